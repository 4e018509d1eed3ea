"""Small osmx layers written by the tests: every loader-1 rule, and the layouts a FeatureCollection can have."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ingest.osm.rules import POI_PASSES

# 15-17 significant digits, as a JVM extractor prints OSM's fixed-point coordinates back in double.
PRECISE = [-73.98571234567891, 40.759379000000003]


def feature(geometry: dict | None, osm_id: Any, tags: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "Feature", "geometry": geometry, "properties": {"id": osm_id, "tagsMap": tags}, **extra}


def point(x: float, y: float) -> dict:
    return {"type": "Point", "coordinates": [x, y]}


def square(x: float, y: float, size: float = 0.01, hole: bool = False) -> list:
    rings = [[[x, y], [x + size, y], [x + size, y + size], [x, y + size], [x, y]]]
    if hole:
        q = size / 4
        rings.append([[x + q, y + q], [x + q, y + 3 * q], [x + 3 * q, y + 3 * q], [x + 3 * q, y + q], [x + q, y + q]])
    return rings


def write_layer(path: Path, features: list[dict], layout: str = "lines") -> Path:
    """A FeatureCollection: one feature per line, pretty-printed, or all on one line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout == "lines":
        body = ",\n".join(json.dumps(item) for item in features)
        path.write_text('{"type": "FeatureCollection", "features": [\n' + body + "\n]}\n", encoding="utf-8")
    else:
        path.write_text(json.dumps({"type": "FeatureCollection", "features": features},
                                   indent=2 if layout == "pretty" else None), encoding="utf-8")
    return path


def rule_layers() -> dict[str, dict[str, list[dict]]]:
    """Layer folder -> file name -> features exercising every rule of ingest/osm/rules.py (loader 1's)."""
    every_category = [feature(point(-100 + k / 100, 40), 1000 + k, {"name": f"{key} {value}", key: value})
                      for k, (key, value) in enumerate((key, value) for key, values in POI_PASSES for value in values)]
    pois_a = [
        feature(point(*PRECISE), 1, {"name": "Precise Museum", "tourism": "museum", "addr:city": "Chicago",
                                     "addr:housenumber": "12", "addr_city": "not an addr tag", "capacity": 12,
                                     "wheelchair": True, "fee": None, "cuisine": 1.5}),
        feature(point(-87.6, 41.8), 2, {"name": "Hotel Cafe", "tourism": "hotel", "amenity": "cafe"}),
        feature(point(-87.5, 41.7), 3, {"name": "All Three", "tourism": "zoo", "amenity": "restaurant",
                                        "leisure": "park"}),
        feature(point(-87.4, 41.6), 4, {"name": "Capital", "tourism": "Museum"}),  # case matters
        feature(point(-87.3, 41.5), 5, {"tourism": "museum"}),  # no name
        feature(point(-87.2, 41.4), 6, {"name": "Trailing", "tourism": "museum "}),
        feature(point(-87.1, 41.3), 7, {"name": "Shop", "shop": "bakery"}),
        feature(point(-87.0, 41.2), 8, {"name": "Twice In Source", "amenity": "fast_food"}),
        feature(point(-87.0, 41.2), 8, {"name": "Twice In Source", "amenity": "fast_food"}),
        feature(point(-86.9, 41.1), "9", {"name": "String Id", "leisure": "stadium", "poi_name": "ignored"}),
        feature(point(-86.8, 41.0), 10, {"poi_name": "Raw Poi Name Tag", "name": "Named", "amenity": "cafe"}),
    ]
    return {
        "pois": {"a.geojson": pois_a, "b.geojson": every_category},
        "roads": {"part-1.geojson": [
            feature({"type": "LineString", "coordinates": [PRECISE, [-73.98, 40.76], [-73.97, 40.77]]}, 11,
                    {"name": "Broadway", "highway": "primary", "addr:street": "Broadway", "tiger:cfcc": "A41"}),
            feature({"type": "Polygon", "coordinates": square(-73.9, 40.7)}, 12, {"highway": "pedestrian"}),
        ], "part-0.geojson": [
            feature({"type": "LineString", "coordinates": [[-74.0, 40.7], [-74.01, 40.71]]}, 13,
                    {"highway": "service"}),
        ]},
        "parks": {"parks.geojson": [
            feature(point(-105.1, 39.9), 21, {"name": "Summit", "leisure": "park", "ele": "3000"}),
            feature({"type": "Polygon", "coordinates": square(-105, 40, hole=True)}, 22, {"leisure": "garden"}),
            feature({"type": "MultiPolygon", "coordinates": [square(-104, 40, hole=True), square(-103.9, 40)]}, 23,
                    {"name": "Two Parts", "leisure": "nature_reserve", "ALAND": "5", "aland": "7"}),
        ]},
        "lakes": {"lakes.geojson": [
            feature({"type": "LineString", "coordinates": [[-90.1, 35.1], [-90.2, 35.3]]}, 31,
                    {"name": "Creek", "waterway": "stream"}),
            feature({"type": "Polygon", "coordinates": square(-91, 36)}, 32, {"name": "Pond", "water": "lake"}),
        ]},
        "postal_codes": {"regions.geojson": [
            feature({"type": "Polygon", "coordinates": [[[-80, 30], [-79, 31], [-79, 30], [-80, 31], [-80, 30]]]}, 41,
                    {"name": "Bow Tie", "border_type": "city", "admin_level": 8}),  # invalid: kept as is
            feature({"type": "MultiPolygon", "coordinates": [square(-81, 30), square(-82, 30)]}, 42,
                    {"name": "Islands", "border_type": "county", "admin_level": "6"}),
        ]},
    }


def write_rule_layers(folder: Path, layout: str = "lines") -> Path:
    for layer, files in rule_layers().items():
        for name, features in files.items():
            write_layer(folder / layer / name, features, layout)
    return folder
