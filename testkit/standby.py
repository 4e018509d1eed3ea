"""A PostgreSQL primary and its hot standby (pg_basebackup -R), started from this machine's PostgreSQL
binaries on private sockets (local_server.py), so that the test server's own configuration is never touched.
Used by tests/test_servers.py and bench/reproduce_bench.py (the replicas case)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from testkit.local_server import SUPERUSER, LocalServer, as_postgres, initdb, scratch_folder, server_binaries

BIN = Path(__file__).resolve().parent.parent / ".venv" / "bin"


@contextmanager
def primary_and_standby(fill: list[list[object]] = (), port: int = 55441) -> Iterator[tuple[LocalServer, LocalServer]]:
    """A primary with the database gsqa (PostGIS, the reference schema and reader role from `ingest init`,
    then each command of `fill` run with --dsn appended) and its standby, both stopped and deleted after."""
    with scratch_folder() as base:
        sockets = base / "sockets"
        primary = LocalServer(base / "primary", port, sockets)
        standby = LocalServer(base / "standby", port + 1, sockets)
        try:
            initdb(primary)
            primary.start()
            with psycopg.connect(primary.dsn("postgres"), autocommit=True) as conn:
                conn.execute("CREATE DATABASE gsqa")
            for command in [[BIN / "ingest", "init"], *fill]:
                subprocess.run([*map(str, command), "--dsn", primary.dsn()], check=True, capture_output=True)
            as_postgres(server_binaries() / "pg_basebackup", "-D", standby.data, "-R", "-h", sockets, "-p",
                        primary.port, "-U", SUPERUSER, "--checkpoint=fast", "--no-sync")
            standby.start()
            yield primary, standby
        finally:
            for server in (standby, primary):
                if server.running:
                    server.stop()
