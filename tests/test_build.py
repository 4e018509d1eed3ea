"""`ingest all`, `ingest status` and `ingest check`: the whole build on a small published layout, a failed stage
and the rerun that continues, and kill -9 at every stage converging to the database of an unbroken run."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import load_helpers
import psycopg
import pytest
from conftest import drop_database, make_scratch_database
from layout_helpers import write_published_layout
from load_helpers import BIN, database_state, end_sessions, partial_download, paused, wait_for
from osm_helpers import feature, write_layer

from ingest import fetch
from testkit.fake_hub import FakeHub, repository_files

ingest = functools.partial(load_helpers.ingest, timeout=300)


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_published_layout(tmp_path_factory.mktemp("published"))


@pytest.fixture(scope="module")
def unbroken(server_dsn: str, template_db: str, layout: Path) -> Iterator[dict]:
    dsn = make_scratch_database(server_dsn, template_db, "build_unbroken")
    result = ingest("all", str(layout), "--offline", "--dsn", dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    yield database_state(dsn)
    drop_database(server_dsn, psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


def test_offline_build_runs_every_stage_then_a_rerun_skips_the_loads(new_database, layout: Path,
                                                                      unbroken: dict) -> None:
    dsn = new_database("build_twice")
    first = ingest("all", str(layout), "--offline", "--dsn", dsn, "--json")
    assert first.returncode == 0, first.stderr
    stages = {stage["stage"]: stage for stage in json.loads(first.stdout)["stages"]}
    assert [stages[name]["state"] for name in ("init", "dem", "osm", "finalize", "check")] == ["done"] * 5
    assert database_state(dsn) == unbroken
    assert len(unbroken["dem_us"]["rows"]) == 18 and len(unbroken["pois"]) > 0

    again = ingest("all", str(layout), "--offline", "--dsn", dsn, "--json")
    assert again.returncode == 0, again.stderr
    summaries = {stage["stage"]: stage["summary"] for stage in json.loads(again.stdout)["stages"]}
    assert "inputs unchanged" in summaries["dem"] and "inputs unchanged" in summaries["osm"]
    assert database_state(dsn) == unbroken

    status = json.loads(ingest("status", "--dsn", dsn, "--json").stdout)
    assert [(stage["stage"], stage["state"]) for stage in status["stages"]] == [
        ("init", "done"), ("fetch", "skipped"), ("dem", "done"), ("osm", "done"), ("finalize", "done"),
        ("check", "done")]
    assert status["loaded"]["public.dem_us"] == {"files": 2, "rows": 18}
    text = ingest("status", "--dsn", dsn).stdout
    assert "public.dem_us           2 of 2 files" in text and "public.roads            2 of 2 files" in text
    assert "public.pois             2 of 2 files" in text, text


def test_check_passes_on_a_build_and_names_what_is_wrong(new_database, layout: Path) -> None:
    dsn = new_database("build_check")
    assert ingest("all", str(layout), "--offline", "--dsn", dsn).returncode == 0
    good = ingest("check", "--dsn", dsn, "--json")
    assert good.returncode == 0, good.stdout
    assert {check["check"] for check in json.loads(good.stdout)} >= {
        "dem.tiles", "dem.tiles_per_file", "dem.census", "dem.extent", "dem.heap_order", "dem.constraints",
        "dem.raster_columns", "dem.index", "roads.rows", "roads.index", "roads.analyzed", "roles", "osm.files"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP INDEX public.roads_geometry_gix")
        conn.execute("DELETE FROM public.dem_us WHERE rid = (SELECT max(rid) FROM public.dem_us)")
    bad = ingest("check", "--dsn", dsn)
    assert bad.returncode == 1
    failed = [line.split()[1] for line in bad.stdout.splitlines() if line.startswith("FAILED")]
    assert set(failed) == {"roads.index", "dem.tiles", "dem.tiles_per_file", "dem.census"}, bad.stdout
    reference = ingest("check", "--reference", "--dsn", dsn, "--json")
    names = {check["check"] for check in json.loads(reference.stdout) if not check["ok"]}
    assert {"dem.reference_tiles", "dem.extent", "roads.reference_rows"} <= names


def test_a_failed_stage_stops_the_build_and_the_rerun_continues(new_database, layout: Path, tmp_path: Path,
                                                                unbroken: dict) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(layout, data)
    victim = data / "dem/tiles/ASTGTMV003_N40W100_dem.tif"
    good = victim.read_bytes()
    victim.write_bytes(good[: len(good) // 3])  # truncated
    dsn = new_database("build_failed_stage")
    failed = ingest("all", str(data), "--offline", "--dsn", dsn)
    assert failed.returncode == 1 and "Traceback" not in failed.stderr
    line = next(line for line in failed.stdout.splitlines() if line.startswith("dem"))
    assert "failed" in line and victim.name in line
    assert "osm" not in [line.split()[0] for line in failed.stdout.splitlines() if line.strip()]
    status = json.loads(ingest("status", "--dsn", dsn, "--json").stdout)
    assert [stage["state"] for stage in status["stages"]] == ["done", "skipped", "failed", "pending", "pending",
                                                               "pending"]
    victim.write_bytes(good)
    rerun = ingest("all", str(data), "--offline", "--dsn", dsn)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert database_state(dsn) == unbroken


def test_a_tile_the_list_names_but_the_folder_lacks_is_one_line(new_database, layout: Path, tmp_path: Path) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(layout, data)
    (data / "dem/tiles/ASTGTMV003_N40W099_dem.tif").unlink()
    result = ingest("all", str(data), "--offline", "--dsn", new_database("build_missing_tile"))
    assert result.returncode == 1
    line = next(line for line in result.stdout.splitlines() if line.startswith("dem"))
    assert "1 of the 2 DEM tiles named by" in line and "ASTGTMV003_N40W099_dem.tif" in line


# Where the build is caught and killed (in the stage the key starts with): a trigger the test adds makes it
# pause there, after the stage has committed part of its work: one DEM file, one roads file; the pois index,
# which the osm stage builds once the pois are in, while other tables are indexed or loaded.
PAUSE_ON_LOG = ("CREATE TRIGGER test_pause BEFORE INSERT ON gsqa.load_log FOR EACH ROW "
                "EXECUTE FUNCTION public.test_pause()")
PAUSE = "CREATE FUNCTION public.test_pause() RETURNS {returns} LANGUAGE plpgsql AS $$ BEGIN IF {condition} THEN " \
        "PERFORM pg_sleep(600); END IF; {tail} END $$"
LOGGED = "(SELECT count(*) FROM gsqa.load_log WHERE target_table = NEW.target_table) >= 1"
KILL_POINTS = {
    "dem": ([PAUSE.format(returns="trigger", condition=f"NEW.target_table = 'public.dem_us' AND {LOGGED}",
                          tail="RETURN NEW;"),
             PAUSE_ON_LOG],
            "INSERT INTO%load_log%", "DROP TRIGGER test_pause ON gsqa.load_log"),
    "osm": ([PAUSE.format(returns="trigger", condition=f"NEW.target_table = 'public.roads' AND {LOGGED}",
                          tail="RETURN NEW;"),
             PAUSE_ON_LOG],
            "INSERT INTO%load_log%", "DROP TRIGGER test_pause ON gsqa.load_log"),
    "osm-index": ([PAUSE.format(returns="event_trigger", tail="", condition="EXISTS (SELECT FROM "
                                "pg_event_trigger_ddl_commands() WHERE object_identity LIKE '%pois_geometry_gix')"),
                   "CREATE EVENT TRIGGER test_pause ON ddl_command_end WHEN TAG IN ('CREATE INDEX') "
                   "EXECUTE FUNCTION public.test_pause()"],
                  "%pois_geometry_gix%", "DROP EVENT TRIGGER test_pause"),
}


@pytest.mark.parametrize("stage", list(KILL_POINTS))
def test_kill_9_during_a_stage_then_rerun_gives_the_unbroken_database(new_database, layout: Path, unbroken: dict,
                                                                       stage: str) -> None:
    dsn = new_database(f"build_kill_{stage}")
    assert ingest("init", "--dsn", dsn).returncode == 0  # the tables the trigger needs
    setup, statement, teardown = KILL_POINTS[stage]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for command in setup:
            conn.execute(command)
    process = subprocess.Popen([str(BIN / "ingest"), "all", str(layout), "--offline", "--dsn", dsn, "--workers", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The trigger's pg_sleep, not any statement like it: the same INSERT runs unpaused for earlier files.
        assert wait_for(lambda: paused(dsn), process), f"the build never paused at {statement}"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    end_sessions(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(teardown)
        conn.execute("DROP FUNCTION public.test_pause()")
    status = json.loads(ingest("status", "--dsn", dsn, "--json").stdout)
    assert {s["stage"]: s["state"] for s in status["stages"]}[stage.split("-")[0]] == "interrupted"
    rerun = ingest("all", str(layout), "--offline", "--dsn", dsn)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert database_state(dsn) == unbroken


def test_kill_9_during_the_fetch_then_rerun_gives_the_unbroken_database(new_database, layout: Path,
                                                                        tmp_path: Path) -> None:
    import shutil

    source = tmp_path / "source"
    shutil.copytree(layout, source)
    big = "osm/osm_extract/roads/part-1.geojson"  # large and served slowly: the build is killed while it downloads
    roads = [feature({"type": "LineString", "coordinates": [[-99.5 + i * 1e-5, 40.5], [-99.4, 40.6 + i * 1e-5]]},
                     i, {"highway": "residential", "name": f"Road {i}"}) for i in range(80_000)]
    write_layer(source / big, roads)
    with FakeHub(fetch.SOURCE_REPO, repository_files(source)) as hub:
        hub.faults.slow[big] = 0.01
        env = {**os.environ, "HF_ENDPOINT": hub.endpoint(), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}
        dsn = new_database("build_kill_fetch")
        data = tmp_path / "data"
        process = subprocess.Popen([str(BIN / "ingest"), "all", str(data), "--dsn", dsn], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_for(lambda: partial_download(data), process), "the fetch was not caught midway"
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        end_sessions(dsn)
        hub.faults.slow.clear()
        rerun = ingest("all", str(data), "--dsn", dsn, env=env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    unbroken = new_database("build_kill_fetch_unbroken")
    assert ingest("all", str(source), "--offline", "--dsn", unbroken).returncode == 0
    assert database_state(dsn) == database_state(unbroken)


def test_openstreetmap_extracts_in_osm_are_the_vector_source_when_there_is_no_osm_extract(
        new_database, tmp_path: Path) -> None:
    import shutil

    from conftest import DATA

    data = write_published_layout(tmp_path / "data", osm=False)
    (data / "osm").mkdir()
    shutil.copy(DATA / "osm" / "manhattan-midtown.osm.pbf", data / "osm")
    dsn = new_database("build_pbf")
    first = ingest("all", str(data), "--offline", "--what", "osm", "--dsn", dsn, "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    osm_stage = next(stage for stage in json.loads(first.stdout)["stages"] if stage["stage"] == "osm")
    assert osm_stage["state"] == "done" and "from 1 extract(s)" in osm_stage["summary"]
    assert osm_stage["report"]["layers"]["roads"]["rows_written"] == 170
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT source_name FROM gsqa.load_log WHERE target_table = 'public.roads'").fetchall() \
            == [("manhattan-midtown.2-ways.geojson",)]
    again = json.loads(ingest("all", str(data), "--offline", "--what", "osm", "--dsn", dsn, "--json").stdout)
    assert "inputs unchanged" in next(s["summary"] for s in again["stages"] if s["stage"] == "osm")
