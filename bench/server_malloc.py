"""glibc's allocator settings of `make db`'s server (Dockerfile.postgis, MALLOC_*) against glibc's defaults, on
`ingest dem`.

    .venv/bin/python bench/server_malloc.py [--files 24] [--terrain rough] [--runs 4] [--json]

One throwaway cluster of this machine's PostgreSQL (testkit/local_server.py: initdb, the default settings), started
anew before every run, with or without the environment Dockerfile.postgis gives the server (read from that file),
alternating which goes first in each round. Every run loads the same files (bench/dem.py's, generated once under
/tmp/gsqa-bench-dem) with `ingest dem --replace`, after a CHECKPOINT. Prints each run and the medians of wall
time, server CPU (all postgres processes) and client CPU, and the ratio of the medians. raster2pgsql is not run:
both settings serve the same server, and the question is what they change for it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import psycopg

from bench.dem import TERRAINS, make_files
from bench.measure import run_measured
from testkit import local_server
from testkit.local_server import LocalServer
from testkit.make_db_server import malloc_environment, server_malloc_variables

ROOT = Path(__file__).resolve().parent.parent


INGEST = Path(sys.executable).parent / "ingest"
SETTINGS = ("default", "malloc")


def start(server: LocalServer, variables: dict[str, str]) -> None:
    """(Re)start the server with exactly `variables` of the MALLOC_* ones in its environment, and check it."""
    if server.running:
        server.stop()
    server.start(environment=variables)
    with psycopg.connect(server.dsn("postgres")) as conn:
        seen = server_malloc_variables(conn)
    if seen != variables:
        raise SystemExit(f"the server runs with {seen}, expected {variables}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=24)
    parser.add_argument("--terrain", choices=sorted(TERRAINS), default="rough")
    parser.add_argument("--runs", type=int, default=4, help="rounds, each setting once per round")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/gsqa-bench-dem"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    files = make_files(args.data_dir / f"{args.terrain}{args.files}", args.files, args.terrain)
    variables = {"default": {}, "malloc": malloc_environment()}
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    with local_server.scratch_folder() as base:
        server = LocalServer(base / "data", local_server.free_port(), base / "sockets")
        local_server.initdb(server)
        try:
            start(server, {})
            with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
                conn.execute("CREATE DATABASE gsqa")
            run_measured(f"{INGEST} init --dsn '{server.dsn()}'", name="init")
            for round_number in range(args.runs):
                for name in SETTINGS if round_number % 2 == 0 else SETTINGS[::-1]:
                    start(server, variables[name])
                    with psycopg.connect(server.dsn(), autocommit=True) as conn:
                        conn.execute("CHECKPOINT")
                    usage = run_measured(f"{INGEST} dem {' '.join(map(str, files))} --dsn '{server.dsn()}' "
                                         f"--table public.bench_malloc --replace 2>/dev/null", name=name).total
                    runs[name].append({"wall_s": usage.wall_s, "server_cpu_s": usage.server_cpu_s,
                                       "client_cpu_s": usage.client_cpu_s})
                    print(f"round {round_number + 1} {name:>8}: wall {usage.wall_s:.2f} s, server CPU "
                          f"{usage.server_cpu_s:.2f} s, client CPU {usage.client_cpu_s:.2f} s", file=sys.stderr)
        finally:
            if server.running:
                server.stop()
    medians = {name: {key: round(statistics.median(run[key] for run in runs[name]), 2) for key in runs[name][0]}
               for name in SETTINGS}
    ratios = {key: round(medians["malloc"][key] / medians["default"][key], 3) for key in medians["default"]}
    result = {"files": args.files, "terrain": args.terrain, "malloc": variables["malloc"], "runs": runs,
              "medians": medians, "malloc_over_default": ratios}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"ingest dem, {args.files} files of {args.terrain} terrain, {args.runs} runs of each, medians:")
    for name in SETTINGS:
        print(f"  {name:>8}: " + ", ".join(f"{key} {value}" for key, value in medians[name].items()))
    print("  malloc / default: " + ", ".join(f"{key} {value}" for key, value in ratios.items()))


if __name__ == "__main__":
    main()
