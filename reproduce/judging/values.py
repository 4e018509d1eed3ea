"""Values as the verdicts read them: numbers and geometries parsed from what a row holds, a component's column
looked up as the authors' evaluators look it up, what makes a row the same feature (identity, twins), and when two
values are equal for the strict row-level comparison."""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

import numpy
import shapely
from shapely.geometry.base import BaseGeometry

EARTH_RADIUS_M = 6_371_008.8
EXACT_REL_TOL = 1e-6
EXACT_GEOMETRY_TOL_DEG = 1e-6
NAME_KEYS = ("poi_name", "park_name", "lake_name", "road_name", "region_name", "name", "answer_name", "higher_poi")
IGNORED_KEYS = frozenset({"id"})  # serial ids depend on the load order (docs/REFERENCE-DB.md, Load rules)
WIKIPEDIA_KEYS = frozenset({"multihop_answer", "multihop_attribute", "multihop_long_answer", "multi_source_answer",
                            "multi_source_attribute", "multi_source_long_answer"})
_WKT = re.compile(r"^\s*(SRID=\d+;)?\s*(MULTI)?(POINT|LINESTRING|POLYGON)|^\s*GEOMETRYCOLLECTION", re.I)
_HEX_EWKB = re.compile(r"^(00|01)[0-9A-Fa-f]{16,}$")


def as_number(value: Any) -> float | None:
    """The value as a float; NULL, booleans, NaN, text that is no number and integers past a float's range:
    None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if math.isnan(number) else number


@lru_cache(maxsize=65536)
def _parse_geometry(text: str) -> BaseGeometry | None:
    # An answer's "POINT (1e999 1e999)" parses to infinities (point_of refuses them); numpy's warning about the
    # overflow would only be noise on the judge's or serve's stderr.
    try:
        with numpy.errstate(over="ignore", invalid="ignore"):
            if _HEX_EWKB.match(text):
                return shapely.from_wkb(text)
            return shapely.from_wkt(text.split(";", 1)[-1]) if _WKT.match(text) else None
    except shapely.errors.ShapelyError:
        return None


def as_geometry(value: Any) -> BaseGeometry | None:
    """A geometry from WKT (optionally SRID=...;) or hex EWKB text, else None."""
    return _parse_geometry(value.strip()) if isinstance(value, str) and value else None


def shown(value: Any) -> Any:
    """A value as a person reads it: hex EWKB (what a re-run returns for a geometry) as WKT, as the stored answers
    hold geometries; anything else as it is."""
    if isinstance(value, str) and _HEX_EWKB.match(value) and (geometry := as_geometry(value)) is not None:
        return geometry.wkt
    return value


def point_of(value: Any) -> tuple[float, float] | None:
    """(lon, lat) of a geometry value (its centroid unless a point), None if it is not one or has no such point
    (empty, or a coordinate that is not finite: an answer may say anything)."""
    geometry = as_geometry(value)
    if geometry is None or geometry.is_empty or not numpy.isfinite(shapely.get_coordinates(geometry)).all():
        return None
    try:
        point = _point(geometry)
    except shapely.errors.GEOSException:
        return None
    return point if all(map(math.isfinite, point)) else None


def _point(geometry: BaseGeometry) -> tuple[float, float]:
    point = geometry if geometry.geom_type == "Point" else geometry.centroid
    return point.x, point.y


def great_circle_m(first: tuple[float, float], second: tuple[float, float]) -> float:
    """Haversine distance in metres between two (lon, lat) points on the sphere of EARTH_RADIUS_M."""
    (lon1, lat1), (lon2, lat2) = first, second
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi, dlambda = phi2 - phi1, math.radians(lon2 - lon1)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlambda / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def lookup(row: dict[str, Any], keys: tuple[str, ...], single_fallback: bool) -> Any:
    """The evaluator's field lookup: an exact alias, then an alias inside a column name, then the only value."""
    for key in keys:
        if key in row:
            return row[key]
    for key in keys:
        for column, value in row.items():
            if key in column:
                return value
    values = [value for column, value in row.items() if column not in IGNORED_KEYS]
    return values[0] if single_fallback and len(values) == 1 else None


def identity(row: dict[str, Any]) -> tuple[str, Any] | None:
    """What makes a row the same feature across loads: osm_id, else its name (never the serial id)."""
    if row.get("osm_id") is not None:
        return ("osm_id", str(row["osm_id"]))
    name = next((row[key] for key in NAME_KEYS if row.get(key) is not None), None)
    if name is None:
        return None
    return ("name", name if isinstance(name, str | int | float) else json.dumps(name, sort_keys=True, default=str))


class Distinct(list):
    """Rows already without twins (one_row_per_feature's result): reducing them again costs nothing, so that a
    caller judging one answer by both verdicts reduces each side once."""


def one_row_per_feature(rows: list[dict[str, Any]]) -> Distinct:
    """The rows with each feature's twins left out, in their order (docs/BENCHMARK-FORMAT.md, Tolerances).

    Twins are rows of one feature: the same osm_id and every other value equal but the serial id (loader 1
    inserts a POI of two category lists twice), or the same row twice, serial id included (stored T11/T12
    answers). Rows that differ in another value, or carry neither key, are separate answers and all count.
    """
    if isinstance(rows, Distinct):
        return rows
    if not _may_have_twins(rows):
        return Distinct(rows)
    seen: set[Any] = set()
    kept = Distinct()
    for row in rows:
        key = _feature(row)
        if key is None or key not in seen:
            kept.append(row)
        if key is not None:
            seen.add(key)
    return kept


def _may_have_twins(rows: list[dict[str, Any]]) -> bool:
    """Whether two rows share an osm_id, or (without one) a serial id: twins need one or the other."""
    keys = [("osm_id", row["osm_id"]) if row.get("osm_id") is not None else ("id", row.get("id")) for row in rows]
    named = [key for key in keys if key[1] is not None]
    try:
        return len(set(named)) < len(named)
    except TypeError:  # an unhashable id: look closer
        return True


def _feature(row: dict[str, Any]) -> Any:
    if row.get("osm_id") is not None:
        items = [item for item in row.items() if item[0] not in IGNORED_KEYS]
    elif row.get("id") is not None:
        items = row.items()
    else:
        return None
    try:  # plain values (the answers' columns) are their own key; a nested one needs a text form
        return frozenset(items)
    except TypeError:
        return json.dumps(dict(items), sort_keys=True, default=str)


def comparable(row: dict[str, Any], template_id: str) -> dict[str, Any]:
    """A row without NULLs (a missing key means NULL), the serial id, and V7's Wikipedia-derived keys."""
    ignored = IGNORED_KEYS | WIKIPEDIA_KEYS if template_id == "V7" else IGNORED_KEYS
    return {key: value for key, value in row.items() if value is not None and key not in ignored}


def values_equal(a: Any, b: Any) -> bool:
    """Numbers within 1e-6 relative (integers exactly), geometries within 1e-6 degrees per vertex, anything else
    exactly."""
    if _is_int(a) and _is_int(b):  # counts and ids: 1e-6 relative of 10^6 would be one off
        return a == b
    x, y = as_number(a), as_number(b)
    if x is not None and y is not None and not (isinstance(a, str) and isinstance(b, str)):
        return math.isclose(x, y, rel_tol=EXACT_REL_TOL, abs_tol=1e-9)
    ga, gb = as_geometry(a), as_geometry(b)
    if ga is not None and gb is not None:
        return ga.equals_exact(gb, EXACT_GEOMETRY_TOL_DEG)
    return a == b or str(a) == str(b)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

