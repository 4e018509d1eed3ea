"""GeoJSON geometry -> WKB: the fast path gives shapely's bytes, and shapely decides whatever is unusual."""

from __future__ import annotations

import json
import random
import struct

import pytest
import shapely
import simdjson

from ingest.osm.features import encoder, geometry_wkb, shapely_wkb
from ingest.osm.rules import LAYERS, BadFeature


def fast(geometry: dict) -> bytes:
    document = simdjson.Parser().parse(json.dumps({"geometry": geometry}).encode())
    return geometry_wkb(document)


def ring(rng: random.Random, points: int) -> list[list[float]]:
    coordinates = [[rng.uniform(-124, -67), rng.uniform(25, 49)] for _ in range(points)]
    return coordinates + [coordinates[0]]


def random_geometries(seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for _ in range(30):
        out += [
            {"type": "Point", "coordinates": [rng.uniform(-180, 180), rng.uniform(-90, 90)]},
            {"type": "LineString", "coordinates": ring(rng, rng.randint(1, 50))},
            {"type": "Polygon", "coordinates": [ring(rng, rng.randint(3, 40)) for _ in range(rng.randint(1, 3))]},
            {"type": "MultiPolygon", "coordinates": [[ring(rng, 5)], [ring(rng, 8), ring(rng, 3)]]},
            {"type": "MultiLineString", "coordinates": [ring(rng, 2), ring(rng, 6)]},
            {"type": "MultiPoint", "coordinates": [[rng.uniform(-1, 1), rng.uniform(-1, 1)] for _ in range(3)]},
        ]
    return out


@pytest.mark.parametrize("geometry", random_geometries(), ids=lambda g: g["type"])
def test_fast_path_gives_shapelys_wkb(geometry: dict) -> None:
    assert fast(geometry) == shapely_wkb(geometry)


@pytest.mark.parametrize("geometry, wkt", [
    ({"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1]]]}, "POLYGON ((0 0, 1 0, 1 1, 0 0))"),  # closed
    ({"type": "Polygon", "coordinates": [[[0, 0], [1, 1], [0, 0]]]}, "POLYGON ((0 0, 1 1, 0 0, 0 0))"),  # padded
    ({"type": "Polygon", "coordinates": []}, "POLYGON EMPTY"),
    ({"type": "LineString", "coordinates": []}, "LINESTRING EMPTY"),
    ({"type": "Point", "coordinates": [1, 2]}, "POINT (1 2)"),  # integers
    ({"type": "GeometryCollection", "geometries": [{"type": "Point", "coordinates": [1, 2]}]},
     "GEOMETRYCOLLECTION (POINT (1 2))"),
    ({"type": "Polygon", "coordinates": [[[0, 0], [1, 1], [1, 0], [0, 1], [0, 0]]]},
     "POLYGON ((0 0, 1 1, 1 0, 0 1, 0 0))"),  # a bow-tie: invalid, kept
])
def test_what_loader_1s_shapely_built_is_built(geometry: dict, wkt: str) -> None:
    assert shapely.from_wkb(fast(geometry)).wkt == wkt


@pytest.mark.parametrize("geometry, message", [
    ({"type": "Polygon", "coordinates": [[[0, 0], [1, 1]]]}, "cannot be built"),
    ({"type": "LineString", "coordinates": [[0, 0]]}, "cannot be built"),
    ({"type": "LineString", "coordinates": [[0, 0, 1], [1, 1, 1]]}, "3D"),
    ({"type": "Curve", "coordinates": [[0, 0], [1, 1]]}, "cannot be built"),
    ({"type": "Point", "coordinates": ["a", "b"]}, "cannot be built"),
    (None, "null"),
])
def test_what_shapely_refused_is_a_bad_feature(geometry: dict | None, message: str) -> None:
    with pytest.raises(BadFeature, match=message):
        fast(geometry)


def test_coordinates_keep_full_double_precision() -> None:
    literal = "-73.98571234567891"  # 16 significant digits; the double nearest to it, not a rounded one
    document = simdjson.Parser().parse(f'{{"geometry": {{"type": "Point", "coordinates": [{literal}, '
                                       f'40.759379000000003]}}}}'.encode())
    x, y = struct.unpack("<dd", geometry_wkb(document)[5:])
    assert (x, y) == (float(literal), float("40.759379000000003"))


def test_binary_copy_row_layout() -> None:
    encode = encoder(LAYERS["parks"], "p.geojson")
    feature = {"geometry": {"type": "Point", "coordinates": [1.0, 2.0]},
               "properties": {"id": 7, "tagsMap": {"name": "P", "leisure": "park"}}}
    (row,) = encode(feature, 0)
    fields = struct.unpack(">h", row[:2])[0]
    assert fields == len(LAYERS["parks"].columns)
    position, values = 2, []
    for _ in range(fields):
        (length,) = struct.unpack(">i", row[position:position + 4])
        position += 4
        values.append(None if length < 0 else row[position:position + length])
        position += max(length, 0)
    assert position == len(row)
    by_column = dict(zip(LAYERS["parks"].columns, values, strict=True))
    assert shapely.from_wkb(by_column["geometry"]).wkt == "POINT (1 2)"
    assert by_column["park_name"] == b"P" and by_column["leisure"] == b"park"
    assert struct.unpack(">q", by_column["osm_id"])[0] == 7
    assert sum(value is None for value in values) == fields - 4
