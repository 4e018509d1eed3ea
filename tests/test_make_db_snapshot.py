"""`make db FROM=DIR` end to end with a real Docker engine: snapshots of databases built by the test (the demo
data) restored into the Docker database instead of a build, then compared with the snapshotted database table
by table and `reproduce verify` run from the host. Both formats: a dump (restored into the running database)
and a physical snapshot (replacing the stopped database's data directory; made from a private cluster of this
machine's PostgreSQL, the same Debian packages as the db image's). Skipped like tests/test_make_db.py where no
Docker engine can be started (a failure with GSQA_REQUIRE_TOOLS=1)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from demo_helpers import demo_cluster, verify_totals
from load_helpers import ingest
from test_make_db import READER_PASSWORD, ROOT, compose_binary, free_port
from test_snapshot import database_contents

from ingest.snapshot.manifest import sha256_of

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def images(engine) -> Iterator[str]:
    """Images of this test run's own name (GSQA_IMAGES): another checkout's build on the same engine does not
    replace them between `make db`'s build and its runs. Removed afterwards (the build cache stays)."""
    name = f"gsqa-e2e-snapshot-{os.getpid()}"
    yield name
    subprocess.run(["docker", "image", "rm", f"{name}/postgis:15-bookworm", f"{name}/loader:latest"],
                   capture_output=True, timeout=300)


@contextmanager
def docker_database(images: str, tmp_path: Path, label: str) -> Iterator[tuple[dict, str]]:
    """A compose project of its own (its own volume and port), taken down with its volume afterwards."""
    port = free_port()
    env = {**os.environ, "COMPOSE_PROJECT_NAME": f"gsqa-e2e-{label}-{os.getpid()}",
           "GSQA_DATA": str(tmp_path / "data"), "GSQA_DB_PORT": str(port),
           "GSQA_IMAGES": images}
    try:
        yield env, f"postgresql://postgres:gsqa@127.0.0.1:{port}/gsqa"
    finally:
        subprocess.run([compose_binary(), "--profile", "loader", "--profile", "restore", "down", "--volumes",
                        "--remove-orphans"], cwd=ROOT, env=env, capture_output=True, timeout=300)


def make_db_from(folder: Path, env: dict) -> None:
    result = subprocess.run(["make", "db", f"FROM={folder}", f"COMPOSE={compose_binary()}"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "26 of 26 checks passed" in result.stdout


def assert_restored_from(folder: Path, dsn: str, snapshot_format: str) -> None:
    origin = json.loads(ingest("status", "--dsn", dsn, "--json").stdout)["snapshot"]
    assert origin["state"] == "restored" and origin["source"] == "/snapshot" and origin["format"] == snapshot_format
    assert origin["manifest_sha256"] == sha256_of(folder / "manifest.json")


def contents_but_the_reader_password(dsn: str) -> dict:
    """database_contents without the sandbox roles' passwords, which the restore sets from the loader's
    GSQA_READER_PASSWORD and GSQA_MODEL_PASSWORD as a build does (verify below logs in with them)."""
    contents = database_contents(dsn)
    assert contents.pop("gsqa.role_login")[0] == 2
    return contents


def assert_verifies_from_the_host(demo_data: Path, dsn: str) -> None:
    env = {**os.environ, "GSQA_READER_PASSWORD": READER_PASSWORD}
    assert verify_totals(demo_data, dsn, env)[1:4] == ["120", "100.0", "100.0"]


def test_make_db_from_a_dump_snapshot_then_reproduce_verify_from_the_host(images: str, demo_data: Path,
                                                                         scratch_dsn: str, tmp_path: Path) -> None:
    folder = tmp_path / "snapshot"
    assert ingest("all", str(demo_data), "--offline", "--dsn", scratch_dsn).returncode == 0
    created = ingest("snapshot", "create", str(folder), "--part-size", "1000000", "--dsn", scratch_dsn)
    assert created.returncode == 0, created.stderr
    with docker_database(images, tmp_path, "dump") as (env, dsn):
        make_db_from(folder, env)
        assert_restored_from(folder, dsn, "dump")
        assert contents_but_the_reader_password(dsn) == contents_but_the_reader_password(scratch_dsn)
        assert_verifies_from_the_host(demo_data, dsn)


def test_make_db_from_a_physical_snapshot_then_reproduce_verify_from_the_host(images: str, demo_data: Path,
                                                                             tmp_path: Path) -> None:
    folder = tmp_path / "snapshot"
    with demo_cluster(demo_data) as server:
        created = ingest("snapshot", "create", str(folder), "--format", "physical", "--data-dir", str(server.data),
                         "--part-size", "20000000", "--dsn", server.dsn())
        assert created.returncode == 0, created.stderr
        snapshotted = contents_but_the_reader_password(server.dsn())
    again = tmp_path / "snapshot-of-docker"
    with docker_database(images, tmp_path, "physical") as (env, dsn):
        make_db_from(folder, env)
        assert_restored_from(folder, dsn, "physical")
        assert contents_but_the_reader_password(dsn) == snapshotted
        assert_verifies_from_the_host(demo_data, dsn)

        # The Docker database's own physical snapshot (`make snapshot`: db stopped for the copy, then started).
        made = subprocess.run(["make", "snapshot", f"TO={again}", f"COMPOSE={compose_binary()}"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1800)
        assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]
        assert contents_but_the_reader_password(dsn) == snapshotted  # db is back
    manifest = json.loads((again / "manifest.json").read_text())
    assert manifest["format"] == "physical" and manifest["image"].startswith("sha256:")
    wal = subprocess.run(["tar", "--list", "--zstd", "--file=-"], input=b"".join(
        (again / part["path"]).read_bytes() for part in manifest["parts"]), capture_output=True).stdout.decode()
    assert len([name for name in wal.splitlines() if name.startswith("./pg_wal/0")]) == 1  # the checkpoint's only
    with docker_database(images, tmp_path / "second", "physical-again") as (env, dsn):
        make_db_from(again, env)
        assert contents_but_the_reader_password(dsn) == snapshotted
