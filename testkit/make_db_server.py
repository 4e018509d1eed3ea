"""`make db`'s server while it loads, as a throwaway cluster of this machine's PostgreSQL: the benches' way to
measure both tools on the server users build on, without Docker in the measurement.

The image (Dockerfile.postgis) runs Debian's own PostgreSQL and PostGIS packages, the ones installed here, with
three layers of configuration, each read here from the file that declares it, so nothing is copied:
- docker/postgresql-gsqa.conf: memory, WAL (wal_level = minimal), lz4 TOAST compression;
- sql/bulk_load_on.sql: the switches `make db` turns on for the load (fsync off, ...) and off after it;
- Dockerfile.postgis's MALLOC_* environment (glibc's allocator, docs/PERFORMANCE.md).
What the container adds besides (its network, the loader running in a container of its own) is not here.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from testkit import local_server
from testkit.local_server import LocalServer

ROOT = Path(__file__).resolve().parent.parent


_SETTING = re.compile(r"^\s*(\w+)\s*=\s*('[^']*'|[^\s#]+)", re.MULTILINE)
_ALTER_SYSTEM = re.compile(r"^ALTER SYSTEM SET (\w+)\s*=\s*('[^']*'|[^\s;]+);", re.MULTILINE)


def malloc_environment() -> dict[str, str]:
    """The MALLOC_* variables Dockerfile.postgis sets, as it sets them."""
    return dict(re.findall(r"\b(MALLOC_\w+_)=(\d+)", (ROOT / "Dockerfile.postgis").read_text()))


def loading_settings() -> dict[str, str]:
    """The server's settings while `make db` loads: postgresql-gsqa.conf, then bulk_load_on.sql over it."""
    declared = dict(_SETTING.findall((ROOT / "docker" / "postgresql-gsqa.conf").read_text()))
    declared |= dict(_ALTER_SYSTEM.findall((ROOT / "sql" / "bulk_load_on.sql").read_text()))
    return {name: value.strip("'") for name, value in declared.items()}


def server_malloc_variables(conn: psycopg.Connection) -> dict[str, str]:
    """The MALLOC_* variables in the environment of the server `conn` is connected to (a superuser's). A backend's
    own /proc/self/environ holds its process title, which PostgreSQL writes over that memory; the postmaster's
    is intact, and every backend inherits it."""
    environ = bytes(conn.execute("SELECT pg_read_binary_file('/proc/' || split_part(pg_read_file('postmaster.pid'), "
                                 "E'\\n', 1) || '/environ')").fetchone()[0])
    pairs = (line.decode().partition("=") for line in environ.split(b"\0") if line.startswith(b"MALLOC_"))
    return {name: value for name, _, value in pairs}


@contextmanager
def make_db_server() -> Iterator[LocalServer]:
    """A new cluster (trust authentication, superuser postgres, on a private socket folder) running with
    `make db`'s loading settings and allocator environment until the block ends."""
    with local_server.scratch_folder() as base:
        server = LocalServer(base / "data", local_server.free_port(), base / "sockets")
        local_server.initdb(server)
        server.start(loading_settings(), environment=malloc_environment())
        try:
            yield server
        finally:
            server.stop()
