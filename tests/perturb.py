"""Test oracle: the metric of every template as docs/BENCHMARK-FORMAT.md, Tolerances states it, written out again
independently of reproduce/compare.py, and answers moved just inside / just beyond each tolerance.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import shapely

NAME_KEYS = ("poi_name", "park_name", "lake_name", "road_name", "name", "answer_name", "higher_poi")

# template -> [(answer key, metric)]; "names" = set-valued names joined into one bag.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    **{f"V{k}": [("*name", "names")] for k in range(1, 13)},
    **{f"V{k}": [("geometry", "location")] for k in range(13, 21)},
    "V21": [("angle", "angle")], "V22": [("angle", "angle")],
    "V23": [("count", "relative")], "V24": [("count", "relative")],
    "V25": [("distance", "relative")], "V26": [("distance", "relative")],
    "V27": [("area", "relative")], "V28": [("length", "relative")],
    "R1": [("elevation", "elevation")], "R2": [("higher_poi", "name")], "R3": [("elevation_difference_m", "elevation")],
    "R4": [("answer", "yesno")], "R5": [("slope_degrees", "slope")], "R6": [("aspect_degrees", "aspect")],
    "R7": [("tri_value", "relative")], "R8": [("distance_m", "relative")], "R9": [("distance_m", "relative")],
    "R10": [("slope_degrees", "slope")], "R11": [("answer_name", "name")],
    "VR1": [("*name", "names")], "VR2": [("geometry", "location")], "VR3": [("count", "relative")],
    "VR5": [("road_name", "name"), ("dist_m", "relative"), ("slope_deg", "slope")],
}
# Tolerances of docs/BENCHMARK-FORMAT.md: (just inside, just beyond).
STEPS = {"elevation": (9.9, 10.1), "slope": (4.9, 5.1), "angle": (4.9, 5.1), "aspect": (4.9, 5.1),
         "relative": (0.049, 0.051), "location": (4.9, 5.1)}


def _tokens(text: Any) -> int:
    return len(re.findall(r"[a-z0-9]+", str(text or "").lower()))


def _key_of(row: dict[str, Any], key: str) -> str | None:
    if key == "*name":
        return next((k for k in NAME_KEYS if k in row), None)
    return key if key in row else None


def _move_north(geometry: str, metres: float) -> str:
    """WKT of the point (given as WKT or hex EWKB) moved `metres` north along its meridian."""
    point = shapely.from_wkb(geometry) if re.fullmatch(r"[0-9A-Fa-f]+", geometry) else shapely.from_wkt(geometry)
    return f"POINT ({point.x} {point.y + math.degrees(metres / 6_371_008.8)})"


def _shift(value: Any, metric: str, step: float) -> Any:
    if metric == "relative":
        return value * (1 + step) if value else (0 if step < 0.05 else 1)
    if metric == "location":
        return _move_north(value, step)
    if metric == "aspect" and value < 0:
        return value if step < 5 else 10.0  # flat stays flat; flat -> 10 degrees is a failure
    return value + step


def perturbed(rows: list[dict[str, Any]], key: str, metric: str, inside: bool) -> list[dict[str, Any]]:
    """A copy of the rows whose (key, metric) component is just inside or just beyond its tolerance."""
    rows = copy.deepcopy(rows)
    if metric in ("name", "names"):
        present = [row for row in rows if _key_of(row, key)]
        features = {row.get("osm_id", index): row for index, row in enumerate(present)}  # twins count once
        total = sum(_tokens(row[_key_of(row, key)]) for row in features.values())
        extra = total // 2 + (0 if inside else 1)  # F1 = 2n / (2n + k) >= 0.8  <=>  k <= n / 2
        first = present[0]
        for row in present:  # the first feature renamed in every row of it, so that its twins stay twins
            if row is first or ("osm_id" in first and row.get("osm_id") == first["osm_id"]):
                row[_key_of(row, key)] = f"{row[_key_of(row, key)]} " + " ".join(["qqq"] * extra)
        return rows
    if metric == "yesno":
        for row in rows:
            row[key] = f"  {row[key].upper()} " if inside else ("no" if row[key] == "yes" else "yes")
        return rows
    step = STEPS[metric][0 if inside else 1]
    for row in rows:
        if row.get(key) is not None:
            row[key] = _shift(row[key], metric, step)
    return rows
