"""`ingest osm` gives loader 1's tables, resumes after kill -9, refuses what it must, and reports bad input."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from conftest import drop_database, make_scratch_database
from load_helpers import BIN, ingest, logged_files, query_active, soon, wait_for
from loader1 import load_reference, table_rows
from osm_helpers import PRECISE, feature, point, write_layer, write_rule_layers

from ingest.initdb import initialize
from ingest.osm.load import load_osm
from ingest.osm.rules import POI_PASSES
from testkit.osmx_synth import write_layers

TABLES = ["pois", "roads", "parks", "lakes", "regions"]


@pytest.fixture(scope="module")
def rules_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_rule_layers(tmp_path_factory.mktemp("rules"))


@pytest.fixture(scope="module")
def reference(initialized_dsn: str, rules_source: Path) -> str:
    load_reference(initialized_dsn, rules_source, ["pois", "roads", "parks", "lakes", "regions"])
    return initialized_dsn


def assert_same_as_reference(dsn: str) -> None:
    for table in TABLES:
        ours, theirs = table_rows(dsn, f"public.{table}"), table_rows(dsn, f"public.ref_{table}")
        assert ours == theirs, table


@pytest.mark.parametrize("layout", ["lines", "pretty", "single"])
def test_rows_ids_and_geometries_are_loader_1s(reference: str, tmp_path: Path, layout: str) -> None:
    source = write_rule_layers(tmp_path / layout, layout)
    result = ingest("osm", str(source), "--dsn", reference, "--replace", "--json")
    assert result.returncode == 0, result.stderr
    assert_same_as_reference(reference)


def test_the_rules_themselves(reference: str, rules_source: Path) -> None:
    load_osm(rules_source, reference, replace=True, progress=False)
    with psycopg.connect(reference) as conn:
        pois = conn.execute("SELECT id, poi_name, osm_id, tourism, amenity, leisure FROM pois ORDER BY id").fetchall()
        precise = conn.execute("SELECT ST_X(geometry::geometry), ST_Y(geometry::geometry), capacity, wheelchair, fee, "
                               "cuisine, addr_city, addr_housenumber FROM pois WHERE osm_id = 1").fetchone()
        types = dict(conn.execute(
            "SELECT 'roads', array_agg(DISTINCT GeometryType(geometry)) FROM roads UNION ALL "
            "SELECT 'parks', array_agg(DISTINCT GeometryType(geometry)) FROM parks UNION ALL "
            "SELECT 'lakes', array_agg(DISTINCT GeometryType(geometry)) FROM lakes").fetchall())
        bow_tie_valid = conn.execute("SELECT ST_IsValid(geometry::geometry) FROM regions WHERE region_name = 'Bow Tie'"
                                     ).fetchone()[0]
        aland = conn.execute("SELECT aland FROM parks WHERE park_name = 'Two Parts'").fetchone()[0]
    names = [row[1] for row in pois]
    # Three passes over both files (a, then b): tourism, amenity, leisure; a feature in two lists twice.
    by_pass = [[f"{key} {value}" for value in values] for key, values in POI_PASSES]
    assert names == (["Precise Museum", "Hotel Cafe", "All Three"] + by_pass[0]
                     + ["Hotel Cafe", "All Three", "Twice In Source", "Twice In Source", "Named"] + by_pass[1]
                     + ["All Three", "String Id"] + by_pass[2])
    assert [row[0] for row in pois] == list(range(1, len(pois) + 1))
    assert next(row[2] for row in pois if row[1] == "String Id") == 9
    assert precise == (PRECISE[0], PRECISE[1], "12", "True", "None", "1.5", "Chicago", "12")
    assert sorted(types["roads"]) == ["LINESTRING", "POLYGON"] and sorted(types["lakes"]) == ["LINESTRING", "POLYGON"]
    assert sorted(types["parks"]) == ["MULTIPOLYGON", "POINT", "POLYGON"]
    assert bow_tie_valid is False and aland == "7"


def bad_source(folder: Path) -> Path:
    """roads/a.geojson: one bad feature of each kind between good ones; b.geojson truncated; parks: bad ids."""
    line = {"type": "LineString", "coordinates": [[-74, 40], [-74.1, 40.1]]}
    long_value = "x" * 256
    roads = [
        feature(line, 1, {"name": "Good"}),
        b'{"type": "Feature", "geom',  # not JSON
        {"type": "Feature", "properties": {"id": 3, "tagsMap": {}}},
        feature(None, 4, {}),
        feature({"type": "Polygon", "coordinates": []}, 5, {"name": "Empty"}),  # loader 1 stored it: so do we
        feature({"type": "Foo", "coordinates": [1, 2]}, 6, {}),
        feature({"type": "LineString", "coordinates": [["a", "b"], [1, 2]]}, 7, {}),
        feature({"type": "Polygon", "coordinates": [[[0, 0], [1, 1]]]}, 8, {}),  # shapely pads 3 points, not 2
        feature({"type": "LineString", "coordinates": [[0, 0, 1], [1, 1, 2]]}, 9, {}),
        feature(line, 10, {"highway": long_value}),
        feature(line, 11, {"highway": "a\u0000b"}),
        feature(line, "x", {"name": "Id Unused"}),  # roads keep no osm_id: loader 1 never used it
        json.dumps(feature(point(-74, 40), 13, {"name": "caf\u00e9"})).encode().replace(b"\\u00e9", b"\xe9"),
        feature(line, 14, {"name": "Last Good"}),
    ]
    lines = [item if isinstance(item, bytes) else json.dumps(item).encode() for item in roads]
    (folder / "roads").mkdir(parents=True)
    (folder / "roads" / "a.geojson").write_bytes(b'{"type": "FeatureCollection", "features": [\n'
                                                 + b",\n".join(lines) + b"\n]}\n")
    truncated = write_layer(folder / "roads" / "b.geojson", [feature(point(-74, 41), 20, {"name": "Cut"})] * 3)
    truncated.write_bytes(truncated.read_bytes()[:-40])
    write_layer(folder / "roads" / "c.geojson", [feature(point(-74, 42), 30, {"name": "After"})])
    no_id = {"type": "Feature", "geometry": point(-74, 43), "properties": {"tagsMap": {"name": "No Id"}}}
    write_layer(folder / "parks" / "p.geojson", [
        feature(point(-74, 43), "abc", {"name": "Bad Id"}), no_id, feature(point(-74, 43), 1.5, {"name": "Float"}),
        feature(point(-74, 43), "77", {"name": "Text Id"}), feature(point(-74, 43), 78, {"name": long_value}),
        feature(point(-74, 43), 79, {"name": "Fine"})])
    return folder


def test_bad_input_is_skipped_reported_and_the_rest_loads(initialized_dsn: str, tmp_path: Path) -> None:
    source = bad_source(tmp_path)
    result = ingest("osm", str(source), "--dsn", initialized_dsn, "--replace", "--json")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)["layers"]
    reasons = {(entry["file"], entry["feature"]): entry["reason"] for layer in report.values()
               for entry in layer["skipped"]}
    expected = {("a.geojson", 1): "not valid JSON", ("a.geojson", 2): "no geometry", ("a.geojson", 3): "null",
                ("a.geojson", 5): "cannot be built", ("a.geojson", 6): "cannot be built",
                ("a.geojson", 7): "cannot be built", ("a.geojson", 8): "3D", ("a.geojson", 9): "256 characters",
                ("a.geojson", 10): "NUL", ("a.geojson", 12): "not valid JSON", ("p.geojson", 0): "not an integer",
                ("p.geojson", 1): "missing", ("p.geojson", 2): "not an integer", ("p.geojson", 4): "256 characters"}
    assert reasons.keys() == expected.keys()
    for key, fragment in expected.items():
        assert fragment in reasons[key], (key, reasons[key])
    assert report["roads"]["skipped_count"] == 10 and report["parks"]["skipped_count"] == 4
    assert list(report["roads"]["failed"]) == ["b.geojson"] and "truncated" in report["roads"]["failed"]["b.geojson"]
    with psycopg.connect(initialized_dsn) as conn:
        roads = conn.execute("SELECT road_name, ST_IsEmpty(geometry::geometry) FROM roads ORDER BY id").fetchall()
        parks = conn.execute("SELECT park_name, osm_id FROM parks ORDER BY id").fetchall()
    # The empty polygon is stored as loader 1 stored it; the id of a road is not used, so "x" is fine.
    assert roads == [("Good", False), ("Empty", True), ("Id Unused", False), ("Last Good", False), ("After", False)]
    assert parks == [("Text Id", 77), ("Fine", 79)]
    text = ingest("osm", str(source), "--dsn", initialized_dsn)
    assert text.returncode == 1
    assert "a.geojson: feature 9 (byte " in text.stdout and "b.geojson: truncated" in text.stdout
    assert "skipped features (14" in text.stdout


def test_refusals_write_nothing(initialized_dsn: str, rules_source: Path, tmp_path: Path) -> None:
    load_osm(rules_source, initialized_dsn, replace=True, progress=False)
    before = {table: table_rows(initialized_dsn, f"public.{table}") for table in TABLES}
    (tmp_path / "pbf").write_bytes(b"\x00\x00\x00\x0d\x0a\x09OSMHeader\x18")
    (tmp_path / "none").mkdir()
    (tmp_path / "odd" / "buildings").mkdir(parents=True)
    (tmp_path / "odd" / "roads").mkdir()
    cases = {
        (str(tmp_path / "pbf"),): "PBF",
        (str(tmp_path / "none"),): "no layer folder",
        (str(tmp_path / "odd"),): "unknown layer folder buildings/",
        (str(tmp_path / "missing"),): "no such file",
        (str(rules_source), "--layers", "pois,shops"): "unknown layer 'shops'",
    }
    for argv, fragment in cases.items():
        result = ingest("osm", *argv, "--dsn", initialized_dsn)
        assert result.returncode == 2 and fragment in result.stderr, (argv, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO roads (road_name) VALUES ('foreign')")
        refused = ingest("osm", str(rules_source), "--dsn", initialized_dsn, "--layers", "lakes,roads")
        assert refused.returncode == 2 and "did not load" not in refused.stderr  # rows beyond the log
        assert "load log accounts for" in refused.stderr
        conn.execute("DELETE FROM roads WHERE road_name = 'foreign'")
        conn.execute("INSERT INTO pois (poi_name) VALUES ('foreign')")  # numbering would have dropped it
        refused = ingest("osm", str(rules_source), "--dsn", initialized_dsn, "--layers", "pois")
        assert refused.returncode == 2 and "public.pois holds" in refused.stderr
        conn.execute("DELETE FROM pois WHERE poi_name = 'foreign'")
        conn.execute("SELECT pg_advisory_lock(hashtext('gsqa ingest osm public.parks'))")
        busy = ingest("osm", str(rules_source), "--dsn", initialized_dsn)
        assert busy.returncode == 2 and "right now" in busy.stderr
    after = {table: table_rows(initialized_dsn, f"public.{table}") for table in TABLES}
    assert after == before


def test_rerun_skips_and_changed_files_converge(initialized_dsn: str, tmp_path: Path) -> None:
    source = write_rule_layers(tmp_path / "src")
    load_osm(source, initialized_dsn, replace=True, progress=False)
    again = load_osm(source, initialized_dsn, progress=False)
    assert all(not layer.loaded and layer.unchanged for layer in again.layers.values())
    # part-0 changes: it and part-1 (numbered after it) are written again; a new pois file is staged alone.
    write_layer(source / "roads" / "part-0.geojson", [feature(
        {"type": "LineString", "coordinates": [[-74.0, 40.7], [-74.02, 40.72]]}, 13, {"highway": "track"})] * 2)
    write_layer(source / "pois" / "c.geojson", [feature(point(-80, 30), 99, {"name": "New", "leisure": "garden"})])
    report = load_osm(source, initialized_dsn, progress=False)
    assert report.layers["roads"].loaded == ["part-0.geojson", "part-1.geojson"]
    assert report.layers["pois"].loaded == ["c.geojson"] and report.layers["pois"].unchanged == ["a.geojson",
                                                                                                 "b.geojson"]
    load_reference(initialized_dsn, source, TABLES)
    assert_same_as_reference(initialized_dsn)


# --- kill -9 anywhere, then rerun ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("synthetic")
    write_layers(folder, total_mb=24, files_per_layer=3)
    return folder


@pytest.fixture(scope="module")
def unbroken(server_dsn: str, template_db: str, synthetic: Path) -> Iterator[dict[str, list[tuple]]]:
    dsn = make_scratch_database(server_dsn, template_db, "osm_unbroken")
    initialize(dsn)
    load_osm(synthetic, dsn, progress=False)
    yield {table: table_rows(dsn, f"public.{table}") for table in TABLES}
    drop_database(server_dsn, psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


def _wait_for_backends_to_end(dsn: str) -> None:
    """The killed loader's backend may still be running its last statement; it holds the table locks."""
    for _ in range(1000):
        with psycopg.connect(dsn) as conn:
            if not conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
                                "database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                                ).fetchone()[0]:
                return
        time.sleep(0.01)
    raise AssertionError("the killed loader's session did not end")


@pytest.mark.parametrize("moment", ["during_copy", "between_files", "during_pois_numbering"])
def test_kill_9_then_rerun_converges(new_database, synthetic: Path, unbroken: dict[str, list[tuple]],
                                     moment: str) -> None:
    dsn = new_database(f"osm_kill_{moment}", initialized=True)
    blocker = psycopg.connect(dsn)
    if moment == "during_pois_numbering":  # numbering waits for this lock: the loader is caught inside it
        with psycopg.connect(dsn, autocommit=True) as conn:  # nothing else of the load needs to lock pois
            conn.execute("ALTER TABLE public.pois ALTER COLUMN geometry SET COMPRESSION lz4")
        blocker.execute("LOCK TABLE public.pois IN ACCESS SHARE MODE")
    process = subprocess.Popen([str(BIN / "ingest"), "osm", str(synthetic), "--dsn", dsn, "--workers", "1"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    condition = {
        "during_copy": lambda: query_active(dsn, "COPY %roads%"),
        "between_files": lambda: logged_files(dsn, "public.roads") >= 1,
        "during_pois_numbering": lambda: query_active(dsn, "%TRUNCATE%pois%"),
    }[moment]
    try:
        assert wait_for(condition, process), f"the load ended before {moment}"
        process.send_signal(signal.SIGKILL)
        process.wait()
    finally:
        blocker.close()
    _wait_for_backends_to_end(dsn)
    rerun = ingest("osm", str(synthetic), "--dsn", dsn)
    assert rerun.returncode == 0, rerun.stderr
    assert {table: table_rows(dsn, f"public.{table}") for table in TABLES} == unbroken


@pytest.mark.parametrize("workers", ["1", "2"])  # one writer; two writers on two layers at once
def test_ctrl_c_exits_130_with_whole_files_only(new_database, synthetic: Path, workers: str) -> None:
    dsn = new_database(f"osm_ctrl_c_{workers}", initialized=True)
    process = subprocess.Popen([str(BIN / "ingest"), "osm", str(synthetic), "--dsn", dsn, "--workers", workers,
                                "--layers", "roads,lakes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: query_active(dsn, "COPY %roads%"), process), "the load ended before its first COPY"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130 and "run the same command again" in stderr and "Traceback" not in stderr
    with psycopg.connect(dsn) as conn:
        for table in ("public.roads", "public.lakes"):
            rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            logged = conn.execute("SELECT coalesce(sum(rows_written), 0) FROM gsqa.load_log "
                                  "WHERE target_table = %s", [table]).fetchone()[0]
            assert rows == logged, table
    # a COPY the Ctrl-C cut ends with the loader's connection (the server notices on its own time)
    assert soon(lambda: not query_active(dsn, "COPY%"))


def test_a_regional_build_keeps_the_features_overlapping_the_box(new_database, rules_source: Path) -> None:
    """--bbox: the rows are loader 1's rows whose envelope overlaps the box; another box, or none, reloads."""
    reference = new_database("osm_bbox", initialized=True)
    load_reference(reference, rules_source, TABLES)
    def expected(table: str, box: str) -> list[tuple]:
        with psycopg.connect(reference) as conn:
            return conn.execute(f"SELECT geometry::bytea, {NAME[table]} FROM public.ref_{table} "
                                f"WHERE geometry::geometry && ST_MakeEnvelope({box}, 4326) ORDER BY id").fetchall()

    def loaded(table: str) -> list[tuple]:
        with psycopg.connect(reference) as conn:
            return conn.execute(f"SELECT geometry::bytea, {NAME[table]} FROM public.{table} ORDER BY id").fetchall()

    for box in ("-80,30,-74,41", "-125,20,-90,50"):
        result = ingest("osm", str(rules_source), "--bbox", box, "--dsn", reference)
        assert result.returncode == 0, result.stderr
        for table in TABLES:
            assert loaded(table) == expected(table, box), (box, table)
    assert 0 < sum(len(loaded(table)) for table in TABLES) < sum(len(expected(t, "-180,-90,180,90")) for t in TABLES)
    assert ingest("osm", str(rules_source), "--dsn", reference).returncode == 0  # no box: everything again
    assert_same_as_reference(reference)


NAME = {"pois": "poi_name", "roads": "road_name", "parks": "park_name", "lakes": "lake_name", "regions": "region_name"}
