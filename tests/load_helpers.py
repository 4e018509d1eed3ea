"""Shared by the loader tests: run `ingest` as a user does; for those that interrupt a load, watch the server
for a moment, then act."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from dem_helpers import table_state
from loader1 import table_rows

from ingest.fetch import STAGING

BIN = Path(sys.executable).parent  # the venv's console scripts (ingest, reproduce)


def ingest(*argv: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`ingest ARGV...` in its own process, as a user runs it, with its output captured."""
    return subprocess.run([str(BIN / "ingest"), *argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def wait_for(predicate: Callable[[], bool], process: subprocess.Popen, seconds: float = 120) -> bool:
    """True as soon as `predicate` holds; False if the process ended (or time ran out) first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def soon(predicate: Callable[[], bool], seconds: float = 30) -> bool:
    """`predicate` holds now or within `seconds` (what the server does after a client has gone, it does
    on its own time: a liveness bound, not a speed)."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def query_active(dsn: str, pattern: str) -> bool:
    """A statement LIKE `pattern` (case-insensitive) is running in the database."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) > 0 FROM pg_stat_activity WHERE state = 'active' "
                            "AND datname = current_database() AND query ILIKE %s", [pattern]).fetchone()[0]


def paused(dsn: str) -> bool:
    """A statement of the database waits in pg_sleep (the pause a test's trigger puts in a load)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event = 'PgSleep' "
                            "AND datname = current_database()").fetchone()[0]


def logged_files(dsn: str, target: str) -> int:
    """Files of `target` in gsqa.load_log (each committed together with its rows)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM gsqa.load_log WHERE target_table = %s", [target]).fetchone()[0]


def partial_download(data: Path, min_bytes: int = 1) -> bool:
    """`ingest fetch` into `data` has written at least `min_bytes` of a file it has not finished."""
    try:
        return any(path.stat().st_size >= min_bytes for path in (data / STAGING).rglob("*.incomplete"))
    except FileNotFoundError:  # a download finished while we looked
        return False


def end_sessions(dsn: str) -> None:
    """The killed loader's backends, as the server would end them once it noticed the client is gone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        for _ in range(1000):
            if not conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchone()[0]:
                return
            time.sleep(0.01)
    raise AssertionError("the killed loader's sessions did not end")


VECTOR = ["pois", "roads", "parks", "lakes", "regions"]


def database_state(dsn: str) -> dict:
    """What the benchmark can observe, plus the load log (without its times)."""
    state = {table: table_rows(dsn, f"public.{table}") for table in VECTOR}
    state["dem_us"] = table_state(dsn, "public.dem_us")
    with psycopg.connect(dsn) as conn:
        state["load_log"] = conn.execute("SELECT target_table, source_name, source_size, source_checksum, "
                                         "rows_written FROM gsqa.load_log ORDER BY 1, 2").fetchall()
        state["indexes"] = conn.execute("SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' "
                                        "ORDER BY 1").fetchall()
    return state
