"""`ingest`: build the GS-QA2 reference database stage by stage (thin typer layer over ingest.*)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from tqdm.contrib.logging import logging_redirect_tqdm

from ingest import dem, initdb
from ingest.cli_common import JsonOption, command_group
from ingest.db import DsnOption
from ingest.errors import EXIT_INTERRUPTED, reported_as_exit_code

app = command_group(
    "ingest",
    """Build the GS-QA2 reference database (PostGIS) stage by stage.

Stages, in the order `make db` runs them: init (schema, role), dem (the DEM), finalize (indexes).
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


@app.command("dem")
def dem_command(
    paths: Annotated[list[Path], typer.Argument(help="GeoTIFF files, or directories of *.tif files.",
                                                show_default=False)],
    table: Annotated[str, typer.Option(help="Raster table to load.")] = dem.DEFAULT_TABLE,
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
    if compression not in dem.COMPRESSIONS:
        raise typer.BadParameter(f"expected one of {', '.join(dem.COMPRESSIONS)}", param_hint="--compression")
    _log_to_stderr()
    with reported_as_exit_code(), logging_redirect_tqdm([logging.getLogger("ingest")]):
        try:
            report = dem.load_dem(paths, dsn, table=table, workers=workers, replace=replace,
                                  compression=compression, check_disk=not skip_disk_check)
        except KeyboardInterrupt:
            print("interrupted: the file being loaded was rolled back, the files before it are kept; "
                  "run the same command again to resume", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if as_json:
        typer.echo(json.dumps(report.as_json()))
    else:
        typer.echo(f"{report.table}: loaded {len(report.loaded)} files ({report.tiles_written:,} tiles) in "
                   f"{report.seconds:.1f} s; {len(report.unchanged)} already loaded; {len(report.failed)} failed")
        for name, error in report.failed.items():
            typer.echo(f"  failed: {name}: {error}")
    raise typer.Exit(report.exit_code)


def _log_to_stderr() -> None:
    """Our per-file warnings and errors, one line each, on stderr (GDAL's own chatter stays out)."""
    logger = logging.getLogger("ingest")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
