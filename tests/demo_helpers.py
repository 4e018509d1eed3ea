"""The demo database of README's "Try it in two minutes", built as a user builds it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from load_helpers import BIN, ingest

from testkit import local_server
from testkit.cli import reproduce
from testkit.local_server import LocalServer


def build_demo(dsn: str, folder: Path, *options: str) -> None:
    """`ingest demo-data FOLDER`, then `ingest all FOLDER --offline OPTIONS...` into `dsn`."""
    subprocess.run([BIN / "ingest", "demo-data", folder], check=True, capture_output=True, timeout=300)
    built = ingest("all", str(folder), "--offline", "--dsn", dsn, *options)
    assert built.returncode == 0, built.stderr


def verify_totals(demo_data: Path, dsn: str, env: dict[str, str] | None = None) -> list[str]:
    """`reproduce verify` of the demo's R1 and V5 questions against `dsn`: its total line without the seconds
    (every question passes: `total 120 100.0 100.0 ...`)."""
    run = reproduce("verify", "--config", "all", "--template", "R1", "--template", "V5",
                          "--data", demo_data / "benchmark", "--dsn", dsn, env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    return next(line for line in run.stdout.splitlines() if line.startswith("total")).split()[:-1]


@contextmanager
def demo_cluster(demo_data: Path) -> Iterator[LocalServer]:
    """A running cluster of its own (a physical snapshot is a whole cluster, and its create stops the server),
    with the demo database built in `gsqa`; removed afterwards."""
    with local_server.scratch_folder() as base:
        server = LocalServer(base / "data", local_server.free_port(), base / "sockets")
        local_server.initdb(server)
        with local_server.running(server, local_server.FAST):
            with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
                conn.execute("CREATE DATABASE gsqa")
            built = ingest("all", str(demo_data), "--offline", "--dsn", server.dsn())
            assert built.returncode == 0, built.stderr
            yield server
