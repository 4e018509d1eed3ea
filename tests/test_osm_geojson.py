"""Reading layer files: the layouts a FeatureCollection comes in, pieces of a file, and broken files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from osm_helpers import feature, point, write_layer

from ingest.osm.geojson import SourceError, jobs_for, parse_job, sniff

FEATURES = [feature(point(-74 + k / 1000, 40), k, {"name": f"Road {k}", "highway": "service"}) for k in range(200)]


def parse(path: Path, range_bytes: int | None = None) -> tuple[bytes, int, list[int]]:
    """All COPY data, the feature count and the skipped feature positions, over every piece of the file."""
    data, features, skipped = b"", 0, []
    for job in jobs_for(path, "roads", range_bytes):
        generator = parse_job(job)
        try:
            while True:
                batch = next(generator)
                data += batch.data
                skipped += [features + index for index, _, _ in batch.skipped]
                features += batch.features
        except StopIteration:
            pass
    return data, features, skipped


@pytest.mark.parametrize("layout, expected", [("lines", "lines"), ("pretty", "stream"), ("single", "stream")])
def test_every_layout_gives_the_same_rows(tmp_path: Path, layout: str, expected: str) -> None:
    reference = parse(write_layer(tmp_path / "lines.geojson", FEATURES))
    path = write_layer(tmp_path / f"{layout}.geojson", FEATURES, layout)
    assert sniff(path)[0] == expected
    assert parse(path) == reference and reference[1] == 200 and reference[0]


def test_first_feature_on_the_header_line(tmp_path: Path) -> None:
    path = tmp_path / "tight.geojson"
    lines = [json.dumps(item) for item in FEATURES[:3]]
    path.write_text('{"type":"FeatureCollection","features":[' + ",\n".join(lines) + "]}")
    assert sniff(path)[0] == "lines"
    assert parse(path)[1] == 3


def test_pieces_of_a_file_add_up_to_the_whole(tmp_path: Path) -> None:
    path = write_layer(tmp_path / "a.geojson", FEATURES)
    text = path.read_bytes().replace(b'"Road 57"', b'"Road 57', 1)  # one broken line in the middle
    path.write_bytes(text)
    whole = parse(path)
    pieces = parse(path, range_bytes=500)
    assert len(jobs_for(path, "roads", 500)) > 20
    assert pieces == whole and whole[2] == [57] and whole[1] == 200


@pytest.mark.parametrize("layout", ["lines", "pretty", "single"])
def test_a_truncated_file_fails_whole(tmp_path: Path, layout: str) -> None:
    path = write_layer(tmp_path / "cut.geojson", FEATURES, layout)
    path.write_bytes(path.read_bytes()[:-30])
    with pytest.raises(SourceError, match="cut.geojson.*(truncated|not valid JSON)"):
        parse(path)


def test_json_that_is_no_feature_collection_fails(tmp_path: Path) -> None:
    path = tmp_path / "object.geojson"
    path.write_text('{"type": "Feature", "geometry": null, "properties": {}}')
    with pytest.raises(SourceError, match="no `features` array"):
        parse(path)
    empty = tmp_path / "empty.geojson"
    empty.write_text('{"type": "FeatureCollection", "features": []}')
    assert parse(empty) == (b"", 0, [])


def test_invalid_utf8_in_a_single_line_file_is_one_line_naming_it(tmp_path: Path) -> None:
    """The stream layout cannot step over a bad byte (as the lines layout skips its line): the file fails in one
    line naming it, not with the decoder's traceback."""
    path = write_layer(tmp_path / "bad.geojson", FEATURES[:3], "single")
    path.write_bytes(path.read_bytes().replace(b'"Road 1"', b'"Road \xc0\xaf1"'))
    with pytest.raises(SourceError) as raised:
        parse(path)
    assert str(raised.value) == (
        f"{path}: not valid JSON after 1 features ('utf-8' codec can't decode byte 0xc0 in position 5: invalid "
        "start byte); expected a GeoJSON FeatureCollection")
