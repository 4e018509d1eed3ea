"""`ingest demo-data DIR`: a small synthetic source dataset and benchmark whose answers hold on it.

Writes, in the published layouts, so that the real commands run on it unchanged:

    DIR/dem/tile_list.txt, DIR/dem/tiles/*.tif   two ASTER-sized tiles (3601 x 3601 Int16) of synthetic terrain
    DIR/osm/osm_extract/<layer>/*.geojson        a few features per layer: museums, hotels, roads, parks, ...
    DIR/benchmark/qa2/raster_only/elevation+poi.jsonl   the 20 questions of R1 (elevation at a museum)
    DIR/benchmark/vector/T5/<n>/question.json            the 100 questions of V5 (nearest museum to a hotel)

The questions use the benchmark templates' own SQL; their stored answers are computed here, independently of
the database: elevations from the arrays written to the tiles (points on pixel centres, away from seams),
nearest museums by great-circle distance (museums on a 0.1-degree grid, each hotel within 600 m of one, so
there is no near tie). `ingest all DIR --offline` then `reproduce verify --data DIR/benchmark --template R1
--template V5` passes every question. Nothing here is real data: it is for trying the tools.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from gsqa_core.dem_grid import ASTER_SIZE, PIXEL
from ingest.dem.synthetic import write_aster_tile

CELLS = [(39, -76), (39, -75)]  # SW corners (lat, lon) of the two tiles
SEED = 20261201


def terrain(size: int, seed: int) -> np.ndarray:
    """Smooth hills of 50-450 m: deterministic, and different for each tile."""
    rows, cols = np.indices((size, size), dtype=np.float64)
    hills = np.sin(cols / 410 + seed) * np.cos(rows / 290 - seed) * 150 + np.sin((rows + cols) / 900) * 40
    return np.rint(250 + hills + rows * 0.01).astype(np.int16)


def write_demo(root: Path) -> dict[str, int]:
    """The demo dataset under `root`; returns what was written (files and questions)."""
    heights = _write_dem(root)
    museums, hotels = _places()
    _write_osm(root, museums, hotels)
    r1 = _r1_records(museums[:20], heights)
    _write_jsonl(root / "benchmark" / "qa2" / "raster_only" / "elevation+poi.jsonl", r1)
    v5 = _v5_records(museums, hotels)
    for number, record in enumerate(v5, start=1):
        path = root / "benchmark" / "vector" / "T5" / f"{number:03d}" / "question.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
    return {"tiles": len(CELLS), "pois": len(museums) + len(hotels), "R1": len(r1), "V5": len(v5)}


def _write_dem(root: Path) -> dict[tuple[int, int], np.ndarray]:
    folder = root / "dem" / "tiles"
    folder.mkdir(parents=True, exist_ok=True)
    heights, names = {}, []
    for seed, (lat, lon) in enumerate(CELLS):
        heights[(lat, lon)] = terrain(ASTER_SIZE, seed)
        names.append(write_aster_tile(folder, lat, lon, heights[(lat, lon)]).name)
    (root / "dem" / "tile_list.txt").write_text("".join(f"{name}\n" for name in names))
    return heights


def _places() -> tuple[list[dict], list[dict]]:
    """Museums on a 0.1-degree grid inside the tiles (on pixel centres), hotels near a random museum."""
    rng = random.Random(SEED)
    museums = []
    for lat, lon in CELLS:
        for i in range(1, 10):
            for j in range(1, 10):
                museums.append({"lon": round(lon + i / 10 + rng.randrange(-30, 30) * PIXEL, 6),
                                "lat": round(lat + j / 10 + rng.randrange(-30, 30) * PIXEL, 6)})
    rng.shuffle(museums)
    for number, museum in enumerate(museums, start=1):
        museum |= {"name": f"Demo Museum {number}", "osm_id": 9_000_000 + number}
    hotels = []
    for number in range(1, 101):
        near = rng.choice(museums)
        hotels.append({"lon": round(near["lon"] + rng.uniform(-0.005, 0.005), 6),
                       "lat": round(near["lat"] + rng.uniform(-0.004, 0.004), 6),
                       "name": f"Demo Hotel {number}", "osm_id": 8_000_000 + number})
    return museums, hotels


def _feature(geometry: dict, osm_id: int, tags: dict[str, str]) -> str:
    return json.dumps({"type": "Feature", "geometry": geometry, "properties": {"id": osm_id, "tagsMap": tags}})


def _write_layer(path: Path, features: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"type": "FeatureCollection", "features": [\n' + ",\n".join(features) + "\n]}\n")


def _square(lon: float, lat: float, size: float) -> dict:
    ring = [[lon, lat], [lon + size, lat], [lon + size, lat + size], [lon, lat + size], [lon, lat]]
    return {"type": "Polygon", "coordinates": [ring]}


def _write_osm(root: Path, museums: list[dict], hotels: list[dict]) -> None:
    layers = root / "osm" / "osm_extract"
    point = lambda place: {"type": "Point", "coordinates": [place["lon"], place["lat"]]}  # noqa: E731
    # Museums first: loader 1's tourism pass numbers them 1..n in this order (hotels follow).
    _write_layer(layers / "pois" / "part-00000.geojson",
                 [_feature(point(m), m["osm_id"], {"name": m["name"], "tourism": "museum"}) for m in museums]
                 + [_feature(point(h), h["osm_id"], {"name": h["name"], "tourism": "hotel"}) for h in hotels])
    roads = [_feature({"type": "LineString", "coordinates": [[-76 + k * 0.2, 39.5], [-75.9 + k * 0.2, 39.6]]},
                      7_000_000 + k, {"name": f"Demo Road {k}", "highway": "residential"}) for k in range(10)]
    _write_layer(layers / "roads" / "part-00000.geojson", roads)
    _write_layer(layers / "parks" / "part-00000.geojson", [
        _feature(_square(-75.8 + k * 0.3, 39.2, 0.02), 6_000_000 + k, {"name": f"Demo Park {k}", "leisure": "park"})
        for k in range(5)])
    _write_layer(layers / "lakes" / "part-00000.geojson", [
        _feature(_square(-75.7 + k * 0.3, 39.7, 0.01), 5_000_000 + k, {"name": f"Demo Lake {k}", "water": "lake"})
        for k in range(5)])
    _write_layer(layers / "postal_codes" / "part-00000.geojson", [
        _feature(_square(lon, lat, 1.0), 4_000_000 + k, {"name": f"Demo County {k}", "border_type": "county",
                                                          "admin_level": "6"}) for k, (lat, lon) in enumerate(CELLS)])


def _height_at(heights: dict[tuple[int, int], np.ndarray], lon: float, lat: float) -> float:
    """The pixel whose centre is the point (points lie on whole arc-seconds)."""
    cell = (math.floor(lat), math.floor(lon))
    col, row = round((lon - cell[1]) / PIXEL), round((cell[0] + 1 - lat) / PIXEL)
    return float(heights[cell][row, col])


def _point_sql(lon: float, lat: float) -> str:
    return f"ST_GeomFromText('POINT ({lon} {lat})',4326)"


def _r1_records(museums: list[dict], heights: dict[tuple[int, int], np.ndarray]) -> list[dict]:
    records = []
    for museum in museums:
        point = _point_sql(museum["lon"], museum["lat"])
        records.append({
            "question": f"What is the elevation at {museum['name']}?",
            "sql": f"SELECT ST_Value(rast, 1, {point}) AS elevation\nFROM public.dem_us\n"
                   f"WHERE ST_Intersects(rast, {point})\nLIMIT 1;",
            "answers": [{"elevation": _height_at(heights, museum["lon"], museum["lat"])}],
            "answer_type": "elevation - point based", "question_entities": {}})
    return records


def _haversine(a: dict, b: dict) -> float:
    phi1, phi2 = math.radians(a["lat"]), math.radians(b["lat"])
    h = (math.sin((phi2 - phi1) / 2) ** 2
         + math.cos(phi1) * math.cos(phi2) * math.sin(math.radians(b["lon"] - a["lon"]) / 2) ** 2)
    return 2 * 6_371_008.8 * math.asin(math.sqrt(h))


def _v5_records(museums: list[dict], hotels: list[dict]) -> list[dict]:
    records = []
    for number, hotel in enumerate(hotels):
        nearest = min(museums, key=lambda museum: _haversine(hotel, museum))
        records.append({
            "question": f"What's the closest museum nearby {hotel['name']}?",
            "sql": f"SELECT * FROM pois\nWHERE tourism = 'museum'\nORDER BY  geometry <-> "
                   f"{_point_sql(hotel['lon'], hotel['lat'])}::geography ASC\nLIMIT 1;\n",
            "answers": [{"id": museums.index(nearest) + 1, "geometry": f"POINT ({nearest['lon']} {nearest['lat']})",
                         "poi_name": nearest["name"], "osm_id": nearest["osm_id"], "tourism": "museum"}],
            "answer_type": "name", "question_entities": {}, "id": 200 + number, "type": "knn+name"})
    return records


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
