"""`ingest`: build the GS-QA2 reference database stage by stage (thin typer layer over ingest.*)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ingest import initdb
from ingest.db import DsnOption
from ingest.errors import reported_as_exit_code

app = typer.Typer(
    name="ingest",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    help="""Build the GS-QA2 reference database (PostGIS) stage by stage.

Stages, in the order `make db` runs them: init (schema, role), the load stages, finalize (indexes).
Every command resolves the database the same way: --dsn, then $DATABASE_URL, then libpq's PG* variables.

Exit codes: 0 ok; 1 the run went through but some inputs failed; 2 nothing started (usage error,
unreachable database, no readable input).""",
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]


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
