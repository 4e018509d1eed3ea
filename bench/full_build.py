"""The whole build at a fraction of the real size, `ingest all --offline` against the anchors' pipeline, then
`reproduce verify --config all` on what it built; and the projection to the full size from two scales.

    .venv/bin/python bench/full_build.py [--scale 0.1] [--project 0.05,0.1] [--dsn SERVER_DSN | --make-db-server]
                                         [--sides anchors,ingest] [--data-dir DIR] [--keep] [--json]

Sources (written once per scale under --data-dir/source-<scale>, in the published layout of ingest/fetch.py):
  dem/tile_list.txt, dem/tiles/ASTGTMV003_*_dem.tif   scale x 1,182 ASTER-like tiles (3601x3601 Int16), cells
        of the CONUS box spread evenly over its land cells, each with the terrain of its region (gentle
        plains, rugged Appalachians, rough mountain west: bench/terrain.py says how the mix is derived from
        the box's coordinates, and the bench prints each terrain's measured pixel steps); uncompressed, 26 MB
        each where the published tiles average 15 MB (about 18 GB for 1,182), so the sources' disk is about
        12 GB above the real 71 GB at scale 1.0
  osm/osm_extract/<layer>/part-*.geojson   scale x 53 GB of osmx-like layers (testkit/osmx_synth.py) in scale x
        3,152 files, each layer with scale x the reference's features (docs/REFERENCE-DB.md: 18,491,387 roads,
        5,816,803 parks, 7,919,489 lakes, 38,955 postal codes; pois, whose raw count is not published, by their
        bytes) and its share of the bytes, so a feature's geometry has the real layer's mean size (the
        generator's vertex counts are scaled to it); the generator's tags (2-12 per feature besides the
        layer's own, addresses on 30 %)
Then, in fresh databases of the server --dsn names, or with --make-db-server of a throwaway cluster of this
machine's PostgreSQL set up as `make db`'s server while it loads (testkit/make_db_server.py: minimal WAL, fsync
off, ...; what the README's full `make db` runs on), each side after a CHECKPOINT and with the sources read into
the page cache first where they fit in half the memory, so neither side pays the first read:
  ingest   `ingest all SOURCE --offline`, stages as it announces them: init, fetch (skipped), dem, osm (with
           each table's GiST index and ANALYZE), finalize, check
  anchors  dem: raster2pgsql -s 4326 -C -I -M -F -t 256x256 <tiles> public.dem_us | psql (the reference's
           command); osm: ogr2ogr per file into the loader-1 table of its layer (COPY, geography, no index:
           bench/osm_geojson.py's command); index: CREATE INDEX ... USING gist (geometry) on the five tables;
           analyze: ANALYZE
printing per stage and in total: wall, client CPU (the command's process tree), server CPU (every postgres
process of the machine), peak client memory (largest process RSS, process tree PSS), peak disk (sources,
database, the server's WAL directory, and their sum; sampled every second), and the wall ratios anchors / ingest
for the DEM, for the vector tables with their indexes and ANALYZE, and in total.
Then `reproduce verify --config all` on the ingest database with the repository's benchmark records
(--benchmark-data): answers cannot match synthetic data, the point is the time per template (median, max)
and the 10 slowest questions.
--project S1,S2 runs both scales (verify at the larger only) and carries each stage's wall time and each
side's peak disk to scale 1.0 by the power law through the two points (bench/measure.py, power_law), so the
growth of index builds is measured, not assumed: the exponent is printed (above 1, a stage grows faster than
its input, as GiST builds that outgrow memory do); start-up costs flatten small scales, so use scales whose
stages take tens of seconds. The WAL's peak is bounded by the server's max_wal_size and checkpoints, so its
projection holds only below that bound; the WAL directory is the whole server's (other databases' writes
count). The machine's load is not controlled: note it with the figures. --sides ingest runs ours only (the
anchors take about 10 times as long: their ratio changes only when either side does); --no-verify builds only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from itertools import islice
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from bench.make_db import fresh_database
from bench.measure import Disk, Measured, Usage, power_law, run_measured
from bench.osm_geojson import ogr2ogr_command
from bench.terrain import TERRAINS, add_steps, mix, sample_cells, step_summary, steps, terrain_of
from gsqa_core.dem_grid import ASTER_SIZE, SRID, TILE
from ingest.dem.synthetic import aster_name, spectral_terrain, write_aster_tile
from reproduce.results import Result
from testkit.make_db_server import make_db_server
from testkit.osmx_synth import LAYER_FOLDERS, LAYER_SHARE, features, write_file

ROOT = Path(__file__).resolve().parent.parent


BIN = Path(sys.executable).parent
FULL_TILES, FULL_OSM_BYTES, FULL_OSM_FILES = 1182, 53e9, 3152
FEATURES = {"roads": 18_491_387, "parks": 5_816_803, "lakes": 7_919_489, "postal_codes": 38_955}
TABLES = {"pois": "pois", "roads": "roads", "parks": "parks", "lakes": "lakes", "postal_codes": "regions"}
ANCHOR_STAGES = ("dem", "osm", "index", "analyze")
COMPARED = {"dem": (("dem",), ("dem",)), "osm, indexes, ANALYZE": (("osm", "index", "analyze"), ("osm",))}
SLOWEST = 10
SIDES = ("anchors", "ingest")


def make_source(data_dir: Path, scale: float, jobs: int) -> tuple[Path, dict]:
    """The source tree of one scale, written once (the summary beside it says what it holds)."""
    root = data_dir / f"source-{scale:g}"
    summary_path = root / "synthetic.json"
    if summary_path.exists():
        return root, json.loads(summary_path.read_text())
    shutil.rmtree(root, ignore_errors=True)
    cells = sample_cells(round(scale * FULL_TILES))
    tiles = root / "dem" / "tiles"
    tiles.mkdir(parents=True)
    with ProcessPoolExecutor(jobs) as pool:
        print(f"writing {len(cells)} tiles and {scale * FULL_OSM_BYTES / 1e9:.2f} GB of layers under {root}",
              file=sys.stderr)
        tile_steps = list(pool.map(_write_tile, [tiles] * len(cells), cells, range(len(cells))))
        layers = _write_layers(pool, root / "osm" / "osm_extract", scale)
    (root / "dem" / "tile_list.txt").write_text("".join(f"{aster_name(lat, lon)}\n" for lat, lon in cells))
    by_terrain: dict[str, list] = {}
    for (lat, lon), counts in zip(cells, tile_steps, strict=True):
        by_terrain.setdefault(terrain_of(lat, lon), []).append(counts)
    summary = {"scale": scale, "tiles": len(cells), "terrain_mix": mix(cells),
               "steps": {terrain: step_summary(_summed(counts)) for terrain, counts in by_terrain.items()},
               "layers": layers}
    summary_path.write_text(json.dumps(summary, indent=1))
    return root, summary


def _write_tile(folder: Path, cell: tuple[int, int], seed: int) -> list[int]:
    lat, lon = cell
    heights = spectral_terrain(ASTER_SIZE, seed=seed, **TERRAINS[terrain_of(lat, lon)])
    write_aster_tile(folder, lat, lon, heights)
    return steps(heights).tolist()


def _summed(counts: list[list[int]]):
    import numpy as np

    total = np.zeros(1, dtype=np.int64)
    for one in counts:
        total = add_steps(total, np.array(one, dtype=np.int64))
    return total


def _write_layers(pool: ProcessPoolExecutor, folder: Path, scale: float) -> dict[str, dict]:
    """Each layer's features over its files, with the geometry detail that gives the real mean bytes."""
    plans = {}
    for layer in LAYER_FOLDERS:
        layer_bytes = scale * FULL_OSM_BYTES * LAYER_SHARE[layer]
        detail = 1.0 if layer not in FEATURES else detail_for(layer, layer_bytes / (scale * FEATURES[layer]))
        count = round(scale * FEATURES[layer]) if layer in FEATURES else round(layer_bytes / mean_bytes(layer, 1.0))
        files = max(1, round(scale * FULL_OSM_FILES * LAYER_SHARE[layer]))
        (folder / layer).mkdir(parents=True, exist_ok=True)
        plans[layer] = (detail, count, files)
    jobs = [(folder / layer / f"part-{k:05d}.geojson", layer, seed, detail,
             count * (k + 1) // files - count * k // files)  # the layer's features split evenly over its files
            for seed, (layer, (detail, count, files)) in enumerate(plans.items()) for k in range(files)]
    list(pool.map(_write_part, *zip(*jobs, strict=True)))
    return {layer: {"features": count, "files": files, "vertex_detail": round(detail, 3),
                    "mb": round(sum(path.stat().st_size for path in (folder / layer).glob("*.geojson")) / 1e6, 1)}
            for layer, (detail, count, files) in plans.items()}


def _write_part(path: Path, layer: str, seed: int, detail: float, count: int) -> None:
    part = int(path.stem.split("-")[1])
    write_file(path, islice(features(layer, seed * 100_000 + part, detail), count), math.inf, "lines")


def mean_bytes(layer: str, detail: float, sample: int = 400) -> float:
    items = features(layer, seed=1, detail=detail)
    return sum(len(json.dumps(next(items), separators=(",", ":"))) + 2 for _ in range(sample)) / sample


def detail_for(layer: str, target: float) -> float:
    """The vertex detail at which the layer's features average `target` bytes (secant steps on samples)."""
    low, high = 0.5, 2.0
    size_low, size_high = mean_bytes(layer, low), mean_bytes(layer, high)
    for _ in range(4):
        if size_high == size_low:
            break
        guess = max(0.02, high + (target - size_high) * (high - low) / (size_high - size_low))
        low, size_low, high, size_high = high, size_high, guess, mean_bytes(layer, guess)
    return high


def drop_database(server_dsn: str, name: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def checkpoint(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def build_ingest(source: Path, server_dsn: str, name: str) -> list[Usage]:
    dsn = fresh_database(server_dsn, name)
    checkpoint(dsn)
    command = shlex.join([str(BIN / "ingest"), "all", str(source), "--offline", "--dsn", dsn])
    run = run_measured(command, name="total", disk=_disk(source, server_dsn, name), first_phase="init",
                       phase_of=lambda line: line.split(": ", 1)[1] if line.startswith("== ingest all: ") else None)
    return [*run.phases, run.total]


def build_anchors(source: Path, server_dsn: str, name: str) -> list[Usage]:
    dsn = fresh_database(server_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION postgis")
        conn.execute("CREATE EXTENSION postgis_raster")
        conn.execute("CHECKPOINT")
    psql = f"psql -q -v ON_ERROR_STOP=1 -d {shlex.quote(dsn)}"
    sql = {"index": " ".join(f"CREATE INDEX {table}_geometry_gix ON public.{table} USING gist (geometry);"
                             for table in TABLES.values()),
           "analyze": "ANALYZE;"}
    with tempfile.TemporaryDirectory() as scratch:
        ogr2ogr = Path(scratch) / "ogr2ogr.sh"  # one command per file: too long for one argument at scale 1
        ogr2ogr.write_text(ogr2ogr_command(source / "osm" / "osm_extract", dsn, TABLES).replace(" && ", "\n") + "\n")
        tiles = shlex.quote(str(source / "dem" / "tiles"))  # the shell's glob: sorted by name, as tile_list.txt
        commands = {
            "dem": f"raster2pgsql -s {SRID} -C -I -M -F -t {TILE}x{TILE} {tiles}/*.tif public.dem_us 2>/dev/null "
                   f"| {psql} >/dev/null",
            "osm": f"bash -e {ogr2ogr}",
            **{stage: f"{psql} -c {shlex.quote(statement)} >/dev/null" for stage, statement in sql.items()},
        }
        runs: list[Measured] = [run_measured(commands[stage], name=stage, disk=_disk(source, server_dsn, name))
                                for stage in ANCHOR_STAGES]
    return [run.total for run in runs] + [_sum(runs)]


def _disk(source: Path, server_dsn: str, database: str) -> Disk:
    return Disk({"sources": source}, server_dsn, database, wal=True)


def _sum(runs: list[Measured]) -> Usage:
    """The stages one after the other: times add up, peaks are the largest."""
    totals = [run.total for run in runs]
    parts = {part for usage in totals for part in usage.peak_disk_mb}
    return Usage("total", sum(u.wall_s for u in totals), sum(u.client_cpu_s for u in totals),
                 sum(u.server_cpu_s for u in totals), max(u.peak_client_rss_mb for u in totals),
                 max(u.peak_client_pss_mb for u in totals),
                 {part: max(u.peak_disk_mb.get(part, 0.0) for u in totals) for part in parts}).rounded()


def table_sizes(server_dsn: str, name: str) -> dict[str, float]:
    with psycopg.connect(make_conninfo(server_dsn, dbname=name)) as conn:
        return {table: round(size / 2**20, 1) for table, size in conn.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relnamespace = 'public'::regnamespace "
            "AND relkind = 'r' AND relname <> 'spatial_ref_sys' ORDER BY relname")}


def verify(server_dsn: str, name: str, data: Path) -> dict:
    """`reproduce verify --config all` on the database: time per template and the slowest questions."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "verify.json"
        command = shlex.join([str(BIN / "reproduce"), "verify", "--config", "all", "--data", str(data),
                              "--dsn", make_conninfo(server_dsn, dbname=name), "--json-out", str(report)])
        run = run_measured(f"{command} 2>/dev/null", name="verify", check=False)
        if run.returncode not in (0, 1):
            raise SystemExit(f"reproduce verify failed (exit {run.returncode}): {command}")
        results = [Result.from_dict(entry) for entry in json.loads(report.read_text())["results"]]
    by_template: dict[str, list[float]] = {}
    for result in results:
        if result.outcome != "skipped":
            by_template.setdefault(result.template_id, []).append(result.seconds)
    slowest = sorted(results, key=lambda result: -result.seconds)[:SLOWEST]
    statuses: dict[str, int] = {}  # per word under the strict verdict (Result.word)
    for result in results:
        statuses[result.word("strict")] = statuses.get(result.word("strict"), 0) + 1
    return {"usage": run.total.__dict__, "questions": len(results), "statuses": statuses,
            "templates": {template: {"questions": len(times), "median_s": round(statistics.median(times), 3),
                                     "max_s": round(max(times), 3)} for template, times in sorted(by_template.items())},
            "slowest": [{"id": r.id, "template": r.template_id, "status": r.word("strict"), "seconds": r.seconds}
                        for r in slowest]}


def one_scale(args: argparse.Namespace, scale: float, with_verify: bool) -> dict:
    source, synthetic = make_source(args.data_dir, scale, args.jobs)
    files = [path for path in source.rglob("*") if path.is_file()]
    if sum(path.stat().st_size for path in files) < os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2:
        subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # both sides: a warm cache
    suffix = f"{scale:g}".replace(".", "p")
    names = {"anchors": f"gsqa_bench_full_anchors_{suffix}", "ingest": f"gsqa_bench_full_ingest_{suffix}"}
    result = {"scale": scale, "synthetic": synthetic,
              "source_mb": {part: round(sum(p.stat().st_size for p in (source / part).rglob("*") if p.is_file())
                                        / 2**20, 1) for part in ("dem", "osm")}}
    builds = {"anchors": build_anchors, "ingest": build_ingest}
    for side in args.sides:
        result[side] = [usage.__dict__ for usage in builds[side](source, args.dsn, names[side])]
    result["tables_mb"] = {side: table_sizes(args.dsn, names[side]) for side in args.sides}
    if with_verify:
        result["verify"] = verify(args.dsn, names["ingest"], args.benchmark_data)
    if not args.keep:
        for side in args.sides:
            drop_database(args.dsn, names[side])
        shutil.rmtree(source)
    return result


def project(small: dict, large: dict) -> dict:
    """Each stage's wall and each side's peak disk at scale 1.0, by the power law through the two scales."""
    out: dict = {}
    for side in SIDES:
        if side not in large:
            continue
        stages = {}
        for low, high in zip(small[side], large[side], strict=True):
            wall, exponent = power_law((small["scale"], low["wall_s"]), (large["scale"], high["wall_s"]))
            stages[high["name"]] = {"wall_s": round(wall, 1), "exponent": round(exponent, 2)}
        disk = {}
        for part, peak in large[side][-1]["peak_disk_mb"].items():
            value, exponent = power_law((small["scale"], small[side][-1]["peak_disk_mb"].get(part, 0.0)),
                                        (large["scale"], peak))
            disk[part] = {"gb": round(value / 1024, 1), "exponent": round(exponent, 2)}
        out[side] = {"stages": stages, "peak_disk": disk}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--project", metavar="S1,S2", help="run two scales and project every stage to 1.0")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""), help="the server (any database)")
    parser.add_argument("--make-db-server", action="store_true",
                        help="a throwaway cluster set up as make db's server while it loads, instead of --dsn's")
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/gsqa-bench-full"))
    parser.add_argument("--benchmark-data", type=Path, default=ROOT / "tests" / "data" / "benchmark")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes writing the sources")
    parser.add_argument("--keep", action="store_true", help="keep the sources and both databases")
    parser.add_argument("--sides", default=",".join(SIDES), help="what builds: anchors, ingest or both")
    parser.add_argument("--no-verify", dest="verify", action="store_false", help="build only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    given = set(args.sides.split(","))
    if given - set(SIDES):
        parser.error("--sides takes anchors, ingest or both, comma-separated")
    args.sides = [side for side in SIDES if side in given]
    scales = sorted(float(value) for value in args.project.split(",")) if args.project else [args.scale]
    if len(scales) != (2 if args.project else 1) or any(not 0 < scale <= 1 for scale in scales):
        parser.error("--scale and --project take scales in (0, 1], --project exactly two")
    with contextlib.ExitStack() as stack:
        if args.make_db_server:
            args.dsn = stack.enter_context(make_db_server()).dsn("postgres")
        results = {"server": "make db's" if args.make_db_server else "--dsn's",
                   "scales": [one_scale(args, scale, args.verify and scale == scales[-1]) for scale in scales]}
    if len(scales) == 2:
        results["projection"] = project(*results["scales"])
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"server: {results['server']}")
    for result in results["scales"]:
        print_scale(result)
    if "projection" in results:
        print_projection(results["projection"], scales)


def print_scale(result: dict) -> None:
    synthetic = result["synthetic"]
    print(f"\nscale {result['scale']:g}: {synthetic['tiles']} tiles ({result['source_mb']['dem']:,.0f} MB; terrain "
          + ", ".join(f"{terrain} {count}" for terrain, count in synthetic["terrain_mix"].items()) + "), "
          f"{result['source_mb']['osm']:,.0f} MB of layers")
    for terrain, summary in synthetic["steps"].items():
        print(f"  {terrain} pixel steps: median {summary['median_m']} m, 90th percentile {summary['p90_m']} m, "
              f"mean {summary['mean_m']} m")
    print("  layers: " + "; ".join(f"{layer} {plan['features']:,} features in {plan['files']} files, "
                                     f"{plan['mb']:,.0f} MB" for layer, plan in synthetic["layers"].items()))
    header = ("side", "stage", "wall s", "client CPU s", "server CPU s", "max RSS MB", "PSS MB", "disk peak MB",
              "sources", "database", "WAL")
    print(f"  {header[0]:<8}{header[1]:<10}" + "".join(f"{title:>13}" for title in header[2:]))
    for side in SIDES:
        for usage in result.get(side, []):
            disk = usage["peak_disk_mb"]
            values = (usage["wall_s"], usage["client_cpu_s"], usage["server_cpu_s"], usage["peak_client_rss_mb"],
                      usage["peak_client_pss_mb"], disk.get("total", ""), disk.get("sources", ""),
                      disk.get("database", ""), disk.get("wal", ""))
            print(f"  {side:<8}{usage['name']:<10}" + "".join(f"{value:>13}" for value in values))
    walls = {side: {usage["name"]: usage["wall_s"] for usage in result[side]} for side in SIDES if side in result}
    for label, (anchor_stages, ingest_stages) in {**COMPARED, "total": (("total",), ("total",))}.items():
        if len(walls) < len(SIDES):
            break
        anchor, ours = sum(walls["anchors"][s] for s in anchor_stages), sum(walls["ingest"][s] for s in ingest_stages)
        print(f"  ratio anchors / ingest, {label}: {anchor / ours:.2f}x ({anchor:.1f} s / {ours:.1f} s)")
    print("  tables MB: " + "; ".join(f"{side}: " + ", ".join(f"{table} {mb:,.0f}" for table, mb in tables.items())
                                      for side, tables in result["tables_mb"].items()))
    if "verify" in result:
        print_verify(result["verify"])


def print_verify(verified: dict) -> None:
    usage = verified["usage"]
    run = verified["questions"] - verified["statuses"].get("skipped", 0)
    print(f"  reproduce verify --config all: {run} questions in {usage['wall_s']} s (the others have no record in "
          f"--benchmark-data), client CPU {usage['client_cpu_s']} s, server CPU {usage['server_cpu_s']} s; "
          f"statuses {verified['statuses']}; per template, median / max s:")
    cells = [f"{template} {times['median_s']}/{times['max_s']}" for template, times in verified["templates"].items()]
    for start in range(0, len(cells), 6):
        print("    " + "  ".join(cells[start:start + 6]))
    print(f"  the {SLOWEST} slowest questions:")
    for slow in verified["slowest"]:
        print(f"    {slow['seconds']:>8.2f} s  {slow['status']:<9} {slow['id']}")


def print_projection(projection: dict, scales: list[float]) -> None:
    print(f"\nprojected to scale 1.0 from {scales[0]:g} and {scales[1]:g} (power law per stage; exponent 1 = linear):")
    for side, entry in projection.items():
        stages = ", ".join(f"{stage} {value['wall_s'] / 60:.1f} min (k {value['exponent']})"
                           for stage, value in entry["stages"].items())
        disk = ", ".join(f"{part} {value['gb']} GB" for part, value in entry["peak_disk"].items())
        print(f"  {side}: {stages}\n    peak disk: {disk}")


if __name__ == "__main__":
    main()
