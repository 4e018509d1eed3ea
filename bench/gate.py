"""Benchmark of the SQL gate (reproduce/gate.py `refusal`, which every door that runs SQL we did not write asks
first): what it costs per statement, against what the statement's cheapest trip to the server costs.

Statements: from the gold SQL of the benchmarks (tests/data/gold_sql, 3,085 statements) the one nearest 5,000
characters, the longest, and the one of median length; and a hostile statement (nested comments, a comment
ended by a carriage return, dollar quotes, E and U& strings hiding `; DELETE`, FOR UPDATE), which the gate
refuses. Each is checked more times per run than fill --seconds; ms per statement is the median of --runs runs'
means [min-max], with the CPU time of this process per statement beside it.

Anchor: psycopg executing `SELECT 1` on the local server (one connection, autocommit, execute + fetchone), the
least a statement costs at the server; the ratio is the anchor's time over the gate's (above 1 the gate is
cheaper). Without a server at --dsn the gate is measured alone. Target: < 0.2 ms for a 5,000-character query.

Usage: .venv/bin/python bench/gate.py [--runs 3] [--seconds 1.0] [--dsn postgresql://postgres@localhost/postgres]
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pglast
import psycopg
from pglast.parser import get_postgresql_version

from bench.serve_bench import spread
from reproduce.gate import refusal

GOLD_SQL = Path(__file__).resolve().parent.parent / "tests" / "data" / "gold_sql" / "gold_sql.jsonl.xz"
TARGET_CHARACTERS, TARGET_MS = 5000, 0.2
HOSTILE = ("/* a /* nested */ comment; DELETE FROM pois; */ --\rSELECT $t$ $$; DELETE FROM pois; $$ $t$ AS a,\n"
           "E'\\'; DELETE FROM pois; --' AS b, U&'!0027; DELETE FROM pois; --' UESCAPE '!' AS c, \"x;\"\"y\" AS d\n"
           "FROM pois -- ; DELETE FROM pois\r\nWHERE name = 'x'';DROP TABLE pois;--' FOR UPDATE")


def statements() -> list[tuple[str, str]]:
    """(label, SQL) of the statements measured."""
    records = [json.loads(line) for line in lzma.decompress(GOLD_SQL.read_bytes()).decode().splitlines()]
    by_length = sorted(records, key=lambda record: (len(record["sql"]), record["id"]))
    near = min(records, key=lambda record: (abs(len(record["sql"]) - TARGET_CHARACTERS), record["id"]))
    median = by_length[len(by_length) // 2]
    return [(f"gold nearest {TARGET_CHARACTERS:,} chars ({near['id']})", near["sql"]),
            (f"gold longest ({by_length[-1]['id']})", by_length[-1]["sql"]),
            (f"gold median length ({median['id']})", median["sql"]),
            ("hostile", HOSTILE)]


def timed_runs(call: Callable[[], object], runs: int, seconds: float) -> tuple[list[float], list[float], int]:
    """(wall ms per call of each run, CPU ms per call of each run, calls per run): the number of calls filling
    `seconds`, from calls for a tenth of that first (which also warm the caches)."""
    started, calibrating = time.perf_counter(), 0
    while (elapsed := time.perf_counter() - started) < seconds / 10 or calibrating < 3:
        call()
        calibrating += 1
    calls = max(3, int(seconds * calibrating / elapsed))
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            call()
        walls.append((time.perf_counter() - wall) / calls * 1000)
        cpus.append((time.process_time() - cpu) / calls * 1000)
    return walls, cpus, calls


def anchor(dsn: str, runs: int, seconds: float) -> tuple[list[float], list[float], int] | str:
    """The `SELECT 1` round trip's runs, or why there is none."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            return timed_runs(lambda: conn.execute("SELECT 1").fetchone(), runs, seconds)
    except psycopg.OperationalError as error:
        return " ".join(str(error).split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each measurement (at least 3 for a figure)")
    parser.add_argument("--seconds", type=float, default=1.0, help="wall time a run's calls fill, about")
    parser.add_argument("--dsn", default="postgresql://postgres@localhost/postgres",
                        help="a server for the anchor, `SELECT 1` (default: %(default)s)")
    args = parser.parse_args()
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"gate: pglast {pglast.__version__} (PostgreSQL {'.'.join(map(str, get_postgresql_version()))}"
          f" parser); cores: {os.cpu_count()}; load average before: {load}")
    print(f"{args.runs} run(s) of about {args.seconds} s each; ms/statement: median of the runs' means [min-max]")
    found = anchor(args.dsn, args.runs, args.seconds)
    anchor_ms = statistics.median(found[0]) if isinstance(found, tuple) else None
    print(f"{'statement':<46} {'chars':>9} {'calls/run':>9} {'ms/statement':>24} {'CPU ms':>9} {'ratio':>7}  gate says")
    near_ms = []
    for label, sql in statements():
        walls, cpus, calls = timed_runs(lambda sql=sql: refusal(sql), args.runs, args.seconds)
        near_ms = near_ms or walls  # the first statement is the one near the target's length
        ratio = f"{anchor_ms / statistics.median(walls):.2g}x" if anchor_ms else "-"
        print(f"{label:<46} {len(sql):>9,} {calls:>9,} {spread(walls, 4):>24} {statistics.median(cpus):>9.4f} "
              f"{ratio:>7}  {(refusal(sql) or 'passes')[:60]}")
    if isinstance(found, tuple):
        walls, cpus, calls = found
        print(f"{'anchor: psycopg SELECT 1 round trip':<46} {8:>9,} {calls:>9,} {spread(walls, 4):>24} "
              f"{statistics.median(cpus):>9.4f} {'1.0x':>7}")
    else:
        print(f"anchor: none, no server at --dsn ({found})")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {peak_mb:.0f} MB")
    near = statistics.median(near_ms)
    verdict = "met" if near < TARGET_MS else "NOT met"
    print(f"target: gate < {TARGET_MS} ms for a {TARGET_CHARACTERS:,}-character query: {near:.4f} ms: {verdict}")


if __name__ == "__main__":
    main()
