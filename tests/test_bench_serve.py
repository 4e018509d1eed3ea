"""bench/serve_bench.py end to end at tiny sizes: it makes its database on the test server, measures every path
and the HTTP throughput, and drops the database again (no timing is asserted)."""

import subprocess
import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["(a) psycopg direct", "(b) tools.query", "(c) MCP in-process", "(d) MCP over HTTP"]


def test_the_serve_bench_runs_every_path_and_the_throughput(server_dsn):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "serve_bench.py"), "--dsn", server_dsn, "--calls", "5",
                           "--http-calls", "3", "--clients", "3", "--runs", "1"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for path in PATHS:
        for workload in ("R1 gold", "SELECT 1"):
            assert any(line.startswith(path) and workload in line for line in lines), (path, workload, done.stdout)
    assert any(line.startswith("target: overhead of (b)") for line in lines)
    assert any(line.startswith("throughput: ") and "calls/s" in line for line in lines)
    assert any(line.startswith("connections: ") and line.endswith("within") for line in lines)
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        assert not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'gsqa_bench_serve'").fetchall()
