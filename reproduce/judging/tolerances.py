"""The tolerances, declared once: template id -> answer components (the column names accepted, a metric), each
metric a small function with its threshold (docs/BENCHMARK-FORMAT.md, Tolerances, is rendered from COMPONENTS)."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from reproduce.judging.values import NAME_KEYS, as_number, great_circle_m, point_of

_TOKEN = re.compile(r"[a-z0-9]+")


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
    a, b = point_of(actual), point_of(gold)
    return math.inf if a is None or b is None else great_circle_m(a, b)


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


def components_of(template_id: str) -> tuple[Component, ...]:
    try:
        return COMPONENTS[template_id]
    except KeyError:
        raise ValueError(f"no tolerance declared for template {template_id!r}") from None

