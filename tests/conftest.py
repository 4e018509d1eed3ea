"""Test fixtures: every test runs against a real PostgreSQL + PostGIS server.

By default the suite brings its own: a throwaway cluster started from this machine's server binaries (initdb
into a temporary folder, a free port, trust authentication; testkit/local_server.py), stopped and deleted at
the end, so that it never needs a role on, or writes into, a server of yours. DATABASE_URL or libpq's PG*
variables point it at a given server instead (a role that may create databases, extensions and roles). Each
test module gets its own scratch database, cloned from a template that has the extensions, and dropped
afterwards. When no server can be had the run stops with instructions; no test is skipped for lack of one.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from docker_helpers import engine  # noqa: F401 - the fixture of the tests marked docker
from load_helpers import BIN
from psycopg import sql
from psycopg.conninfo import make_conninfo

from gsqa_core.errors import GsqaError
from testkit import local_server
from testkit.refdb import load_stored_answers

# Real benchmark records and the reference DDL, copied into the repository (tests/data/README.md).
DATA = Path(__file__).resolve().parent / "data"
STORED_TEMPLATES = ["R1", "R2", "R3", "R4", "VR1", "VR2", "VR3"]  # the stored_db fixture's
HOW_TO_START = (
    "The tests start their own PostgreSQL from the server binaries: `make test` installs them (as root; "
    "otherwise it prints the apt-get line to run). Or point DATABASE_URL (or PGHOST/PGPORT/PGUSER) at a server "
    "with PostGIS, as a role that may create databases, extensions and roles, e.g. after `make db`: "
    "DATABASE_URL=postgresql://postgres:gsqa@127.0.0.1:55432/postgres."
)
_LIBPQ_TARGET = ("PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


def pytest_configure(config: pytest.Config) -> None:
    """The Ctrl-C tests press Ctrl-C as at a terminal. A run started in the background by a non-interactive
    shell (`make test &` in a script) inherits SIGINT ignored, and so would every command the tests start:
    they would never see the signal. Handled here, the commands start with it at its default again."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _admin_connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


@pytest.fixture(scope="session")
def server_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """The DSN of the test server (the given one, else a throwaway cluster), after checking that it is
    reachable and has PostGIS."""
    if os.environ.get("DATABASE_URL") or any(os.environ.get(name) for name in _LIBPQ_TARGET):
        yield _checked(os.environ.get("DATABASE_URL", ""))  # "": libpq's PG* variables
        return
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(local_server.throwaway_cluster())
        except (local_server.NoServerBinaries, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", b"") or b""
            cause = " ".join(f"{error} {detail.decode(errors='replace')}".split())
            pytest.exit(f"cannot start a throwaway PostgreSQL ({cause}). {HOW_TO_START}", returncode=3)
        with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
            print(f"\ntests: a throwaway PostgreSQL in {server.data.parent} on port {server.port} (DATABASE_URL or "
                  "PG* to use another server)")
        yield _checked(server.dsn("postgres"))


def _checked(dsn: str) -> str:
    try:
        with _admin_connect(dsn) as conn:
            available = conn.execute(
                "SELECT count(*) FROM pg_available_extensions WHERE name IN ('postgis', 'postgis_raster')"
            ).fetchone()[0]
    except psycopg.OperationalError as error:
        pytest.exit(f"no PostgreSQL reachable ({' '.join(str(error).split())}). {HOW_TO_START}", returncode=3)
    if available != 2:
        pytest.exit(f"PostGIS (with raster) is not installed on the test server. {HOW_TO_START}", returncode=3)
    return dsn


@pytest.fixture(scope="session")
def template_db(server_dsn: str) -> Iterator[str]:
    """A database with postgis and postgis_raster, cloned by every scratch database."""
    name = f"gsqa_test_template_{os.getpid()}"
    with _admin_connect(server_dsn) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    with _admin_connect(make_conninfo(server_dsn, dbname=name)) as conn:
        conn.execute("CREATE EXTENSION postgis; CREATE EXTENSION postgis_raster")
    yield name
    drop_database(server_dsn, name)


def drop_database(server_dsn: str, name: str) -> None:
    with _admin_connect(server_dsn) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def make_scratch_database(server_dsn: str, template: str | None, label: str) -> str:
    """Create a fresh database (from `template`, or empty) and return its DSN."""
    name = f"gsqa_test_{re.sub(r'[^a-z0-9]+', '_', label.lower())[-30:]}_{os.getpid()}"
    drop_database(server_dsn, name)
    with _admin_connect(server_dsn) as conn:
        create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            create += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        conn.execute(create)
    return make_conninfo(server_dsn, dbname=name)


@pytest.fixture(scope="module")
def scratch_dsn(request: pytest.FixtureRequest, server_dsn: str, template_db: str) -> Iterator[str]:
    """A scratch database with the extensions, private to the test module."""
    dsn = make_scratch_database(server_dsn, template_db, request.module.__name__)
    yield dsn
    drop_database(server_dsn, psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


@pytest.fixture
def fresh_dsn(request: pytest.FixtureRequest, server_dsn: str) -> Iterator[str]:
    """An empty database (no extensions), private to one test."""
    dsn = make_scratch_database(server_dsn, None, request.node.name)
    yield dsn
    drop_database(server_dsn, psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


@pytest.fixture(scope="module")
def initialized_dsn(scratch_dsn: str) -> str:
    """The module's scratch database after `ingest init`."""
    from ingest.initdb import initialize

    try:
        initialize(scratch_dsn)
    except GsqaError as error:
        pytest.fail(f"ingest init failed on the scratch database: {error}")
    return scratch_dsn


@pytest.fixture
def new_database(server_dsn: str, template_db: str) -> Iterator:
    """A factory of scratch databases with the extensions (after `ingest init` with initialized=True),
    dropped after the test."""
    from ingest.initdb import initialize

    made: list[str] = []

    def make(label: str, initialized: bool = False) -> str:
        dsn = make_scratch_database(server_dsn, template_db, label)
        made.append(psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])
        if initialized:
            initialize(dsn)
        return dsn

    yield make
    for name in made:
        drop_database(server_dsn, name)


@pytest.fixture(scope="session")
def demo_template(server_dsn: str, template_db: str, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[str, Path]]:
    """The README's demo database (`ingest demo-data`, then `ingest all --offline`), built once per test session
    as a template: (its database name, the demo data folder). Modules take their own copy (demo_db)."""
    data = tmp_path_factory.mktemp("demo-template") / "data"
    written = subprocess.run([str(BIN / "ingest"), "demo-data", str(data)], capture_output=True, text=True,
                             timeout=300)
    assert written.returncode == 0, written.stderr
    dsn = make_scratch_database(server_dsn, template_db, "demo_template")
    built = subprocess.run([str(BIN / "ingest"), "all", str(data), "--offline", "--dsn", dsn], capture_output=True,
                           text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    yield name, data
    drop_database(server_dsn, name)


@pytest.fixture(scope="module")
def demo_db(request: pytest.FixtureRequest, server_dsn: str, demo_template: tuple[str, Path]
            ) -> Iterator[tuple[str, Path]]:
    """The module's own copy of the demo database (CREATE DATABASE ... TEMPLATE), with `ingest init` run on it
    for what a copy does not take along (the database's own privileges): (its DSN, the demo data folder)."""
    from ingest.initdb import initialize

    template, data = demo_template
    dsn = make_scratch_database(server_dsn, template, f"{request.module.__name__}_demo")
    initialize(dsn)
    yield dsn, data
    drop_database(server_dsn, psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


@pytest.fixture(scope="module")
def demo(demo_db: tuple[str, Path]) -> tuple[str, Path]:
    """The module's demo database and its benchmark records: (its DSN, the benchmark folder)."""
    return demo_db[0], demo_db[1] / "benchmark"


@pytest.fixture(scope="module")
def gold(demo: tuple[str, Path]) -> dict:
    """The demo's R1 records by question id (the Inspect tests script the model with their gold SQL)."""
    from reproduce import configs, dataset

    return {record.id: record for record in dataset.load(demo[1], [configs.template("R1")]).records}


@pytest.fixture
def inspect_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No token count (so no download: Inspect's mock model counts with tiktoken's o200k_base, which tiktoken
    downloads on first use); Inspect's traces and buffers in the test's folder, not in ~/.local."""
    import tiktoken

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def refused(name: str) -> None:
        raise AssertionError(f"tiktoken.get_encoding({name!r}): a token count would download its encoding")
    monkeypatch.setattr(tiktoken, "get_encoding", refused)


@pytest.fixture(scope="module")
def demo_dsn(demo_db: tuple[str, Path]) -> str:
    """The module's demo database's DSN."""
    return demo_db[0]


@pytest.fixture(scope="module")
def stored_db(initialized_dsn: str) -> str:
    """The module's database holding the world of tests/data/benchmark's R1-R4 and VR1-VR3 records, in which
    their stored answers hold (testkit.refdb)."""
    from reproduce import configs, dataset

    records = dataset.load(DATA / "benchmark", [configs.template(t) for t in STORED_TEMPLATES]).records
    with psycopg.connect(initialized_dsn) as conn:
        load_stored_answers(conn, records)
    return initialized_dsn


@pytest.fixture(scope="module")
def demo_export(demo_db: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`ingest export` of the module's demo database, readable by everyone (as the sandbox's user needs)."""
    finalized = subprocess.run([str(BIN / "ingest"), "finalize", "--dsn", demo_db[0]], capture_output=True,
                               text=True, timeout=300)  # a copy of a database has no statistics: check wants them
    assert finalized.returncode == 0, finalized.stderr
    folder = tmp_path_factory.mktemp("export") / "out"
    done = subprocess.run([str(BIN / "ingest"), "export", str(folder), "--dsn", demo_db[0]], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    folder.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic dataset of README's "Try it" (`ingest demo-data`), written once per test module."""
    data = tmp_path_factory.mktemp("demo") / "data"
    done = subprocess.run([str(BIN / "ingest"), "demo-data", str(data)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return data
