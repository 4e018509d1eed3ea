"""bench/serve_bench.py end to end at tiny sizes: it makes its database on the test server, measures every path
(stdio too) on every workload (the 1 MB text query too), says what the agent gets of that query and the HTTP
throughput, and drops the database again (no timing is asserted)."""

import re
import subprocess
import sys
from pathlib import Path

import psycopg

from reproduce.gate import MAX_REPLY_BYTES
from reproduce.serve.tools import ServeRequest
from reproduce.session import REPORTED_CHARACTERS

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["(a) psycopg direct", "(b) tools.query", "(c) MCP in-process", "(d) MCP over HTTP", "(e) MCP over stdio"]
WORKLOADS = ["R1 gold", "SELECT 1", "1 MB text"]


def test_the_serve_bench_runs_every_path_and_the_throughput(server_dsn):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "serve_bench.py"), "--dsn", server_dsn, "--calls", "5",
                           "--reply-calls", "2", "--http-calls", "3", "--clients", "3", "--runs", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for path in PATHS:
        for workload in WORKLOADS:
            assert any(line.startswith(path) and workload in line for line in lines), (path, workload, done.stdout)
    assert any(line.startswith("target: overhead over (a) through HTTP (d) and stdio (e) < 5 ms/call: (d) R1 gold ")
               for line in lines), done.stdout
    rows, size = figures(r"1 MB text: psycopg fetches (\d+) rows, ([\d,]+) bytes of values as text; the agent gets "
                         rf"\(serve's reply cap: {MAX_REPLY_BYTES:,} bytes\):", lines)
    # ServeRequest.max_rows rows of texts REPORTED_CHARACTERS long, in as many columns as make 1 MB
    column = ServeRequest.max_rows * REPORTED_CHARACTERS
    assert (rows, size) == (ServeRequest.max_rows, -(-1_000_000 // column) * column), done.stdout
    kept = set()
    for path in PATHS[1:]:
        size, rows, of = figures(rf"  {re.escape(path)} +([\d,]+) bytes, (\d+) of (\d+) rows", lines)
        assert size <= MAX_REPLY_BYTES and 0 < rows < of == ServeRequest.max_rows, (path, done.stdout)
        kept.add(rows)
    assert len(kept) == 1, done.stdout  # every path gives the agent the same rows
    assert any(line.startswith("throughput: ") and "calls/s" in line for line in lines)
    assert "target: >= 250 calls/s with 8 clients: not measured (--clients 3)" in lines
    assert any(line.startswith("connections: ") and line.endswith("within") for line in lines)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        assert not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'gsqa_bench_serve'").fetchall()


def figures(pattern: str, lines: list[str]) -> list[int]:
    """The numbers in the one line that is the pattern (its groups, thousands separators dropped)."""
    found = [match for line in lines if (match := re.fullmatch(pattern, line))]
    assert len(found) == 1, (pattern, lines)
    return [int(group.replace(",", "")) for group in found[0].groups()]
