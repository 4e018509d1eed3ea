"""The native GeoJSON lines encoder (ingest/osm/_lines.cpp) gives the Python path's batches byte for byte: the
same COPY rows, feature counts, skipped features with their reasons and offsets, batch boundaries and file
errors, on testkit's synthetic layers, on the rules' layers, on the load tests' bad input and on lines made to
be tricky; the lines it does not take without a doubt go to the Python path."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import DATA
from osm_helpers import feature, point, rule_layers, square, write_layer, write_rule_layers
from test_osm_features import random_geometries
from test_osm_load import bad_source

from ingest.osm import native
from ingest.osm.batches import BATCH_BYTES
from ingest.osm.geojson import jobs_for, layer_files, parse_job
from ingest.osm.pbf.export import export
from ingest.osm.rules import LAYER_BY_FOLDER, LAYERS
from testkit.osmx_synth import write_layers
from testkit.tools import missing


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    if native.native_module("_lines") is None:
        missing("native GeoJSON lines encoder", "installed without g++ or simdjson's headers (ingest/osm/_lines was "
                "not built); GeoJSON lines are encoded in Python")


def batches(path: Path, layer: str, use_native: bool, range_bytes: int | None = None,
            bbox: tuple[float, float, float, float] | None = None) -> list[tuple]:
    """Every batch of every piece of the file, or the error that ended a piece."""
    found: list[tuple] = []
    for job in jobs_for(path, layer, range_bytes, bbox):
        try:
            for batch in parse_job(dataclasses.replace(job, native=use_native)):
                found.append((job.start, batch.data, batch.rows, batch.features, batch.skipped, batch.skipped_count))
        except Exception as error:  # a file error (SourceError), or whatever the Python path raises
            found.append((job.start, type(error).__name__, str(error)))
    return found


def assert_same_batches(folder: Path, range_bytes: int | None = None,
                        bbox: tuple[float, float, float, float] | None = None) -> list[tuple]:
    everything = []
    for layer_folder in sorted(path for path in folder.iterdir() if path.name in LAYER_BY_FOLDER):
        for path in layer_files(layer_folder):
            layer = LAYER_BY_FOLDER[layer_folder.name].name
            expected = batches(path, layer, False, range_bytes, bbox)
            assert batches(path, layer, True, range_bytes, bbox) == expected, path
            everything += expected
    return everything


def test_synthetic_layers_give_the_same_batches(tmp_path: Path) -> None:
    folder = tmp_path / "synthetic"
    write_layers(folder, 12, 1)
    found = assert_same_batches(folder)
    assert sum(batch[2] for batch in found) > 2000 and max(len(batch[1]) for batch in found) >= BATCH_BYTES
    assert assert_same_batches(folder, range_bytes=100_000)  # pieces cut at many line starts


def test_real_osm_data_gives_the_same_batches(tmp_path: Path) -> None:
    """The extracts of tests/data as osmx-style layers (--export-geojson): real tags, names and shapes."""
    extracts = sorted((DATA / "osm").glob("*.osm.pbf"))
    export(extracts, tmp_path / "layers", progress=False)
    found = assert_same_batches(tmp_path / "layers")
    assert sum(batch[2] for batch in found) > 5000


def test_the_rules_layers_give_the_same_batches(tmp_path: Path) -> None:
    found = assert_same_batches(write_rule_layers(tmp_path / "rules"))
    expected_rows = sum(len(items) for files in rule_layers().values() for items in files.values())
    assert sum(batch[2] for batch in found) > expected_rows // 2


@pytest.mark.parametrize("bbox, rows", [((-100.0, 35.0, -85.0, 42.0), 37), ((-104.5, 39.0, -103.95, 41.0), 1),
                                        ((-99.5, 39.5, -98.5, 40.5), 1), ((-80.5, 30.5, -79.5, 31), 3)])
def test_a_regional_build_keeps_the_same_features(tmp_path: Path, bbox: tuple[float, float, float, float],
                                                  rows: int) -> None:
    folder = write_rule_layers(tmp_path / "rules")
    # A hole outside its shell: shapely's bounds (the shell's) leave it out, so the third box keeps only the
    # MultiLineString.
    outside_shell = [[[-90.0, 36.0], [-89.0, 36.0], [-89.0, 37.0], [-90.0, 36.0]],
                     [[-99.0, 40.0], [-98.0, 40.0], [-98.0, 41.0], [-99.0, 40.0]]]
    write_layer(folder / "lakes" / "odd.geojson", [
        feature({"type": "Polygon", "coordinates": outside_shell}, 51, {"name": "Odd"}),
        feature({"type": "MultiLineString", "coordinates": [[[-99, 40], [-98, 41]], [[-80, 30], [-79, 31]]]}, 52, {}),
        feature({"type": "MultiPoint", "coordinates": [[-86.9, 41.1], [0, 0]]}, 53, {})])
    found = assert_same_batches(folder, bbox=bbox)
    assert sum(batch[2] for batch in found) == rows


def test_the_load_tests_bad_input_gives_the_same_batches_and_reasons(tmp_path: Path) -> None:
    folder = bad_source(tmp_path / "bad")
    write_layer(folder / "lakes" / "shapes.geojson",
                [feature(geometry, k, {"name": f"Shape {k}"}) for k, geometry in enumerate(random_geometries())])
    found = assert_same_batches(folder)
    reasons = [reason for batch in found if len(batch) > 3 for _, _, reason in batch[4]]
    errors = [batch[2] for batch in found if len(batch) == 3]
    assert len(reasons) == 14 and any("not valid JSON" in reason for reason in reasons)
    assert len(errors) == 1 and "truncated" in errors[0]


LINE = {"type": "LineString", "coordinates": [[-74.0, 40.0], [-74.1, 40.1]]}
TRICKY = [
    json.dumps(feature(LINE, 1, {"name": "Plain", "highway": "primary"})),
    json.dumps(feature(LINE, 2, {"name": "Again"})).replace('"Again"', '"First", "name": "Again"'),  # twice
    json.dumps(feature(LINE, 3, {"highway": 12, "name": True, "surface": None, "lanes": 2.5, "ref": [1, "a"]})),
    json.dumps(feature(LINE, 4, {"name": "\u00e9" * 255}), ensure_ascii=False),  # 255 characters, 510 bytes: fits
    json.dumps(feature(LINE, 5, {"name": "\u00e9" * 256}), ensure_ascii=False),
    json.dumps(feature(LINE, 6, {"name": "nul \u0000 inside"})),
    json.dumps(feature(LINE, 7, {"name": "esc\\aped \"quote\" \ud83d\ude00 \t"})),
    json.dumps(feature(LINE, 8, {"name": "lone"})).replace("lone", "\\ud800"),  # a lone surrogate escape
    json.dumps(feature(LINE, 9, {"name": "bad"})).replace("bad", "b\udcffd"),  # not UTF-8 (surrogateescape)
    json.dumps(feature(LINE, 10, {"name": "big", "lanes": 12345678901234567890})),  # an unsigned 64-bit integer
    json.dumps(feature(LINE, 11, {})).replace('"id": 11', '"id": 11, "id": 12'),
    json.dumps(feature({"type": "LineString", "coordinates": [[1, 2, 3], [4]]}, 12, {})),  # _fast_wkb takes it
    json.dumps(feature({"type": "LineString", "coordinates": [[1, 2], [3, 4, 5]]}, 13, {})),
    json.dumps(feature({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 0.5]]]}, 14, {})),  # open
    json.dumps(feature({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [-0.0, 0]]]}, 15, {})),
    json.dumps(feature({"type": "Polygon", "coordinates": [1, 2]}, 16, {})),
    json.dumps(feature({"type": "MultiPoint", "coordinates": [[1, 2, 3], [4]]}, 17, {})),
    json.dumps(feature({"type": "MultiPoint", "coordinates": [[1, 2], []]}, 18, {})),
    json.dumps(feature({"type": "MultiLineString", "coordinates": [[[0, 0], [1, 1]], []]}, 19, {})),
    json.dumps(feature({"type": "MultiPolygon", "coordinates": [square(1, 1), [[]]]}, 20, {})),
    json.dumps(feature({"type": "MultiPolygon", "coordinates": []}, 21, {})),
    json.dumps(feature({"type": "GeometryCollection", "geometries": [point(1, 2)]}, 22, {})),
    json.dumps(feature({"type": "Point", "coordinates": [[1], [2]]}, 23, {})),
    json.dumps(feature({"type": "Point", "coordinates": [1, True]}, 24, {})),
    json.dumps(feature({"type": "Point", "coordinates": [1e308, -1e-320]}, 25, {})),
    json.dumps(feature({"type": "Point", "coordinates": [12345678901234567890, -9]}, 26, {})),
    json.dumps(feature({"coordinates": [1, 2]}, 27, {})),
    json.dumps({"type": "Feature", "properties": {"id": 28, "tagsMap": {}}, "geometry": point(1, 2),
                "geometry ": None}),
    json.dumps({"geometry": point(1, 2), "properties": {"id": 29, "tagsMap": "none"}}),
    json.dumps({"geometry": point(1, 2), "properties": None}),
    json.dumps([1, 2]),
    "  " + json.dumps(feature(LINE, 32, {"name": "Spaced"})) + "\t\r",
    "",
    "   ,",
    json.dumps(feature(point(1, 2), 34, {"name": "Last"})) + "]}",
]


@pytest.mark.parametrize("layer", ["roads", "pois", "parks"])
def test_tricky_lines_give_the_same_batches(tmp_path: Path, layer: str) -> None:
    head = '{"type": "FeatureCollection", "features": [\n'
    lines = [line.replace('"name"', '"amenity": "cafe", "name"', 1) if layer == "pois" and k % 2 else line
             for k, line in enumerate(TRICKY)]
    body = ",\n".join(lines).encode("utf-8", "surrogateescape")
    path = tmp_path / LAYERS[layer].folder / "tricky.geojson"
    path.parent.mkdir()
    path.write_bytes(head.encode() + body + b"\n")
    found = assert_same_batches(tmp_path)
    assert sum(batch[3] for batch in found) == len([line for line in TRICKY if line.strip(" \t\r,")])
    assert assert_same_batches(tmp_path, range_bytes=300)


def test_a_number_beyond_64_bits_is_one_skipped_feature_both_ways(tmp_path: Path) -> None:
    """pysimdjson raises RuntimeError (not ValueError) for it; the native encoder hands the line back, and the
    Python path skips that feature with the reason, as any unreadable line."""
    big = json.dumps(feature(LINE, 1, {})).replace('"id": 1', '"id": 123456789012345678901234567890')
    write_layer(tmp_path / "roads" / "a.geojson", [feature(LINE, 0, {"name": "Before"})])
    path = tmp_path / "roads" / "a.geojson"
    path.write_bytes(path.read_bytes().replace(b"\n]}", b",\n" + big.encode() + b"\n]}"))
    found = assert_same_batches(tmp_path)
    assert [batch[3:] for batch in found] == [
        (2, [(1, len(path.read_bytes()) - len(big) - 4,  # the second feature, at its line's start
              "not readable (BIGINT_ERROR: Big integer value that cannot be represented using 64 bits)")], 1)]


def test_the_python_path_takes_what_the_native_encoder_declines(tmp_path: Path) -> None:
    """A plain feature is the encoder's own; a tag value that is no string is handed back, line and all."""
    encoder = native.line_encoder(LAYERS["roads"], "a.geojson", None)
    plain, odd = (json.dumps(feature(LINE, k, tags)).encode() for k, tags in ((1, {"name": "A"}), (2, {"name": 1})))
    piece = plain + b",\n" + odd + b",\n" + plain + b"\n"
    position, data, rows, features, last, closed, declined, start, end = encoder.encode(piece, 0, 1000, 0)
    assert (rows, features, last, closed, declined) == (1, 1, 1000, False, len(plain) + 2)
    assert piece[start:end] == odd and position == start + len(odd) + 2 and data
    assert encoder.encode(piece, position, 1000, 0)[2:7] == (1, 1, 1000 + position, False, -1)


def test_switched_off_there_is_no_native_encoder() -> None:
    """$GSQA_NATIVE_READER=0, as an install without simdjson's headers: the Python path encodes every line."""
    code = ("from ingest.osm import native; from ingest.osm.rules import LAYERS; "
            "print(native.line_encoder(LAYERS['roads'], 'a.geojson', None)); print(native.lines_note())")
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, native.NATIVE_READER_ENV: "0"})
    assert said.stdout == (f"None\ningest osm: {native.NATIVE_READER_ENV}=0 is set; encoding GeoJSON lines in Python: "
                           f"the same rows, more CPU. For the native encoder: apt-get install "
                           f"{native.NATIVE_LINES_PACKAGES}, then install this package again (make venv, or pip "
                           "install .)\n")
    assert native.lines_note() is None


def test_the_lines_handed_back_are_those_the_rules_or_shapely_decide() -> None:
    """Of TRICKY, the roads encoder takes itself the plain features, 255 characters in 510 bytes, escapes, a
    duplicate id (roads keep none), the buffers _fast_wkb takes whatever their nesting, numbers as doubles and an
    extra member; it hands back the rest, and the last feature with the end of the array."""
    body = ",\n".join(TRICKY).encode("utf-8", "surrogateescape") + b"\n"
    line_of, offset = {}, 0
    for number, line in enumerate(body.split(b"\n")):
        line_of[offset], offset = number, offset + len(line) + 1
    encoder = native.line_encoder(LAYERS["roads"], "t.geojson", None)
    position, handed_back, closed = 0, [], False
    while position < len(body) and not closed:
        position, *_, closed, declined, _, _ = encoder.encode(body, position, 0, 0)
        handed_back += [line_of[declined]] if declined >= 0 else []
    assert handed_back == [1, 2, 4, 5, 7, 8, 9, 12, 13, 14, 15, 17, 18, 19, 20, 21, 23, 26, 28, 29, 30, 34]
