"""Synthetic osmx-style GeoJSON layers, for the `ingest osm` benchmark and tests that need volume.

The layout is the one the published source (`Zoe/GS-QA2-source`, osm/osm_extract/<layer>/*.geojson) has by
its card: one FeatureCollection per file, each feature with `geometry` and `properties` {`id`, `tagsMap`}.
Shapes follow what the benchmark answers show (docs/REFERENCE-DB.md, Tables): named and unnamed POI points
with many tags (about one in six passes loader 1's category filter), long road LineStrings (some closed
ways as Polygons), parks and lakes as (Multi)Polygons with holes plus park points and waterway lines,
postal-code polygons with many vertices. Coordinates are OSM's 7-decimal fixed point converted to double
and printed shortest-round-trip, as a JVM extractor prints them (so some carry 16-17 significant digits).
Files are written one feature per line (`--layout lines`, the fast path) or pretty-printed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path

LAYER_FOLDERS = ("pois", "roads", "parks", "lakes", "postal_codes")
# Share of the total bytes per layer folder, about the proportions of the published extract.
LAYER_SHARE = {"roads": 0.50, "pois": 0.18, "lakes": 0.14, "parks": 0.11, "postal_codes": 0.07}

TOURISM = ["museum", "hotel", "attraction", "viewpoint", "gallery", "zoo", "camp_site", "information", "Museum"]
AMENITY = ["restaurant", "cafe", "fast_food", "hospital", "university", "bench", "parking", "school", "bank"]
LEISURE = ["park", "garden", "golf_course", "stadium", "pitch", "playground", "nature_reserve", "marina"]
HIGHWAY = ["residential", "service", "footway", "primary", "secondary", "track", "motorway", "cycleway"]
STREETS = ["Main Street", "Oak Avenue", "Elm Road", "Washington Boulevard", "Lake Drive", "Park Lane"]


def coordinate(value: float) -> float:
    """A coordinate as OSM stores it (1e-7 degree units), back in double as an extractor computes it."""
    return round(value * 1e7) * 1e-7


class Shapes:
    """Random geometries around US places, seeded; `detail` scales the number of vertices of every line and
    ring (1.0: as drawn)."""

    def __init__(self, seed: int, detail: float = 1.0) -> None:
        self.random, self.detail = random.Random(seed), detail

    def vertices(self, drawn: int, least: int) -> int:
        return drawn if self.detail == 1.0 else max(least, round(drawn * self.detail))

    def point(self) -> list[float]:
        return [coordinate(self.random.uniform(-124, -67)), coordinate(self.random.uniform(25, 49))]

    def path(self, points: int, step: float = 0.0004) -> list[list[float]]:
        x, y = self.point()
        out = []
        for _ in range(self.vertices(points, 2)):
            x, y = x + self.random.uniform(-step, step), y + self.random.uniform(-step, step)
            out.append([coordinate(x), coordinate(y)])
        return out

    def ring(self, centre: list[float], radius: float, points: int) -> list[list[float]]:
        ring, points = [], self.vertices(points, 3)
        for k in range(points):
            angle = 2 * math.pi * k / points
            r = radius * self.random.uniform(0.8, 1.2)
            ring.append([coordinate(centre[0] + r * math.cos(angle)), coordinate(centre[1] + r * math.sin(angle))])
        return ring + [ring[0]]

    def polygon(self, radius: float, points: int, holes: int = 0) -> list[list[list[float]]]:
        centre = self.point()
        rings = [self.ring(centre, radius, points)]
        for _ in range(holes):
            hole = [centre[0] + self.random.uniform(-radius, radius) / 3,
                    centre[1] + self.random.uniform(-radius, radius) / 3]
            rings.append(self.ring(hole, radius / 8, max(4, points // 4))[::-1])
        return rings


def tags(shapes: Shapes, base: dict[str, str], extra: int) -> dict[str, str]:
    out = dict(base)
    for k in range(extra):
        out[f"tiger:field_{k}" if k % 3 else f"source:{k}"] = f"value {shapes.random.randint(0, 10**6)}"
    if shapes.random.random() < 0.3:
        out.update({"addr:city": "Springfield", "addr:state": "IL", "addr:postcode": "62701",
                    "addr:street": shapes.random.choice(STREETS),
                    "addr:housenumber": str(shapes.random.randint(1, 999))})
    return out


def poi(shapes: Shapes, n: int) -> dict:
    key = shapes.random.choice(["tourism", "amenity", "leisure", "shop"])
    value = {"tourism": TOURISM, "amenity": AMENITY, "leisure": LEISURE, "shop": ["bakery"]}[key]
    base = {key: shapes.random.choice(value)}
    if shapes.random.random() < 0.5:
        base["name"] = f"Place {n}"
    if shapes.random.random() < 0.05:  # matches two category lists: loader 1 inserts it twice
        base["amenity"] = "cafe"
    geometry = {"type": "Point", "coordinates": shapes.point()}
    return feature(geometry, n, tags(shapes, base, shapes.random.randint(2, 12)))


def road(shapes: Shapes, n: int) -> dict:
    base = {"highway": shapes.random.choice(HIGHWAY), "oneway": "yes", "lanes": "2"}
    if shapes.random.random() < 0.6:
        base["name"] = shapes.random.choice(STREETS)
    if shapes.random.random() < 0.05:  # a closed way: osmx emits it as a Polygon
        geometry = {"type": "Polygon", "coordinates": [shapes.ring(shapes.point(), 0.001, 12)]}
    else:
        geometry = {"type": "LineString", "coordinates": shapes.path(shapes.random.randint(4, 120))}
    return feature(geometry, n, tags(shapes, base, shapes.random.randint(3, 10)))


def area(shapes: Shapes, n: int, base: dict[str, str], point_share: float, line_share: float) -> dict:
    roll = shapes.random.random()
    if roll < point_share:
        geometry = {"type": "Point", "coordinates": shapes.point()}
    elif roll < point_share + line_share:
        geometry = {"type": "LineString", "coordinates": shapes.path(shapes.random.randint(10, 200))}
    elif roll < 0.85:
        geometry = {"type": "Polygon", "coordinates": shapes.polygon(0.01, shapes.random.randint(8, 150),
                                                                     holes=shapes.random.randint(0, 2))}
    else:
        geometry = {"type": "MultiPolygon", "coordinates": [shapes.polygon(0.005, shapes.random.randint(8, 80),
                                                                           holes=1) for _ in range(3)]}
    return feature(geometry, n, tags(shapes, base, shapes.random.randint(2, 8)))


def park(shapes: Shapes, n: int) -> dict:
    base = {"leisure": shapes.random.choice(LEISURE), "name": f"Park {n}"}
    return area(shapes, n, base, point_share=0.1, line_share=0.0)


def lake(shapes: Shapes, n: int) -> dict:
    base = {"natural": "water", "water": shapes.random.choice(["lake", "reservoir", "pond"]), "name": f"Lake {n}"}
    if shapes.random.random() < 0.3:
        base = {"waterway": shapes.random.choice(["river", "stream", "canal"]), "name": f"Creek {n}"}
        return area(shapes, n, base, point_share=0.0, line_share=1.0)
    return area(shapes, n, base, point_share=0.0, line_share=0.0)


def postal_code(shapes: Shapes, n: int) -> dict:
    base = {"boundary": "administrative", "admin_level": "8", "border_type": "city", "name": f"Town {n}",
            "postal_code": f"{10000 + n % 89999}"}
    geometry = {"type": "Polygon", "coordinates": shapes.polygon(0.05, shapes.random.randint(200, 2000))}
    return feature(geometry, n, tags(shapes, base, 4))


MAKERS = {"pois": poi, "roads": road, "parks": park, "lakes": lake, "postal_codes": postal_code}


def feature(geometry: dict, n: int, tag_map: dict[str, str]) -> dict:
    return {"type": "Feature", "geometry": geometry, "properties": {"id": 100_000 + n, "tagsMap": tag_map}}


def features(layer: str, seed: int, detail: float = 1.0) -> Iterator[dict]:
    shapes, n = Shapes(seed, detail), 0
    while True:
        n += 1
        yield MAKERS[layer](shapes, n)


def write_file(path: Path, items: Iterator[dict], target_bytes: int, layout: str) -> int:
    """Write features until the file reaches `target_bytes`; returns the number of features."""
    count, written = 0, 0
    with open(path, "w", encoding="utf-8") as out:
        if layout == "lines":
            out.write('{"type":"FeatureCollection","features":[\n')
            for item in items:
                text = json.dumps(item, separators=(",", ":"))
                out.write(("," if count else "") + text + "\n")  # osmx-like: one feature per line
                count, written = count + 1, written + len(text) + 2
                if written >= target_bytes:
                    break
            out.write("]}\n")
        else:
            collected = []
            for item in items:
                collected.append(item)
                written += len(json.dumps(item))
                if written >= target_bytes:
                    break
            json.dump({"type": "FeatureCollection", "features": collected}, out, indent=2)
            count = len(collected)
    return count


def write_layers(folder: Path, total_mb: float, files_per_layer: int = 4, layout: str = "lines",
                 seed: int = 7) -> dict[str, int]:
    """The five layer folders under `folder`, about `total_mb` MB in all; returns features per layer."""
    counts = {}
    for number, layer in enumerate(LAYER_FOLDERS):
        (folder / layer).mkdir(parents=True, exist_ok=True)
        items = features(layer, seed + number)
        per_file = int(total_mb * 1e6 * LAYER_SHARE[layer] / files_per_layer)
        counts[layer] = sum(write_file(folder / layer / f"part-{k:05d}.geojson", items, per_file, layout)
                            for k in range(files_per_layer))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--total-mb", type=float, default=1000)
    parser.add_argument("--files-per-layer", type=int, default=4)
    parser.add_argument("--layout", choices=["lines", "pretty"], default="lines")
    args = parser.parse_args()
    print(write_layers(args.folder, args.total_mb, args.files_per_layer, args.layout))


if __name__ == "__main__":
    main()
