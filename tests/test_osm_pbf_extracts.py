"""`ingest osm` with several `.osm.pbf` extracts: an object in two of them is taken once, from the first in
source name order, whatever layers a load reads, and however a load was cut (a damaged extract, then mended;
one dropped, then back); a damaged extract fails the ones after it, unread."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest
from conftest import DATA
from loader1 import table_rows
from pbf_helpers import OPL, TABLES, damaged_copy, ingest, pbf_from_opl

from ingest.osm.native import NATIVE_READER_ENV


def test_overlapping_extracts_load_each_object_once(new_database, tmp_path: Path) -> None:
    first = shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "a.osm.pbf")
    second = shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "b.osm.pbf")
    one, both = new_database("pbf_one", initialized=True), new_database("pbf_both", initialized=True)
    assert ingest("osm", str(first), "--dsn", one).returncode == 1  # cut relations, as above
    result = json.loads(ingest("osm", str(second), str(first), "--dsn", both, "--json").stdout)
    assert result["pbf"]["duplicates"] > 3000
    for table in TABLES:  # b's copies are skipped whatever the order on the command line
        assert table_rows(one, f"public.{table}") == table_rows(both, f"public.{table}"), table


def test_a_damaged_block_fails_that_extract_only(new_database, tmp_path: Path) -> None:
    initialized_dsn = new_database("pbf_damaged", initialized=True)
    good = shutil.copy(DATA / "osm" / "manhattan-midtown.osm.pbf", tmp_path)
    damaged = damaged_copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "monaco.osm.pbf")
    result = ingest("osm", str(good), str(damaged), "--dsn", initialized_dsn, "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    failed = {name: error for layer in report["layers"].values() for name, error in layer["failed"].items()}
    assert failed and all(name.startswith("monaco.") for name in failed)
    assert all(f"{damaged}: cannot be read to its end" in error for error in failed.values())
    assert report["layers"]["roads"]["loaded"][0] == "manhattan-midtown.2-ways.geojson"
    with psycopg.connect(initialized_dsn) as conn:  # what was loaded is whole: rows match the log
        for table in TABLES:
            rows = conn.execute(f"SELECT count(*) FROM public.{table}").fetchone()[0]
            logged = conn.execute("SELECT coalesce(sum(rows_written), 0) FROM gsqa.load_log WHERE target_table = "
                                  "%s", [f"public.{table}"]).fetchone()[0]
            assert rows == logged, table


@pytest.mark.parametrize("native", ["1", "0"])
def test_some_layers_then_the_rest_claim_what_one_run_claims(new_database, tmp_path: Path, native: str) -> None:
    """Way 21 is a closed highway (roads) in a.osm.pbf and a park in b.osm.pbf (a later download): one run
    takes a's version and skips b's. Loading parks first, then everything, must not let b's park in because
    the first run read no roads."""
    first = pbf_from_opl(OPL, tmp_path / "a.osm.pbf")
    second = pbf_from_opl(OPL.replace("w21 v1 Thighway=pedestrian", "w21 v1 Tleisure=park"), tmp_path / "b.osm.pbf")
    whole, split = new_database("pbf_whole", initialized=True), new_database("pbf_split", initialized=True)
    env = {NATIVE_READER_ENV: native}
    assert ingest("osm", str(first), str(second), "--dsn", whole, env=env).returncode == 1  # way 24, relation 102
    parks = ingest("osm", str(first), str(second), "--layers", "parks", "--dsn", split, env=env)
    assert parks.returncode == 0, parks.stdout  # read for roads' claims too, but way 24 is no feature of this load
    assert ingest("osm", str(first), str(second), "--dsn", split, env=env).returncode == 1
    for table in TABLES:
        assert table_rows(whole, f"public.{table}") == table_rows(split, f"public.{table}"), table
    with psycopg.connect(split) as conn:
        assert conn.execute("SELECT count(*) FROM parks WHERE osm_id = 21").fetchone()[0] == 0


def monaco_alone(new_database, tmp_path: Path) -> str:
    dsn = new_database("pbf_monaco", initialized=True)
    assert ingest("osm", str(shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path)), "--dsn", dsn).returncode == 1
    return dsn


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_rerun_after_a_damaged_extract_loads_each_object_once(new_database, tmp_path: Path, native: str) -> None:
    """a.osm.pbf loads, its copy b.osm.pbf is damaged; once b is mended the rerun reads a again (its sources are
    loaded) for the ids it claims, so b's copies are skipped as in one run: the tables of Monaco alone."""
    one, both = monaco_alone(new_database, tmp_path), new_database("pbf_mended", initialized=True)
    first = shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "a.osm.pbf")
    second = damaged_copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "b.osm.pbf")
    env = {NATIVE_READER_ENV: native}
    damaged = ingest("osm", str(first), str(second), "--dsn", both, "--json", env=env)
    report = json.loads(damaged.stdout)
    assert sorted(name for layer in report["layers"].values() for name in layer["failed"]) == sorted(
        name.replace("a.", "b.", 1) for layer in report["layers"].values() for name in layer["loaded"])
    shutil.copy(DATA / "osm" / "monaco.osm.pbf", second)
    mended = json.loads(ingest("osm", str(first), str(second), "--dsn", both, "--json", env=env).stdout)
    assert mended["pbf"]["features"] == {} and mended["pbf"]["duplicates"] > 3000  # b's objects are all a's
    assert all(name.startswith("a.") for layer in mended["layers"].values() for name in layer["unchanged"])
    for table in TABLES:
        assert table_rows(one, f"public.{table}") == table_rows(both, f"public.{table}"), table


@pytest.mark.parametrize("native", ["1", "0"])
def test_an_extract_after_a_damaged_one_waits_for_it(new_database, tmp_path: Path, native: str) -> None:
    """Which objects b shares with a damaged a (and so which b's load would skip) is known only once a can be
    read: b fails too, saying why, and nothing is loaded; a rerun without a loads all of b; a rerun with a
    mended loads a and b again (b's sources follow a's), each object once."""
    one, dsn = monaco_alone(new_database, tmp_path), new_database("pbf_waits", initialized=True)
    first = damaged_copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "a.osm.pbf")
    second = shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "b.osm.pbf")
    result = ingest("osm", str(first), str(second), "--dsn", dsn, "--json", env={NATIVE_READER_ENV: native})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    # one line on stderr for the damaged extract, however many of its sources fail
    assert result.stderr.count(f"error: {first}: cannot be read to its end") == 1
    failed = {name: error for layer in json.loads(result.stdout)["layers"].values()
              for name, error in layer["failed"].items()}
    waiting = f"{second}: not read: a.osm.pbf, before it in source order, could not be read to its end"
    assert {name for name in failed if name.startswith("b.")} == {name.replace("a.", "b.", 1) for name in failed
                                                                   if name.startswith("a.")}
    assert all(error.startswith(waiting) for name, error in failed.items() if name.startswith("b."))
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM gsqa.load_log").fetchone()[0] == 0
    assert ingest("osm", str(second), "--dsn", dsn).returncode == 1  # Monaco's cut relations
    for table in TABLES:
        assert table_rows(one, f"public.{table}") == table_rows(dsn, f"public.{table}"), table
    shutil.copy(DATA / "osm" / "monaco.osm.pbf", first)
    mended = ingest("osm", str(first), str(second), "--dsn", dsn, "--json", env={NATIVE_READER_ENV: native})
    assert all(not layer["unchanged"] for layer in json.loads(mended.stdout)["layers"].values())
    with psycopg.connect(dsn) as conn:  # a's objects now, b's copies skipped
        assert conn.execute("SELECT count(*), count(DISTINCT osm_id) FROM pois").fetchone() == (169, 169)


def test_an_export_with_a_damaged_extract_writes_the_others_and_exits_1(tmp_path: Path) -> None:
    good = shutil.copy(DATA / "osm" / "manhattan-midtown.osm.pbf", tmp_path)
    damaged = damaged_copy(DATA / "osm" / "monaco.osm.pbf", tmp_path / "monaco.osm.pbf")
    result = ingest("osm", str(good), str(damaged), "--export-geojson", str(tmp_path / "layers"), "--json")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    failed = json.loads(result.stdout)["pbf"]["failed"]
    assert len(failed) == 1 and failed[0].startswith(f"{damaged}: cannot be read to its end")
    written = sorted(path.name for path in (tmp_path / "layers").rglob("*") if path.is_file())
    assert written and all(name.startswith("manhattan-midtown.") for name in written)
