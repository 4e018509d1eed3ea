"""The read-only login that benchmark SQL runs as (gsqa_reader): its DSN, and whether it is usable."""

from __future__ import annotations

import os

import psycopg

from gsqa_core import schema
from gsqa_core.db import with_user

READER_PASSWORD_ENV = "GSQA_READER_PASSWORD"  # the reader role's password, where it has one


def reader_dsn(dsn: str | None, reader: str | None) -> str:
    """--reader-dsn, else the main DSN logged in as gsqa_reader with $GSQA_READER_PASSWORD."""
    return reader or with_user(dsn, schema.READER_ROLE, os.environ.get(READER_PASSWORD_ENV))


def reader_settings(dsn: str) -> tuple[dict[str, str], str | None]:
    """What the reader login gets (user, read-only default, temp_file_limit, work_mem, whether it may signal
    other backends), and why it is unusable for benchmark SQL, or None when it is fine: it must log in as
    gsqa_reader, default to read-only transactions, have a temp_file_limit, and not be able to signal
    other backends (sql/25_reader_limits.sql, sql/30_reader_grants.sql)."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            user, read_only, temp_limit, work_mem, can_signal = conn.execute(
                "SELECT current_user, current_setting('transaction_read_only'), current_setting('temp_file_limit'), "
                "current_setting('work_mem'), "
                "has_function_privilege('pg_catalog.pg_terminate_backend(integer, bigint)', 'EXECUTE') "
                "OR has_function_privilege('pg_catalog.pg_cancel_backend(integer)', 'EXECUTE')"
            ).fetchone()
    except psycopg.OperationalError as error:
        return {}, f"the reader role cannot log in: {' '.join(str(error).split())}"
    settings = {"user": user, "read_only": read_only, "temp_file_limit": temp_limit, "work_mem": work_mem,
                "may_signal_backends": "yes" if can_signal else "no"}
    if user != schema.READER_ROLE:
        return settings, f"the reader DSN logs in as {user}, expected {schema.READER_ROLE}"
    if read_only != "on":
        return settings, f"{user} does not default to read-only transactions: rerun `ingest init` on a fresh role"
    if temp_limit == "-1":
        return settings, (f"{user} has no temp_file_limit (a bad join could fill the server's disk): "
                          "rerun `ingest init`")
    if can_signal:
        return settings, (f"{user} may cancel or end other backends (one question could end another): "
                          "rerun `ingest init`")
    return settings, None


def reader_problem(dsn: str) -> str | None:
    return reader_settings(dsn)[1]
