"""User-facing errors: one line on stderr and a documented exit code, never a traceback."""

from __future__ import annotations

import psycopg

EXIT_OK = 0
EXIT_SOME_FAILED = 1  # the run went through, but some inputs failed or answers differ
EXIT_NOT_STARTED = 2  # usage error, unreachable database, no readable input
EXIT_INTERRUPTED = 130  # Ctrl-C, after what was running has been cancelled or rolled back


class GsqaError(Exception):
    """An error the user can act on. The message is the whole story; no traceback is shown."""

    exit_code = EXIT_NOT_STARTED


class DatabaseUnreachable(GsqaError):
    """The database named by --dsn / DATABASE_URL / PG* cannot be reached."""


class SchemaConflict(GsqaError):
    """A table exists but does not have the reference columns."""


def connection_lost(error: psycopg.Error) -> bool:
    """The server went away (shut down, crashed, the backend was ended, the network broke), as opposed to an
    error of the statement. Client-side connection failures carry no SQLSTATE."""
    return error.sqlstate is None or error.sqlstate.startswith(("08", "57P"))
