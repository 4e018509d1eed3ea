"""Verdicts: is the result of a benchmark SQL the stored answer, under the paper's tolerances?

The tolerances are declared once, in COMPONENTS: template id -> answer components (keys, metric), each
metric a small function with its threshold (docs/BENCHMARK-FORMAT.md, Tolerances). Beside the verdict, `exact_diff`
is the strict row-level comparison: multisets of rows keyed on osm_id or name, numbers within 1e-6
relative, geometries within 1e-6 degrees, the serial id and V7's Wikipedia keys ignored.

Judging (the verdict and the strict diff) costs 2.67 ms per question on average over the 3,085 records of a full
copy of the benchmark, each against its own stored answer (`bench/reproduce_bench.py --data DIR`): the multi-row
vector answers decide (mean per question: V4 31 ms, V16 25 ms, V25 16 ms). The largest answers take the longest:
vector/range+distance/21, 6,885 rows, 0.22 s (verdict 0.07 s, strict diff 0.15 s); vector/range+angle/31 (V21,
6,208 rows) 0.17 s; every other record less.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import shapely
from shapely.geometry.base import BaseGeometry

from gsqa_core import dem_grid

EARTH_RADIUS_M = 6_371_008.8
EXACT_REL_TOL = 1e-6
EXACT_GEOMETRY_TOL_DEG = 1e-6
NAME_KEYS = ("poi_name", "park_name", "lake_name", "road_name", "region_name", "name", "answer_name", "higher_poi")
IGNORED_KEYS = frozenset({"id"})  # serial ids depend on the load order (docs/REFERENCE-DB.md, Load rules)
WIKIPEDIA_KEYS = frozenset({"multihop_answer", "multihop_attribute", "multihop_long_answer", "multi_source_answer",
                            "multi_source_attribute", "multi_source_long_answer"})
_WKT = re.compile(r"^\s*(SRID=\d+;)?\s*(MULTI)?(POINT|LINESTRING|POLYGON)|^\s*GEOMETRYCOLLECTION", re.I)
_HEX_EWKB = re.compile(r"^(00|01)[0-9A-Fa-f]{16,}$")
_TOKEN = re.compile(r"[a-z0-9]+")


# --- metrics --------------------------------------------------------------------------------------------


def tokens(value: Any) -> Counter:
    """The [a-z0-9]+ tokens of the lowercased text, as a multiset (shared between calls: never change it)."""
    return _tokens_of(str(value or ""))


@lru_cache(maxsize=65536)
def _tokens_of(text: str) -> Counter:
    return Counter(_TOKEN.findall(text.lower()))


def token_f1(actual: Any, gold: Any) -> float:
    """Token F1 over [a-z0-9]+ multisets of the lowercased texts; an empty side scores 0."""
    pred, ref = tokens(actual), tokens(gold)
    common = sum((pred & ref).values())
    if not pred or not ref or not common:
        return 0.0
    return 2 * common / (sum(pred.values()) + sum(ref.values()))  # = 2PR/(P+R), with one rounding step


def haversine_m(actual: Any, gold: Any) -> float:
    """Great-circle distance in metres between two geometries (WKT or hex EWKB); centroids for non-points."""
    a, b = as_geometry(actual), as_geometry(gold)
    if a is None or b is None or a.is_empty or b.is_empty:
        return math.inf
    return great_circle_m(_point(a), _point(b))


def great_circle_m(first: tuple[float, float], second: tuple[float, float]) -> float:
    """Haversine distance in metres between two (lon, lat) points on the sphere of EARTH_RADIUS_M."""
    (lon1, lat1), (lon2, lat2) = first, second
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi, dlambda = phi2 - phi1, math.radians(lon2 - lon1)
    h = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlambda / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(h)))


def angle_error(actual: Any, gold: Any) -> float:
    """Circular difference in degrees: min(e, 360 - e) with e = |p - g| mod 360."""
    p, g = as_number(actual), as_number(gold)
    if p is None or g is None:
        return math.inf
    e = abs(p - g) % 360
    return min(e, 360 - e)


def aspect_error(actual: Any, gold: Any) -> float:
    """As angle_error, but a negative aspect means flat: both flat is 0, one flat is a failure."""
    p, g = as_number(actual), as_number(gold)
    if p is None or g is None:
        return math.inf
    if p < 0 or g < 0:
        return 0.0 if p < 0 and g < 0 else math.inf
    return angle_error(p, g)


def absolute_error(actual: Any, gold: Any) -> float:
    p, g = as_number(actual), as_number(gold)
    return math.inf if p is None or g is None else abs(p - g)


def relative_error(actual: Any, gold: Any) -> float:
    """|p - g| / |g|; with gold 0 only 0 passes."""
    p, g = as_number(actual), as_number(gold)
    if p is None or g is None:
        return math.inf
    if g == 0:
        return 0.0 if p == 0 else math.inf
    return abs(p - g) / abs(g)


def yes_no_error(actual: Any, gold: Any) -> float:
    """0 when equal after lowercasing and collapsing whitespace, else 1."""
    if actual is None or gold is None:  # NULL is no answer, not the empty string
        return math.inf
    def normal(value: Any) -> str:
        return " ".join(str(value).lower().split())
    return 0.0 if normal(actual) == normal(gold) else 1.0


@dataclass(frozen=True)
class Metric:
    name: str
    threshold: float
    measure: Callable[[Any, Any], float]
    higher_is_better: bool = False  # token F1 is a score, everything else an error
    single_value_fallback: bool = True  # a row of one value answers for the key (names: never)
    expects: str = ""  # what an answer's value is, as a model is told (reproduce serve's question tool)

    def passes(self, value: float) -> bool:
        return value >= self.threshold if self.higher_is_better else value <= self.threshold

    def badness(self, value: float) -> float:
        """How far from perfect, in units of the tolerance: ranks pairings of rows."""
        if self.higher_is_better:
            return (1 - value) / (1 - self.threshold)
        return value / self.threshold if self.threshold else (0.0 if value == 0 else math.inf)


NAME = Metric("token F1", 0.8, token_f1, higher_is_better=True, single_value_fallback=False, expects="a name (text)")
LOCATION = Metric("location (m)", 5.0, haversine_m,
                  expects='a geometry as WKT in longitude/latitude (SRID 4326), e.g. "POINT(-122.42 37.77)"')
ANGLE = Metric("angle (deg)", 5.0, angle_error, expects="degrees")
ASPECT = Metric("aspect (deg)", 5.0, aspect_error, expects="degrees clockwise from north; negative for flat ground")
ELEVATION = Metric("elevation (m)", 10.0, absolute_error, expects="metres")
SLOPE = Metric("slope (deg)", 5.0, absolute_error, expects="degrees")
RELATIVE = Metric("relative error", 0.05, relative_error, expects="a number, in the unit the question names")
COVERAGE = Metric("coverage (points)", 5.0, absolute_error, expects="percent")
YES_NO = Metric("yes/no", 0.0, yes_no_error, expects='"yes" or "no"')


def tolerances_text() -> str:
    """The tolerances as the manuals state them: "token F1 >= 0.8, 5 m, 5 deg, 10 m elevation, ..."."""
    return (f"token F1 >= {NAME.threshold:g}, {LOCATION.threshold:g} m, {ANGLE.threshold:g} deg, "
            f"{ELEVATION.threshold:g} m elevation, {SLOPE.threshold:g} deg slope, {RELATIVE.threshold:g} relative")


@dataclass(frozen=True)
class Component:
    keys: tuple[str, ...]  # aliases looked up in a row: exact, then as part of a column name
    metric: Metric
    joined: bool = False  # set-valued names: every row's name joined into one bag, then one token F1

    @property
    def label(self) -> str:
        """What reports call the component: its first column name, "name" for any of the name columns."""
        return "name" if self.keys in (NAME_KEYS, RASTER_NAME_KEYS) else self.keys[0]


def _c(key: str | tuple[str, ...], metric: Metric, joined: bool = False) -> Component:
    return Component((key,) if isinstance(key, str) else key, metric, joined)


NAMES = _c(NAME_KEYS, NAME, joined=True)
# The raster evaluator's name columns, in its order (evaluate_raster.py @5407251, NAME_FIELDS).
RASTER_NAME_KEYS = ("answer", "answer_name", "higher_poi", "steeper_poi", "name", "poi_name", "road_name",
                    "park_name", "lake_name", "region_name")
RASTER_NAMES = _c(RASTER_NAME_KEYS, NAME, joined=True)
# Each component's keys are every column name the authors' evaluator accepts for it, in its order (the raster
# templates: evaluate_raster.py @5407251, COMPONENT_SPECS); docs/BENCHMARK-FORMAT.md's table is rendered from
# here (components_markdown).
COMPONENTS: dict[str, tuple[Component, ...]] = {
    # Vector (V1-V28 = T1-T28). Several stored rows of a name answer are one bag of names.
    **{f"V{k}": (NAMES,) for k in range(1, 13)},
    **{f"V{k}": (_c("geometry", LOCATION),) for k in range(13, 21)},
    "V21": (_c("angle", ANGLE),), "V22": (_c("angle", ANGLE),),
    "V23": (_c("count", RELATIVE),), "V24": (_c("count", RELATIVE),),
    "V25": (_c("distance", RELATIVE),), "V26": (_c("distance", RELATIVE),),
    "V27": (_c("area", RELATIVE),), "V28": (_c("length", RELATIVE),),
    # raster_only
    "R1": (_c(("elevation", "elevation_m"), ELEVATION),),
    "R2": (_c(("higher_poi", "higher_location", "higher_place", "answer_name", "name"), NAME),),
    "R3": (_c(("elevation_difference_m", "elevation_difference", "difference"), ELEVATION),),
    "R4": (_c("answer", YES_NO),),
    "R5": (_c(("slope_degrees", "slope"), SLOPE),), "R6": (_c(("aspect_degrees", "aspect"), ASPECT),),
    "R7": (_c(("tri_value", "ruggedness", "ruggedness_index"), RELATIVE),),
    "R8": (_c(("distance_m", "distance"), RELATIVE),), "R9": (_c(("distance_m", "distance"), RELATIVE),),
    "R10": (_c(("slope_degrees", "avg_slope", "slope"), SLOPE),),
    "R11": (_c(("answer_name", "answer", "name"), NAME),),
    # extended
    "VR1": (RASTER_NAMES,), "VR2": (_c("geometry", LOCATION),), "VR3": (_c("count", RELATIVE),),
    "VR4": (_c(("distance", "distance_m", "dist_m"), RELATIVE), _c(("elevation", "elevation_m"), ELEVATION)),
    "VR5": (_c(RASTER_NAME_KEYS, NAME), _c(("dist_m", "distance_m", "distance"), RELATIVE),
            _c(("slope_deg", "slope_degrees", "slope"), SLOPE)),
    "VR6": (_c(RASTER_NAME_KEYS, NAME), _c(("slope_degrees", "slope_deg", "slope"), SLOPE)),
    "VR7": (_c(RASTER_NAME_KEYS, NAME), _c(("max_elevation", "max_elev", "elevation"), ELEVATION)),
    "VR8": (_c(("area", "computed_area"), RELATIVE), _c(("avg_slope", "slope"), SLOPE)),
    # raster_vector
    "VR9": (RASTER_NAMES,), "VR10": (RASTER_NAMES,), "VR11": (RASTER_NAMES,),
    "VR12": (_c(("answer_name", "answer", "name"), NAME),), "VR13": (RASTER_NAMES,), "VR14": (RASTER_NAMES,),
    # Exploratory templates: not in the paper's tables; scored as the raster evaluator scores them.
    "elevation_max+region": (_c(("max_elevation", "elevation", "max"), ELEVATION),),
    "elevation_min+region": (_c(("min_elevation", "elevation", "min"), ELEVATION),),
    "elevation_mean+region": (_c(("mean_elevation", "mean", "elevation"), ELEVATION),),
    "elevation_range+region": (_c(("elevation_range", "range", "elevation"), ELEVATION),),
    "elevation+coverage": (_c(("coverage_percent", "coverage", "percent", "percentage"), COVERAGE),),
    "avg_slope+area": (_c(("slope_degrees", "avg_slope", "slope"), SLOPE),),
    "min_slope+area": (_c(("min_slope", "slope_degrees", "slope"), SLOPE),),
    "max_slope+area": (_c(("max_slope", "slope_degrees", "slope"), SLOPE),),
    "elevation_count_threshold+count": (_c("count", RELATIVE),),
}


def components_markdown() -> str:
    """The COMPONENTS table as docs/BENCHMARK-FORMAT.md prints it (a test holds the two equal): templates with
    the same components on one line, each component with every column name accepted, in lookup order."""
    lines = ["| templates | components (all must pass): the column names accepted, in the order looked up; the "
             "metric |", "|---|---|"]
    grouped: dict[tuple[Component, ...], list[str]] = defaultdict(list)
    for template_id, components in COMPONENTS.items():
        grouped[components].append(template_id)
    for components, template_ids in grouped.items():
        described = "; ".join(
            ("set of names: " if c.joined else "") + ", ".join(f"`{key}`" for key in c.keys)
            + ("" if c.joined else f": {c.metric.name}") for c in components)
        lines.append(f"| {_ranges(template_ids)} | {described} |")
    return "\n".join(lines)


def _ranges(template_ids: list[str]) -> str:
    """V1, V2, ..., V12, VR9 as "V1-V12, VR9"."""
    runs: list[list[str]] = []
    for template_id in template_ids:
        prefix, number = re.match(r"([A-Z]*)(\d*)", template_id).groups()
        last = runs[-1][-1] if runs else ""
        last_prefix, last_number = re.match(r"([A-Z]*)(\d*)", last).groups()
        if number and last_number and prefix == last_prefix and int(number) == int(last_number) + 1:
            runs[-1].append(template_id)
        else:
            runs.append([template_id])
    return ", ".join(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


# Known reasons a stored answer may not come back, by template (docs/BENCHMARK-FORMAT.md, the last section).
TEMPLATE_CAVEATS = {
    "V12": "stale stored answer possible: generation ran an extra name/wikipedia predicate (T12); the stored "
           "answer may hold the same row twice (counted once)",
    "V28": "stale stored answer possible: generation ran an extra name/wikipedia predicate (T28)",
    "V23": "count includes duplicate POI rows", "V24": "count includes duplicate POI rows",
    "VR3": "count includes duplicate POI rows",
    "R11": "equal slopes: a1 >= a2 names the first route",
    "VR5": "nearest road ranked in degrees; sensitive to roads coverage",
    "VR11": "ties at the N-th elevation swap set members", "VR14": "ties at the N-th slope swap set members",
    "V11": "the stored answer may hold the same row twice; the verdict counts it once",
}


# --- values ---------------------------------------------------------------------------------------------


def as_number(value: Any) -> float | None:
    """The value as a float; NULL, booleans, NaN and text that is no number: None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


@lru_cache(maxsize=65536)
def _parse_geometry(text: str) -> BaseGeometry | None:
    try:
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
    """(lon, lat) of a geometry value (its centroid unless a point), None if it is not one."""
    geometry = as_geometry(value)
    return None if geometry is None or geometry.is_empty else _point(geometry)


def _point(geometry: BaseGeometry) -> tuple[float, float]:
    point = geometry if geometry.geom_type == "Point" else geometry.centroid
    return point.x, point.y


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


# --- verdict --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One component on one pairing: the stored value, the value returned, and how far apart they are."""

    component: str
    metric: str
    threshold: float
    expected: Any
    actual: Any
    value: float
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        value = None if math.isinf(self.value) else self.value
        return {"component": self.component, "metric": self.metric, "threshold": self.threshold,
                "expected": self.expected, "actual": self.actual, "value": value, "passed": self.passed}


@dataclass
class Verdict:
    status: str  # pass, mismatch or empty
    checks: list[Check] = field(default_factory=list)  # one per component (multi-row: the worst pair)

    @property
    def first_failure(self) -> Check | None:
        return next((check for check in self.checks if not check.passed), None)


def components_of(template_id: str) -> tuple[Component, ...]:
    try:
        return COMPONENTS[template_id]
    except KeyError:
        raise ValueError(f"no tolerance declared for template {template_id!r}") from None


def judge(template_id: str, gold: list[dict[str, Any]], actual: list[dict[str, Any]]) -> Verdict:
    """The verdict of the paper's metric for one question; every component must pass."""
    components = components_of(template_id)
    if not actual:
        return Verdict("pass" if not gold else "empty")
    if not gold:
        return Verdict("mismatch", [_row_count_check(gold, actual)])
    gold, actual = one_row_per_feature(gold), one_row_per_feature(actual)
    checks = [joined_check(c, gold, actual) for c in components if c.joined]
    per_row = [c for c in components if not c.joined]
    if per_row:
        checks += _best_single(per_row, gold[0], actual) if len(gold) == 1 else _paired(per_row, gold, actual)
    return Verdict("pass" if all(check.passed for check in checks) else "mismatch", checks)


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


def check_component(component: Component, gold_row: dict[str, Any], actual_row: dict[str, Any]) -> Check:
    expected, got, value = _measured(component, gold_row, actual_row)
    return Check(component.label, component.metric.name, component.metric.threshold, expected, got, value,
                 component.metric.passes(value))


def rank_of(component: Component, gold_row: dict[str, Any], actual_row: dict[str, Any]) -> tuple[bool, float]:
    """How good a pairing is for one component, as `badness` ranks it (failed first, then the error), without
    making its Check: the search for the best pair asks this of many pairs."""
    value = _measured(component, gold_row, actual_row)[2]
    return not component.metric.passes(value), component.metric.badness(value)


def _measured(component: Component, gold_row: dict[str, Any], actual_row: dict[str, Any]) -> tuple[Any, Any, float]:
    single = component.metric.single_value_fallback
    expected = lookup(gold_row, component.keys, single)
    got = lookup(actual_row, component.keys, single)
    return expected, got, component.metric.measure(got, expected)


def joined_check(component: Component, gold: list[dict[str, Any]], actual: list[dict[str, Any]]) -> Check:
    """Set-valued names: every row's name joined into one text on each side, then one measure."""
    def bag(rows: Iterable[dict[str, Any]]) -> str:
        names = (lookup(row, component.keys, False) for row in rows)
        return "\n".join(str(name) for name in names if name is not None)
    expected, got = bag(gold), bag(actual)
    value = component.metric.measure(got, expected)
    return Check("names", component.metric.name, component.metric.threshold, _shorten(expected), _shorten(got),
                 value, component.metric.passes(value))


def _shorten(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({text.count(chr(10)) + 1} names)"


def badness(checks: list[Check], components: list[Component]) -> tuple[int, float]:
    failed = sum(not check.passed for check in checks)
    return failed, sum(c.metric.badness(check.value) for c, check in zip(components, checks, strict=True))


def _best_single(components: list[Component], gold_row: dict[str, Any], actual: list[dict[str, Any]]) -> list[Check]:
    """One stored row: the returned row that passes most components (ties: the smallest summed error).

    Extra returned rows fail the row count: re-running the gold SQL must not give more answers than stored.
    """
    candidates = [[check_component(c, gold_row, row) for c in components] for row in actual]
    best = min(candidates, key=lambda checks: badness(checks, components))
    return best if len(actual) == 1 else [_row_count_check([gold_row], actual), *best]


def _paired(components: list[Component], gold: list[dict[str, Any]], actual: list[dict[str, Any]]) -> list[Check]:
    """Several stored rows: pair rows by identity, then report each component's worst pair."""
    pairs, unpaired = _pair_by_identity(gold, actual, components)
    checks = []
    for c in components:
        results = [check_component(c, g, a) for g, a in pairs]
        if results:
            checks.append(min(results, key=lambda check: (check.passed, -c.metric.badness(check.value))))
    if unpaired or len(gold) != len(actual):
        checks.insert(0, _row_count_check(gold, actual))
    return checks


def _row_count_check(gold: list[dict[str, Any]], actual: list[dict[str, Any]]) -> Check:
    return Check("rows", "row count", 0.0, len(gold), len(actual), math.inf, False)


def _pair_by_identity(gold: list[dict[str, Any]], actual: list[dict[str, Any]], components: list[Component]):
    """Rows with the same identity are paired, duplicates in the order of their component values; for a
    location, the rows of either side left over (a returned row that carries only a location, or another
    identity) are then paired by nearest location. Also how many rows stayed unpaired."""
    def sort_key(row: dict[str, Any]) -> str:
        return repr([lookup(row, c.keys, False) for c in components])
    located = next((c for c in components if c.metric is LOCATION), None)
    groups: dict[Any, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in gold:
        groups[identity(row)][0].append(row)
    for row in actual:
        groups[identity(row)][1].append(row)
    gold_left, actual_left = groups.pop(None, ([], [])) if located else ([], [])
    pairs = []
    for gold_rows, actual_rows in groups.values():
        gold_rows.sort(key=sort_key)
        actual_rows.sort(key=sort_key)
        pairs += list(zip(gold_rows, actual_rows, strict=False))
        gold_left += gold_rows[len(actual_rows):]
        actual_left += actual_rows[len(gold_rows):]
    nearest = _pair_by_location(located, gold_left, actual_left) if located else []
    return pairs + nearest, len(gold_left) + len(actual_left) - 2 * len(nearest)


PAIRED_BEYOND_TOLERANCE_UP_TO = 250_000  # (stored x returned rows left): past it, only pairs within the tolerance


def _pair_by_location(component: Component, gold: list[dict[str, Any]], actual: list[dict[str, Any]]
                      ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Returned rows with stored rows by location, nearest pairs first, each row once: those within the
    tolerance (found through an index), then, for answers of a size to afford it, the rest (so that a row too
    far away is judged, and named, by its distance)."""
    gold_points = [point_of(lookup(row, component.keys, True)) for row in gold]
    actual_points = [point_of(lookup(row, component.keys, True)) for row in actual]
    within = [(great_circle_m(gold_points[i], actual_points[j]), i, j)
              for i, j in _near(gold_points, actual_points, component.metric.threshold)]
    used_gold: set[int] = set()
    used_actual: set[int] = set()
    pairs = _greedy(sorted(within), gold, actual, used_gold, used_actual)
    if (len(gold) - len(used_gold)) * (len(actual) - len(used_actual)) <= PAIRED_BEYOND_TOLERANCE_UP_TO:
        rest = sorted((great_circle_m(g, a), i, j) for i, g in enumerate(gold_points)
                      if g is not None and i not in used_gold
                      for j, a in enumerate(actual_points) if a is not None and j not in used_actual)
        pairs += _greedy(rest, gold, actual, used_gold, used_actual)
    return pairs


def _near(gold: list[tuple[float, float] | None], actual: list[tuple[float, float] | None], metres: float
          ) -> list[tuple[int, int]]:
    """(stored, returned) index pairs whose points may lie within `metres`: boxes around the returned points
    queried in an index of the stored ones."""
    known = [i for i, point in enumerate(gold) if point is not None]
    asked = [j for j, point in enumerate(actual) if point is not None]
    if not known or not asked:
        return []
    tree = shapely.STRtree(shapely.points([gold[i] for i in known]))
    margin = math.degrees(metres / EARTH_RADIUS_M) * 1.01
    boxes = [shapely.box(x - margin / max(math.cos(math.radians(y)), 1e-6), y - margin,
                         x + margin / max(math.cos(math.radians(y)), 1e-6), y + margin)
             for x, y in (actual[j] for j in asked)]
    found = tree.query(boxes)
    return [(known[i], asked[j]) for j, i in zip(*found, strict=True)]


def _greedy(candidates: list[tuple[float, int, int]], gold: list, actual: list, used_gold: set[int],
            used_actual: set[int]) -> list[tuple[dict, dict]]:
    """The candidate pairs in their order (nearest first), each row once; the rows taken join `used_*`."""
    pairs = []
    for _, i, j in candidates:
        if i not in used_gold and j not in used_actual:
            used_gold.add(i)
            used_actual.add(j)
            pairs.append((gold[i], actual[j]))
    return pairs


# --- strict row-level comparison ------------------------------------------------------------------------


@dataclass
class RowDiff:
    missing: list[dict[str, Any]] = field(default_factory=list)  # stored, not returned
    unexpected: list[dict[str, Any]] = field(default_factory=list)  # returned, not stored
    changed: list[dict[str, Any]] = field(default_factory=list)  # same feature, other values: {key: [stored, got]}

    @property
    def exact(self) -> bool:
        return not (self.missing or self.unexpected or self.changed)

    def as_dict(self, limit: int = 10) -> dict[str, Any]:
        """Counts and the first `limit` rows of each kind (answers can have thousands of rows)."""
        return {kind: {"count": len(rows), "rows": rows[:limit]}
                for kind, rows in (("missing", self.missing), ("unexpected", self.unexpected),
                                   ("changed", self.changed)) if rows}


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


def _differences(gold_row: dict[str, Any], actual_row: dict[str, Any]) -> dict[str, list[Any]]:
    keys = dict.fromkeys([*gold_row, *actual_row])
    pairs = {key: [gold_row.get(key), actual_row.get(key)] for key in keys}
    return {key: pair for key, pair in pairs.items() if not values_equal(*pair)}


def exact_diff(template_id: str, gold: list[dict[str, Any]], actual: list[dict[str, Any]]) -> RowDiff:
    """Multisets of rows, paired by identity (osm_id, else name); equal rows first, then the closest."""
    groups: dict[Any, tuple[list, list]] = defaultdict(lambda: ([], []))
    for row in gold:
        groups[identity(row)][0].append(comparable(row, template_id))
    for row in actual:
        groups[identity(row)][1].append(comparable(row, template_id))
    diff = RowDiff()
    for gold_rows, actual_rows in groups.values():
        left = [row for row in gold_rows if not _take_equal(row, actual_rows)]
        for stored, got in zip(left, actual_rows, strict=False):
            diff.changed.append({"identity": _describe(stored), "differences": _differences(stored, got)})
        diff.missing += left[len(actual_rows):]
        diff.unexpected += actual_rows[len(left):]
    return diff


def _take_equal(row: dict[str, Any], candidates: list[dict[str, Any]]) -> bool:
    """Remove the first candidate equal to `row`; say whether there was one."""
    for index, candidate in enumerate(candidates):
        if not _differences(row, candidate):
            del candidates[index]
            return True
    return False


def _describe(row: dict[str, Any]) -> str:
    key = identity(row)
    return f"{key[0]}={key[1]}" if key else "row"


# --- known instability ----------------------------------------------------------------------------------

_POINT = re.compile(r"POINT\s*\(\s*(-?\d+(?:\.\d+)?)\s+(-?\d+(?:\.\d+)?)\s*\)")
_HALF_PX_PER_DEG = 2 * dem_grid.PIXELS_PER_DEGREE  # the file seams and tile edges lie on half pixels


def instability(template_id: str, sql: str) -> list[str]:
    """Why re-running this question may legitimately give another answer (docs/BENCHMARK-FORMAT.md, last section)."""
    flags = []
    limits, orders = len(re.findall(r"\bLIMIT\b", sql, re.I)), len(re.findall(r"\bORDER\s+BY\b", sql, re.I))
    if limits > orders:
        flags.append("LIMIT without ORDER BY: the first row the plan returns wins")
    if limits and orders:  # VR5 has both: ORDER BY <-> LIMIT 1 and a LATERAL ... LIMIT 1
        flags.append("ORDER BY ... LIMIT: tied rows (duplicate source rows) may swap")
    if "dem_us" in sql:
        flags += [f"point {x} {y} {where}" for x, y in _POINT.findall(sql) if (where := _seam(float(x), float(y)))]
    if template_id in TEMPLATE_CAVEATS:
        flags.append(TEMPLATE_CAVEATS[template_id])
    return flags


def _seam(lon: float, lat: float) -> str | None:
    """Where a point sits on the DEM tiling (gsqa_core.dem_grid): near a file seam, where neighbouring files
    overlap, or on an internal tile edge."""
    tolerance = EXACT_GEOMETRY_TOL_DEG * _HALF_PX_PER_DEG
    for value in (lon, lat):
        if abs(value - round(value)) <= 1 / _HALF_PX_PER_DEG:
            return f"lies within 1/{_HALF_PX_PER_DEG} deg of a DEM file seam (two tiles answer)"
    # Half pixels from the file's upper-left corner, half a pixel west of and north of its cell: tile edge k
    # lies at 2 * TILE * k.
    east = (lon - math.floor(lon)) * _HALF_PX_PER_DEG + 1
    south = (math.floor(lat) + 1 - lat) * _HALF_PX_PER_DEG + 1
    for offset in (east, south):
        k = round(offset / (2 * dem_grid.TILE))
        if 1 <= k < dem_grid.tiles_across(dem_grid.ASTER_SIZE) and abs(offset - 2 * dem_grid.TILE * k) <= tolerance:
            return "lies on an internal DEM tile edge (one tile returns NULL)"
    return None
