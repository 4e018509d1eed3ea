"""bench/gate.py end to end at a tiny size: it measures the gate on every statement, with the anchor on the test
server, and on the gate alone when no server answers (no timing is asserted)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATEMENTS = ["gold nearest 5,000 chars (vector/T28/076)", "gold longest (vector/T11/055)",
              "gold median length (vector/T19/084)", "hostile"]


def run_bench(dsn: str) -> list[str]:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gate.py"), "--dsn", dsn, "--runs", "1",
                           "--seconds", "0.01"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_the_gate_bench_measures_every_statement_against_select_1(server_dsn):
    lines = run_bench(server_dsn)
    rows = {label: line for label in STATEMENTS for line in lines if line.startswith(label)}
    assert list(rows) == STATEMENTS, lines
    assert [row.endswith("passes") for row in rows.values()] == [True, True, True, False]
    assert "refused: `FOR UPDATE` / `FOR SHARE` locks rows" in rows["hostile"]
    assert any(line.startswith("anchor: psycopg SELECT 1 round trip") and line.rstrip().endswith("1.0x")
               for line in lines), lines
    assert any(line.startswith("target: gate < 0.2 ms for a 5,000-character query: ") for line in lines), lines


def test_without_a_server_the_gate_is_measured_alone():
    lines = run_bench("postgresql://nobody@127.0.0.1:1/none")
    assert sum(line.startswith(tuple(STATEMENTS)) for line in lines) == 4, lines
    assert any(line.startswith("anchor: none, no server at --dsn (") for line in lines), lines
