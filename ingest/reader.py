"""The read-only login that benchmark SQL runs as (gsqa_reader): its DSN, and whether it is usable."""

from __future__ import annotations

import os

import psycopg

from ingest import schema
from ingest.db import with_user
from ingest.initdb import READER_PASSWORD_ENV


def reader_dsn(dsn: str | None, reader: str | None) -> str:
    """--reader-dsn, else the main DSN logged in as gsqa_reader with $GSQA_READER_PASSWORD."""
    return reader or with_user(dsn, schema.READER_ROLE, os.environ.get(READER_PASSWORD_ENV))


def reader_problem(dsn: str) -> str | None:
    """Why the reader login is unusable for benchmark SQL, or None when it is fine."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            user, read_only = conn.execute(
                "SELECT current_user, current_setting('transaction_read_only')"
            ).fetchone()
    except psycopg.OperationalError as error:
        return f"the reader role cannot log in: {' '.join(str(error).split())}"
    if user != schema.READER_ROLE:
        return f"the reader DSN logs in as {user}, expected {schema.READER_ROLE}"
    if read_only != "on":
        return f"{user} does not default to read-only transactions: rerun `ingest init` on a fresh role"
    return None
