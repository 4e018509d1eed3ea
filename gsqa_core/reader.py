"""The read-only login that benchmark SQL runs as (gsqa_reader): its DSN, and whether it is usable.

Its password is $GSQA_READER_PASSWORD, else the one `ingest init` kept in gsqa.reader_login (read through the
admin connection). Where the local socket refuses the reader (a stock Debian or Ubuntu server authenticates
socket logins by peer, and there is no OS user gsqa_reader), it logs in over TCP on 127.0.0.1, the same port,
with that password (scram-sha-256 there)."""

from __future__ import annotations

import os

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gsqa_core import schema
from gsqa_core.db import identifier, resolve_dsn, with_user

READER_PASSWORD_ENV = "GSQA_READER_PASSWORD"  # the reader role's password, where it has one
LOGIN_TIMEOUT = 10  # seconds for each login tried


def reader_dsn(dsn: str | None, reader: str | None) -> str:
    """--reader-dsn, else the main DSN logged in as gsqa_reader with its password, over TCP on 127.0.0.1 when
    the socket refuses it and TCP takes it."""
    if reader:
        return reader
    password = os.environ.get(READER_PASSWORD_ENV) or kept_password(dsn)
    login = with_user(dsn, schema.READER_ROLE, password)
    if not password or not _on_socket(login) or _logs_in(login):
        return login
    over_tcp = make_conninfo(login, host="127.0.0.1")
    return over_tcp if _logs_in(over_tcp) else login


def kept_password(dsn: str | None) -> str | None:
    """The password `ingest init` kept for the reader (None where the admin connection cannot read it)."""
    try:
        with psycopg.connect(resolve_dsn(dsn), autocommit=True, connect_timeout=LOGIN_TIMEOUT) as conn:
            row = conn.execute(sql.SQL("SELECT password FROM {}").format(identifier(schema.reader_login.fullname)))
            return (row.fetchone() or [None])[0]
    except psycopg.Error:
        return None


def _on_socket(dsn: str) -> bool:
    host = conninfo_to_dict(dsn).get("host") or os.environ.get("PGHOST", "")
    return not host or host.startswith("/")


def _logs_in(dsn: str) -> bool:
    try:
        psycopg.connect(dsn, connect_timeout=LOGIN_TIMEOUT).close()
    except psycopg.OperationalError:
        return False
    return True


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
        return {}, (f"the reader role cannot log in: {' '.join(str(error).split())} (`ingest init` gives it a "
                    f"password, {READER_PASSWORD_ENV} or one it generates, with which it logs in over TCP)")
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
