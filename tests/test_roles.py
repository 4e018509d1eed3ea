"""The sandbox roles (gsqa_core/sandbox.py) as `ingest init` makes them and gsqa_core/roles.py audits them:
each reads the reference tables and nothing else; what a role may change of itself in PostgreSQL 15 (its
stored settings, its password, its default privileges) never reaches our sessions, is named in one line by
every preflight, and is restored by the next `ingest init`, which says what it restored and then has nothing
to do; the model role cannot see the query text of gold runs, nor they its."""

from __future__ import annotations

import getpass
import re
import threading
import time
from pathlib import Path

import psycopg
import pytest
from load_helpers import ingest
from psycopg.conninfo import conninfo_to_dict
from sandbox_helpers import session_settings

from gsqa_core.errors import GsqaError
from gsqa_core.roles import audit, kept_password, login_dsn
from gsqa_core.sandbox import CLOSED_FUNCTIONS, CLOSED_LANGUAGES, MODEL, READER, ROLES, SERVER, SETTINGS
from ingest.initdb import initialize
from reproduce import readiness
from reproduce.baseline import engine
from testkit import local_server
from testkit.cli import reproduce

NOT_DECLARED = "(`ingest init` restores what it can and names the rest)"


@pytest.fixture(scope="module")
def admin(initialized_dsn: str) -> str:
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pois (geometry, poi_name) VALUES ('POINT(1 2)', 'seed')")
    return initialized_dsn


def database_of(dsn: str) -> str:
    return conninfo_to_dict(dsn)["dbname"]


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_each_role_reads_the_tables_and_postgis_metadata_and_is_as_declared(admin: str, role) -> None:
    with psycopg.connect(login_dsn(admin, role)) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == role.name
        name, = conn.execute(
            "SELECT poi_name FROM pois WHERE ST_DWithin(geometry, 'POINT(1 2)'::geography, 10)").fetchone()
        assert name == "seed" and conn.execute("SELECT count(*) FROM dem_us").fetchone()[0] == 0
        x, = conn.execute("SELECT ST_X(ST_Transform('SRID=4326;POINT(1 2)'::geometry, 3857))").fetchone()  # reads
        assert x == pytest.approx(111319.49, abs=0.01)                                               # spatial_ref_sys
    found = audit(login_dsn(admin, role), role)
    assert (found.problem, found.settings) == (None, {"user": role.name, **session_settings(role.name)})


@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.name)
def test_a_session_gets_the_declared_settings_whatever_the_role_stored(admin: str, role) -> None:
    stored = {"statement_timeout": "0", "default_transaction_read_only": "off", "work_mem": "1GB",
              "search_path": "pg_catalog", "extra_float_digits": "-10"}
    with psycopg.connect(admin, autocommit=True) as conn:
        for name, value in stored.items():
            conn.execute(f"ALTER ROLE {role.name} SET {name} = '{value}'")
    try:
        with psycopg.connect(login_dsn(admin, role)) as conn:
            got = dict(conn.execute("SELECT name, current_setting(name) FROM unnest(%s::text[]) name",
                                    [list(stored)]).fetchall())
        assert got == {name: session_settings(role.name)[name] for name in stored}
    finally:
        assert initialize(admin).left == []


def tamper_as_the_model(admin: str) -> None:
    """What PostgreSQL 15 lets a login do to itself, done as gsqa_model over its own connection."""
    with psycopg.connect(login_dsn(admin, MODEL), autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute("ALTER ROLE CURRENT_USER SET statement_timeout = 0")
        conn.execute(f'ALTER ROLE CURRENT_USER IN DATABASE "{database_of(admin)}" SET work_mem = \'1GB\'')
        conn.execute("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC")
        conn.execute("ALTER ROLE CURRENT_USER PASSWORD 'taken-over'")


def test_what_the_model_changed_of_itself_is_named_in_one_line_then_restored_by_init(admin: str) -> None:
    database = database_of(admin)
    tamper_as_the_model(admin)
    differences = (f"it stores work_mem=1GB for database {database}; it stores statement_timeout=0 (declared 120s); "
                   f"it owns 1 entry of default privileges in database {database}")
    problem = f"gsqa_model is not as declared: {differences} {NOT_DECLARED}"
    checked = readiness.check(admin)
    assert [p for p in checked.problems if p.startswith("gsqa_")] == [problem]
    with pytest.raises(GsqaError) as refused:
        readiness.preflight(admin, {MODEL: None}, ["pois"])
    assert str(refused.value).startswith(f"the database is not ready: {problem}")
    readiness.preflight(admin, {READER: None}, ["pois"])  # a gold run does not depend on the model role
    with pytest.raises(GsqaError, match="^no engine for baselines: gsqa_model is not as declared: it stores work_mem"):
        engine(admin)
    check = ingest("check", "--dsn", admin)
    assert f"FAILED roles {problem}" in " ".join(check.stdout.split())

    repaired = ingest("init", "--dsn", admin)
    assert repaired.returncode == 0, repaired.stderr
    assert repaired.stdout.splitlines()[-5:] == [
        f"repaired in {conninfo_to_dict(admin)['host']}:{conninfo_to_dict(admin)['port']}/{database} "
        "(it differed from its declaration):",
        f"  gsqa_model: it stores work_mem=1GB for database {database}",
        "  gsqa_model: it stores statement_timeout=0 (declared 120s)",
        f"  gsqa_model: it owns 1 entry of default privileges in database {database}",
        "  gsqa_model: its password differed from the one kept for it"]
    again = ingest("init", "--dsn", admin)
    assert again.returncode == 0 and again.stdout.startswith("nothing to do: ")
    assert [p for p in readiness.check(admin).problems if p.startswith("gsqa_")] == []


def test_what_a_role_owns_in_another_database_is_named_not_dropped(admin: str) -> None:
    other = psycopg.conninfo.make_conninfo(admin, dbname="postgres")
    with psycopg.connect(login_dsn(other, MODEL), autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute("SELECT lo_create(0)")  # the postgres database is not ours: lo_* are open there
    note = ("gsqa_model owns 1 large object in database postgres: `psql -d postgres -c 'DROP OWNED BY "
            "gsqa_model'`, then `ingest init` on each reference database")
    try:
        found = audit(login_dsn(admin, MODEL), MODEL)
        assert (found.problem, found.elsewhere) == (None, [note])  # our doors never go there: runs go on
        checked = reproduce("check", "--dsn", admin)
        assert f"note: {note}" in checked.stdout.splitlines()
        result = ingest("init", "--dsn", admin)
        assert result.returncode == 1
        assert result.stdout.splitlines() == ["not repaired (init cannot):", f"  {note}"]
    finally:
        with psycopg.connect(other, autocommit=True) as conn:
            conn.execute("DROP OWNED BY gsqa_model")
    assert audit(login_dsn(admin, MODEL), MODEL).problem is None


def test_passwords_are_kept_where_the_roles_cannot_read_them(admin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for role in ROLES:
        monkeypatch.delenv(role.password_env, raising=False)
    generated = {role.name: kept_password(admin, role) for role in ROLES}
    assert all(password and len(password) >= 20 for password in generated.values())
    assert len(set(generated.values())) == 2
    initialize(admin)
    assert {role.name: kept_password(admin, role) for role in ROLES} == generated  # a rerun keeps them
    for role in ROLES:
        with psycopg.connect(login_dsn(admin, role)) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT password FROM gsqa.role_login")
    monkeypatch.setenv(MODEL.password_env, "chosen-by-the-admin")
    assert initialize(admin).repaired == []
    monkeypatch.delenv(MODEL.password_env)
    assert kept_password(admin, MODEL) == "chosen-by-the-admin"
    with psycopg.connect(admin) as conn:
        assert conn.execute("SELECT bool_and(rolpassword LIKE 'SCRAM-SHA-256$%%') FROM pg_authid WHERE rolname = "
                            "ANY(%s)", [[role.name for role in ROLES]]).fetchone()[0]


def test_an_older_databases_reader_password_moves_into_role_login(new_database, monkeypatch) -> None:
    monkeypatch.delenv(READER.password_env, raising=False)
    dsn = new_database("legacy", initialized=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM gsqa.role_login WHERE role = 'gsqa_reader'")
        conn.execute("CREATE TABLE gsqa.reader_login (password TEXT NOT NULL)")
        conn.execute("INSERT INTO gsqa.reader_login VALUES ('kept-by-an-older-init')")
    initialize(dsn)
    assert kept_password(dsn, READER) == "kept-by-an-older-init"
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('gsqa.reader_login')").fetchone()[0] is None


def test_the_model_cannot_see_the_query_text_of_gold_runs_nor_they_its(admin: str) -> None:
    def sleep_as(role) -> None:
        with psycopg.connect(login_dsn(admin, role)) as conn:
            conn.execute(f"SELECT pg_sleep(2) /* secret of {role.name} */")

    sleepers = [threading.Thread(target=sleep_as, args=[role]) for role in ROLES]
    for sleeper in sleepers:
        sleeper.start()
    time.sleep(0.5)
    seen = {}
    for viewer, other in ((MODEL, READER), (READER, MODEL)):
        with psycopg.connect(login_dsn(admin, viewer)) as conn:
            seen[viewer.name] = conn.execute("SELECT query FROM pg_stat_activity WHERE usename = %s",
                                             [other.name]).fetchall()
    with psycopg.connect(admin) as conn:  # what there was to see
        seen["postgres"] = conn.execute("SELECT query FROM pg_stat_activity WHERE usename = ANY(%s) ORDER BY usename",
                                        [[role.name for role in ROLES]]).fetchall()
    for sleeper in sleepers:
        sleeper.join()
    assert seen == {"gsqa_model": [("<insufficient privilege>",)], "gsqa_reader": [("<insufficient privilege>",)],
                    "postgres": [("SELECT pg_sleep(2) /* secret of gsqa_model */",),
                                 ("SELECT pg_sleep(2) /* secret of gsqa_reader */",)]}


def test_where_the_socket_refuses_the_roles_they_log_in_over_tcp_and_a_changed_password_is_restored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stock Debian server: peer authentication on the socket, scram-sha-256 on 127.0.0.1."""
    for role in ROLES:
        monkeypatch.delenv(role.password_env, raising=False)
    with local_server.stock_debian_cluster() as server:
        admin = server.dsn("postgres", user=getpass.getuser())
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION postgis; CREATE EXTENSION postgis_raster")
        initialize(admin)
        for role in ROLES:
            login = login_dsn(admin, role)
            assert conninfo_to_dict(login)["host"] == "127.0.0.1" and audit(login, role).problem is None
        with psycopg.connect(login_dsn(admin, MODEL), autocommit=True) as conn:
            conn.execute("SET default_transaction_read_only = off")
            conn.execute("ALTER ROLE CURRENT_USER PASSWORD 'taken-over'")
        problem = audit(login_dsn(admin, MODEL), MODEL).problem  # the server's answer over TCP, not the socket's
        assert problem.startswith("gsqa_model cannot log in: ") and (
            'password authentication failed for user "gsqa_model"' in problem)
        assert problem.endswith("gsqa_model's password is not the one kept for it (a login may change its own): "
                                "`ingest init` restores it.")
        assert initialize(admin).repaired == ["gsqa_model: its password differed from the one kept for it"]
        assert audit(login_dsn(admin, MODEL), MODEL).problem is None and initialize(admin).repaired == []
        held = [psycopg.connect(login_dsn(admin, MODEL)) for _ in range(MODEL.connection_limit)]
        try:
            problem = audit(login_dsn(admin, MODEL), MODEL).problem
        finally:
            for conn in held:
                conn.close()
        assert problem.startswith("gsqa_model cannot log in: ") and (
            'too many connections for role "gsqa_model"' in problem)
        assert problem.endswith(f"gsqa_model may hold {MODEL.connection_limit} connections at once: close some, or "
                                "wait.")


def test_a_server_that_allows_prepared_transactions_is_named() -> None:
    with local_server.scratch_folder() as base:
        server = local_server.LocalServer(base / "data", local_server.free_port(), base / "sockets")
        local_server.initdb(server)
        with local_server.running(server, {**local_server.FAST, "max_prepared_transactions": "2"}):
            admin = server.dsn("postgres")
            problem = ("the server has max_prepared_transactions = 2 (set by: command line), where PREPARE "
                       "TRANSACTION would leave a transaction, with its locks, behind the session: set it to 0 there")
            assert initialize(admin).left == [problem]
            assert audit(login_dsn(admin, MODEL), MODEL).problems == [problem]
            assert readiness.check(admin).problems[-1:] == [problem]  # once, not once per role
            with pytest.raises(GsqaError, match=f"^no engine for baselines: {re.escape(problem)}$"):
                engine(admin)


def test_the_threat_model_names_every_door_the_declaration_closes() -> None:
    threat_model = (Path(__file__).resolve().parent.parent / "docs" / "SANDBOX.md").read_text()
    named = {closed.function.removeprefix("pg_catalog.").split("(")[0] for closed in CLOSED_FUNCTIONS}
    assert [name for name in sorted(named) if f"`{name}`" not in threat_model] == []
    assert [language for language in CLOSED_LANGUAGES if f"`{language}`" not in threat_model] == []
    assert [name for name in [*SETTINGS, *SERVER] if f"`{name}" not in threat_model] == []
    assert [role.name for role in ROLES if f"`{role.name}`" not in threat_model] == []


def test_a_second_database_of_the_server_logs_the_roles_in_with_the_same_passwords(admin: str, new_database,
                                                                                   monkeypatch) -> None:
    for role in ROLES:
        monkeypatch.delenv(role.password_env, raising=False)
    initialize(admin)  # the roles have the passwords this database keeps (other tests here gave them others)
    second = new_database("second", initialized=True)
    assert [kept_password(second, role) for role in ROLES] == [kept_password(admin, role) for role in ROLES]
    assert (initialize(admin).repaired, initialize(second).repaired) == ([], [])


def test_a_repair_keeps_what_the_role_was_granted_on_other_databases(admin: str, new_database) -> None:
    second = new_database("granted", initialized=True)
    with psycopg.connect(second, autocommit=True) as conn:  # CONNECT only by init's grant to the roles
        conn.execute(f'REVOKE CONNECT ON DATABASE "{database_of(second)}" FROM PUBLIC')
    with psycopg.connect(login_dsn(admin, MODEL), autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute("ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO PUBLIC")
    assert initialize(admin).repaired == [
        f"gsqa_model: it owns 1 entry of default privileges in database {database_of(admin)}"]
    with psycopg.connect(login_dsn(second, MODEL)) as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == MODEL.name


def test_write_grants_someone_gave_are_named_and_revoked(admin: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("GRANT INSERT, TRUNCATE ON pois TO gsqa_model; GRANT USAGE ON SEQUENCE pois_id_seq TO PUBLIC")
    differences = ["it may write to table public.pois", "it may advance sequence public.pois_id_seq"]
    assert audit(login_dsn(admin, MODEL), MODEL).differences == differences
    assert audit(login_dsn(admin, READER), READER).differences == differences[1:]  # through PUBLIC
    assert initialize(admin).repaired == [f"gsqa_reader: {differences[1]}",
                                          *(f"gsqa_model: {found}" for found in differences)]
    with psycopg.connect(login_dsn(admin, MODEL), autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("TRUNCATE pois")


def test_a_library_the_role_stored_for_itself_neither_locks_it_out_nor_reaches_a_session(admin: str) -> None:
    with psycopg.connect(login_dsn(admin, MODEL), autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute("ALTER ROLE CURRENT_USER SET local_preload_libraries = 'nowhere'")
    try:
        assert audit(login_dsn(admin, MODEL), MODEL).differences == ["it stores local_preload_libraries=nowhere"]
    finally:
        assert initialize(admin).repaired == ["gsqa_model: it stores local_preload_libraries=nowhere"]


def test_a_setting_stored_after_the_preflight_is_refused_at_the_next_connection(admin: str) -> None:
    from reproduce.runner import SandboxConnection, ServerLost

    made = engine(admin, pool_size=1, max_overflow=0)
    with psycopg.connect(login_dsn(admin, MODEL), autocommit=True) as conn:
        conn.execute("SET default_transaction_read_only = off")
        conn.execute("ALTER ROLE CURRENT_USER SET transform_null_equals = on")
    refusal = "gsqa_model is not as declared: it stores transform_null_equals=on (`ingest init` restores it)"
    try:
        with pytest.raises(GsqaError, match=re.escape(refusal)), made.connect():
            pass
        with pytest.raises(ServerLost, match=re.escape(refusal)):
            SandboxConnection(login_dsn(admin, MODEL), timeout=5)
    finally:
        made.dispose()
        initialize(admin)


def test_a_password_is_compared_as_postgresql_prepares_it(admin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODEL.password_env, "soft\u00adhyphen and\u2003em space")
    initialize(admin)
    assert initialize(admin).repaired == []  # the same verifier: nothing to set again


def test_grants_on_the_bookkeeping_schema_are_named_and_revoked(admin: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("GRANT SELECT ON gsqa.role_login TO gsqa_model; GRANT UPDATE ON gsqa.load_log TO PUBLIC")
    differences = ["it may write to table gsqa.load_log",
                   "it holds SELECT on gsqa.role_login (in gsqa, where the passwords are kept)"]
    assert audit(login_dsn(admin, MODEL), MODEL).differences == differences
    assert audit(login_dsn(admin, READER), READER).differences == differences[:1]  # through PUBLIC
    assert initialize(admin).repaired == [f"gsqa_reader: {differences[0]}",
                                          *(f"gsqa_model: {found}" for found in differences)]
    assert initialize(admin).repaired == []


def test_a_function_someone_added_to_the_reference_schema_is_named_not_dropped(admin: str) -> None:
    """An overload of a PostGIS function makes the benchmark's calls ambiguous ("function st_value(...) is not
    unique"): every preflight names it, and `ingest init`, which did not make it, leaves it to an administrator."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION public.st_value(raster, integer, geometry) RETURNS float8 "
                     "LANGUAGE sql AS 'SELECT 0::float8'")
        try:
            problem = ("function st_value(raster,integer,geometry) in the reference schema is not PostGIS's: it can "
                       "shadow a function the benchmark's SQL calls, or make the call ambiguous; drop it or move it "
                       "to another schema")
            assert audit(login_dsn(admin, MODEL), MODEL).problems == [problem]
            assert readiness.check(admin).problems[-1:] == [problem]
            assert initialize(admin).left == [problem]
        finally:
            conn.execute("DROP FUNCTION public.st_value(raster, integer, geometry)")
    assert initialize(admin).left == []
