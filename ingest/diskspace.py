"""Will the load fit on the database server's disk? Checked before anything is written.

PostgreSQL has no SQL function for free disk space, so the check asks the server's own `df` through
COPY FROM PROGRAM (superusers and pg_execute_server_program members only); without that right the check
is skipped with a warning. The server's disk is the one that matters: in Docker it is the volume, which
the loader container cannot see.
"""

from __future__ import annotations

import psycopg

from gsqa_core.errors import GsqaError

GB = 1024**3


class NotEnoughDisk(GsqaError):
    """The estimated load does not fit on the database's disk."""


def server_free_bytes(conn: psycopg.Connection) -> int | None:
    """Free bytes on the file system of the data directory, or None when the server won't say."""
    try:
        with conn.transaction(force_rollback=True):
            directory = conn.execute("SELECT current_setting('data_directory')").fetchone()[0]
            conn.execute("CREATE TEMP TABLE gsqa_df (line text)")
            command = "df -Pk " + directory.replace("'", "")
            conn.execute(f"COPY gsqa_df FROM PROGRAM '{command}'")
            lines = [line for (line,) in conn.execute("SELECT line FROM gsqa_df")]
    except psycopg.Error:
        return None
    return int(lines[-1].split()[3]) * 1024  # POSIX df -P: filesystem, blocks, used, available, ...


def max_wal_bytes(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT pg_size_bytes(current_setting('max_wal_size'))").fetchone()[0]


def check_room(conn: psycopg.Connection, table_bytes: int, what: str) -> str | None:
    """Raise NotEnoughDisk when table plus WAL would not fit; return a warning when it cannot be checked."""
    free = server_free_bytes(conn)
    if free is None:
        return "could not read the database server's free disk space (needs superuser); not checked"
    wal = max_wal_bytes(conn)
    needed = table_bytes + wal
    if needed > free:
        raise NotEnoughDisk(
            f"the database disk has {free / GB:.1f} GB free, but {what} needs about {needed / GB:.1f} GB "
            f"(table up to {table_bytes / GB:.1f} GB + WAL up to {wal / GB:.1f} GB). Free some space or pass "
            "--skip-disk-check."
        )
    return None
