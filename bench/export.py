"""`ingest export` beside the anchors, on the same database in one run: GeoParquet against what a user writes
(geopandas' read_postgis + to_parquet) and against ogr2ogr to FlatGeobuf and to GeoPackage; the COGs against
gdal_translate -of COG from GDAL's PostGISRaster driver, and against rio-cogeo over the source GeoTIFFs (the
physical floor: decode and compress the same pixels).

    .venv/bin/python bench/export.py [--runs 3] [--input large|xlarge] [--work DIR] [--json]

The input is one of bench/make_db.py's (large: 16 ASTER-like tiles and 400 MB of osmx layers) or xlarge (1,600
MB of osmx layers, no DEM: the vector steps alone, on tables large enough that geopandas' memory, which grows
with the largest table, is far past the export's, which does not), built once per bench into a private cluster
(bench/snapshot.py's: the settings of a `make db` load) with `ingest all --offline`. Every step writes into an
empty folder; each tool gets the same compression where it has one (DEFLATE with the horizontal predictor,
512-pixel blocks, nearest-neighbour overviews, every core for the COGs; zstd for ours and snappy, geopandas'
default, for its Parquet). Measured per step (bench/measure.py):
wall time, CPU of the client process tree and of the servers, peak memory of the client tree (PSS). Printed:
the median and range (min-max) over the runs, and each anchor over ours (wall; memory for geopandas). The
outputs are checked to hold the same: row counts of every file, the pixels of one COG of each tool.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
from pathlib import Path

import numpy as np
import psycopg
import pyarrow.parquet as pq
import rasterio

from bench.make_db import INPUTS, make_source
from bench.measure import run_measured
from bench.snapshot import new_cluster
from gsqa_core import schema
from testkit.local_server import LocalServer
from testkit.osmx_synth import write_layers

# This bench's inputs beyond bench/make_db.py's: (DEM tiles, MB of GeoJSON).
OWN_INPUTS = {"xlarge": (0, 1600)}

BIN = Path(sys.executable).parent
TABLES = [table.name for table in schema.VECTOR_TABLES]
COG_OPTIONS = ["COMPRESS=DEFLATE", "PREDICTOR=YES", "BLOCKSIZE=512", "OVERVIEW_RESAMPLING=NEAREST",
               "NUM_THREADS=ALL_CPUS"]
GEOPANDAS = """
import sys, geopandas, sqlalchemy
engine = sqlalchemy.create_engine(sys.argv[1])
for table in sys.argv[3:]:
    frame = geopandas.read_postgis(f"SELECT * FROM {table}", engine, geom_col="geometry")
    frame.to_parquet(f"{sys.argv[2]}/{table}.parquet")
"""
VECTOR_STEPS = ("ingest export GeoParquet", "geopandas read_postgis+to_parquet", "ogr2ogr FlatGeobuf", "ogr2ogr GPKG")
DEM_STEPS = ("ingest export COG", "gdal_translate -of COG PostGISRaster", "rio-cogeo source GeoTIFFs")


def sqlalchemy_url(server: LocalServer) -> str:
    return f"postgresql+psycopg://postgres@/gsqa?host={server.sockets}&port={server.port}"


def source_of(work: Path, name: str) -> Path:
    """The input's published layout, written once (bench/make_db.py's inputs by it)."""
    if name not in OWN_INPUTS:
        return make_source(work, name)
    root = work / f"source-{name}"
    if not (root / ".complete").exists():
        write_layers(root / "osm" / "osm_extract", total_mb=OWN_INPUTS[name][1])
        (root / ".complete").touch()
    return root


def commands(server: LocalServer, source: Path, files: list[str], out: Path) -> dict[str, str]:
    """Each step's shell command, writing into out/<step number>; the DEM's only where there are DEM files."""
    dsn, pg = server.dsn(), f"PG:{server.dsn()}"
    ingest = shlex.quote(str(BIN / "ingest"))
    steps = {
        "ingest export GeoParquet": f"{ingest} export {out}/0 --what vector --dsn {shlex.quote(dsn)}",
        "geopandas read_postgis+to_parquet": f"mkdir {out}/1 && {shlex.quote(sys.executable)} -c "
                                             f"{shlex.quote(GEOPANDAS)} {shlex.quote(sqlalchemy_url(server))} {out}/1 "
                                             + " ".join(TABLES),
        "ogr2ogr FlatGeobuf": f"mkdir {out}/2 && " + " && ".join(
            f"ogr2ogr -f FlatGeobuf {out}/2/{table}.fgb {shlex.quote(pg)} {table}" for table in TABLES),
        "ogr2ogr GPKG": f"mkdir {out}/3 && ogr2ogr -f GPKG {out}/3/all.gpkg {shlex.quote(pg)} " + " ".join(TABLES),
        "ingest export COG": f"{ingest} export {out}/4 --what dem --dsn {shlex.quote(dsn)}",
        "gdal_translate -of COG PostGISRaster": f"mkdir {out}/5 && " + " && ".join(
            "gdal_translate -q -of COG " + " ".join(f"-co {option}" for option in COG_OPTIONS) + " "
            + shlex.quote(f"{pg} table=dem_us column=rast mode=2 where='filename = $${name}$$'") + f" {out}/5/{name}"
            for name in files),
        "rio-cogeo source GeoTIFFs": f"mkdir {out}/6 && " + " && ".join(
            f"{shlex.quote(str(BIN / 'rio'))} cogeo create -q --cog-profile deflate --co PREDICTOR=2 "
            f"--overview-resampling nearest --threads ALL_CPUS {source / 'dem' / 'tiles' / name} {out}/6/{name}"
            for name in files),
    }
    return steps if files else {step: steps[step] for step in VECTOR_STEPS}


def check_outputs(out: Path, counts: dict[str, int], first: str | None, source: Path) -> None:
    """The steps' files hold the same rows, and one COG the same pixels, whoever wrote them."""
    for table, rows in counts.items():
        assert pq.ParquetFile(out / "0" / "vector" / f"{table}.parquet").metadata.num_rows == rows, table
        assert pq.ParquetFile(out / "1" / f"{table}.parquet").metadata.num_rows == rows, table
    if first is None:
        return
    with rasterio.open(source / "dem" / "tiles" / first) as original:
        pixels = original.read(1)
    for cog in (out / "4" / "dem" / first, out / "5" / first, out / "6" / first):
        with rasterio.open(cog) as written:
            assert np.array_equal(written.read(1), pixels), cog


def one_run(server: LocalServer, source: Path, work: Path, counts: dict[str, int], files: list[str]) -> dict:
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    results = {}
    for step, command in commands(server, source, files, out).items():
        usage = run_measured(f"{command} 2>/dev/null", name=step).total
        results[step] = {"wall_s": usage.wall_s, "cpu_s": usage.client_cpu_s + usage.server_cpu_s,
                         "peak_memory_mb": usage.peak_client_pss_mb}
    check_outputs(out, counts, files[0] if files else None, source)
    return results


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict]) -> dict:
    steps = {step: {measure: spread([run[step][measure] for run in runs]) for measure in runs[0][step]}
             for step in runs[0]}
    ours = steps["ingest export GeoParquet"]
    ratios = {step: steps[step]["wall_s"]["median"] / ours["wall_s"]["median"] for step in VECTOR_STEPS[1:]}
    if DEM_STEPS[0] in steps:
        ratios |= {step: steps[DEM_STEPS[0]]["wall_s"]["median"] / steps[step]["wall_s"]["median"]
                   for step in DEM_STEPS[1:]}
    memory = steps["geopandas read_postgis+to_parquet"]["peak_memory_mb"]["median"] / ours["peak_memory_mb"]["median"]
    return {"runs": len(runs), "steps": steps, "ratios": ratios, "geopandas_memory_over_ours": memory}


def _cell(value: dict, digits: int = 2) -> str:
    return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}-{value['max']:.{digits}f})"


def print_summary(name: str, database: dict, summary: dict) -> None:
    print(f"{name}: {database}; {summary['runs']} runs, median (min-max)")
    print(f"  {'step':38} {'wall s':>20} {'CPU s':>20} {'peak memory MB':>22}")
    for step, measures in summary["steps"].items():
        print(f"  {step:38} {_cell(measures['wall_s']):>20} {_cell(measures['cpu_s']):>20} "
              f"{_cell(measures['peak_memory_mb'], 0):>22}")
    print("  vector: anchor wall / ours; dem: ours / anchor wall")
    for step, ratio in summary["ratios"].items():
        print(f"  {step:38} {ratio:.2f}")
    print(f"  geopandas peak memory / ours: {summary['geopandas_memory_over_ours']:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--input", default="large", choices=sorted(INPUTS | OWN_INPUTS))
    parser.add_argument("--work", type=Path, default=Path("/tmp/gsqa-bench-export"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    source = source_of(args.work, args.input)
    tiles, osm_mb = (INPUTS | OWN_INPUTS)[args.input]
    what = ",".join(part for part, size in (("dem", tiles), ("osm", osm_mb)) if size)
    with new_cluster() as server:
        run_measured(shlex.join([str(BIN / "ingest"), "all", str(source), "--offline", "--what", what, "--dsn",
                                 server.dsn()]) + " >/dev/null 2>&1", name="build")
        with psycopg.connect(server.dsn()) as conn:
            counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
            files = [name for name, in conn.execute("SELECT DISTINCT filename FROM dem_us ORDER BY 1")]
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        database = {"rows": counts, "dem_files": len(files), "database_mb": round(size / 1e6)}
        runs = []
        for number in range(args.runs):
            runs.append(one_run(server, source, args.work, counts, files))
            print(f"run {number + 1} of {args.runs} done", file=sys.stderr)
    summary = summarize(runs)
    if args.json:
        print(json.dumps({"input": args.input, "database": database, **summary}, indent=1))
    else:
        print_summary(args.input, database, summary)


if __name__ == "__main__":
    main()
