"""`ingest`: build the GS-QA2 reference database stage by stage (thin typer layer over ingest.*)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from gsqa_core import schema
from gsqa_core.cli import DsnOption, JsonOption, command_group, interrupted_as_130, reported_as_exit_code, run
from gsqa_core.errors import EXIT_SOME_FAILED
from ingest import initdb, report

app = command_group(
    "ingest",
    """Build the GS-QA2 reference database (PostGIS) stage by stage.

Stages, in the order `ingest all` (and `make db`) runs them: init (schema, role), fetch (the published
sources), dem (the DEM), osm (the five vector tables), finalize (indexes), check (post-load checks);
`ingest status` says where a build stands; `ingest snapshot` publishes a built database, `ingest export` writes
it as files for code-writing agents.
Every command resolves the database the same way: --dsn, then $DATABASE_URL, then libpq's PG* variables.

Exit codes: 0 ok; 1 the run went through but some inputs failed; 2 nothing started (usage error,
unreachable database, no readable input).""",
    order=("all", "fetch", "init", "dem", "osm", "finalize", "check", "status", "snapshot", "export", "demo-data"),
)


@app.command()
def init(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Create the reference schema: extensions postgis and postgis_raster, the tables pois, roads, parks,
    lakes, regions and public.dem_us (empty), the bookkeeping schema gsqa, and the two sandbox login roles:
    gsqa_reader, which gold SQL runs as, and gsqa_model, which a model's SQL runs as (`reproduce score`,
    `reproduce.baseline.engine()`). Both may read the reference tables and nothing else, own nothing and
    create nothing (docs/DESIGN.md, "The sandbox").

    Idempotent: a second run changes nothing and says so. A table that exists with other columns is
    reported and left untouched. The roles are cluster-wide: created when missing, and where one differs
    from its declaration (settings it stored for itself, its password, what it owns here, a membership) it
    is restored, and each repair is listed; what init cannot repair (objects the role owns in another
    database, a server setting) is listed too. Each role's password is $GSQA_READER_PASSWORD /
    $GSQA_MODEL_PASSWORD, else the one this database keeps, else a generated one; it is kept in
    gsqa.role_login (readable by the admin only), where `reproduce` finds it to log the role in over TCP on
    127.0.0.1 when the local socket refuses it (peer authentication, as on a stock Debian or Ubuntu server).

    Needs a role that may create extensions and roles (e.g. postgres).

    Example: ingest init --dsn postgresql://postgres@localhost:5432/gsqa

    Exit codes: 0 schema in place; 1 in place, but a role still differs in a way init cannot repair;
    2 unreachable database, missing PostGIS, conflicting table.
    """
    with reported_as_exit_code():
        done = initdb.initialize(dsn)
    _show(as_json, report.init_json(done), report.init_text(done))
    if done.left:
        raise typer.Exit(EXIT_SOME_FAILED)


@app.command()
def finalize(dsn: DsnOption = None) -> None:
    """Build the GiST indexes the five vector tables miss (loader 2's names) and ANALYZE every one, as many
    tables at once as the machine has cores, largest first. `ingest osm` already does both for each table it
    loads (unless --no-index); this completes a load made with --no-index or one whose layers failed. Safe to
    rerun: existing indexes are kept.

    Example: ingest finalize

    Exit codes: 0 done; 2 unreachable database or missing tables (run `ingest init` first).
    """
    with reported_as_exit_code():
        initdb.finalize(dsn)
    typer.echo("post-load indexes in place; vector tables analyzed")


@app.command("fetch")
def fetch_command(
    data_dir: Annotated[Path, typer.Argument(help="Where the published layout goes (dem/, osm/).", show_default=False)],
    what: Annotated[str, typer.Option(metavar="PARTS",
                                      help="Comma-separated parts to fetch, of dem and osm.")] = "dem,osm",
    tiles: Annotated[Path | None, typer.Option(metavar="FILE",
                                               help="Fetch only the DEM tiles named in this file (one file name "
                                               "per line) instead of those of dem/tile_list.txt.",
                                               show_default=False)] = None,
    bbox: Annotated[str | None, typer.Option(metavar="W,S,E,N",
                                             help="Fetch only the DEM tiles of the tile list whose 1-degree cell "
                                             "overlaps W,S,E,N (degrees).", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the files and the size to download; "
                                          "write nothing.")] = False,
    workers: Annotated[int, typer.Option(metavar="N", min=1, help="Parallel downloads.")] = 8,
    as_json: JsonOption = False,
) -> None:
    """Download the published sources (Hugging Face dataset Zoe/GS-QA2-source) into DATA_DIR in their
    published layout: `dem/tile_list.txt`, `dem/tiles/*.tif` (the tiles the tile list names) and
    `osm/osm_extract/<layer>/*.geojson` (about 18 GB + 53 GB).

    Every file is checked against the hub's checksum before it is moved into the layout, so a stage never
    reads a partial or unverified file; a file that does not match is discarded and reported. Interrupted
    downloads resume where they stopped (run the same command again: verified files are skipped, the files
    in flight when a run was killed are downloaded again); server errors and dropped connections are retried
    with backoff (a dropped download resumes with a Range request). One progress bar on stderr. `--bbox`
    narrows only the DEM tiles: the GeoJSON file names do not say where their features lie. HF_ENDPOINT and
    HF_TOKEN are honoured.

    Example: ingest fetch /data --what dem --bbox -118.7,33.6,-117.9,34.4 --dry-run

    Exit codes: 0 every file in place and verified; 1 some files failed or are missing on the hub (the
    others are in place); 2 nothing started (usage error, hub unreachable, DATA_DIR not writable).
    """
    from ingest import fetch

    if tiles is not None and bbox is not None:
        raise typer.BadParameter("give --tiles or --bbox, not both", param_hint="--bbox")
    parts = [part.strip() for part in what.split(",") if part.strip()]
    _log_to_stderr()
    with reported_as_exit_code():
        fetched = fetch.fetch(data_dir, parts, tiles_file=tiles, bbox=fetch.parse_bbox(bbox) if bbox else None,
                              dry_run=dry_run, workers=workers)
    _show(as_json, fetched.as_json(), report.fetch_text(fetched, dry_run))
    raise typer.Exit(fetched.exit_code)


# The stages import their loaders when they run: `ingest osm` need not load rasterio, nor `ingest dem` shapely.
@app.command("dem")
def dem_command(
    paths: Annotated[list[Path], typer.Argument(help="GeoTIFF files, or directories of *.tif files.",
                                                show_default=False)],
    table: Annotated[str, typer.Option(metavar="TABLE", help="Raster table to load.")] = schema.dem_us.fullname,
    workers: Annotated[int | None, typer.Option(
        metavar="N", min=1, help="Stager processes, each with its own connection [default: number of cores].",
        show_default=False)] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Drop the table and its load log first.")] = False,
    compression: Annotated[str, typer.Option(metavar="lz4|pglz", help="TOAST compression of rast: lz4 (fast) or pglz "
                                             "(raster2pgsql's, smaller, slower to load).")] = "lz4",
    skip_disk_check: Annotated[bool, typer.Option("--skip-disk-check",
                                                  help="Load even if the disk looks too small.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Load ASTER GDEM GeoTIFFs into public.dem_us, tile for tile as
    `raster2pgsql -s 4326 -I -C -M -F -t 256x256 <files sorted by name>` would, only faster.

    Files load in name order, each in one transaction with its gsqa.load_log entry. A rerun skips files
    already loaded with the same size and checksum and reloads changed ones and every file after them (rids
    follow name order), so an interrupted load is resumed by running the same command again: killed at any
    point, the table ends up as from one clean run. A file that cannot be loaded (not a GeoTIFF, truncated,
    not EPSG:4326, not Int16) is reported on one line and the other files still load; a size other than
    3601x3601 loads with a warning. Afterwards the GiST index, the raster constraints of -C and VACUUM
    ANALYZE are in place (docs/REFERENCE-DB.md, the DEM table). Tiles are stored with lz4 TOAST compression:
    the same pixels and query results as raster2pgsql's pglz (`--compression pglz`), more disk, faster.
    Progress goes to stderr.

    Refused before anything is written: a table holding tiles this command did not load or tiles of files
    not named (`--replace` drops and reloads it), a second load into the same table, a load that would not
    fit on the database's disk (`--skip-disk-check`).

    Example: ingest dem /data/dem --dsn postgresql://postgres@localhost:5432/gsqa

    Exit codes: 0 every file loaded; 1 some files failed (the rest loaded); 2 nothing started (missing
    path, no readable GeoTIFF, unreachable database, a refusal above); 130 interrupted (Ctrl-C): the file
    being loaded is rolled back, a rerun resumes.
    """
    from ingest.dem.load import load_dem

    _check_compression(compression)
    with _load_stage():
        loaded = load_dem(paths, dsn, table=table, workers=workers, replace=replace,
                          compression=compression, check_disk=not skip_disk_check)
    _show(as_json, loaded.as_json(), report.dem_text(loaded))
    raise typer.Exit(loaded.exit_code)


@app.command("osm")
def osm_command(
    sources: Annotated[list[Path], typer.Argument(
        help="One folder holding the layer folders (pois/, roads/, parks/, lakes/, postal_codes/) or a dataset "
        "root holding osm/osm_extract/; or one or more OpenStreetMap .osm.pbf extracts.", show_default=False)],
    layers: Annotated[str | None, typer.Option(metavar="LAYERS",
                                               help="Comma-separated layers to load, of pois, roads, parks, "
                                               "lakes, regions [default: every layer folder in SOURCE].",
                                               show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(metavar="N",
                                                min=1, help="GeoJSON: parser processes in all, shared by two writer "
                                                "connections [default: number of cores].",
                                                show_default=False)] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Empty the tables and their load log first.")] = False,
    compression: Annotated[str, typer.Option(metavar="lz4|pglz",
                                             help="TOAST compression of the geometries: lz4 (fast) or pglz "
                                             "(loader 1's); the values are the same.")] = "lz4",
    bbox: Annotated[str | None, typer.Option(metavar="W,S,E,N",
                                             help="A regional build: only the features whose envelope overlaps "
                                             "W,S,E,N (degrees).", show_default=False)] = None,
    export_geojson: Annotated[Path | None, typer.Option(
        "--export-geojson", metavar="DIR", help="PBF input: write the osmx-style layers to DIR and load nothing.",
        show_default=False)] = None,
    work: Annotated[Path | None, typer.Option(
        metavar="DIR", help="PBF input over 1 GiB: where the node locations are kept on disk while the "
        "extracts are read [default: beside the first extract].", show_default=False)] = None,
    no_index: Annotated[bool, typer.Option("--no-index", help="Leave each table without its GiST index and "
                                           "statistics (`ingest finalize` adds them).")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Load the osmx GeoJSON layers (the published `osm/osm_extract/`), or layers derived from OpenStreetMap
    `.osm.pbf` extracts, into pois, roads, parks, lakes and regions, with the rows, values and ids of the
    benchmark's loader ("loader 1", docs/REFERENCE-DB.md).

    GeoJSON (any valid FeatureCollection; one feature per line is the fast path): files load in name order,
    each in one transaction with its gsqa.load_log entry; pois are numbered in loader 1's pass order
    (tourism, amenity, leisure) once every pois file is in. A rerun skips files already loaded with the same
    size and checksum and reloads changed ones (for roads, parks, lakes and regions also every later file,
    whose ids follow), so an interrupted load is resumed by running the same command again: killed anywhere,
    the tables end up as from one clean run. A feature loader 1 could not have stored (no geometry, invalid
    JSON, a tag value over 255 characters, an id that is not an integer, ...; docs/REFERENCE-DB.md) is skipped and
    listed with its file, number and byte offset. A file that is truncated or not JSON is reported on one
    line and the other files still load.

    PBF (detected from the content, not the name): two reader processes share the kinds of objects (nodes,
    ways, relation areas), read the extracts with libosmium (a native reader built at install where g++ and
    libosmium's headers are; without it, or with GSQA_NATIVE_READER=0, pyosmium reads the same rows more
    slowly and says so; --export-geojson reads with pyosmium) and stream rows straight into the tables under
    the same rules (docs/REFERENCE-DB.md); what each reader makes of each extract for each layer is one source,
    loaded and logged like a file above, so a rerun loads only what is missing. An object in several extracts
    is taken once (a rerun reads the earlier extracts again for their ids; a damaged extract fails the ones
    after it too, unread, until it is mended); what cannot be built (ways with missing nodes, broken
    multipolygons) is listed by OSM type and id. A truncated extract is refused before anything starts. Above
    1 GiB of input the node locations are kept in one file on disk (16 bytes per node: about 24 GB for the
    whole US), removed at the end. `--export-geojson DIR` writes the same features as osmx-style GeoJSON
    layers instead (loading DIR gives the same rows). A current extract is not the benchmark's snapshot:
    answers drift. Progress goes to stderr.

    Each table comes out ready to query: as soon as its layer is loaded, while the other layers still load,
    its GiST index (loader 2's name) is built and the table analyzed, unless a file of the layer failed (the
    rerun that loads it does it) or --no-index. A table rewritten from its first row (--replace, a changed
    first file, pois renumbered) loses its index first, so the rows are not indexed one by one.

    Refused before anything is written: a table holding rows this command did not load or rows of files not
    in SOURCE (`--replace` empties it), a second load into the same table, an unknown layer folder, a SOURCE
    without any layer folder.

    Example: ingest osm /data/osm_extract --dsn postgresql://postgres@localhost:5432/gsqa

    Example: ingest osm new-york.osm.pbf new-jersey.osm.pbf --bbox -74.3,40.5,-73.7,40.9

    Exit codes: 0 everything loaded; 1 some features, objects or files were skipped (the rest loaded); 2
    nothing started (no *.geojson file, not a PBF, unreachable database, a refusal above); 130 interrupted
    (Ctrl-C): the file being loaded is rolled back, a rerun resumes.
    """
    from ingest.fetch import parse_bbox
    from ingest.osm.load import load_osm, load_pbf

    _check_compression(compression)
    wanted = [name.strip() for name in layers.split(",") if name.strip()] if layers else None
    read, loaded = None, None
    with _load_stage():
        box = parse_bbox(bbox) if bbox else None
        if _geojson_layers(sources):
            loaded = load_osm(sources[0], dsn, layers=wanted, workers=workers, replace=replace,
                              compression=compression, bbox=box, index=not no_index)
        elif export_geojson is not None:
            from ingest.osm.pbf.export import export  # (it reads with pyosmium: imported only for it)

            read = export(sources, export_geojson, bbox=box)
        else:
            loaded, read = load_pbf(sources, dsn, layers=wanted, replace=replace, compression=compression,
                                    bbox=box, work=work, index=not no_index)
    _show(as_json, report.osm_json(read, loaded), report.osm_text(read, loaded, export_geojson))
    raise typer.Exit(max(1 if read and (read.broken or read.failed) else 0, loaded.exit_code if loaded else 0))


def _geojson_layers(sources: list[Path]) -> bool:
    """One folder is GeoJSON layers, told without importing the PBF path (pyosmium, libosmium), so that a GeoJSON
    load starts sooner; any other sources as the PBF checks tell them (a `.pbf` name, a PBF's first block)."""
    if len(sources) == 1 and sources[0].is_dir() and not sources[0].name.endswith(".pbf"):
        return True
    from ingest.osm.pbf.checks import all_pbf

    return not all_pbf(sources)


@app.command("all")
def all_command(
    data_dir: Annotated[Path, typer.Argument(help="The sources in their published layout (dem/, osm/); fetched "
                                             "there unless --offline.", show_default=False)],
    what: Annotated[str, typer.Option(metavar="PARTS",
                                      help="Comma-separated parts to build, of dem and osm.")] = "dem,osm",
    offline: Annotated[bool, typer.Option("--offline", help="Use only what is in DATA_DIR; fetch nothing.")] = False,
    bbox: Annotated[str | None, typer.Option(metavar="W,S,E,N",
                                             help="Build a region: the DEM tiles of the tile list whose 1-degree "
                                             "cell overlaps W,S,E,N (degrees), and the OSM features whose envelope "
                                             "overlaps it.", show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(metavar="N",
                                                min=1, help="Processes per load stage [default: number of cores].",
                                                show_default=False)] = None,
    compression: Annotated[str, typer.Option(metavar="lz4|pglz",
                                             help="TOAST compression of tiles and geometries: lz4 or pglz.")] = "lz4",
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Build the whole reference database: init, fetch (skipped with --offline), dem, osm, finalize, check.

    Each stage is recorded in gsqa.stage_log (start, end, outcome; see `ingest status`). The build stops at
    the first stage that fails, with one line saying what failed; run the same command again and it
    continues where it stopped: the fetch keeps every verified file, the loads keep every loaded file, and
    a load stage already done on unchanged inputs is skipped. The DEM tile set is the one dem/tile_list.txt
    names. Without osm/osm_extract/ in DATA_DIR, the OpenStreetMap extracts DATA_DIR/osm/*.osm.pbf are the
    vector source (read as `ingest osm` reads them); with neither, the vector tables stay empty (the osm
    stage says so). Progress and stage lines go to stderr; the summary to stdout.

    A region (`--bbox`) takes the DEM tiles of the tile list that overlap the box and the OSM features whose
    envelope overlaps it; the GeoJSON files do not say where their features lie, so the OSM part still needs
    all 53 GB (a small region is usually built with `--what dem`, as `make demo` does, or from a Geofabrik
    extract copied into DATA_DIR/osm/: `make db OFFLINE=1 BBOX=...`).

    Example: ingest all /data   (in the loader container, as `make db` runs it)

    Exit codes: 0 every stage done; 1 a stage failed (the summary says which and why); 2 nothing started
    (usage error, unreachable database, DATA_DIR missing with --offline); 130 interrupted.
    """
    from ingest import build, fetch

    _check_compression(compression)
    parts = _subset(what, fetch.WHAT, "--what")
    options = build.BuildOptions(data_dir, what=parts, offline=offline, bbox=fetch.parse_bbox(bbox) if bbox else None,
                                 workers=workers, compression=compression)
    with _load_stage():
        built = build.build(options, dsn, lambda line: print(line, file=sys.stderr, flush=True))
    _show(as_json, built.as_json(), report.build_text(built))
    raise typer.Exit(built.exit_code)


@app.command("demo-data")
def demo_data_command(
    data_dir: Annotated[Path, typer.Argument(help="Where to write the demo dataset.", show_default=False)],
) -> None:
    """Write a small synthetic dataset to try the tools on, in the published layouts: two DEM tiles with
    `dem/tile_list.txt`, a few features per OSM layer under `osm/osm_extract/`, and under `benchmark/` the 20
    questions of R1 (elevation at a museum) and the 100 of V5 (nearest museum to a hotel), with the benchmark
    templates' SQL and answers computed independently of any database. About 55 MB. Nothing in it is real.

    Example: ingest demo-data /tmp/gsqa-demo && ingest all /tmp/gsqa-demo --offline && reproduce verify
    --config all --template R1 --template V5 --data /tmp/gsqa-demo/benchmark   (every question passes)

    Exit codes: 0 written; 2 DATA_DIR cannot be written.
    """
    from ingest import demo

    try:
        written = demo.write_demo(data_dir)
    except OSError as error:
        print(f"error: {data_dir}: cannot write the demo data ({error.strerror or error})", file=sys.stderr)
        raise typer.Exit(2) from None
    typer.echo(report.demo_text(data_dir, written))


@app.command("status")
def status_command(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Where the build stands: every stage of `ingest all` (done, failed, running, interrupted or pending,
    with its times and summary) and what each reference table holds (files and rows from the load log)
    against the files the last `ingest all` set out to load into it. A database restored from a snapshot
    (`ingest snapshot restore`) says so first: from where, and its manifest's sha256.

    Example: ingest status --json

    Exit codes: 0 printed; 2 unreachable database or no build recorded.
    """
    from ingest import build

    with reported_as_exit_code():
        state = build.status(dsn)
    _show(as_json, state, report.status_text(state))


@app.command("check")
def check_command(
    reference: Annotated[bool, typer.Option("--reference", help="Also compare with the published totals: "
                                            "265,950 tiles, the documented extent, the vector row-count lower "
                                            "bounds.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """The post-load checks (docs/REFERENCE-DB.md): DEM tile count, 225 tiles per ASTER file and the
    tile-size census, extent, heap order, raster constraints and raster_columns, the GiST index; vector
    tables: rows equal to the load log's, indexes, ANALYZE; the files `ingest all` set out to load; the
    reader role. Read-only; every check is listed, failed ones first.

    Example: ingest check --reference

    Exit codes: 0 every check passed; 1 some checks failed (listed); 2 unreachable database.
    """
    from ingest import check

    with reported_as_exit_code():
        results = check.run_checks(dsn, reference=reference)
    results.sort(key=lambda result: result.ok)
    _show(as_json, [result.as_json() for result in results], report.checks_text(results))
    raise typer.Exit(1 if any(not result.ok for result in results) else 0)


snapshot_app = command_group(
    "snapshot",
    """Publish a built and checked reference database once, restore it anywhere: `create` writes it as a
folder of verified parts with a manifest and a dataset card, `push` uploads it to the Hugging Face hub,
`restore` puts it into a database (from the folder or from the hub); `make db FROM=DIR` (or
FROM=hf:OWNER/NAME; REPLACE=1 over a database that holds tables) restores into the Docker database instead of
building it. docs/SNAPSHOTS.md says what a snapshot holds.

Exit codes: 0 ok; 1 restored but `ingest check` failed; 2 nothing started or nothing restored.""",
    order=("create", "push", "restore"),
)
app.add_typer(snapshot_app)
JobsOption = Annotated[int | None, typer.Option("--jobs", metavar="N", min=1, help="Parallel pg_dump / pg_restore "
                                                "jobs and part checks (default: the machine's cores).",
                                                show_default=False)]


@snapshot_app.command("create")
def snapshot_create(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="A new or empty folder for the snapshot.",
                                           show_default=False)],
    snapshot_format: Annotated[str, typer.Option("--format", metavar="FORMAT",
                                                 help="dump: a directory-format pg_dump (portable to any "
                                                 "PostgreSQL >= the snapshot's major version); physical: a cold "
                                                 "copy of the data directory as a zstd-compressed tar (--data-dir; "
                                                 "the server is stopped for the copy and started again), for "
                                                 "`make db FROM=` only.")
                   ] = "dump",
    data_dir: Annotated[Path | None, typer.Option("--data-dir", metavar="PGDATA", help="physical: the data "
                                                  "directory of the database's server (run as root or as its "
                                                  "owner).", show_default=False)] = None,
    verify: Annotated[Path | None, typer.Option("--verify", metavar="FILE", help="A `reproduce verify "
                                                "--json-out` file to keep in the manifest.",
                                                show_default=False)] = None,
    part_size: Annotated[int | None, typer.Option("--part-size", metavar="BYTES", min=1,
                                                  help="Largest part (of a table's data in a dump, of the "
                                                  "compressed tar in a physical snapshot; a hub upload and a "
                                                  "download resume part by part); default 2 GB.",
                                                  show_default=False)] = None,
    image: Annotated[str | None, typer.Option("--image", metavar="NAME", envvar="GSQA_DB_IMAGE",
                                              help="The image the database server runs in, for the manifest.",
                                              show_default=False)] = None,
    jobs: JobsOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write a snapshot of the database into DIR: its data in parts (each at most --part-size), manifest.json
    (every part's sha256 and size; the PostgreSQL, PostGIS, GEOS, PROJ and GDAL versions and collation; the
    image; the load and stage log summaries; the `ingest check` report; --verify's summary) and README.md
    (the dataset card). Only a database that passes `ingest check` is snapshotted.

    Interrupted (even kill -9), the same command resumes: a finished dump is not made again, nor the parts of
    a physical copy whose cluster has not run since. A DIR that already holds a finished snapshot is left as
    it is. For the Docker database, `make snapshot TO=DIR` makes the physical one.

    Example: ingest snapshot create /srv/gsqa-snapshot --verify verify.json

    Exit codes: 0 written (or already there); 2 nothing written (checks fail, DIR not usable, pg_dump failed).
    """
    from ingest.snapshot import create, manifest

    if snapshot_format not in manifest.FORMATS:
        raise typer.BadParameter(f"expected one of {', '.join(manifest.FORMATS)}", param_hint="--format")
    with reported_as_exit_code():
        created = create.create(folder, dsn, jobs or os.cpu_count() or 1, verify, part_size or manifest.PART_SIZE,
                                image, snapshot_format, data_dir)
    _show(as_json, created.as_json(), report.snapshot_created_text(folder, created))


@snapshot_app.command("push")
def snapshot_push(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="A finished snapshot folder.", show_default=False)],
    repo: Annotated[str, typer.Argument(metavar="REPO", help="The Hugging Face dataset, OWNER/NAME.",
                                        show_default=False)],
    revision: Annotated[str | None, typer.Option("--revision", metavar="BRANCH", help="An existing branch to "
                                                 "commit to (default: main).", show_default=False)] = None,
) -> None:
    """Upload a snapshot folder as a Hugging Face dataset repository (created if missing): manifest.json,
    README.md (the dataset card) and the parts, with huggingface_hub's resumable upload. HF_TOKEN and
    HF_ENDPOINT are honoured. Interrupted (even kill -9), the same command goes on: parts the hub already
    holds are not sent again.

    Example: ingest snapshot push /srv/gsqa-snapshot Zoe/GS-QA2-refdb

    Exit codes: 0 pushed; 2 nothing pushed (not a finished snapshot, hub unreachable or refused).
    """
    from ingest.snapshot import hub

    with reported_as_exit_code():
        commit = hub.push(folder, repo, revision)
    typer.echo(report.pushed_text(folder, repo, revision, commit))


@snapshot_app.command("restore")
def snapshot_restore(
    source: Annotated[str, typer.Argument(metavar="SOURCE", help="A snapshot folder, or hf:OWNER/NAME[@REVISION].",
                                          show_default=False)],
    replace: Annotated[bool, typer.Option("--replace", help="Drop the tables the database holds first.")] = False,
    allow_version_change: Annotated[bool, typer.Option("--allow-version-change", help="Restore although this "
                                                       "server's PostgreSQL major version, PostGIS, GEOS or PROJ "
                                                       "differ from the snapshot's.")] = False,
    download_to: Annotated[Path | None, typer.Option("--download-to", metavar="DIR", help="Where a hub snapshot is "
                                                     "downloaded (default: gsqa-snapshots/OWNER--NAME).",
                                                     show_default=False)] = None,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", metavar="PGDATA", help="physical: extract the "
                                                  "snapshot in place of this data directory (its server stopped; "
                                                  "--replace if it holds a cluster); then start the server and "
                                                  "run the same command with --dsn to finish.",
                                                  show_default=False)] = None,
    preflight: Annotated[bool, typer.Option("--preflight", help="Only download the snapshot and check that the "
                                            "database can take it; print its format and folder.")] = False,
    jobs: JobsOption = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restore a snapshot into the database: download it (a hub source, with the checksums, staging and
    resume of `ingest fetch`), check every part against the manifest (a missing or damaged part stops it
    before anything is restored), restore the tables, indexes, constraints and logs, re-create the sandbox
    roles' grants (`ingest init`), VACUUM ANALYZE, then run `ingest check`.

    Refuses a server whose PostgreSQL major version, PostGIS, GEOS or PROJ differ from the snapshot's
    unless --allow-version-change (then says what may differ in answers), and a database that already holds
    tables unless --replace. Interrupted (even kill -9), the same command starts the restore over; on a
    database that is already this snapshot's finished restore (a kill as it ended) it only checks it again.

    A physical snapshot (a data directory, `make db FROM=` does all this): --data-dir replaces the stopped
    server's data directory with it; once the server runs on it, the command without --data-dir sets the
    sandbox roles' passwords, ANALYZEs what lacks statistics and runs `ingest check`. Into any other server it is
    refused: restore a dump snapshot there.

    Example: ingest snapshot restore hf:Zoe/GS-QA2-refdb --dsn postgresql://postgres@localhost/gsqa

    Exit codes: 0 restored and checked; 1 restored but some checks failed (listed); 2 nothing restored.
    """
    from ingest.snapshot import hub, manifest, restore

    _log_to_stderr()
    workers = jobs or os.cpu_count() or 1
    with reported_as_exit_code():
        folder = hub.local_folder(source, download_to, 8, lambda line: print(line, file=sys.stderr))
        label = source if source.startswith(hub.HF_PREFIX) else str(folder.resolve())
        if preflight:
            typer.echo(f"{restore.preflight(folder, dsn, replace, allow_version_change)} {folder}")
            return
        restored = restore.restore_folder(folder, label, dsn, workers, replace, allow_version_change, data_dir)
    if data_dir is not None:
        typer.echo(report.extracted_text(source, data_dir, restored))
        return
    for change in restored.version_changes:
        print(f"warning: {change}: answers may differ in the last digits ("
              f"{manifest.VERSION_KEYS[change.split()[0]]})", file=sys.stderr)
    _show(as_json, restored.as_json(), report.restored_text(source, restored))
    raise typer.Exit(1 if restored.failed_checks else 0)


@app.command("export")
def export_command(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="A new or empty folder, or one holding this "
                                           "database's export (finished or not).", show_default=False)],
    check_only: Annotated[bool, typer.Option("--check", help="Write nothing: prove that DIR equals the database "
                                             "and name every difference.")] = False,
    what: Annotated[str, typer.Option(metavar="PARTS", help="Comma-separated parts to export, of vector "
                                      "and dem.")] = "vector,dem",
    formats: Annotated[str, typer.Option("--format", metavar="FORMATS", help="Comma-separated formats of the "
                                         "vector tables, of parquet (GeoParquet), geojson (the published "
                                         "layers' layout: DIR/geojson/LAYER/part-NNNNN.geojson) and flatgeobuf "
                                         "(DIR/flatgeobuf/TABLE.fgb; needs the export extra: pyogrio).")
                 ] = "parquet",
    workers: Annotated[int | None, typer.Option(metavar="N", min=1, help="Processes writing COGs and threads "
                                                "writing GeoParquet files, each with its own connection "
                                                "[default: number of cores].", show_default=False)] = None,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """The reference database as the files a code-writing agent reads (docs/REFERENCE-DB.md, "The export"):
    each vector table as one GeoParquet 1.1 file (DIR/vector/TABLE.parquet: every column with its type, the
    geometry as WKB, CRS as PROJJSON, a bbox covering column, row groups in spatial order), each DEM source
    file as a Cloud-Optimized GeoTIFF reassembled from its tiles, pixel for pixel (DIR/dem/NAME.tif), a VRT
    mosaic over them (DIR/dem/dem_us.vrt), and DIR/export.json, the manifest: the database's identity and
    versions, every file's size, sha256 and rows or pixels. `--format geojson` writes the vector tables as
    GeoJSON parts in the published layers' layout too (properties: the table's columns, NULLs left out), and
    `--format flatgeobuf` as FlatGeobuf files (DIR/flatgeobuf/TABLE.fgb). Only a
    database that passes `ingest check` is exported. Progress goes to stderr.

    Files appear complete or not at all (written under a temporary name, renamed); interrupted (even kill -9),
    the same command writes only what is missing or changed since. Refused before anything is written: a DIR
    that holds another database's export or other files.

    --check writes nothing: every file against the manifest (size, sha256), the manifest's database against
    this one, each table's rows and their order-independent checksum against the GeoParquet file's, each
    COG's pixels against its tiles.

    Example: ingest export /srv/gsqa-export && ingest export --check /srv/gsqa-export

    Exit codes: 0 exported (or, with --check, equal); 1 --check found differences (listed); 2 nothing written
    (database not built or not checked, DIR refused, a full disk: the complete files are kept); 130
    interrupted (Ctrl-C): the complete files are kept, a rerun resumes.
    """
    from ingest.export import run, verify

    parts, vector_formats = _subset(what, run.WHAT, "--what"), _subset(formats, run.FORMATS, "--format")
    _log_to_stderr()
    with reported_as_exit_code(), interrupted_as_130("the file being written was removed, the complete ones are "
                                                     "kept; run the same command again to resume"):
        if check_only:
            checked = verify.check_export(folder, dsn)
        else:
            exported = run.export(folder, dsn, parts, vector_formats, workers=workers)
    if check_only:
        _show(as_json, checked.as_json(), report.export_check_text(folder, checked))
        raise typer.Exit(1 if checked.differences else 0)
    _show(as_json, exported.as_json(), report.export_text(folder, exported))


def _subset(given: str, allowed: tuple[str, ...], option: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in given.split(",") if part.strip())
    if not chosen or set(chosen) - set(allowed):
        raise typer.BadParameter(f"expected a comma-separated subset of {','.join(allowed)}", param_hint=option)
    return chosen


def _show(as_json: bool, data: Any, text: str) -> None:
    """A command's result on stdout: `data` as JSON with --json, else the report's text (if it has any)."""
    if as_json:
        typer.echo(json.dumps(data))
    elif text:
        typer.echo(text)


def _check_compression(compression: str) -> None:
    if compression not in schema.TOAST_COMPRESSIONS:
        raise typer.BadParameter(f"expected one of {', '.join(schema.TOAST_COMPRESSIONS)}", param_hint="--compression")


@contextlib.contextmanager
def _load_stage() -> Iterator[None]:
    """A load stage's run: warnings on stderr, user errors as one line, Ctrl-C as exit 130."""
    _log_to_stderr()
    with (reported_as_exit_code(), logging_redirect_tqdm([logging.getLogger("ingest")]),
          interrupted_as_130("the file being loaded was rolled back, the files before it are kept; run the same "
                             "command again to resume")):
        yield


def _log_to_stderr() -> None:
    """Our per-file warnings and errors, one line each, on stderr (GDAL's own chatter stays out)."""
    logger = logging.getLogger("ingest")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def main() -> None:
    """The `ingest` console script."""
    run(app)
