"""A PostgreSQL primary and its hot standby (pg_basebackup -R), started from this machine's PostgreSQL 15
binaries on private sockets, so that the test server's own configuration is never touched. Used by
tests/test_servers.py and bench/reproduce.py (the replicas case)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

BIN = Path(__file__).resolve().parent.parent / ".venv" / "bin"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
AS_POSTGRES = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []  # the server refuses root


@dataclass
class LocalServer:
    data: Path
    port: int
    sockets: Path

    def dsn(self, database: str = "gsqa") -> str:
        return f"host={self.sockets} port={self.port} user=postgres dbname={database}"

    def start(self) -> None:
        as_postgres(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.data / "server.log", "-w", "-o",
                    f"-p {self.port} -k {self.sockets} -c listen_addresses=''", "start")

    def stop(self) -> None:
        as_postgres(PG_BIN / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


def as_postgres(*argv: object) -> None:
    subprocess.run([*AS_POSTGRES, *map(str, argv)], check=True, capture_output=True, timeout=300)


@contextmanager
def primary_and_standby(fill: list[list[object]] = (), port: int = 55441) -> Iterator[tuple[LocalServer, LocalServer]]:
    """A primary with the database gsqa (PostGIS, the reference schema and reader role from `ingest init`,
    then each command of `fill` run with --dsn appended) and its standby, both stopped and deleted after."""
    base = Path(tempfile.mkdtemp(prefix="gsqa-replicas-"))
    sockets = base / "sockets"
    sockets.mkdir()
    if AS_POSTGRES:
        for folder in (base, sockets):
            shutil.chown(folder, "postgres")
    base.chmod(0o755)
    primary, standby = LocalServer(base / "primary", port, sockets), LocalServer(base / "standby", port + 1, sockets)
    try:
        as_postgres(PG_BIN / "initdb", "-D", primary.data, "-U", "postgres", "--auth=trust", "--no-sync",
                    "-E", "UTF8", "--locale=C.UTF-8")
        primary.start()
        with psycopg.connect(primary.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE gsqa")
        for command in [[BIN / "ingest", "init"], *fill]:
            subprocess.run([*map(str, command), "--dsn", primary.dsn()], check=True, capture_output=True)
        as_postgres(PG_BIN / "pg_basebackup", "-D", standby.data, "-R", "-h", sockets, "-p", primary.port,
                    "-U", "postgres", "--checkpoint=fast", "--no-sync")
        standby.start()
        yield primary, standby
    finally:
        for server in (standby, primary):
            if server.running:
                server.stop()
        shutil.rmtree(base, ignore_errors=True)
