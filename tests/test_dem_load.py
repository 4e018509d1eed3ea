"""`ingest dem` gives the table raster2pgsql gives, resumes after kill -9, and handles bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import psycopg
import pytest
from dem_helpers import load_with_raster2pgsql, table_state, tile_size_census, with_nodata_tile, write_neighbours
from load_helpers import BIN, end_sessions, ingest, logged_files, query_active, wait_for

from gsqa_core.db import with_user
from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import READER
from ingest.dem.load import Target, load_dem
from ingest.dem.synthetic import cheap_terrain, write_aster_tile
from ingest.diskspace import NotEnoughDisk, check_room


@pytest.fixture(scope="module")
def full_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two full 3601x3601 neighbours without a NODATA tag, like the reference tiles."""
    return write_neighbours(tmp_path_factory.mktemp("full"))


@pytest.fixture(scope="module")
def reference(initialized_dsn: str, full_files: list[Path]) -> dict:
    load_with_raster2pgsql(initialized_dsn, "public.ref_full", full_files)
    return table_state(initialized_dsn, "public.ref_full")


def stages_left(dsn: str, table: str) -> list[str]:
    """The per-file staging tables of `table` that are still in the database."""
    with psycopg.connect(dsn) as conn:
        return [name for (name,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'gsqa' "
                                                 "AND starts_with(tablename, %s)", [Target.parse(table).stage_prefix])]


def compressions(dsn: str, table: str) -> set[str]:
    """How the full-size tiles of `table` are stored (the 17-pixel edge tiles stay small and uncompressed)."""
    with psycopg.connect(dsn) as conn:
        return {method for (method,) in conn.execute(
            f"SELECT DISTINCT pg_column_compression(rast) FROM {table} WHERE ST_Width(rast) = 256")}


def test_full_files_match_raster2pgsql(initialized_dsn: str, full_files: list[Path], reference: dict) -> None:
    report = load_dem(list(reversed(full_files)), initialized_dsn, progress=False)  # order given must not matter
    assert report.exit_code == 0 and report.tiles_written == 450
    ours = table_state(initialized_dsn, "public.dem_us")
    assert ours["physical_order"] == [rid for rid, _, _ in ours["rows"]]
    for aspect in reference:
        assert ours[aspect] == reference[aspect], aspect
    assert tile_size_census(initialized_dsn, "public.dem_us") == {
        (256, 256): 392, (17, 256): 28, (256, 17): 28, (17, 17): 2}
    with psycopg.connect(initialized_dsn) as conn:
        assert conn.execute("SELECT attcompression FROM pg_attribute WHERE attrelid = 'public.dem_us'::regclass "
                            "AND attname = 'rast'").fetchone()[0] == "l"
        assert conn.execute("SELECT count(*) FROM raster_columns WHERE r_table_name = 'dem_us' "
                            "AND spatial_index").fetchone()[0] == 1
    assert compressions(initialized_dsn, "public.dem_us") == {"lz4"}
    assert stages_left(initialized_dsn, "public.dem_us") == []


def test_pglz_stores_the_tiles_as_pglz(initialized_dsn: str, tmp_path: Path) -> None:
    """The staged tiles are compressed by the stagers and kept as they are: in the target's method."""
    files = write_neighbours(tmp_path, size=600, lat=47, lons=(-100,))
    report = load_dem(files, initialized_dsn, table="public.dem_pglz", compression="pglz", progress=False)
    assert report.exit_code == 0 and report.tiles_written == 9
    assert compressions(initialized_dsn, "public.dem_pglz") == {"pglz"}


def test_point_on_the_seam_reads_the_same_tiles(initialized_dsn: str, reference: dict) -> None:
    """A point on the shared column intersects the edge tiles of both files; LIMIT 1 picks the same."""
    query = ("SELECT rid, ST_Value(rast, 1, pt) FROM {t}, ST_SetSRID(ST_MakePoint(-99.0, 40.5), 4326) AS pt "
             "WHERE ST_Intersects(rast, pt) {tail}")
    with psycopg.connect(initialized_dsn) as conn:
        for tail in ("ORDER BY rid", "LIMIT 1"):
            ours = conn.execute(query.format(t="dem_us", tail=tail)).fetchall()
            theirs = conn.execute(query.format(t="ref_full", tail=tail)).fetchall()
            assert ours == theirs
        both = conn.execute(query.format(t="dem_us", tail="ORDER BY rid")).fetchall()
    assert len(both) == 2 and both[0][1] == both[1][1]


def test_rerun_skips_loaded_files(initialized_dsn: str, full_files: list[Path], reference: dict) -> None:
    result = ingest("dem", *map(str, full_files), "--dsn", initialized_dsn, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["loaded"] == [] and sorted(summary["unchanged"]) == sorted(p.name for p in full_files)
    assert table_state(initialized_dsn, "public.dem_us") == reference


def test_nodata_tiles_are_dropped_as_raster2pgsql_drops_them(initialized_dsn: str, tmp_path: Path) -> None:
    files = [with_nodata_tile(tmp_path, 41, -100), with_nodata_tile(tmp_path, 41, -99)]
    load_with_raster2pgsql(initialized_dsn, "public.ref_nodata", files)
    report = load_dem(files, initialized_dsn, table="public.dem_nodata", progress=False)
    assert report.tiles_written == 2 * (9 - 1)
    assert table_state(initialized_dsn, "public.dem_nodata") == table_state(initialized_dsn, "public.ref_nodata")
    assert "not the ASTER 3601x3601" in report.warnings[0]


def test_the_finish_vacuums_the_tiles_and_analyzes_the_table(initialized_dsn: str, tmp_path: Path) -> None:
    """raster2pgsql -M: the table and its TOAST table (the pixels) vacuumed, every page all-visible, and the
    planner's statistics taken; on this server too, whose commits do not wait for their WAL (tests'
    synchronous_commit is off), and with the dummy rows rolled back before the second file."""
    load_dem(write_neighbours(tmp_path, lat=44, lons=(-100, -99)), initialized_dsn, table="public.dem_vacuumed",
             progress=False)
    with psycopg.connect(initialized_dsn) as conn:
        pages = conn.execute(
            "SELECT c.relpages > 0, c.relallvisible = c.relpages, c.reltuples, t.relpages > 0, "
            "t.relallvisible = t.relpages FROM pg_class c JOIN pg_class t ON t.oid = c.reltoastrelid "
            "WHERE c.oid = 'public.dem_vacuumed'::regclass").fetchone()
        statistics = conn.execute("SELECT count(*) FROM pg_stats WHERE schemaname = 'public' "
                                  "AND tablename = 'dem_vacuumed'").fetchone()[0]
    assert pages == (True, True, 450, True, True)
    assert statistics == 3  # rid, rast, filename


def test_mixed_nodata_tags_leave_out_the_nodata_constraint_like_postgis(initialized_dsn: str, tmp_path: Path) -> None:
    files = [with_nodata_tile(tmp_path, 42, -100), write_aster_tile(tmp_path, 42, -99, cheap_terrain(600, 3))]
    load_with_raster2pgsql(initialized_dsn, "public.ref_mixed", files)
    load_dem(files, initialized_dsn, table="public.dem_mixed", progress=False)
    ours = table_state(initialized_dsn, "public.dem_mixed")
    assert ours == table_state(initialized_dsn, "public.ref_mixed")
    assert "enforce_nodata_values_rast" not in {name for name, _, _ in ours["constraints"]}


def test_file_by_file_loads_stay_in_rid_order(initialized_dsn: str, tmp_path: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    """Separate runs, separate transactions: the heap still holds the tiles in rid order without any
    rewrite, although each file ends with a 17x17 tile that is stored inside its row."""
    files = write_neighbours(tmp_path, lat=45, lons=(-100, -99, -98, -97))
    for count in range(1, len(files) + 1):
        load_dem(sorted(files)[:count], initialized_dsn, table="public.stepwise", progress=False)
    state = table_state(initialized_dsn, "public.stepwise")
    assert len(state["rows"]) == 4 * 225
    assert state["physical_order"] == [rid for rid, _, _ in state["rows"]]
    assert "restoring the physical order" not in caplog.text


def test_changed_and_inserted_files_converge_to_a_fresh_load(initialized_dsn: str, tmp_path: Path) -> None:
    # Names sort W097 < W098 < W099 < W100: rid order runs east to west here.
    w100, w098, w097 = write_neighbours(tmp_path, size=700, lat=43, lons=(-100, -98, -97))
    load_dem([w100, w098, w097], initialized_dsn, table="public.grow", progress=False)
    write_aster_tile(tmp_path, 43, -98, cheap_terrain(700, 11))  # W098 changes on disk
    w099 = write_aster_tile(tmp_path, 43, -99, cheap_terrain(700, 12))  # a new file between loaded ones
    report = load_dem([tmp_path], initialized_dsn, table="public.grow", progress=False)
    # W097 sorts first and is kept; everything from the changed W098 on is written again, in order.
    assert report.loaded == [w098.name, w099.name, w100.name] and report.unchanged == [w097.name]
    load_dem([tmp_path], initialized_dsn, table="public.fresh", progress=False)
    grown, fresh = table_state(initialized_dsn, "public.grow"), table_state(initialized_dsn, "public.fresh")
    assert grown == fresh


def test_bad_files_are_reported_and_the_rest_loads(initialized_dsn: str, tmp_path: Path) -> None:
    good = write_aster_tile(tmp_path, 44, -100, cheap_terrain(300, 1))
    (tmp_path / "ASTGTMV003_N44W101_dem.tif").write_text("not a tiff")
    truncated = write_aster_tile(tmp_path, 44, -102, cheap_terrain(3601, 2))
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    write_aster_tile(tmp_path, 44, -103, cheap_terrain(300, 3), crs="EPSG:3857")
    write_aster_tile(tmp_path, 44, -104, cheap_terrain(300, 4).astype("float32"), dtype="float32")
    result = ingest("dem", str(tmp_path), "--dsn", initialized_dsn, "--table", "public.bad", "--json")
    assert result.returncode == 1, result.stderr
    failed = json.loads(result.stdout)["failed"]
    expected = {"N44W101": "not a readable GeoTIFF", "N44W102": "truncated or corrupt",
                "N44W103": "expected EPSG:4326", "N44W104": "expected Int16"}
    assert {name[11:18]: message for name, message in failed.items()}.keys() == expected.keys()
    for name, message in failed.items():
        assert expected[name[11:18]] in message and name in message and "\n" not in message
    assert "See previous exception" not in failed["ASTGTMV003_N44W102_dem.tif"]  # GDAL's own words instead
    assert "Traceback" not in result.stderr
    with psycopg.connect(initialized_dsn) as conn:
        assert conn.execute("SELECT DISTINCT filename FROM public.bad").fetchall() == [(good.name,)]
    assert stages_left(initialized_dsn, "public.bad") == []


def test_nothing_readable_or_missing_path_is_exit_2(initialized_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "a.tif").write_text("no")
    for argv in ([str(tmp_path)], [str(tmp_path / "missing")], [str(tmp_path / "empty_dir_not_there")]):
        result = ingest("dem", *argv, "--dsn", initialized_dsn, "--table", "public.none")
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) <= 2 and "Traceback" not in result.stderr
    (tmp_path / "empty").mkdir()
    assert "no *.tif files" in ingest("dem", str(tmp_path / "empty"), "--dsn", initialized_dsn).stderr


def test_foreign_table_is_refused_untouched_then_replaced(initialized_dsn: str, full_files: list[Path],
                                                          reference: dict) -> None:
    result = ingest("dem", *map(str, full_files), "--dsn", initialized_dsn, "--table", "public.ref_full")
    assert result.returncode == 2
    assert "did not load" in result.stderr and "--replace" in result.stderr
    assert table_state(initialized_dsn, "public.ref_full") == reference  # no index, compression or row added
    partial = ingest("dem", str(full_files[0]), "--dsn", initialized_dsn)  # dem_us holds both files
    assert partial.returncode == 2 and "not among the inputs" in partial.stderr
    replaced = ingest("dem", str(full_files[0]), "--dsn", initialized_dsn, "--table", "public.ref_full",
                      "--replace", "--json")
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads(replaced.stdout)["tiles_written"] == 225
    with psycopg.connect(with_user(initialized_dsn, READER.name, None)) as reader:  # the new table is readable
        assert reader.execute("SELECT count(*) FROM public.ref_full").fetchone()[0] == 225


def test_a_second_loader_on_the_same_table_is_refused(initialized_dsn: str, full_files: list[Path]) -> None:
    with psycopg.connect(initialized_dsn) as holder:
        holder.execute("SELECT pg_advisory_lock(hashtext('gsqa ingest dem public.dem_us'))")
        result = ingest("dem", *map(str, full_files), "--dsn", initialized_dsn)
    assert result.returncode == 2 and "right now" in result.stderr


def test_disk_check_refuses_with_the_numbers(initialized_dsn: str) -> None:
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        assert check_room(conn, 1024**2, "a small load") is None
        with pytest.raises(NotEnoughDisk, match=r"GB free, but a huge load needs about .* GB \(table up to"):
            check_room(conn, 10**18, "a huge load")


def test_table_name_must_be_schema_qualified_or_plain(initialized_dsn: str, full_files: list[Path]) -> None:
    with pytest.raises(GsqaError, match="expected"):
        load_dem(full_files, initialized_dsn, table="public.", progress=False)


def _wait_until_gone(table: str, seconds: float = 10) -> bool:
    """True once no process has `table` on its command line (forked stagers share the loader's)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if subprocess.run(["pgrep", "-f", "--", f"--table {table}"], capture_output=True).returncode == 1:
            return True
        time.sleep(0.05)
    return False


def _finishing(dsn: str) -> bool:
    """The index/constraint phase is running (after the last file's COPY)."""
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT count(*) > 0 FROM pg_stat_activity WHERE state = 'active' AND datname = current_database() "
            "AND (query ILIKE '%%AddRasterConstraints%%' OR query ILIKE 'VACUUM%%' OR query ILIKE '%%lag(ctid)%%' "
            "OR query ILIKE 'ALTER TABLE%%')").fetchone()[0]


def _three_files(dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three full files, and public.unbroken: them loaded in one go, to compare an interrupted load with."""
    folder = tmp_path_factory.getbasetemp() / "kill"
    if not folder.exists():
        write_neighbours(folder, lons=(-100, -99, -98))
        load_dem([folder], dsn, table="public.unbroken", progress=False)
    return folder


@pytest.mark.parametrize("moment", ["during_copy", "between_files", "during_finish"])
def test_kill_9_then_rerun_converges(initialized_dsn: str, tmp_path_factory: pytest.TempPathFactory,
                                     moment: str) -> None:
    folder = _three_files(initialized_dsn, tmp_path_factory)
    table = f"public.killed_{moment}"
    process = subprocess.Popen([str(BIN / "ingest"), "dem", str(folder), "--dsn", initialized_dsn, "--table", table,
                                "--workers", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    condition = {
        "during_copy": lambda: query_active(initialized_dsn, "COPY %"),
        "between_files": lambda: logged_files(initialized_dsn, table) >= 1,
        "during_finish": lambda: logged_files(initialized_dsn, table) == 3 and _finishing(initialized_dsn),
    }[moment]
    assert wait_for(condition, process), f"the load ended before {moment}"
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert _wait_until_gone(table), "stager processes outlived the killed loader"
    rerun = ingest("dem", str(folder), "--dsn", initialized_dsn, "--table", table)
    assert rerun.returncode == 0, rerun.stderr
    assert "restoring the physical order" not in rerun.stderr  # resumed in order, no rewrite needed
    assert table_state(initialized_dsn, table) == table_state(initialized_dsn, "public.unbroken")
    assert stages_left(initialized_dsn, table) == []  # what the killed run had staged is gone


def test_a_lost_connection_is_one_line_and_a_rerun_resumes(initialized_dsn: str,
                                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    folder = _three_files(initialized_dsn, tmp_path_factory)
    table = "public.connection_lost"
    process = subprocess.Popen([str(BIN / "ingest"), "dem", str(folder), "--dsn", initialized_dsn, "--table", table,
                                "--workers", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: logged_files(initialized_dsn, table) >= 1 and query_active(initialized_dsn, "COPY %"),
                    process), "the load ended before its second file"
    end_sessions(initialized_dsn)  # as a server restart or a broken network would
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1 and "Traceback" not in stderr and "error ignored" not in stderr
    [line] = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert line.startswith("error: lost the connection to the database (") and "run the same command again" in line
    assert _wait_until_gone(table), "stager processes outlived the lost connection"
    rerun = ingest("dem", str(folder), "--dsn", initialized_dsn, "--table", table, "--json")
    assert rerun.returncode == 0, rerun.stderr
    assert 1 <= len(json.loads(rerun.stdout)["unchanged"]) <= 2  # the committed files were kept
    assert table_state(initialized_dsn, table) == table_state(initialized_dsn, "public.unbroken")


def test_ctrl_c_rolls_back_the_current_file_and_exits_130(initialized_dsn: str, full_files: list[Path]) -> None:
    table = "public.interrupted"
    process = subprocess.Popen([str(BIN / "ingest"), "dem", *map(str, full_files), "--dsn", initialized_dsn,
                                "--table", table], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: query_active(initialized_dsn, "COPY %"), process), "the load ended before its first COPY"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "run the same command again to resume" in stderr and "Traceback" not in stderr
    with psycopg.connect(initialized_dsn) as conn:  # whole files only: tiles and log agree
        tiles = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        logged = conn.execute("SELECT coalesce(sum(rows_written), 0) FROM gsqa.load_log WHERE target_table = %s",
                              [table]).fetchone()[0]
    assert tiles == logged and tiles % 225 == 0
    assert _wait_until_gone(table)
    assert stages_left(initialized_dsn, table) == []


def test_a_dropped_table_is_reloaded_not_trusted_to_the_log(initialized_dsn: str, tmp_path: Path) -> None:
    files = write_neighbours(tmp_path, size=600, lat=46, lons=(-100,))
    load_dem(files, initialized_dsn, table="public.dropped", progress=False)
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE public.dropped")
    report = load_dem(files, initialized_dsn, table="public.dropped", progress=False)
    assert report.loaded == [files[0].name] and report.tiles_written == 9


def test_an_unreachable_database_is_one_line_from_every_process(tmp_path: Path) -> None:
    """The stagers connect on their own as they start: their failure must not print anything either."""
    files = write_neighbours(tmp_path, size=300, lat=48, lons=(-100, -99))
    result = ingest("dem", *map(str, files), "--dsn", "postgresql://gsqa@127.0.0.1:9/gsqa")
    assert result.returncode == 2
    [line] = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning:")]  # 300 px
    assert line.startswith("error: cannot connect to PostgreSQL") and "Traceback" not in result.stderr


def test_a_missing_schema_is_one_line(initialized_dsn: str, full_files: list[Path]) -> None:
    result = ingest("dem", str(full_files[0]), "--dsn", initialized_dsn, "--table", "nowhere.dem")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --table nowhere.dem: schema nowhere does not exist"
