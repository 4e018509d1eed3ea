"""`reproduce`: check the reference database against the benchmark (thin typer layer over reproduce.*)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ingest.db import DsnOption
from ingest.errors import EXIT_SOME_FAILED, reported_as_exit_code
from reproduce import readiness

app = typer.Typer(
    name="reproduce",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
    pretty_exceptions_show_locals=False,
    help="""Re-run the GS-QA2 benchmark SQL against the reference database and compare with the stored answers.

The database is resolved as everywhere: --dsn, then $DATABASE_URL, then libpq's PG* variables.
Benchmark SQL runs as the read-only login role gsqa_reader (--reader-dsn, or the main DSN with that user
and $GSQA_READER_PASSWORD).

Exit codes: 0 ok; 1 the run went through but something failed or differs; 2 nothing started.""",
)

ReaderDsnOption = Annotated[
    str | None,
    typer.Option("--reader-dsn", help="DSN of the read-only role (default: --dsn as gsqa_reader).", show_default=False),
]


@app.callback()
def main() -> None:
    # A callback keeps `reproduce` a command group while it has a single command.
    pass


@app.command()
def check(dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
          as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False) -> None:
    """Say whether the database is ready for benchmark runs: PostGIS >= 3.2, the six reference tables
    present and not empty (with planner row estimates), and the gsqa_reader login usable and read-only.

    Example: reproduce check --dsn postgresql://postgres@localhost:5432/gsqa

    Exit codes: 0 ready; 1 some table is missing or empty, or the reader cannot log in; 2 unreachable
    database or no PostGIS.
    """
    with reported_as_exit_code():
        result = readiness.check(dsn, reader_dsn)
    if as_json:
        typer.echo(json.dumps({"postgis": result.postgis_version, "tables": result.row_estimates,
                               "problems": result.problems}))
    else:
        typer.echo(f"PostGIS {result.postgis_version}")
        for name, rows in result.row_estimates.items():
            typer.echo(f"  {name:<8} {_describe_rows(rows)}")
        for problem in result.problems:
            typer.echo(f"not ready: {problem}")
    if result.problems:
        raise typer.Exit(EXIT_SOME_FAILED)


def _describe_rows(rows: int | None) -> str:
    if rows is None:
        return "missing"
    return "empty" if rows == 0 else f"~{rows:,} rows"
