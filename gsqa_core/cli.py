"""What both CLIs (`ingest`, `reproduce`) share: how a command group is set up, run, and common options."""

from __future__ import annotations

import contextlib
import difflib
import logging
import re
import string
import sys
from collections.abc import Callable, Iterator
from typing import Annotated, TypeVar

import psycopg
import typer
import typer.core

from gsqa_core.db import DSN_HELP
from gsqa_core.errors import EXIT_INTERRUPTED, EXIT_NOT_STARTED, EXIT_SOME_FAILED, GsqaError, connection_lost

# typer carries its own copy of click and exports only BadParameter by name; its base is click's UsageError.
UsageError = typer.BadParameter.__mro__[1]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
DsnOption = Annotated[str | None, typer.Option("--dsn", metavar="DSN", help=DSN_HELP, show_default=False)]
F = TypeVar("F", bound=Callable)


def command_group(name: str, help_text: str, order: tuple[str, ...] = ()) -> typer.Typer:
    """A typer app with click's plain help (rich's panels swallowed `<placeholders>`, cut long defaults and
    wrapped choices mid-word), its commands listed in `order`; a bug's traceback never prints local variables
    (they can hold a DSN with its password)."""

    class Group(typer.core.TyperGroup):
        def list_commands(self, ctx: typer.Context) -> list[str]:
            names = super().list_commands(ctx)
            return sorted(names, key=lambda command: order.index(command) if command in order else len(order))

    return typer.Typer(
        cls=Group,
        name=name,
        help=help_text,
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_show_locals=False,
    )


@contextlib.contextmanager
def reported_as_exit_code() -> Iterator[None]:
    """Turn a GsqaError raised by library code into `error: ...` on stderr and its exit code."""
    try:
        yield
    except GsqaError as error:
        print(f"error: {error}", file=sys.stderr)
        raise typer.Exit(error.exit_code) from None
    except psycopg.OperationalError as error:
        if not connection_lost(error):
            raise
        cause = " ".join(str(error).split("\n")[0].split())
        print(f"error: lost the connection to the database ({cause}): what was committed before stays; "
              "once the server is back, run the same command again to resume", file=sys.stderr)
        raise typer.Exit(EXIT_SOME_FAILED) from None


@contextlib.contextmanager
def interrupted_as_130(what_was_kept: str) -> Iterator[None]:
    """Ctrl-C inside: say what happened to the work in flight and what was kept, then exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        print(f"interrupted: {what_was_kept}", file=sys.stderr)
        raise typer.Exit(EXIT_INTERRUPTED) from None


def manual(**values: str) -> Callable[[F], F]:
    """Fill ${name} in a command's docstring (its manual) from the declarations it states, such as the
    tolerances or the minimum PostGIS, so that the manual cannot drift from them."""

    def fill(command: F) -> F:
        command.__doc__ = string.Template(command.__doc__ or "").safe_substitute(values)
        return command

    return fill


def run(app: typer.Typer) -> None:
    """The console-script entry point: usage errors as one line with a "did you mean", exit 2."""
    # psycopg warns while it cleans up after a lost connection ("error ignored terminating ..."); the user
    # gets our one line about the lost connection instead (errors.reported_as_exit_code).
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    try:
        code = app(standalone_mode=False)
    except UsageError as error:
        if type(error).__name__ == "NoArgsIsHelpError":  # a bare command: its help, as it is
            print(error.format_message(), file=sys.stderr)
        else:
            print(f"error: {usage_error_line(error)}", file=sys.stderr)
        sys.exit(EXIT_NOT_STARTED)
    except typer.Abort:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(error: UsageError) -> str:
    message = " ".join(error.format_message().replace("Value error, ", "").split()).rstrip(".")
    suggestion = _suggestion(error, message)
    if suggestion and "did you mean" not in message.lower():
        message += f" (did you mean {suggestion}?)"
    where = error.ctx.command_path if error.ctx else ""
    return f"{message}; see `{where} --help`" if where else message


def _suggestion(error: UsageError, message: str) -> str | None:
    """The closest choice to a mistyped choice value ("'x' is not one of 'a', 'b'") or command."""
    quoted = re.findall(r"'([^']*)'", message)
    if len(quoted) > 2 and "is not one of" in message:
        given, candidates = quoted[1], quoted[2:]  # quoted[0] names the option
    elif quoted and error.ctx is not None and hasattr(error.ctx.command, "list_commands"):
        given, candidates = quoted[0], error.ctx.command.list_commands(error.ctx)
    else:
        return None
    close = difflib.get_close_matches(given, candidates, n=1)
    return close[0] if close else None
