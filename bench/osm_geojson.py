"""GeoJSON layer load benchmark: `ingest osm` against ogr2ogr on the same osmx-like layers, server and settings.

    .venv/bin/python bench/osm_geojson.py [--total-mb 1000] [--files-per-layer 4] [--runs 3] [--indexes] [--fetched]
                                          [--dsn DSN] [--json]

Generates osmx-like layers (testkit/osmx_synth.py: named and unnamed POIs with many tags, long road lines,
parks and lakes with multipolygons and holes, postal-code polygons; one feature per line), then, `--runs`
times and alternating which goes first, each after a CHECKPOINT, loads them into one database:
  ogr2ogr -f PostgreSQL PG:<dsn> <file> -nln ogr_<layer> -append -lco GEOMETRY_NAME=geometry
          -lco GEOM_TYPE=geography -lco SPATIAL_INDEX=NONE --config PG_USE_COPY YES      (every file in turn)
  ingest osm <dir> --no-index
Both start from nothing, as in a first build: before each tool's run, outside its timing, its tables of the
round before are dropped (ingest's, with their load log, then made again by `ingest init`).
With --indexes, both sides as they run by default: ogr2ogr with its GiST index (no SPATIAL_INDEX=NONE) and
then ANALYZE of its tables, against `ingest osm <dir>` (each table's GiST index and ANALYZE).
With --fetched, the layers are as `ingest fetch` leaves them: its verified log (.fetch/verified.tsv, written
once, outside the timing) holds each file's sha256, which `ingest osm` then logs without reading the file again
(as in `make db`); without it, `ingest osm` hashes every file as it loads it (a folder put in place by hand).
ogr2ogr applies no loader-1 rule: it keeps every feature and every property (tagsMap as one JSON column).
`ingest`'s modules are byte-compiled first, as an installed wheel has them (bench/measure.py, byte_compiled).
The lines encoder `ingest osm` uses is in the output (native where _lines is built, unless GSQA_NATIVE_READER=0).
For each tool: wall time, client CPU (all client processes), server CPU (all postgres processes), peak
client memory (largest process RSS; PSS of the process tree), input MB/s, rows/s; then the medians with
the spread (min-max) and the wall-time ratio of the medians.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

from bench.dem import drop_tables, init_database, prepare_database, timed
from bench.measure import byte_compiled, medians
from gsqa_core import schema
from ingest.fetch import STAGING, RemoteFile, VerifiedLog
from ingest.osm.native import native_module
from testkit.osmx_synth import LAYER_FOLDERS, write_layers

INGEST = Path(sys.executable).parent / "ingest"
TABLES = ["public.pois", "public.roads", "public.parks", "public.lakes", "public.regions"]
STAGE = schema.pois_stage.fullname  # loader 1's pois before their ids are final (ingest/osm/load.py)
OGR_TABLES = [f"public.ogr_{folder}" for folder in LAYER_FOLDERS]


def make_layers(data_dir: Path, total_mb: float, files_per_layer: int) -> Path:
    folder = data_dir / f"{total_mb:g}mb-{files_per_layer}files"
    if not (folder / "done").exists():
        print(f"generating {folder}", file=sys.stderr)
        write_layers(folder, total_mb, files_per_layer)
        (folder / "done").touch()
    return folder


def mark_fetched(folder: Path) -> None:
    """The verified log `ingest fetch` would have written for the layer files of `folder`."""
    verified = VerifiedLog(folder)
    for path in sorted(folder.rglob("*.geojson")):
        with open(path, "rb") as handle:
            sha256 = hashlib.file_digest(handle, "sha256").hexdigest()
        verified.add(RemoteFile(str(path.relative_to(folder)), path.stat().st_size, sha256, blob_id=""), path)


def ogr2ogr_command(folder: Path, dsn: str, tables: dict[str, str] | None = None, index: bool = False) -> str:
    """Every file of every layer in turn, appended to table ogr_<layer> (or `tables`[layer]); with `index`,
    ogr2ogr's default GiST index, else none."""
    tables = tables or {layer: f"ogr_{layer}" for layer in LAYER_FOLDERS}
    no_index = "" if index else "-lco SPATIAL_INDEX=NONE "
    steps = [f"ogr2ogr -f PostgreSQL 'PG:{dsn}' {path} -nln {tables[layer]} -append -lco GEOMETRY_NAME=geometry "
             f"-lco GEOM_TYPE=geography {no_index}--config PG_USE_COPY YES 2>/dev/null"
             for layer in LAYER_FOLDERS for path in sorted((folder / layer).glob("*.geojson"))]
    return " && ".join(steps)


def rows(dsn: str, tables: list[str]) -> int:
    with psycopg.connect(dsn) as conn:
        return sum(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in tables)


def fresh_ingest_tables(dsn: str) -> None:
    """The five tables as `ingest init` makes them on a new database: empty, no load log, no index."""
    drop_tables(dsn, [*TABLES, STAGE])
    init_database(dsn)


def one_round(folder: Path, dsn: str, mb: float, ingest_first: bool, indexes: bool = False) -> dict[str, dict]:
    analyze = f" && psql -q -d '{dsn}' -c 'ANALYZE {', '.join(OGR_TABLES)}'" if indexes else ""
    no_index = "" if indexes else " --no-index"
    tools = [("ogr2ogr", ogr2ogr_command(folder, dsn, index=indexes) + analyze, OGR_TABLES,
              functools.partial(drop_tables, tables=OGR_TABLES)),
             ("ingest osm", f"{INGEST} osm {folder}{no_index} --dsn '{dsn}' >/dev/null 2>&1", TABLES,
              fresh_ingest_tables)]
    results = {}
    for tool, command, tables, start_from_nothing in (tools[::-1] if ingest_first else tools):
        start_from_nothing(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CHECKPOINT")
        run = timed(tool, command, dsn, tables)
        count = rows(dsn, tables)
        results[tool] = {**run.__dict__, "rows": count, "mb_per_s": round(mb / run.wall_s, 1),
                         "rows_per_s": round(count / run.wall_s)}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mb", type=float, default=1000)
    parser.add_argument("--files-per-layer", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--database", default="gsqa_bench_osm")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/gsqa-bench-osm"))
    parser.add_argument("--indexes", action="store_true", help="both sides with their GiST indexes and ANALYZE")
    parser.add_argument("--fetched", action="store_true", help="the layers with `ingest fetch`'s verified log")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    folder = make_layers(args.data_dir, args.total_mb, args.files_per_layer)
    shutil.rmtree(folder / STAGING, ignore_errors=True)
    if args.fetched:
        mark_fetched(folder)
    mb = sum(path.stat().st_size for path in folder.rglob("*.geojson")) / 1e6
    dsn = prepare_database(args.dsn, args.database, drop=OGR_TABLES)
    subprocess.run(["cat", *map(str, folder.rglob("*.geojson"))], stdout=subprocess.DEVNULL, check=True)
    byte_compiled()
    rounds = [one_round(folder, dsn, mb, ingest_first=bool(n % 2), indexes=args.indexes) for n in range(args.runs)]
    encoder = "native" if native_module("_lines") else "Python"  # as the `ingest` it runs finds it (same env)
    result = {"input_mb": round(mb, 1), "files": len(list(folder.rglob("*.geojson"))), "indexes": args.indexes,
              "fetched": args.fetched, "lines_encoder": encoder, "loadavg_1min": os.getloadavg()[0],
              "rounds": rounds, "median": medians(rounds, "ogr2ogr", "ingest osm")}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['input_mb']} MB in {result['files']} files, {args.runs} rounds (medians; wall min-max), "
          + ("with GiST indexes and ANALYZE on both sides" if args.indexes else "without indexes")
          + (", layers as `ingest fetch` leaves them" if args.fetched else "")
          + f", GeoJSON lines encoded in {result['lines_encoder']}"
          + f"; load average at the end {result['loadavg_1min']:.2f}")
    header = ("tool", "wall s", "min-max", "client CPU s", "server CPU s", "max RSS MB", "PSS MB", "MB/s", "rows/s")
    print(f"{header[0]:<12}" + "".join(f"{title:>14}" for title in header[1:]))
    for tool in ("ogr2ogr", "ingest osm"):
        m = result["median"][tool]
        values = (m["wall_s"], f"{m['wall_min_s']}-{m['wall_max_s']}", m["client_cpu_s"], m["server_cpu_s"],
                  m["peak_client_rss_mb"], m["peak_client_pss_mb"], m["mb_per_s"], m["rows_per_s"])
        print(f"{tool:<12}" + "".join(f"{value:>14}" for value in values))
    print(f"speed-up (ratio of median walls): {result['median']['ratio_of_median_walls']}x; per round: "
          f"{result['median']['ratios_per_round']}")


if __name__ == "__main__":
    main()
