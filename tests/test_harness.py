"""The test harness itself: without a reachable PostgreSQL the run fails and says how to start one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_database_fails_the_run_with_instructions() -> None:
    env = {**os.environ, "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nowhere", "PGCONNECT_TIMEOUT": "3"}
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_db.py"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "no PostgreSQL reachable" in output and "pg_ctlcluster 15 main start" in output
    assert "skipped" not in output
