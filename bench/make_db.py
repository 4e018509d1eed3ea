"""`ingest all` stage by stage, on the demo region and on a larger synthetic data dir, with the projection to the
full build (time and disk) on this machine.

    .venv/bin/python bench/make_db.py [--runs 3] [--inputs demo,large] [--dsn DSN] [--work DIR] [--json]

Inputs (made once under --work, reused by every run):
  demo   4 ASTER-like tiles (3601x3601 Int16, spectral terrain), DEM only: what `make demo` builds
  large  16 ASTER-like tiles and 400 MB of osmx GeoJSON layers (testkit/osmx_synth.py), DEM and OSM
Each run starts from a fresh database and an empty data dir and runs `ingest all DATA --dsn DB` with the
fetch served by a local hub on 127.0.0.1 (testkit/fake_hub.py): the fetch stage measures download into
staging, checksum verification and the move into the layout, not a real network. Stage times come from
gsqa.stage_log. Printed per input: each stage's median over the runs and its range, the whole run's wall
time, client CPU (the ingest process tree), server CPU (all postgres processes), peak client memory (PSS of
the process tree), and the size of the tables built.

The projection scales the `large` runs' per-tile DEM time and per-input-MB OSM time to the published
sources (1,182 tiles, 53 GB of GeoJSON), and likewise the table sizes; the download of the 71 GB is added
at a few bandwidths, since it depends on the user's network, not on this tool. The anchors of the load stages
(raster2pgsql, ogr2ogr) are measured by bench/dem.py and bench/osm_geojson.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from bench.measure import run_measured
from gsqa_core.dem_grid import ASTER_SIZE
from gsqa_core.schema import REFERENCE_DEM_FILES
from ingest.dem.synthetic import spectral_terrain, write_aster_tile
from ingest.fetch import SOURCE_REPO
from testkit.fake_hub import FakeHub, repository_files
from testkit.osmx_synth import write_layers

ROOT = Path(__file__).resolve().parent.parent


INGEST = Path(sys.executable).parent / "ingest"
INPUTS = {"demo": (4, 0), "large": (16, 400)}  # DEM tiles, MB of GeoJSON
FULL_TILES, FULL_OSM_MB, FULL_DEM_MB = REFERENCE_DEM_FILES, 53_000, 18_000
BANDWIDTHS_MB_S = (10, 50, 100)


def make_source(work: Path, name: str) -> Path:
    """The published layout of one input, written once."""
    tiles, osm_mb = INPUTS[name]
    root = work / f"source-{name}"
    done = root / ".complete"
    if done.exists():
        return root
    folder = root / "dem" / "tiles"
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for index in range(tiles):
        lat, lon = 40 + index // 4, -75 + index % 4  # the demo box first: N40-N41 x W075-W074
        names.append(write_aster_tile(folder, lat, lon, spectral_terrain(ASTER_SIZE, index)).name)
    (root / "dem" / "tile_list.txt").write_text("".join(f"{tile}\n" for tile in names))
    if osm_mb:
        write_layers(root / "osm" / "osm_extract", total_mb=osm_mb)
    done.touch()
    return root


def fresh_database(server_dsn: str, name: str) -> str:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(server_dsn, dbname=name)


def one_run(hub: FakeHub, server_dsn: str, work: Path, name: str, number: int) -> dict:
    data = work / f"data-{name}-{number}"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    dsn = fresh_database(server_dsn, f"gsqa_bench_make_db_{name}")
    what = "dem" if INPUTS[name][1] == 0 else "dem,osm"
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint(), "HF_HOME": str(work / "hf"), "HF_HUB_DISABLE_XET": "1"}
    command = shlex.join([str(INGEST), "all", str(data), "--what", what, "--dsn", dsn])
    run = run_measured(f"{command} >/dev/null 2>&1", name=f"ingest all ({name})", env=env, check=False)
    if run.returncode:
        raise SystemExit(f"ingest all failed on {name} (exit {run.returncode}); run it by hand to see why")
    with psycopg.connect(dsn) as conn:
        stages = dict(conn.execute("SELECT stage, extract(epoch FROM finished_at - started_at)::float "
                                   "FROM gsqa.stage_log WHERE finished_at IS NOT NULL").fetchall())
        sizes = dict(conn.execute("SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relnamespace = "
                                  "'public'::regnamespace AND relkind = 'r' AND relname <> 'spatial_ref_sys'"))
    subprocess.run(["rm", "-rf", str(data)], check=True)
    usage = run.total
    return {"stages": stages, "wall_s": usage.wall_s, "server_cpu_s": usage.server_cpu_s,
            "client_cpu_s": usage.client_cpu_s, "peak_client_pss_mb": usage.peak_client_pss_mb, "table_bytes": sizes}


def summarize(runs: list[dict]) -> dict:
    def spread(values: list[float]) -> dict:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    stages = sorted({stage for run in runs for stage in run["stages"]})
    return {
        "runs": len(runs),
        "stages_s": {stage: spread([run["stages"].get(stage, 0.0) for run in runs]) for stage in stages},
        "wall_s": spread([run["wall_s"] for run in runs]),
        "client_cpu_s": spread([run["client_cpu_s"] for run in runs]),
        "server_cpu_s": spread([run["server_cpu_s"] for run in runs]),
        "peak_client_pss_mb": spread([run["peak_client_pss_mb"] for run in runs]),
        "table_mb": {table: size / 1e6 for table, size in runs[-1]["table_bytes"].items() if size > 16384},
    }


def project(large: dict, source_mb: dict[str, float]) -> dict:
    """The full build from the `large` runs: per-tile DEM and per-MB OSM time and disk."""
    tiles, osm_mb = INPUTS["large"]
    dem_s = large["stages_s"]["dem"]["median"] * FULL_TILES / tiles
    osm_s = large["stages_s"]["osm"]["median"] * FULL_OSM_MB / source_mb["osm"]
    rest_s = (large["stages_s"]["finalize"]["median"] + large["stages_s"]["check"]["median"]) * FULL_OSM_MB / osm_mb
    dem_mb = large["table_mb"].get("dem_us", 0) * FULL_TILES / tiles
    vector_mb = sum(size for table, size in large["table_mb"].items() if table != "dem_us") * FULL_OSM_MB / osm_mb
    return {
        "dem_stage_h": dem_s / 3600, "osm_stage_h": osm_s / 3600, "finalize_and_check_h": rest_s / 3600,
        "download_h": {f"{bandwidth} MB/s": (FULL_DEM_MB + FULL_OSM_MB) / bandwidth / 3600
                       for bandwidth in BANDWIDTHS_MB_S},
        "dem_table_gb": dem_mb / 1e3, "vector_tables_gb": vector_mb / 1e3,
        "sources_gb": (FULL_DEM_MB + FULL_OSM_MB) / 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inputs", default="demo,large")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--work", type=Path, default=Path("/tmp/gsqa-bench-make-db"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results, source_mb = {}, {}
    for name in args.inputs.split(","):
        source = make_source(args.work, name)
        files = repository_files(source, frozenset({".complete"}))
        source_mb = {"osm": sum(len(body) for path, body in files.items() if path.startswith("osm/")) / 1e6}
        with FakeHub(SOURCE_REPO, files) as hub:
            runs = [one_run(hub, args.dsn, args.work, name, number) for number in range(args.runs)]
        results[name] = summarize(runs) | {"source_mb": sum(len(body) for body in files.values()) / 1e6}
        if not args.json:
            print_input(name, results[name])
    if "large" in results:
        results["projection"] = project(results["large"], source_mb)
        if not args.json:
            print_projection(results["projection"])
    if args.json:
        print(json.dumps(results, indent=2))


def _cell(spread: dict) -> str:
    return f"{spread['median']:8.1f} ({spread['min']:.1f}-{spread['max']:.1f})"


def print_input(name: str, result: dict) -> None:
    print(f"\n{name}: {result['source_mb']:,.0f} MB of sources, {result['runs']} runs (median (min-max) seconds)")
    for stage in ("init", "fetch", "dem", "osm", "finalize", "check"):
        if stage in result["stages_s"]:
            print(f"  {stage:9} {_cell(result['stages_s'][stage])}")
    print(f"  {'wall':9} {_cell(result['wall_s'])}")
    print(f"  client CPU {_cell(result['client_cpu_s'])} s, server CPU {_cell(result['server_cpu_s'])} s, "
          f"peak client PSS {_cell(result['peak_client_pss_mb'])} MB")
    print("  tables: " + ", ".join(f"{table} {size:,.0f} MB" for table, size in sorted(result["table_mb"].items())))


def print_projection(projection: dict) -> None:
    print("\nprojected full build on this machine (from the large runs):")
    print(f"  dem stage {projection['dem_stage_h']:.2f} h, osm stage {projection['osm_stage_h']:.2f} h, "
          f"finalize+check {projection['finalize_and_check_h']:.2f} h")
    print("  download of 71 GB: " + ", ".join(f"{hours:.1f} h at {bandwidth}"
                                             for bandwidth, hours in projection["download_h"].items()))
    print(f"  disk: sources {projection['sources_gb']:.0f} GB, dem_us {projection['dem_table_gb']:.1f} GB, "
          f"vector tables {projection['vector_tables_gb']:.1f} GB (+ WAL up to 32 GB during the load)")


if __name__ == "__main__":
    main()
