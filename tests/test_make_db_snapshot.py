"""`make db FROM=DIR` end to end with a real Docker engine: a snapshot of a database built by the test (the demo
data) restored into the Docker database instead of a build, then `reproduce verify` from the host. Skipped
like tests/test_make_db.py where no Docker engine can be started (a failure with GSQA_REQUIRE_TOOLS=1)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from load_helpers import BIN, ingest
from test_make_db import READER_PASSWORD, ROOT, compose_binary, free_port

from ingest import snapshot

pytestmark = pytest.mark.docker


def test_make_db_from_a_snapshot_then_reproduce_verify_from_the_host(engine, scratch_dsn: str,
                                                                     tmp_path: Path) -> None:
    demo, folder = tmp_path / "demo", tmp_path / "snapshot"
    assert ingest("demo-data", str(demo)).returncode == 0
    assert ingest("all", str(demo), "--offline", "--dsn", scratch_dsn).returncode == 0
    created = ingest("snapshot", "create", str(folder), "--part-size", "1000000", "--dsn", scratch_dsn)
    assert created.returncode == 0, created.stderr
    port = free_port()
    env = {**os.environ, "COMPOSE_PROJECT_NAME": f"gsqa-e2e-snapshot-{os.getpid()}",
           "GSQA_DATA": str(tmp_path / "data"), "GSQA_DB_PORT": str(port)}
    dsn = f"postgresql://postgres:gsqa@127.0.0.1:{port}/gsqa"
    try:
        result = subprocess.run(["make", "db", f"FROM={folder}", f"COMPOSE={compose_binary()}"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=1800)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        assert "26 of 26 checks passed" in result.stdout
        origin = json.loads(ingest("status", "--dsn", dsn, "--json").stdout)["snapshot"]
        assert origin["state"] == "restored" and origin["source"] == "/snapshot"
        assert origin["manifest_sha256"] == snapshot.sha256_of(folder / "manifest.json")
        verify = subprocess.run([str(BIN / "reproduce"), "verify", "--config", "all", "--template", "R1", "--template",
                                 "V5", "--data", str(demo / "benchmark"), "--dsn", dsn], capture_output=True, text=True,
                                env={**os.environ, "GSQA_READER_PASSWORD": READER_PASSWORD}, timeout=600)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        total = next(line for line in verify.stdout.splitlines() if line.startswith("total"))
        assert total.split()[1:4] == ["120", "100.0", "100.0"], verify.stdout
    finally:
        subprocess.run([compose_binary(), "--profile", "loader", "down", "--volumes", "--remove-orphans"], cwd=ROOT,
                       env=env, capture_output=True, timeout=300)
