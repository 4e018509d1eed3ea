"""`ingest snapshot create` / `restore` (dump format) on a database built from the demo data: the restored
database equals the original table by table, `reproduce verify` gives the same results on both; damaged or
missing parts, other server versions and a database holding tables are refused; kill -9 then a rerun; a
snapshot on a local hub (testkit/fake_hub.py) restored from hf:OWNER/NAME."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from demo_helpers import demo_cluster, verify_totals
from load_helpers import BIN, ingest, wait_for

from ingest.snapshot.manifest import VERSION_KEYS, sha256_of
from ingest.snapshot.restore import user_tables
from testkit import local_server
from testkit.fake_hub import FakeHub, repository_files
from testkit.local_server import LocalServer

PART_SIZE = 100_000  # the demo's DEM data (about 2 MB) is cut into parts, as a full DEM's is at 2 GB


@pytest.fixture(scope="module")
def built(scratch_dsn: str, demo_data: Path) -> str:
    """The demo database, built and checked as `ingest all` does."""
    result = ingest("all", str(demo_data), "--offline", "--dsn", scratch_dsn)
    assert result.returncode == 0, result.stderr
    return scratch_dsn


@pytest.fixture(scope="module")
def snapshot_dir(built: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("snapshot") / "snap"
    result = ingest("snapshot", "create", str(folder), "--part-size", str(PART_SIZE), "--dsn", built)
    assert result.returncode == 0, result.stderr
    return folder


def restore(source: str | Path, dsn: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return ingest("snapshot", "restore", str(source), "--dsn", dsn, *args, env=env)


def database_contents(dsn: str) -> dict:
    """Every table (rows, as a digest independent of their order), index, constraint and the reader's
    privileges: what a restore must bring back."""
    with psycopg.connect(dsn) as conn:
        tables = user_tables(conn)
        contents: dict = {"tables": tables}
        for table in tables:
            contents[table] = conn.execute(
                f"SELECT count(*), md5(string_agg(md5(t::text), '' ORDER BY md5(t::text))) FROM {table} t"
            ).fetchone()
        contents["indexes"] = conn.execute("SELECT schemaname, tablename, indexdef FROM pg_indexes WHERE schemaname "
                                           "IN ('public', 'gsqa') ORDER BY 1, 2, 3").fetchall()
        contents["constraints"] = conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE connamespace::regnamespace::text IN ('public', 'gsqa') ORDER BY 1, 2").fetchall()
        contents["reader"] = conn.execute(
            "SELECT t, has_table_privilege('gsqa_reader', t, 'SELECT'), has_table_privilege('gsqa_reader', t, "
            "'INSERT') FROM unnest(%s::text[]) t ORDER BY 1", [tables]).fetchall()
        contents["raster_columns"] = conn.execute("SELECT to_jsonb(r) - 'r_table_catalog' FROM raster_columns r"
                                                  ).fetchall()
    return contents


def test_the_restored_database_equals_the_original_table_by_table_and_verifies_the_same(
        built: str, snapshot_dir: Path, demo_data: Path, fresh_dsn: str) -> None:
    manifest = json.loads((snapshot_dir / "manifest.json").read_text())
    assert [part["path"] for part in manifest["parts"] if ".part" in part["path"]], "the DEM data was not cut"
    assert max(part["size"] for part in manifest["parts"]) <= PART_SIZE
    assert manifest["server"]["postgis"] and manifest["load_log"]["public.dem_us"]["files"] == 2
    assert all(check["ok"] for check in manifest["check"]) and (snapshot_dir / "README.md").is_file()

    result = restore(snapshot_dir, fresh_dsn)
    assert result.returncode == 0, result.stderr
    assert "26 of 26 checks passed" in result.stdout
    assert database_contents(fresh_dsn) == database_contents(built)

    status = ingest("status", "--dsn", fresh_dsn, "--json")
    origin = json.loads(status.stdout)["snapshot"]
    assert origin["state"] == "restored" and origin["source"] == str(snapshot_dir.resolve())
    assert origin["manifest_sha256"] == sha256_of(snapshot_dir / "manifest.json")

    totals = [verify_totals(demo_data, dsn) for dsn in (built, fresh_dsn)]
    assert totals[0] == totals[1] and totals[0][1:4] == ["120", "100.0", "100.0"]


def test_a_damaged_or_missing_part_is_named_before_anything_is_restored(snapshot_dir: Path, tmp_path: Path,
                                                                        fresh_dsn: str) -> None:
    copy = tmp_path / "snap"
    shutil.copytree(snapshot_dir, copy)
    damaged = sorted((copy / "data").glob("*.part001"))[0]
    body = bytearray(damaged.read_bytes())
    body[500] ^= 0xFF
    damaged.write_bytes(bytes(body))
    result = restore(copy, fresh_dsn)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: snapshot {copy}: data/{damaged.name} is damaged (sha256 ")
    assert result.stderr.strip().endswith("; nothing was restored") and len(result.stderr.splitlines()) == 1

    damaged.unlink()
    result = restore(copy, fresh_dsn)
    assert result.returncode == 2
    assert result.stderr == f"error: snapshot {copy}: data/{damaged.name} is missing; nothing was restored\n"
    with psycopg.connect(fresh_dsn) as conn:
        assert user_tables(conn) == []


def copy_with_server_fact(snapshot_dir: Path, copy: Path, fact: str, value: str) -> tuple[Path, str]:
    """A copy of the snapshot whose manifest says the server had `value` for `fact`; and the fact as it was."""
    shutil.copytree(snapshot_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    here, manifest["server"][fact] = manifest["server"][fact], value
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy, here


def test_another_postgis_is_refused_unless_the_change_is_allowed(snapshot_dir: Path, tmp_path: Path, built: str,
                                                                 fresh_dsn: str) -> None:
    copy, here = copy_with_server_fact(snapshot_dir, tmp_path / "snap", "postgis", "3.0.0")

    refused = restore(copy, fresh_dsn)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert f"postgis 3.0.0 in the snapshot, {here} on this server" in refused.stderr
    assert "--allow-version-change" in refused.stderr

    allowed = restore(copy, fresh_dsn, "--allow-version-change")
    assert allowed.returncode == 0, allowed.stderr
    assert (f"warning: postgis 3.0.0 in the snapshot, {here} on this server: answers may differ in the last digits "
            f"({VERSION_KEYS['postgis']})") in allowed.stderr
    assert database_contents(fresh_dsn) == database_contents(built)


def test_a_database_holding_tables_is_refused_unless_replace(snapshot_dir: Path, built: str, fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE mine (x int); INSERT INTO mine VALUES (1)")
    refused = restore(snapshot_dir, fresh_dsn)
    assert refused.returncode == 2
    assert "already holds 1 tables (mine): restore into an empty database, or give --replace" in refused.stderr
    replaced = restore(snapshot_dir, fresh_dsn, "--replace")
    assert replaced.returncode == 0, replaced.stderr
    assert database_contents(fresh_dsn) == database_contents(built)


def _has_tables(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        return bool(user_tables(conn))


def test_kill_9_during_restore_then_the_same_command_restores_it(snapshot_dir: Path, built: str,
                                                                 fresh_dsn: str) -> None:
    command = [str(BIN / "ingest"), "snapshot", "restore", str(snapshot_dir), "--dsn", fresh_dsn]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: _has_tables(fresh_dsn), process), "the restore ended before it created a table"
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    again = restore(snapshot_dir, fresh_dsn)
    assert again.returncode == 0, again.stderr
    assert database_contents(fresh_dsn) == database_contents(built)
    assert not list(snapshot_dir.glob(".restore-*"))  # the killed run's scratch folder is gone too


def test_kill_9_during_create_then_the_same_command_finishes_it(built: str, tmp_path: Path, fresh_dsn: str) -> None:
    folder = tmp_path / "snap"
    command = [str(BIN / "ingest"), "snapshot", "create", str(folder), "--part-size", str(PART_SIZE), "--dsn", built]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (folder / ".work" / "dump").is_dir(), process), "create ended before it dumped"
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert not (folder / "manifest.json").exists()
    again = ingest("snapshot", "create", str(folder), "--part-size", str(PART_SIZE), "--dsn", built)
    assert again.returncode == 0, again.stderr
    assert not (folder / ".work").exists()
    assert ingest("snapshot", "create", str(folder), "--dsn", built).stdout.split(") ", 1)[1].startswith(
        "already held a finished snapshot")
    assert restore(folder, fresh_dsn).returncode == 0
    assert database_contents(fresh_dsn) == database_contents(built)


def test_a_snapshot_on_the_hub_is_downloaded_verified_and_restored(snapshot_dir: Path, built: str, tmp_path: Path,
                                                                   fresh_dsn: str) -> None:
    files = repository_files(snapshot_dir)
    with FakeHub("someone/gsqa-snapshot", files, lfs_suffixes=("",)) as hub:
        env = {"HF_ENDPOINT": hub.endpoint(), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
        download = tmp_path / "download"
        result = restore("hf:someone/gsqa-snapshot", fresh_dsn, "--download-to", str(download), env=env)
        assert result.returncode == 0, result.stderr
        assert f"hf:someone/gsqa-snapshot: {len(files)} files downloaded, 0 already present" in result.stderr
        assert database_contents(fresh_dsn) == database_contents(built)

        again = restore("hf:someone/gsqa-snapshot@main", fresh_dsn, "--download-to", str(download), "--replace",
                        env=env)
        assert again.returncode == 0, again.stderr
        assert f"0 files downloaded, {len(files)} already present" in again.stderr
    origin = json.loads(ingest("status", "--dsn", fresh_dsn, "--json").stdout)["snapshot"]
    assert origin["source"] == "hf:someone/gsqa-snapshot@main"


def test_push_then_kill_9_then_the_same_command_uploads_the_rest_and_the_hub_copy_restores(
        snapshot_dir: Path, built: str, tmp_path: Path, fresh_dsn: str) -> None:
    with FakeHub("someone/pushed", {}) as hub:
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint(), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1",
               "HF_TOKEN": "hf_test"}
        hub.faults.slow_uploads = 0.3
        process = subprocess.Popen([str(BIN / "ingest"), "snapshot", "push", str(snapshot_dir), "someone/pushed"],
                                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_for(lambda: len(hub.uploads) >= 2, process), "push ended before it uploaded two parts"
            process.send_signal(signal.SIGKILL)
        finally:
            process.wait()
        first = list(hub.uploads)
        assert hub.files == {}  # nothing committed yet
        hub.faults.slow_uploads = 0.0
        again = subprocess.run([str(BIN / "ingest"), "snapshot", "push", str(snapshot_dir), "someone/pushed"], env=env,
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert not set(first) & set(hub.uploads[len(first):])  # what the killed run sent is not sent again
        assert hub.files == repository_files(snapshot_dir)

        restored = restore("hf:someone/pushed", fresh_dsn, "--download-to", str(tmp_path / "download"), env=env)
        assert restored.returncode == 0, restored.stderr
    assert database_contents(fresh_dsn) == database_contents(built)


# --- the physical format: a private cluster (testkit/local_server.py) holding the demo database ---------------

PHYSICAL_PART_SIZE = 4_000_000  # a cluster of about 100 MB in some 30 parts


@pytest.fixture(scope="module")
def cluster(demo_data: Path) -> Iterator[LocalServer]:
    """The demo database in a cluster of its own (demo_helpers.demo_cluster), for the whole module."""
    with demo_cluster(demo_data) as server:
        yield server


def create_physical(folder: Path, server: LocalServer) -> subprocess.CompletedProcess[str]:
    return ingest("snapshot", "create", str(folder), "--format", "physical", "--data-dir", str(server.data),
                  "--part-size", str(PHYSICAL_PART_SIZE), "--dsn", server.dsn())


@pytest.fixture(scope="module")
def physical_dir(cluster: LocalServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("physical") / "snap"
    result = create_physical(folder, cluster)
    assert result.returncode == 0, result.stderr
    assert cluster.running  # stopped for the copy, started again
    return folder


@contextlib.contextmanager
def restored_cluster(snapshot_folder: Path, *args: str) -> Iterator[LocalServer]:
    """The physical snapshot extracted into a new data directory, its server started and the restore finished."""
    with local_server.scratch_folder() as base:
        server = LocalServer(base / "data", local_server.free_port(), base / "sockets")
        extracted = ingest("snapshot", "restore", str(snapshot_folder), "--data-dir", str(server.data), *args)
        assert extracted.returncode == 0, extracted.stderr
        with local_server.running(server):
            yield server


def test_a_physical_snapshot_restores_the_same_database_with_its_statistics_and_verifies_the_same(
        cluster: LocalServer, physical_dir: Path, demo_data: Path) -> None:
    manifest = json.loads((physical_dir / "manifest.json").read_text())
    assert manifest["format"] == "physical" and manifest["cluster"]["databases"] == ["gsqa", "postgres"]
    assert [part["path"] for part in manifest["parts"]] == [
        f"data/cluster.tar.zst.part{number:03d}" for number in range(len(manifest["parts"]))]
    assert len(manifest["parts"]) > 1 and max(part["size"] for part in manifest["parts"]) == PHYSICAL_PART_SIZE
    assert all(check["ok"] for check in manifest["check"]) and "cold copy" in (physical_dir / "README.md").read_text()

    with restored_cluster(physical_dir) as server:
        finished = ingest("snapshot", "restore", str(physical_dir), "--dsn", server.dsn(), "--json")
        assert finished.returncode == 0, finished.stderr
        report = json.loads(finished.stdout)
        assert report["analyzed"] == []  # a cleanly shut down cluster keeps its activity statistics
        assert all(check["ok"] for check in report["checks"]) and len(report["checks"]) == 26
        assert database_contents(server.dsn()) == database_contents(cluster.dsn())
        assert planner_statistics(server.dsn()) == planner_statistics(cluster.dsn())
        origin = json.loads(ingest("status", "--dsn", server.dsn(), "--json").stdout)["snapshot"]
        assert origin["state"] == "restored" and origin["format"] == "physical"
        assert origin["manifest_sha256"] == sha256_of(physical_dir / "manifest.json")
        totals = [verify_totals(demo_data, dsn) for dsn in (cluster.dsn(), server.dsn())]
    assert totals[0] == totals[1] and totals[0][1:4] == ["120", "100.0", "100.0"]


def planner_statistics(dsn: str) -> list:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT schemaname, tablename, attname, null_frac, n_distinct, most_common_vals::text, "
                            "histogram_bounds::text FROM pg_stats WHERE schemaname IN ('public', 'gsqa') "
                            "ORDER BY 1, 2, 3").fetchall()


def test_a_physical_snapshot_into_another_server_is_refused_in_one_line(physical_dir: Path, fresh_dsn: str) -> None:
    refused = restore(physical_dir, fresh_dsn)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith(f"error: {physical_dir.resolve()} is a physical snapshot (a whole cluster's data "
                                     "directory, for the server build of the Docker database): restore it with `make "
                                     f"db FROM={physical_dir.resolve()}`; into ")
    assert refused.stderr.endswith(" restore a dump snapshot (`ingest snapshot create DIR --format dump`)\n")
    with psycopg.connect(fresh_dsn) as conn:
        assert user_tables(conn) == []


def test_another_server_build_is_refused_always_for_a_physical_snapshot(physical_dir: Path, tmp_path: Path,
                                                                      cluster: LocalServer) -> None:
    copy, here = copy_with_server_fact(physical_dir, tmp_path / "snap", "server_build", "PostgreSQL 15.0 (other)")
    refused = ingest("snapshot", "restore", str(copy), "--preflight", "--replace", "--dsn", cluster.dsn())
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert (f"error: the physical snapshot was made by another server build (image not recorded): server_build "
            f"'PostgreSQL 15.0 (other)' in the snapshot, {here!r} on this server; ") in refused.stderr
    allowed = ingest("snapshot", "restore", str(copy), "--preflight", "--allow-version-change", "--dsn", cluster.dsn())
    assert allowed.returncode == 2
    assert allowed.stderr == ("error: --allow-version-change does not apply to a physical snapshot: a data directory "
                              "runs only on the server build that wrote it; restore a dump snapshot instead\n")
    assert ingest("snapshot", "restore", str(physical_dir), "--preflight", "--replace", "--dsn",
                  cluster.dsn()).stdout == f"physical {physical_dir}\n"


def test_a_damaged_physical_part_is_named_before_the_data_directory_is_touched(physical_dir: Path,
                                                                              tmp_path: Path) -> None:
    copy = tmp_path / "snap"
    shutil.copytree(physical_dir, copy)
    damaged = copy / "data" / "cluster.tar.zst.part001"
    body = bytearray(damaged.read_bytes())
    body[500] ^= 0xFF
    damaged.write_bytes(bytes(body))
    target = tmp_path / "pgdata"
    target.mkdir()
    (target / "PG_VERSION").write_text("15\n")
    result = ingest("snapshot", "restore", str(copy), "--data-dir", str(target), "--replace")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith(f"error: snapshot {copy}: data/cluster.tar.zst.part001 is damaged (sha256 ")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pgdata", "snap"]
    assert [path.name for path in target.iterdir()] == ["PG_VERSION"]

    kept = ingest("snapshot", "restore", str(physical_dir), "--data-dir", str(target))
    assert kept.returncode == 2
    assert kept.stderr == (f"error: --data-dir {target}: holds a cluster: give --replace to replace it with the "
                           "snapshot\n")


def decompressed_tar(parts: list[Path]) -> bytes:
    """A physical snapshot's parts, concatenated and decompressed with the zstd tool."""
    return subprocess.run(f"cat {' '.join(map(str, parts))} | zstd -d -c", shell=True, capture_output=True,
                          check=True).stdout


def test_a_physical_snapshot_is_a_zstd_compressed_tar_smaller_than_the_cluster(physical_dir: Path) -> None:
    parts = sorted((physical_dir / "data").iterdir())
    assert json.loads((physical_dir / "manifest.json").read_text())["compression"] == "zstd"
    assert parts[0].name == "cluster.tar.zst.part000" and parts[0].read_bytes()[:4] == bytes.fromhex("28b52ffd")
    tar = decompressed_tar(parts)
    assert sum(part.stat().st_size for part in parts) < len(tar) / 2
    listed = subprocess.run(["tar", "-t"], input=tar, capture_output=True, check=True).stdout.decode().split()
    assert {"./PG_VERSION", "./global/pg_control"} <= set(listed) and "./postmaster.pid" not in listed


def test_a_manifest_without_compression_restores_an_uncompressed_snapshot(physical_dir: Path, cluster: LocalServer,
                                                                          tmp_path: Path) -> None:
    """An older snapshot's parts are a plain tar and its manifest names no compression."""
    older = tmp_path / "older"
    (older / "data").mkdir(parents=True)
    shutil.copy(physical_dir / "README.md", older)
    manifest = json.loads((physical_dir / "manifest.json").read_text())
    tar = decompressed_tar([physical_dir / part["path"] for part in manifest["parts"]])
    del manifest["compression"]
    manifest["parts"] = []
    for number, start in enumerate(range(0, len(tar), PHYSICAL_PART_SIZE)):
        path = older / "data" / f"cluster.tar.part{number:03d}"
        path.write_bytes(tar[start:start + PHYSICAL_PART_SIZE])
        manifest["parts"].append({"path": str(path.relative_to(older)), "size": path.stat().st_size,
                                  "sha256": sha256_of(path)})
    (older / "manifest.json").write_text(json.dumps(manifest))
    with restored_cluster(older) as server:
        assert ingest("snapshot", "restore", str(older), "--dsn", server.dsn()).returncode == 0
        assert database_contents(server.dsn()) == database_contents(cluster.dsn())

    manifest["compression"] = "lz4"
    (older / "manifest.json").write_text(json.dumps(manifest))
    target = tmp_path / "pgdata"
    refused = ingest("snapshot", "restore", str(older), "--data-dir", str(target))
    assert refused.returncode == 2
    assert refused.stderr == (f"error: snapshot {older}: compression 'lz4' in its manifest, expected zstd or none\n")
    assert not target.exists()


def test_without_zstd_a_physical_snapshot_is_refused_in_one_line_naming_the_package(physical_dir: Path,
                                                                                    tmp_path: Path) -> None:
    target = tmp_path / "pgdata"
    refused = ingest("snapshot", "restore", str(physical_dir), "--data-dir", str(target), env={"PATH": str(tmp_path)})
    assert refused.returncode == 2
    assert refused.stderr == ("error: zstd is not installed: a physical snapshot's parts are zstd-compressed "
                              "(Debian: apt-get install zstd)\n")
    assert not target.exists()


def test_kill_9_during_a_physical_create_then_the_same_command_resumes_it(cluster: LocalServer, tmp_path: Path,
                                                                          physical_dir: Path) -> None:
    folder = tmp_path / "snap"
    command = [str(BIN / "ingest"), "snapshot", "create", str(folder), "--format", "physical", "--data-dir",
               str(cluster.data), "--part-size", str(PHYSICAL_PART_SIZE), "--dsn", cluster.dsn()]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: (folder / "data" / "cluster.tar.zst.part002").exists(), process), \
            "create ended before it wrote three parts"
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    assert not cluster.running and not (folder / "manifest.json").exists()
    first = (folder / "data" / "cluster.tar.zst.part000").stat().st_ino
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert cluster.running and not (folder / ".work").exists()
    assert (folder / "data" / "cluster.tar.zst.part000").stat().st_ino == first  # kept, not written again
    with restored_cluster(folder) as server:
        assert ingest("snapshot", "restore", str(folder), "--dsn", server.dsn()).returncode == 0
        assert database_contents(server.dsn()) == database_contents(cluster.dsn())


def test_kill_9_during_a_physical_restore_then_the_same_command_restores_it(cluster: LocalServer,
                                                                           physical_dir: Path) -> None:
    with local_server.scratch_folder() as base:
        target = base / "data"
        command = [str(BIN / "ingest"), "snapshot", "restore", str(physical_dir), "--data-dir", str(target)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        scratch = base / ".data.gsqa-restore" / "cluster"
        try:
            assert wait_for(lambda: (scratch / "base").is_dir(), process), "restore ended before it extracted"
            process.send_signal(signal.SIGKILL)
        finally:
            process.wait()
        assert not target.exists()
        again = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr
        assert sorted(path.name for path in base.iterdir()) == ["data", "sockets"]
        server = LocalServer(target, local_server.free_port(), base / "sockets")
        with local_server.running(server):
            assert ingest("snapshot", "restore", str(physical_dir), "--dsn", server.dsn()).returncode == 0
            assert database_contents(server.dsn()) == database_contents(cluster.dsn())


def test_tables_whose_activity_statistics_were_lost_are_analyzed_when_the_restore_finishes(
        physical_dir: Path) -> None:
    with restored_cluster(physical_dir) as server:
        analyzed = analyzed_tables(server.dsn())  # as in the snapshotted cluster
        # A crash: recovery at the next start discards the activity statistics (last_analyze), not the planner's.
        local_server.as_postgres(local_server.server_binaries() / "pg_ctl", "-D", server.data, "-m", "immediate",
                                 "-w", "stop")
        server.start()
        assert analyzed_tables(server.dsn()) == []
        finished = ingest("snapshot", "restore", str(physical_dir), "--dsn", server.dsn(), "--json")
        assert finished.returncode == 0, finished.stderr
        report = json.loads(finished.stdout)
        assert report["analyzed"] == analyzed and "dem_us" in analyzed
        assert analyzed_tables(server.dsn()) == analyzed
        assert all(check["ok"] for check in report["checks"])


def analyzed_tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [name for (name,) in conn.execute(
            "SELECT relid::regclass::text FROM pg_stat_user_tables WHERE coalesce(last_analyze, last_autoanalyze) "
            "IS NOT NULL ORDER BY 1")]
