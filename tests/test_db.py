"""One DSN resolution everywhere: --dsn, then DATABASE_URL, then libpq's PG* variables."""

from __future__ import annotations

from urllib.parse import quote

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gsqa_core.db import MAKE_DB_DSN, connect, resolve_dsn, with_user
from gsqa_core.errors import DatabaseUnreachable, GsqaError


def current_database(dsn: str | None) -> str:
    with connect(dsn) as conn:
        return conn.execute("SELECT current_database()").fetchone()[0]


def test_explicit_dsn_wins_over_database_url(scratch_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "host=127.0.0.1 port=1 dbname=wrong")
    assert current_database(scratch_dsn) == conninfo_to_dict(scratch_dsn)["dbname"]


def test_database_url_wins_over_pg_variables(scratch_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", scratch_dsn)
    monkeypatch.setenv("PGDATABASE", "postgres")
    assert current_database(None) == conninfo_to_dict(scratch_dsn)["dbname"]


def test_pg_variables_apply_without_dsn(scratch_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    for key, value in conninfo_to_dict(scratch_dsn).items():
        monkeypatch.setenv(f"PG{key.upper()}".replace("PGDBNAME", "PGDATABASE"), str(value))
    monkeypatch.setenv("PGDATABASE", conninfo_to_dict(scratch_dsn)["dbname"])
    assert resolve_dsn(None) == ""
    assert current_database(None) == conninfo_to_dict(scratch_dsn)["dbname"]


def test_without_any_setting_the_default_is_the_make_db_database(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DATABASE_URL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE"):
        monkeypatch.delenv(name, raising=False)
    assert resolve_dsn(None) == MAKE_DB_DSN == "postgresql://postgres:gsqa@127.0.0.1:55432/gsqa"


def test_a_missing_database_and_a_refused_connection_get_their_own_advice(scratch_dsn: str) -> None:
    with pytest.raises(DatabaseUnreachable) as missing:
        connect(make_conninfo(scratch_dsn, dbname="gsqa_no_such_database"))
    assert "database=gsqa_no_such_database" in str(missing.value) and "createdb" in str(missing.value)
    with pytest.raises(DatabaseUnreachable) as refused:
        connect("postgresql://nobody@127.0.0.1:1/gsqa", connect_timeout=3)
    assert "Nothing listens there" in str(refused.value) and "createdb" not in str(refused.value)


def test_uri_and_keyword_forms_reach_the_same_database(scratch_dsn: str) -> None:
    params = conninfo_to_dict(scratch_dsn)
    with psycopg.connect(scratch_dsn) as conn:
        host, port, user = conn.info.host, conn.info.port, conn.info.user
    uri = f"postgresql://{user}@{quote(host, safe='')}:{port}/{params['dbname']}"
    assert current_database(uri) == current_database(f"host={host} port={port} user={user} dbname={params['dbname']}")


def test_unreachable_server_names_host_port_database_and_cause() -> None:
    with pytest.raises(DatabaseUnreachable) as caught:
        connect("postgresql://nobody@127.0.0.1:1/gsqa_nowhere", connect_timeout=3)
    message = str(caught.value)
    assert "host=127.0.0.1 port=1 database=gsqa_nowhere" in message
    assert "refused" in message.lower()
    assert "\n" not in message
    assert caught.value.exit_code == 2


def test_malformed_dsn_is_a_usage_error() -> None:
    with pytest.raises(GsqaError, match="malformed connection string"):
        connect("host=localhost dbname")


def test_with_user_keeps_server_and_database(scratch_dsn: str) -> None:
    params = conninfo_to_dict(with_user(scratch_dsn, "gsqa_reader", "secret"))
    assert (params["user"], params["password"]) == ("gsqa_reader", "secret")
    assert params["dbname"] == conninfo_to_dict(scratch_dsn)["dbname"]
