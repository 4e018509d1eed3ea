"""`ingest`: build the GS-QA2 reference database stage by stage (thin typer layer over ingest.*)."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from ingest import initdb, schema
from ingest.cli_common import JsonOption, command_group
from ingest.db import DsnOption
from ingest.errors import EXIT_INTERRUPTED, reported_as_exit_code

if TYPE_CHECKING:
    from ingest.osm import OsmLoadReport

app = command_group(
    "ingest",
    """Build the GS-QA2 reference database (PostGIS) stage by stage.

Stages, in the order `make db` runs them: init (schema, role), dem (the DEM), osm (the five vector
tables), finalize (indexes).
Every command resolves the database the same way: --dsn, then $DATABASE_URL, then libpq's PG* variables.

Exit codes: 0 ok; 1 the run went through but some inputs failed; 2 nothing started (usage error,
unreachable database, no readable input).""",
)


@app.command()
def init(dsn: DsnOption = None, as_json: JsonOption = False) -> None:
    """Create the reference schema: extensions postgis and postgis_raster, the tables pois, roads, parks,
    lakes, regions and public.dem_us (empty), the bookkeeping schema gsqa, and the read-only login role
    gsqa_reader with its grants.

    Idempotent: a second run changes nothing and says so. A table that exists with other columns is
    reported and left untouched. The role is cluster-wide: it is created when missing (with the password
    in $GSQA_READER_PASSWORD, if set) and otherwise left as it is; its grants are re-applied.

    Needs a role that may create extensions and roles (e.g. postgres).

    Example: ingest init --dsn postgresql://postgres@localhost:5432/gsqa

    Exit codes: 0 schema in place; 2 unreachable database, missing PostGIS, conflicting table.
    """
    with reported_as_exit_code():
        report = initdb.initialize(dsn)
    if as_json:
        typer.echo(json.dumps({"database": report.target, "created": report.created}))
    elif report.changed:
        typer.echo(f"created in {report.target}:")
        for label in report.created:
            typer.echo(f"  {label}")
    else:
        typer.echo(f"nothing to do: the reference schema is already in place in {report.target}")


@app.command()
def finalize(dsn: DsnOption = None) -> None:
    """Build the post-load GiST indexes on the five vector tables and ANALYZE them
    (sql/40_post_load_indexes.sql). Safe to rerun: existing indexes are kept.

    Example: ingest finalize

    Exit codes: 0 done; 2 unreachable database or missing tables (run `ingest init` first).
    """
    with reported_as_exit_code():
        initdb.finalize(dsn)
    typer.echo("post-load indexes in place; vector tables analyzed")


# The stages import their loaders when they run: `ingest osm` need not load rasterio, nor `ingest dem` shapely.
@app.command("dem")
def dem_command(
    paths: Annotated[list[Path], typer.Argument(help="GeoTIFF files, or directories of *.tif files.",
                                                show_default=False)],
    table: Annotated[str, typer.Option(help="Raster table to load.")] = schema.dem_us.fullname,
    workers: Annotated[int | None, typer.Option(min=1, help="Encoder processes [default: number of cores].",
                                                show_default=False)] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Drop the table and its load log first.")] = False,
    compression: Annotated[str, typer.Option(help="TOAST compression of rast: lz4 (fast) or pglz "
                                             "(raster2pgsql's, smaller, about 3x slower to load).")] = "lz4",
    skip_disk_check: Annotated[bool, typer.Option("--skip-disk-check",
                                                  help="Load even if the disk looks too small.")] = False,
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Load ASTER GDEM GeoTIFFs into public.dem_us, tile for tile as
    `raster2pgsql -s 4326 -I -C -M -F -t 256x256 <files sorted by name>` would, only faster.

    Files load in name order, each in one transaction with its gsqa.load_log entry. A rerun skips files
    already loaded with the same size and checksum and reloads changed ones, so an interrupted load is
    resumed by running the same command again. A file that cannot be loaded (not a GeoTIFF, truncated,
    not EPSG:4326, not Int16) is reported on one line and the other files still load. Afterwards the
    GiST index, the raster constraints of -C and VACUUM ANALYZE are in place. Progress goes to stderr.

    Example: ingest dem /data/dem --dsn postgresql://postgres@localhost:5432/gsqa

    Exit codes: 0 every file loaded; 1 some files failed (the rest loaded); 2 nothing started (missing
    path, no readable GeoTIFF, unreachable database, a table holding tiles we did not load, not enough
    disk); 130 interrupted (Ctrl-C): the file being loaded is rolled back, a rerun resumes.
    """
    from ingest import dem

    _check_compression(compression)
    with _load_stage():
        report = dem.load_dem(paths, dsn, table=table, workers=workers, replace=replace,
                              compression=compression, check_disk=not skip_disk_check)
    if as_json:
        typer.echo(json.dumps(report.as_json()))
    else:
        typer.echo(f"{report.table}: loaded {len(report.loaded)} files ({report.tiles_written:,} tiles) in "
                   f"{report.seconds:.1f} s; {len(report.unchanged)} already loaded; {len(report.failed)} failed")
        for name, error in report.failed.items():
            typer.echo(f"  failed: {name}: {error}")
    raise typer.Exit(report.exit_code)


@app.command("osm")
def osm_command(
    source: Annotated[Path, typer.Argument(help="Folder holding the layer folders (pois/, roads/, parks/, lakes/, "
                                           "postal_codes/), or a dataset root holding osm/osm_extract/.",
                                           show_default=False)],
    layers: Annotated[str | None, typer.Option(help="Comma-separated layers to load, of pois, roads, parks, "
                                               "lakes, regions [default: every layer folder in SOURCE].",
                                               show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Parser processes in all, shared by two writer "
                                                "connections [default: number of cores].",
                                                show_default=False)] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Empty the tables and their load log first.")] = False,
    compression: Annotated[str, typer.Option(help="TOAST compression of the geometries: lz4 (fast) or pglz "
                                             "(loader 1's); the values are the same.")] = "lz4",
    dsn: DsnOption = None,
    as_json: JsonOption = False,
) -> None:
    """Load the osmx GeoJSON layers (the published `osm/osm_extract/`) into pois, roads, parks, lakes and
    regions, with the rows, values and ids of the benchmark's loader ("loader 1", docs/DESIGN.md).

    Files load in name order, each in one transaction with its gsqa.load_log entry; pois are numbered in
    loader 1's pass order (tourism, amenity, leisure) once every pois file is in. A rerun skips files
    already loaded with the same size and checksum and reloads changed ones, so an interrupted load is
    resumed by running the same command again. A feature loader 1 could not have stored (no geometry,
    invalid JSON, a tag value over 255 characters, an id that is not an integer, ...) is skipped and
    listed; a file that is truncated or not JSON is reported on one line and the other files still load.
    Progress goes to stderr; run `ingest finalize` afterwards for the indexes.

    Example: ingest osm /data/osm_extract --dsn postgresql://postgres@localhost:5432/gsqa

    Exit codes: 0 everything loaded; 1 some features or files were skipped (the rest loaded); 2 nothing
    started (missing or unknown layer folder, no *.geojson file, unreachable database, a table holding
    rows we did not load, another load running); 130 interrupted (Ctrl-C): the file being loaded is rolled
    back, a rerun resumes.
    """
    from ingest import osm

    _check_compression(compression)
    wanted = [name.strip() for name in layers.split(",") if name.strip()] if layers else None
    with _load_stage():
        report = osm.load_osm(source, dsn, layers=wanted, workers=workers, replace=replace, compression=compression)
    if as_json:
        typer.echo(json.dumps(report.as_json()))
    else:
        _print_osm_report(report)
    raise typer.Exit(report.exit_code)


def _print_osm_report(report: OsmLoadReport, listed: int = 20) -> None:
    from ingest.osm import describe_skip

    for layer in report.layers.values():
        typer.echo(f"{layer.table}: loaded {len(layer.loaded)} of {layer.files} files ({layer.rows_written:,} rows "
                   f"from {layer.features_read:,} features); {len(layer.unchanged)} already loaded; "
                   f"{len(layer.failed)} failed; skipped features: {layer.skipped_count:,}")
        for error in layer.failed.values():  # the message names the file
            typer.echo(f"  failed: {error}")
    skipped = [entry for layer in report.layers.values() for entry in layer.skipped]
    total = sum(layer.skipped_count for layer in report.layers.values())
    if total:
        typer.echo(f"skipped features ({total:,}; loader 1 could not have stored them):")
        for entry in skipped[:listed]:
            typer.echo(f"  {describe_skip(entry)}")
        if total > listed:
            typer.echo(f"  ... and {total - listed:,} more (see --json)")
    typer.echo(f"done in {report.seconds:.1f} s")


def _check_compression(compression: str) -> None:
    if compression not in schema.TOAST_COMPRESSIONS:
        raise typer.BadParameter(f"expected one of {', '.join(schema.TOAST_COMPRESSIONS)}", param_hint="--compression")


@contextlib.contextmanager
def _load_stage() -> Iterator[None]:
    """A load stage's run: warnings on stderr, user errors as one line, Ctrl-C as exit 130."""
    _log_to_stderr()
    with reported_as_exit_code(), logging_redirect_tqdm([logging.getLogger("ingest")]):
        try:
            yield
        except KeyboardInterrupt:
            print("interrupted: the file being loaded was rolled back, the files before it are kept; "
                  "run the same command again to resume", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None


def _log_to_stderr() -> None:
    """Our per-file warnings and errors, one line each, on stderr (GDAL's own chatter stays out)."""
    logger = logging.getLogger("ingest")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
