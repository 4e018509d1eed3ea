"""Throwaway PostgreSQL clusters started from this machine's server binaries: initdb into a temporary folder, a
free port on 127.0.0.1 and a private socket folder, stopped and deleted afterwards. The server refuses to run
as root, so as root it runs as the postgres user (as Debian's pg_virtualenv does). Used by the test server of
tests/conftest.py, the stock-authentication README test, tests/test_servers.py and bench/reproduce_bench.py (a
primary and its standby, standby.py)."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

from gsqa_core import sandbox

AS_POSTGRES = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []  # the server refuses root
SUPERUSER = "postgres"
# For a server that is thrown away: nothing needs to survive a crash.
FAST = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "max_connections": "200",
        "listen_addresses": "127.0.0.1"}  # on its free port: the README's stock-authentication test logs in over TCP
# What Debian's pg_createcluster writes into pg_hba.conf: peer on the local socket, scram-sha-256 over TCP.
DEBIAN_AUTH = ["--auth-local=peer", "--auth-host=scram-sha-256"]


class NoServerBinaries(RuntimeError):
    pass


def server_binaries() -> Path:
    """The newest /usr/lib/postgresql/N/bin (Debian, Ubuntu), else the folder of initdb on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
    initdb = found[-1] if found else shutil.which("initdb")
    if initdb is None:
        raise NoServerBinaries("no PostgreSQL server binaries (initdb) on this machine")
    return Path(initdb).parent


@dataclass
class LocalServer:
    data: Path
    port: int
    sockets: Path

    def dsn(self, database: str = "gsqa", user: str = SUPERUSER) -> str:
        return f"host={self.sockets} port={self.port} user={user} dbname={database}"

    def start(self, settings: dict[str, str] | None = None, environment: dict[str, str] | None = None) -> None:
        """On the socket folder only, unless `settings` give listen_addresses; `environment` is added to the
        server's. Each backend may take the memory make db's server gives one on this machine
        (sandbox.backend_memory_mb), so that the tests meet the same bound."""
        settings = {"listen_addresses": "''", **(settings or {})}
        options = " ".join(f"-c {name}={value}" for name, value in settings.items())
        as_postgres("prlimit", f"--data={backend_memory_bytes()}", server_binaries() / "pg_ctl", "-D", self.data,
                    "-l", self.data / "server.log", "-w", "-o", f"-p {self.port} -k {self.sockets} {options}",
                    "start", environment=environment)

    def stop(self) -> None:
        as_postgres(server_binaries() / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    def reload(self) -> None:
        as_postgres(server_binaries() / "pg_ctl", "-D", self.data, "reload")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


def backend_memory_bytes() -> int:
    """What sandbox.backend_memory_mb gives a server of this machine's memory."""
    with open("/proc/meminfo") as meminfo:
        total_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:"))
    return sandbox.backend_memory_mb(total_kb // 1024) * 1024**2


def as_postgres(*argv: object, environment: dict[str, str] | None = None) -> None:
    subprocess.run([*AS_POSTGRES, *map(str, argv)], check=True, capture_output=True, timeout=300,
                   env={**os.environ, **environment} if environment else None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def scratch_folder() -> Iterator[Path]:
    """A temporary folder the server's user may write in, with a `sockets` folder; deleted afterwards."""
    base = Path(tempfile.mkdtemp(prefix="gsqa-pg-"))
    (base / "sockets").mkdir()
    if AS_POSTGRES:
        for folder in (base, base / "sockets"):
            shutil.chown(folder, SUPERUSER)
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def initdb(server: LocalServer, *options: str) -> None:
    as_postgres(server_binaries() / "initdb", "-D", server.data, "-U", SUPERUSER, "--no-sync", "-E", "UTF8",
                "--locale=C.UTF-8", *(options or ["--auth=trust"]))


@contextmanager
def running(server: LocalServer, settings: dict[str, str] | None = None) -> Iterator[LocalServer]:
    server.start(settings)
    try:
        yield server
    finally:
        if server.running:
            server.stop()


@contextmanager
def throwaway_cluster() -> Iterator[LocalServer]:
    """A new cluster with trust authentication, its superuser `postgres`, running until the block ends."""
    with scratch_folder() as base:
        server = LocalServer(base / "data", free_port(), base / "sockets")
        initdb(server)
        with running(server, FAST):
            yield server


@contextmanager
def stock_debian_cluster() -> Iterator[LocalServer]:
    """A cluster authenticating as Debian's stock one does (peer on the socket, scram-sha-256 on 127.0.0.1),
    with a superuser role for the OS user running the tests, as `createuser --superuser $USER` makes it."""
    import getpass

    with scratch_folder() as base:
        server = LocalServer(base / "data", free_port(), base / "sockets")
        initdb(server)
        stock_hba = server.data / "pg_hba.stock"
        initdb(LocalServer(base / "stock", server.port, server.sockets), *DEBIAN_AUTH)
        shutil.copy(base / "stock" / "pg_hba.conf", stock_hba)
        with running(server, FAST):
            me = getpass.getuser()
            if me != SUPERUSER:
                with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
                    conn.execute(f'CREATE ROLE "{me}" SUPERUSER LOGIN')
            shutil.copy(stock_hba, server.data / "pg_hba.conf")
            server.reload()
            yield server
