"""What both CLIs (`ingest`, `reproduce`) share: how a command group is set up, and common options."""

from __future__ import annotations

from typing import Annotated

import typer

JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]


def command_group(name: str, help_text: str) -> typer.Typer:
    """A typer app whose docstrings are Markdown manuals; a bug's traceback never prints local variables
    (they can hold a DSN with its password)."""
    return typer.Typer(
        name=name,
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode="markdown",
        pretty_exceptions_show_locals=False,
    )
