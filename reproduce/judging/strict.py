"""The strict verdict and the strict row-level comparison of a returned answer against the stored one.

The verdict (`strict_verdict`): every component of the template (tolerances.COMPONENTS) must pass; one stored
row is judged against the returned row that passes the most components, and several stored rows are paired by
identity (osm_id, else the name; for a location the rest by nearest point) with every row counted. `exact_diff`
is stricter still: multisets of rows keyed on osm_id or name, numbers within 1e-6 relative, geometries within
1e-6 degrees, the serial id and V7's Wikipedia keys ignored (docs/BENCHMARK-FORMAT.md, Tolerances).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import shapely

from reproduce.judging.tolerances import LOCATION, Component, components_of
from reproduce.judging.values import (
    EARTH_RADIUS_M,
    comparable,
    great_circle_m,
    identity,
    lookup,
    one_row_per_feature,
    point_of,
    values_equal,
)


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
    status: str  # pass or fail (results.VERDICTS), or empty: no rows where the stored answer has some
    checks: list[Check] = field(default_factory=list)  # one per component (multi-row: the worst pair)

    @property
    def first_failure(self) -> Check | None:
        return next((check for check in self.checks if not check.passed), None)


def strict_verdict(template_id: str, gold: list[dict[str, Any]], actual: list[dict[str, Any]]) -> Verdict:
    """The strict verdict on one question's rows: every component must pass, every row counted."""
    components = components_of(template_id)
    if not actual:
        return Verdict("pass" if not gold else "empty")
    if not gold:
        return Verdict("fail", [_row_count_check(gold, actual)])
    gold, actual = one_row_per_feature(gold), one_row_per_feature(actual)
    checks = [joined_check(c, gold, actual) for c in components if c.joined]
    per_row = [c for c in components if not c.joined]
    if per_row:
        checks += _best_single(per_row, gold[0], actual) if len(gold) == 1 else _paired(per_row, gold, actual)
    return Verdict("pass" if all(check.passed for check in checks) else "fail", checks)


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

