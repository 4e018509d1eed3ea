"""The test harness itself: without DATABASE_URL or PG* the suite brings its own throwaway PostgreSQL (and
deletes it); a given server that cannot be reached fails the run with instructions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import HOW_TO_START

ROOT = Path(__file__).resolve().parent.parent
SERVER_VARIABLES = ("DATABASE_URL", "PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE")


def run_pytest(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_no_database_fails_the_run_with_instructions() -> None:
    env = {**os.environ, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nowhere", "PGCONNECT_TIMEOUT": "3"}
    result = run_pytest(env, "tests/test_db.py")
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "no PostgreSQL reachable" in output and HOW_TO_START in output
    assert "skipped" not in output


def test_without_a_given_server_the_tests_start_and_delete_their_own() -> None:
    env = {key: value for key, value in os.environ.items() if key not in SERVER_VARIABLES}
    result = run_pytest(env, "tests/test_db.py")
    assert result.returncode == 0, result.stdout + result.stderr
    [folder] = re.findall(r"tests: a throwaway PostgreSQL in (\S+) on port \d+", result.stdout)
    assert not Path(folder).exists()
