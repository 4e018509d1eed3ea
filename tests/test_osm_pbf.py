"""`ingest osm FILE.osm.pbf`: the layer rules on inline OPL, broken data listed by OSM type and id, extracts that
overlap taken once, the same rows as the PBF's own --export-geojson output, and one-line refusals."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import osmium
import psycopg
import pytest
from conftest import DATA
from load_helpers import BIN, end_sessions, paused, wait_for
from loader1 import table_rows
from pbf_helpers import OPL, TABLES, ingest, pbf_from_opl

from ingest.osm.load import load_pbf
from ingest.osm.native import NATIVE_READER_ENV
from ingest.osm.pbf import native as pbf_native
from ingest.osm.pbf import plans as pbf_plans
from ingest.osm.pbf.export import export
from ingest.osm.pbf.sources import PbfReport
from ingest.osm.rules import AREA_RULES, KIND_LAYERS, matching
from testkit.tools import missing


def features(folder: Path, layer: str) -> list[dict]:
    found = []
    for path in sorted((folder / layer).glob("*.geojson")):
        found += json.loads(path.read_text())["features"]
    return found


def by_id(folder: Path, layer: str) -> dict[int, dict]:
    return {feature["properties"]["id"]: feature for feature in features(folder, layer)}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PbfReport]:
    folder = tmp_path_factory.mktemp("cases")
    source = pbf_from_opl(OPL, folder / "cases.osm.pbf")
    return folder / "layers", export([source], folder / "layers", progress=False)


def test_layer_rules_on_each_kind_of_object(cases: tuple[Path, PbfReport]) -> None:
    folder, _ = cases
    pois, parks = by_id(folder, "pois"), by_id(folder, "parks")
    assert sorted(pois) == [1, 3, 9]  # named with tourism/amenity/leisure; the unnamed bench is not a POI
    assert pois[1]["properties"]["tagsMap"] == {"amenity": "restaurant", "name": "Chez Zoé", "cuisine": "french"}
    assert pois[1]["geometry"] == {"type": "Point", "coordinates": [7.0001, 43.0001]}
    roads = by_id(folder, "roads")
    assert roads[20]["geometry"]["type"] == "LineString" and len(roads[20]["geometry"]["coordinates"]) == 3
    assert roads[21]["geometry"]["type"] == "Polygon"  # a closed highway way, as the benchmark's roads hold
    lakes = by_id(folder, "lakes")
    assert lakes[22]["geometry"]["type"] == "LineString" and lakes[23]["geometry"]["type"] == "Polygon"
    assert parks[3]["geometry"]["type"] == "Point" and parks[100]["geometry"]["type"] == "MultiPolygon"
    assert len(parks[100]["geometry"]["coordinates"]) == 2
    # A closed way with area tags that is also a relation's member: once as the way, once as the relation.
    park_ids = [feature["properties"]["id"] for feature in features(folder, "parks")]
    assert park_ids.count(28) == 1 and park_ids.count(103) == 1
    assert parks[28]["geometry"]["type"] == "Polygon" and parks[103]["geometry"]["type"] == "Polygon"
    regions = by_id(folder, "postal_codes")
    assert list(regions) == [101] and regions[101]["geometry"]["type"] == "Polygon"
    assert regions[101]["properties"]["tagsMap"]["admin_level"] == "8"


def test_what_cannot_be_built_is_listed_by_type_and_id(cases: tuple[Path, PbfReport]) -> None:
    folder, report = cases
    assert 24 not in by_id(folder, "roads") and 102 not in by_id(folder, "lakes")
    assert dict(report.broken) == {"way": 1, "relation": 1}
    assert any(line.startswith("way 24: node 999") for line in report.broken_listed)
    assert any(line.startswith("relation 102: ") for line in report.broken_listed)


def test_overlapping_extracts_are_taken_once_and_a_box_keeps_what_overlaps(tmp_path: Path) -> None:
    first = pbf_from_opl(OPL, tmp_path / "a.osm.pbf")
    second = pbf_from_opl(OPL, tmp_path / "b.osm.pbf")
    report = export([first, second], tmp_path / "both", progress=False)
    single = export([first], tmp_path / "one", progress=False)
    assert report.features == single.features and report.broken == single.broken
    # Every object the first file gave a layer (nodes 1, 3, 9; ways 20-24, 28; relations 100-103) is skipped once.
    assert report.duplicates == 13
    boxed = export([first], tmp_path / "box", bbox=(7.0, 43.0, 7.00015, 43.00015), progress=False)
    assert boxed.features["pois"] == 1 and boxed.outside > 0


def test_a_pbf_loads_the_same_rows_as_its_exported_layers(new_database, tmp_path: Path) -> None:
    extracts = [shutil.copy(path, tmp_path) for path in sorted((DATA / "osm").glob("*.osm.pbf"))]  # all four
    direct, exported = new_database("pbf_direct", initialized=True), new_database("pbf_export", initialized=True)
    result = ingest("osm", *map(str, extracts), "--dsn", direct, "--json")
    assert result.returncode == 1, result.stderr  # Monaco's extract cuts French boundary relations
    assert "node locations: flex_mem (in memory)" in result.stderr
    report = json.loads(result.stdout)
    sent = sum(layer["features_read"] for layer in report["layers"].values())
    assert f"B/s, {sent:,} features]" in result.stderr  # the bar: bytes read, rate, features sent
    assert report["pbf"]["broken"]["relation"] > 0 and report["layers"]["roads"]["rows_written"] > 3000
    assert all(layer["indexed"] for layer in report["layers"].values())  # broken objects fail no source
    written = ingest("osm", *map(str, extracts), "--export-geojson", str(tmp_path / "geojson"))
    assert written.returncode == 1 and "could not be built" in written.stdout
    assert ingest("osm", str(tmp_path / "geojson"), "--dsn", exported).returncode == 0
    for table in TABLES:
        assert table_rows(direct, f"public.{table}") == table_rows(exported, f"public.{table}"), table
    with psycopg.connect(direct) as conn:
        names = {name for (name,) in conn.execute("SELECT poi_name FROM pois")}
        kinds = dict(conn.execute("SELECT ST_GeometryType(geometry::geometry), count(*) FROM lakes GROUP BY 1"))
    assert len(names) == 521 and "3 Tapas" in names  # the named POIs of loader 1's categories in the four extracts
    assert kinds.get("ST_LineString") and kinds.get("ST_Polygon")  # waterways and water areas
    again = json.loads(ingest("osm", *map(str, extracts), "--dsn", direct, "--json").stdout)
    assert all(not layer["loaded"] and layer["unchanged"] for layer in again["layers"].values())
    assert again["pbf"]["features"] == {}  # every source was logged: nothing was read again


def test_the_native_reader_is_built_where_its_build_tools_are() -> None:
    """CI and the loader image install g++ and libosmium's headers (system-packages.txt), so the install built
    ingest/osm/pbf/_osmread; elsewhere (no compiler) a direct load reads with pyosmium, and this says so."""
    if pbf_native.native_reader() is None:
        missing("native PBF reader", "installed without g++ or libosmium's headers (ingest/osm/pbf/_osmread was not "
                "built); loads read with pyosmium")
    assert pbf_native.reader_note() is None


def test_the_native_reader_reads_the_headers_and_a_load_does_not_import_pyosmium(new_database, tmp_path: Path) -> None:
    """The checks before a load read each header's box with the native reader, as pyosmium reads it, so that
    pyosmium is not imported on the way to a load (it reads only without the native reader)."""
    if pbf_native.native_reader() is None:
        missing("native PBF reader", "installed without g++ or libosmium's headers; loads read with pyosmium")
    for path in sorted((DATA / "osm").glob("*.osm.pbf")):
        box = osmium.io.Reader(osmium.io.File(str(path), "pbf"), osmium.osm.NOTHING).header().box()
        expected = [box.bottom_left.lon, box.bottom_left.lat, box.top_right.lon, box.top_right.lat]
        assert pbf_native.native_reader().header_box(str(path)) == (expected if box.valid() else None), path
    (tmp_path / "garbage.osm.pbf").write_bytes(bytes(100))
    with pytest.raises(RuntimeError, match="PBF error"):
        pbf_native.native_reader().header_box(str(tmp_path / "garbage.osm.pbf"))
    dsn = new_database("pbf_without_pyosmium", initialized=True)
    load = ("import sys; from pathlib import Path; from ingest.osm.load import load_pbf; "
            f"load_pbf([Path({str(DATA / 'osm' / 'manhattan-midtown.osm.pbf')!r})], {dsn!r}, "
            "progress=False); print('osmium' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True)
    assert result.stdout == "False\n", result.stderr


# Run in a process of its own: the native reader leaves libosmium's thread pool behind in its process, and a
# reader process forked later from that process (a load run in the test process) would wait on workers that fork
# did not copy.
READER_BATCHES = """
import hashlib, json, sys, tempfile
from pathlib import Path
from ingest.osm.pbf import native as pbf_native
from ingest.osm.pbf import plans as pbf_plans
from ingest.osm.pbf.pyosmium import copy_rows, run_reader
from ingest.osm.pbf.sources import FOLDERS, layer_sources

def batches(paths, work, native):
    sent = {}
    def send(kind, layer, message):
        source = sent.setdefault(f"{kind} {layer}",
                                 {"digest": hashlib.sha256(), "rows": 0, "skipped": [], "last": None})
        state, batch = message
        source["last"] = state
        if state == "item":
            source["digest"].update(repr((batch.rows, batch.features, batch.skipped, batch.skipped_count)).encode())
            source["digest"].update(batch.data)
            source["rows"] += batch.rows
            source["skipped"] += batch.skipped
        else:
            source["digest"].update(repr(message).encode())
    wanted = {layer: set(layer_sources(paths, layer)) for layer in FOLDERS}
    for plan in pbf_plans.reader_plans(paths, wanted, work, None):
        if native:
            pbf_native.read_natively(plan, send)
        else:
            run_reader(plan, lambda path, layers, features: copy_rows(path, layers, features, send), geojson=False)
    return {name: {**source, "digest": source["digest"].hexdigest()} for name, source in sorted(sent.items())}

paths = [Path(arg) for arg in sys.argv[1:]]
with tempfile.TemporaryDirectory() as work:
    print(json.dumps({"native": batches(paths, Path(work), True), "pyosmium": batches(paths, Path(work), False)}))
"""


def reader_batches(paths: list[Path]) -> dict[str, dict[str, dict]]:
    """Per reader (native, pyosmium), per source ("kind layer"): a digest of every message it sent for a direct
    load of all layers of `paths`, its rows, its skipped features and its last message's state."""
    done = subprocess.run([sys.executable, "-c", READER_BATCHES, *map(str, paths)], capture_output=True, text=True,
                          cwd=DATA.parent.parent, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_native_reader_sends_the_pyosmium_readers_batches_byte_for_byte(tmp_path: Path) -> None:
    """Both readers follow rules.py's declarations: the same batches (rows, counts, skip lists), in the same
    order, for the four real extracts at once (duplicates across them skipped) and for the OPL cases."""
    if pbf_native.native_reader() is None:
        missing("native PBF reader", "installed without g++ or libosmium's headers; nothing to compare")
    extracts = sorted((DATA / "osm").glob("*.osm.pbf"))
    for paths in (extracts, [pbf_from_opl(OPL, tmp_path / "cases.osm.pbf")]):
        sent = reader_batches(paths)
        native = sent["native"]
        assert native == sent["pyosmium"]
        assert set(native) == {f"{kind} {layer}" for kind, layers in KIND_LAYERS.items() for layer in layers}
        assert {source["last"] for source in native.values()} == {"done"}
    assert {name: source["rows"] for name, source in native.items()} == {
        "nodes pois": 2, "nodes parks": 1, "ways roads": 2, "ways lakes": 2, "ways parks": 1, "ways postal_codes": 0,
        "areas lakes": 0, "areas parks": 2, "areas postal_codes": 1}
    assert {name: source["skipped"] for name, source in native.items() if source["skipped"]} == {
        "nodes pois": [[2, 9, "node 9: tag 'description' is 300 characters long; pois columns hold 255"]]}


def test_without_the_native_reader_a_load_gives_the_same_tables_and_says_so(new_database, tmp_path: Path) -> None:
    """$GSQA_NATIVE_READER=0 reads with pyosmium, as an install without a compiler does: the same rows, skip
    lists, load log and report as the native reader, on the four real extracts at once."""
    extracts = [str(shutil.copy(path, tmp_path)) for path in sorted((DATA / "osm").glob("*.osm.pbf"))]
    native, fallback = new_database("pbf_native", initialized=True), new_database("pbf_pyosmium", initialized=True)
    first = ingest("osm", *extracts, "--dsn", native, "--json")
    second = ingest("osm", *extracts, "--dsn", fallback, "--json", env={NATIVE_READER_ENV: "0"})
    assert (first.returncode, second.returncode) == (1, 1), second.stderr  # Monaco's cut relations
    note = f"ingest osm: {NATIVE_READER_ENV}=0 is set; reading with pyosmium: the same rows"
    assert second.stderr.count(note) == 1 and "reading with pyosmium" not in first.stderr
    assert f"apt-get install {pbf_native.NATIVE_READER_PACKAGES}" in second.stderr
    reports = [json.loads(result.stdout) for result in (first, second)]
    for report in reports:
        report.pop("seconds"), report["pbf"].pop("seconds")
        for layer in report["layers"].values():
            layer.pop("index_seconds", None)
    assert reports[0] == reports[1]
    for table in TABLES:
        assert table_rows(native, f"public.{table}") == table_rows(fallback, f"public.{table}"), table
    logged = "SELECT target_table, source_name, source_size, source_checksum, rows_written, details " \
             "FROM gsqa.load_log ORDER BY 1, 2"
    with psycopg.connect(native) as one, psycopg.connect(fallback) as other:
        assert one.execute(logged).fetchall() == other.execute(logged).fetchall()


def test_a_box_keeps_the_same_rows_loaded_directly_as_exported(new_database, tmp_path: Path) -> None:
    """--bbox in the native reader (a direct load) and in the pyosmium one (--export-geojson) keep the same
    features: a box over part of Monaco cuts through its roads, parks and areas."""
    extract = shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path)
    box = "7.415,43.725,7.425,43.735"
    direct = new_database("pbf_box_direct", initialized=True)
    exported = new_database("pbf_box_export", initialized=True)
    assert ingest("osm", str(extract), "--bbox", box, "--dsn", direct).returncode == 1  # ways cut by the extract
    assert ingest("osm", str(extract), "--bbox", box, "--export-geojson", str(tmp_path / "geojson")).returncode == 1
    assert ingest("osm", str(tmp_path / "geojson"), "--dsn", exported).returncode == 0
    whole = new_database("pbf_box_whole", initialized=True)
    assert ingest("osm", str(extract), "--dsn", whole).returncode == 1
    for table in TABLES:
        assert table_rows(direct, f"public.{table}") == table_rows(exported, f"public.{table}"), table
    assert 0 < len(table_rows(direct, "public.roads")) < len(table_rows(whole, "public.roads"))


def test_the_255_character_limit_counts_characters_not_bytes(new_database, tmp_path: Path) -> None:
    """Loader 1's VARCHAR(255): a name of 255 two-byte letters (510 bytes) loads, one of 256 is skipped and
    listed, in a direct load (native reader) as in the GeoJSON path."""
    extract = pbf_from_opl(f"n1 v1 x7.0 y43.0 Tamenity=cafe,name={'%e9%' * 255}\n"
                           f"n2 v1 x7.1 y43.1 Tamenity=cafe,name={'%e9%' * 256}\n", tmp_path / "names.osm.pbf")
    direct, exported = new_database("pbf_names_direct", initialized=True), new_database("pbf_names_export",
                                                                                        initialized=True)
    result = ingest("osm", str(extract), "--dsn", direct, "--json")
    assert result.returncode == 1, result.stderr
    [skipped] = json.loads(result.stdout)["layers"]["pois"]["skipped"]
    assert skipped["feature"] == 1 and "256 characters" in skipped["reason"], skipped
    assert ingest("osm", str(extract), "--export-geojson", str(tmp_path / "geojson")).returncode == 0
    assert ingest("osm", str(tmp_path / "geojson"), "--dsn", exported).returncode == 1
    assert table_rows(direct, "public.pois") == table_rows(exported, "public.pois")
    with psycopg.connect(direct) as conn:
        assert conn.execute("SELECT char_length(poi_name), octet_length(poi_name) FROM pois").fetchall() == [(255, 510)]


def test_a_layer_loaded_earlier_is_not_read_again(new_database, tmp_path: Path) -> None:
    initialized_dsn = new_database("pbf_layers", initialized=True)
    extract = shutil.copy(DATA / "osm" / "manhattan-midtown.osm.pbf", tmp_path)
    first = json.loads(ingest("osm", str(extract), "--layers", "pois,roads", "--dsn", initialized_dsn,
                              "--json").stdout)
    assert set(first["layers"]) == {"pois", "roads"} and first["layers"]["roads"]["rows_written"] == 170
    rest = json.loads(ingest("osm", str(extract), "--dsn", initialized_dsn, "--json").stdout)
    assert rest["layers"]["roads"]["unchanged"] == ["manhattan-midtown.2-ways.geojson"]
    assert rest["layers"]["parks"]["loaded"] and set(rest["pbf"]["features"]) <= {"parks", "lakes", "postal_codes"}


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_layer_s_load_lists_only_its_own_relations_not_built(new_database, tmp_path: Path, native: str) -> None:
    """Monaco's boundaries cut by the extract are regions' (postal_codes) relations: a load of parks alone
    lists only the parks relations it could not assemble (it listed the boundaries too, and some that it
    assembled but did not keep)."""
    extract = shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path)
    dsn = new_database("pbf_parks_only", initialized=True)
    report = json.loads(ingest("osm", str(extract), "--layers", "parks", "--dsn", dsn, "--json",
                               env={NATIVE_READER_ENV: native}).stdout)["pbf"]
    listed = {int(line.split()[1].rstrip(":")) for line in report["broken_listed"] if line.startswith("relation ")}
    layers = {relation.id: {rule.layer for rule in matching(AREA_RULES, dict(relation.tags))}
              for relation in osmium.FileProcessor(str(extract), osmium.osm.RELATION) if relation.id in listed}
    assert report["broken"].get("relation", 0) == len(listed) > 0
    assert all("parks" in layers[relation] for relation in listed), layers


@pytest.mark.parametrize("readers", [pbf_plans.READERS, pbf_plans.READERS_ON_DISK])
def test_every_source_has_exactly_one_reader(readers: dict) -> None:
    produced = [(kind, layer) for kinds in readers.values() for kind, layers in kinds.items() for layer in layers]
    assert sorted(produced) == sorted((kind, layer) for kind, layers in KIND_LAYERS.items()
                                      for layer in layers)


def test_node_locations_on_disk_load_the_same_rows(new_database, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Above IN_MEMORY_LIMIT one reader keeps the node locations, in one file, removed at the end. Each extract
    starts it empty, as in memory: b's ways take b's nodes (moved), not a's, nor those a killed run left."""
    moved = OPL.replace(" x7.0", " x8.0") + "w40 v1 Thighway=service Nn4,n5\n"  # b's own way, on moved nodes
    extracts = [pbf_from_opl(OPL, tmp_path / "a.osm.pbf"), shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path),
                pbf_from_opl(moved, tmp_path / "b.osm.pbf")]
    in_memory, on_disk = new_database("pbf_in_memory", initialized=True), new_database("pbf_on_disk", initialized=True)
    assert ingest("osm", *map(str, extracts), "--dsn", in_memory).returncode == 1  # cut relations, as above
    stale = osmium.index.create_map(f"sparse_file_array,{tmp_path / 'node-locations-ways+areas.bin'}")
    stale.set(4, osmium.osm.Location(9.0, 45.0))  # a location a killed run left in the file
    del stale
    monkeypatch.setattr(pbf_plans, "IN_MEMORY_LIMIT", 0)
    _, read = load_pbf([Path(extract) for extract in extracts], on_disk, progress=False, work=tmp_path)
    assert read.location_index == f"sparse_file_array,{tmp_path / 'node-locations-ways+areas.bin'}"
    assert not list(tmp_path.glob("node-locations-*"))
    for table in TABLES:
        assert table_rows(in_memory, f"public.{table}") == table_rows(on_disk, f"public.{table}"), table


KILL_ON_LOG = """
CREATE FUNCTION public.test_pause() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
    IF NEW.target_table = 'public.lakes' THEN PERFORM pg_sleep(600); END IF; RETURN NEW; END $$;
CREATE TRIGGER test_pause BEFORE INSERT ON gsqa.load_log FOR EACH ROW EXECUTE FUNCTION public.test_pause();
"""


def test_kill_9_during_a_load_then_rerun_gives_the_same_tables(new_database, tmp_path: Path) -> None:
    extract = shutil.copy(DATA / "osm" / "monaco.osm.pbf", tmp_path)
    clean, killed = new_database("pbf_clean", initialized=True), new_database("pbf_killed", initialized=True)
    ingest("osm", str(extract), "--dsn", clean)
    with psycopg.connect(killed, autocommit=True) as conn:
        conn.execute(KILL_ON_LOG)
    process = subprocess.Popen([str(BIN / "ingest"), "osm", str(extract), "--dsn", killed],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # lakes' first source has its rows copied and waits to be logged: kill the loader there
        assert wait_for(lambda: paused(killed), process), "the load never paused"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    end_sessions(killed)
    with psycopg.connect(killed, autocommit=True) as conn:
        conn.execute("DROP TRIGGER test_pause ON gsqa.load_log; DROP FUNCTION public.test_pause()")
        assert conn.execute("SELECT count(*) FROM lakes").fetchone()[0] == 0  # rolled back with its log row
    # The rerun loads lakes and what the kill left; it lists Monaco's cut relations of those layers only (which
    # they are depends on how far the other lanes got) and exits 1 for them
    rerun = ingest("osm", str(extract), "--dsn", killed, "--json")
    report = json.loads(rerun.stdout)
    assert report["layers"]["lakes"]["loaded"] and rerun.returncode == (1 if report["pbf"]["broken"] else 0)
    for table in TABLES:
        assert table_rows(clean, f"public.{table}") == table_rows(killed, f"public.{table}"), table


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_failed_second_read_leaves_the_first_reads_sources(new_database, tmp_path: Path, native: str) -> None:
    """Member ways out of id order fail osmium's area assembler, in the second read: the sources of nodes and
    ways, ended with the first read, stand with both readers (pyosmium failed its nodes'); the areas' fail."""
    source = pbf_from_opl(OPL.replace("w25", "w95"), tmp_path / "unsorted.osm.pbf")
    result = ingest("osm", str(source), "--dsn", new_database(f"pbf_unsorted_{native}", initialized=True), "--json",
                    env={NATIVE_READER_ENV: native})
    parks = json.loads(result.stdout)["layers"]["parks"]
    assert result.returncode == 1 and "Way IDs out of order" in result.stderr
    assert (parks["loaded"], list(parks["failed"])) == (["unsorted.1-nodes.geojson", "unsorted.2-ways.geojson"],
                                                        ["unsorted.3-areas.geojson"])


def test_node_locations_on_disk_for_large_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = pbf_from_opl(OPL, tmp_path / "cases.osm.pbf")
    monkeypatch.setattr(pbf_plans, "IN_MEMORY_LIMIT", 0)
    report = export([source], tmp_path / "layers", progress=False)
    assert report.location_index == f"sparse_file_array,{tmp_path / 'layers' / 'node-locations-ways+areas.bin'}"
    assert sorted(by_id(tmp_path / "layers", "roads")) == [20, 21]
    assert not list((tmp_path / "layers").glob("node-locations-*"))  # removed after the export


@pytest.mark.parametrize("content, expected", [
    (b"", "empty file"),
    (b"<?xml version='1.0'?><osm></osm>", "not an OpenStreetMap PBF file"),
])
def test_bad_inputs_are_one_line_and_load_nothing(tmp_path: Path, content: bytes, expected: str,
                                                   initialized_dsn: str) -> None:
    good = pbf_from_opl(OPL, tmp_path / "good.osm.pbf")
    bad = tmp_path / "bad.osm.pbf"
    bad.write_bytes(content)
    result = ingest("osm", str(good), str(bad), "--dsn", initialized_dsn)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and expected in result.stderr
    assert "Traceback" not in result.stderr
    with psycopg.connect(initialized_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM public.roads").fetchone()[0] == 0


def test_a_truncated_extract_stops_before_anything_is_loaded(tmp_path: Path, initialized_dsn: str) -> None:
    whole = (DATA / "osm" / "monaco.osm.pbf").read_bytes()
    (tmp_path / "monaco.osm.pbf").write_bytes(whole[: len(whole) // 2])
    result = ingest("osm", str(tmp_path / "monaco.osm.pbf"), "--dsn", initialized_dsn)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'monaco.osm.pbf'}: ")
    assert not list((tmp_path / "monaco.layers").rglob("*.geojson"))  # no half-written layer either
    with psycopg.connect(initialized_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM public.roads").fetchone()[0] == 0


def test_names_whose_sources_would_interleave_are_refused(tmp_path: Path) -> None:
    first = pbf_from_opl(OPL, tmp_path / "us.osm.pbf")
    second = pbf_from_opl(OPL, tmp_path / "us.2.osm.pbf")
    result = ingest("osm", str(first), str(second), "--export-geojson", str(tmp_path / "out"))
    assert result.returncode == 2 and "'us' and 'us.2'" in result.stderr and result.stderr.count("\n") == 1


def test_a_missing_extract_is_one_line(tmp_path: Path) -> None:
    good = pbf_from_opl(OPL, tmp_path / "good.osm.pbf")
    result = ingest("osm", str(good), str(tmp_path / "absent.osm.pbf"), "--export-geojson", str(tmp_path / "out"))
    assert result.returncode == 2 and "absent.osm.pbf" in result.stderr and result.stderr.count("\n") == 1


def test_the_format_comes_from_the_content_not_the_name(tmp_path: Path) -> None:
    odd = tmp_path / "extract.dat"
    shutil.copy(DATA / "osm" / "manhattan-midtown.osm.pbf", odd)
    result = ingest("osm", str(odd), "--export-geojson", str(tmp_path / "out"), "--json")
    assert result.returncode == 1, result.stderr  # Midtown's ways cut by the extract's edge are listed
    assert json.loads(result.stdout)["pbf"]["features"]["roads"] == 170
    assert (tmp_path / "out" / "roads" / "extract.dat.2-ways.geojson").is_file()


def test_a_box_outside_the_extract_is_one_line(tmp_path: Path) -> None:
    result = ingest("osm", str(DATA / "osm" / "monaco.osm.pbf"), "--bbox", "-100,40,-99,41", "--work",
                    str(tmp_path / "layers"), "--dsn", "postgresql://nobody@127.0.0.1:1/none")
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("error: --bbox -100.0,40.0")
    assert "monaco.osm.pbf: 7.4092,43.7234,7.4486,43.7517" in result.stderr
