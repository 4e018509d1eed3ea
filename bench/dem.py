"""DEM load benchmark: `ingest dem` against `raster2pgsql | psql` on the same files, server and settings.

    .venv/bin/python bench/dem.py --files 16 [--terrain gentle|rugged|rough] [--runs 3] [--busy]
                                  [--dsn DSN | --make-db-server] [--data-dir DIR] [--json]

Generates N ASTER-like GeoTIFFs (3601x3601 Int16, no NODATA tag, uncompressed strips, like the published tiles;
the terrain kinds of bench/terrain.py: gentle like the plains, rugged like the Appalachians, rough like the
mountain west, each rougher and less compressible than the one before), measures their pixel-to-pixel steps
(median, 90th percentile, mean, over the first 4 files), then, in each of --runs rounds, loads them with both
tools into fresh tables of one database, raster2pgsql first, each after a CHECKPOINT with the files in the page
cache (read once before the rounds):
  raster2pgsql -s 4326 -I -C -M -F -Y 50 -t 256x256 <files> public.bench_r2p | psql -v ON_ERROR_STOP=1
  ingest dem <files> --table public.bench_ingest
and prints, for each: wall time, client CPU (all client processes), server CPU (all postgres processes),
peak client memory (RSS of the largest client process, and PSS of all of them together: shared pages
split between processes, so forked workers are not counted twice), table size; the wall-time ratio; and whether the
tiles are identical (md5 of every tile's WKB by rid); the median round of each tool, every round's wall time;
and where the median `ingest dem` run spent its time (start-up, files, finish), by the server's clock and the
load log's per-file transaction starts.
--busy runs one competing CPU-bound process (a Python busy loop) from before the first round to after the
last, the same for both tools: a build machine that is doing something else.
The server is --dsn's (default: libpq's), or with --make-db-server a throwaway cluster of this machine's
PostgreSQL set up as `make db`'s server while it loads (testkit/make_db_server.py), both tools on it alike.
Measuring: bench/measure.py.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import psycopg
from psycopg.conninfo import make_conninfo

from bench.measure import run_measured
from bench.terrain import TERRAINS, add_steps, step_summary, steps
from gsqa_core.dem_grid import ASTER_SIZE, SRID, TILE
from ingest.dem.synthetic import spectral_terrain, write_aster_tile
from testkit.make_db_server import make_db_server

STEP_FILES = 4  # the step statistics read this many of the files


@dataclass
class Run:
    tool: str
    wall_s: float
    client_cpu_s: float
    server_cpu_s: float
    peak_client_rss_mb: float  # the largest client process
    peak_client_pss_mb: float  # all client processes together, shared pages split between them
    table_mb: float
    # ingest dem only, from the server's clock and the load log's per-file transaction starts: start-up until
    # the first file's transaction, from there to the last file's, and the last file plus the finish
    phases_s: tuple[float, float, float] | None = None


def make_files(folder: Path, count: int, terrain: str = "gentle") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        lat, lon = 30 + index // 8, -110 + index % 8
        path = folder / f"ASTGTMV003_N{lat:02d}W{abs(lon):03d}_dem.tif"
        if not path.exists():
            print(f"generating {path.name}", file=sys.stderr)
            write_aster_tile(folder, lat, lon, spectral_terrain(ASTER_SIZE, seed=index, **TERRAINS[terrain]))
        paths.append(path)
    return sorted(paths)


def file_steps(files: list[Path]) -> dict[str, float]:
    """Pixel-to-pixel steps of the first STEP_FILES files (bench/terrain.py), so the terrain's roughness is
    measured, not assumed."""
    import rasterio

    counts = np.zeros(1, dtype=np.int64)
    for path in files[:STEP_FILES]:
        with rasterio.open(path) as source:
            counts = add_steps(counts, steps(source.read(1)))
    return step_summary(counts) | {"files": min(len(files), STEP_FILES)}


@contextlib.contextmanager
def competing_process(busy: bool) -> Iterator[None]:
    """With `busy`, one CPU-bound process beside everything inside the block (outside the measured process
    trees: it is not the server's nor the client's)."""
    if not busy:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def timed(tool: str, command: str, dsn: str, tables: list[str]) -> Run:
    """Run a shell command, measured (bench/measure.py); table_mb is the total size of `tables` afterwards."""
    usage = run_measured(command, name=tool).total
    with psycopg.connect(dsn) as conn:
        size = sum(conn.execute("SELECT pg_total_relation_size(%s)", [table]).fetchone()[0] for table in tables)
    return Run(tool, usage.wall_s, usage.client_cpu_s, usage.server_cpu_s, usage.peak_client_rss_mb,
               usage.peak_client_pss_mb, round(size / 2**20, 1))


def identical(dsn: str, left: str, right: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            f"SELECT count(*) = 0 FROM (SELECT rid, md5(rast::bytea) m, filename FROM {left}) a "
            f"FULL JOIN (SELECT rid, md5(rast::bytea) m, filename FROM {right}) b USING (rid) "
            "WHERE a.m IS DISTINCT FROM b.m OR a.filename IS DISTINCT FROM b.filename").fetchone()[0]


def prepare_database(server_dsn: str, name: str,
                     drop: tuple[str, ...] | list[str] = ("public.bench_r2p", "public.bench_ingest")) -> str:
    """The benchmark database, initialized, without the tables `drop` names (nor their load log)."""
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(server_dsn, dbname=name)
    init_database(dsn)
    drop_tables(dsn, drop)
    return dsn


def init_database(dsn: str) -> None:
    """`ingest init`: the reference tables that are missing, and the bookkeeping."""
    subprocess.run([str(Path(sys.executable).parent / "ingest"), "init", "--dsn", dsn], check=True,
                   stdout=subprocess.DEVNULL)


def drop_tables(dsn: str, tables: tuple[str, ...] | list[str]) -> None:
    """The tables and their load-log rows, gone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {', '.join(tables)}")
        conn.execute("DELETE FROM gsqa.load_log WHERE target_table = ANY(%s)", [list(tables)])


def _commands(files: list[Path], dsn: str, compression: str) -> list[tuple[str, str, str]]:
    listing = " ".join(map(str, files))
    return [
        ("raster2pgsql", f"raster2pgsql -s {SRID} -I -C -M -F -Y 50 -t {TILE}x{TILE} {listing} public.bench_r2p "
                         f"2>/dev/null | psql -q -v ON_ERROR_STOP=1 -d '{dsn}' >/dev/null", "public.bench_r2p"),
        ("ingest dem", f"{Path(sys.executable).parent / 'ingest'} dem {listing} --dsn '{dsn}' "
                       f"--table public.bench_ingest --compression {compression} --replace 2>/dev/null",
         "public.bench_ingest"),
    ]


def _round(files: list[Path], dsn: str, compression: str) -> tuple[list[Run], bool]:
    """Both tools once, each into a fresh table, then whether their tiles are identical."""
    runs = []
    for tool, command, table in _commands(files, dsn, compression):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute("CHECKPOINT")
            started = conn.execute("SELECT clock_timestamp()").fetchone()[0]
        runs.append(timed(tool, command, dsn, [table]))
        if tool == "ingest dem":
            runs[-1].phases_s = _phases(dsn, table, started)
    return runs, identical(dsn, "public.bench_r2p", "public.bench_ingest")


def _phases(dsn: str, table: str, started: datetime.datetime) -> tuple[float, float, float]:
    with psycopg.connect(dsn) as conn:
        first, last, ended = conn.execute("SELECT min(loaded_at), max(loaded_at), clock_timestamp() "
                                          "FROM gsqa.load_log WHERE target_table = %s", [table]).fetchone()
    return tuple(round((later - earlier).total_seconds(), 2)
                 for earlier, later in ((started, first), (first, last), (last, ended)))


def _summary(rounds: list[list[Run]]) -> dict:
    """Per tool: the median run (by wall time) and every round's wall time; the ratio of the medians."""
    tools = {}
    for index, tool in enumerate(run.tool for run in rounds[0]):
        ordered = sorted((one[index] for one in rounds), key=lambda run: run.wall_s)
        tools[tool] = {"median": asdict(ordered[len(ordered) // 2]), "walls_s": [one[index].wall_s for one in rounds]}
    walls = [entry["median"]["wall_s"] for entry in tools.values()]
    return {"tools": tools, "speedup": round(walls[0] / walls[1], 2),
            "speedups": [round(one[0].wall_s / one[1].wall_s, 2) for one in rounds]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3, help="rounds, each tool once per round (median reported)")
    parser.add_argument("--terrain", choices=sorted(TERRAINS), default="gentle")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--make-db-server", action="store_true",
                        help="a throwaway cluster set up as make db's server while it loads, instead of --dsn's")
    parser.add_argument("--database", default="gsqa_bench")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/gsqa-bench-dem"))
    parser.add_argument("--compression", default="lz4", choices=["lz4", "pglz"])
    parser.add_argument("--busy", action="store_true", help="one competing CPU-bound process during every round")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    files = make_files(args.data_dir / f"{args.terrain}{args.files}", args.files, args.terrain)
    terrain_steps = file_steps(files)
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # same warm page cache
    rounds, same = [], []
    with contextlib.ExitStack() as stack:
        server_dsn = stack.enter_context(make_db_server()).dsn("postgres") if args.make_db_server else args.dsn
        dsn = prepare_database(server_dsn, args.database)
        stack.enter_context(competing_process(args.busy))
        for _ in range(args.runs):
            runs, identical_tiles = _round(files, dsn, args.compression)
            rounds.append(runs)
            same.append(identical_tiles)
    result = {"files": len(files), "terrain": args.terrain, "steps": terrain_steps, "busy": args.busy,
              "compression": args.compression, "server": "make db's" if args.make_db_server else "--dsn's",
              **_summary(rounds), "identical_tiles": all(same)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    server = "a cluster set up as make db's server" if args.make_db_server else "the --dsn server"
    print(f"{len(files)} files of {args.terrain} terrain (pixel-to-pixel steps over {terrain_steps['files']} files: "
          f"median {terrain_steps['median_m']} m, 90th percentile {terrain_steps['p90_m']} m, mean "
          f"{terrain_steps['mean_m']} m), ingest dem with {args.compression} TOAST compression, median of "
          f"{args.runs} rounds{', beside one competing CPU-bound process' if args.busy else ''}, on {server}")
    header = ("tool", "wall s", "client CPU s", "server CPU s", "max RSS MB", "total PSS MB", "table MB", "rounds")
    print(f"{header[0]:<14}" + "".join(f"{title:>14}" for title in header[1:]))
    for tool, entry in result["tools"].items():
        run = entry["median"]
        values = (run["wall_s"], run["client_cpu_s"], run["server_cpu_s"], run["peak_client_rss_mb"],
                  run["peak_client_pss_mb"], run["table_mb"])
        rounds_text = " / ".join(map(str, entry["walls_s"]))
        print(f"{tool:<14}" + "".join(f"{value:>14}" for value in values) + f"  {rounds_text}")
    print(f"speed-up (wall, medians): {result['speedup']}x (rounds: {' / '.join(map(str, result['speedups']))}); "
          f"identical tiles: {result['identical_tiles']}")
    start_up, files_s, finish = result["tools"]["ingest dem"]["median"]["phases_s"]
    print(f"ingest dem, median round: {start_up} s until the first file's transaction (start-up and the first "
          f"file's staging), {files_s} s to the last file's, {finish} s for that file and the finish")


if __name__ == "__main__":
    main()
