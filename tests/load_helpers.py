"""Shared by the loader tests that interrupt a load: watch the server for a moment, then act."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import psycopg


def wait_for(predicate: Callable[[], bool], process: subprocess.Popen, seconds: float = 120) -> bool:
    """True as soon as `predicate` holds; False if the process ended (or time ran out) first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def query_active(dsn: str, pattern: str) -> bool:
    """A statement LIKE `pattern` (case-insensitive) is running in the database."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) > 0 FROM pg_stat_activity WHERE state = 'active' "
                            "AND datname = current_database() AND query ILIKE %s", [pattern]).fetchone()[0]


def logged_files(dsn: str, target: str) -> int:
    """Files of `target` in gsqa.load_log (each committed together with its rows)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM gsqa.load_log WHERE target_table = %s", [target]).fetchone()[0]
