"""The paper's own scoring, beside the strict verdict: what the benchmark authors' evaluator would accept.

Re-told from its documented behaviour (docs/BENCHMARK-FORMAT.md, "Two verdicts"), not copied: the authors score
one pair of rows, the (returned row, stored row) pair that passes the most answer components (ties: the
smallest summed error, in units of each tolerance), and a question passes when that pair passes every
component. The thresholds and metrics are compare.COMPONENTS'. Where it differs from the strict verdict
(compare.judge):
- row counts do not matter: an extra or a missing row is not a failure;
- several stored names are not one bag: the best single name pair decides;
- rows are not paired by identity: a returned row may pass against another stored row (cross-matching).
One rule is deliberately not the authors': a negative aspect (ST_Aspect's -1 for a flat cell) is flat, not an
angle, in both verdicts (docs/BENCHMARK-FORMAT.md says why).
Large answers (thousands of rows on both sides) are searched through an index on the first component instead
of every pair, so the verdict stays proportional to the rows.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from reproduce.compare import (
    LOCATION,
    NAME,
    Check,
    Component,
    as_geometry,
    badness,
    check_component,
    components_of,
    identity,
    lookup,
    tokens,
)

ALL_PAIRS_UP_TO = 100_000  # pairs of rows tried one by one; above, candidates come from an index
NAME_CANDIDATES = 50  # stored names tried per returned name, found through the tokens they share


@dataclass(frozen=True)
class PaperVerdict:
    status: str  # pass or mismatch
    reason: str


def paper_components(template_id: str) -> list[Component]:
    """The strict verdict's components as the authors apply them: one name per row, not one bag."""
    return [Component(c.keys, c.metric, joined=False) for c in components_of(template_id)]


def paper_verdict(template_id: str, gold: list[dict[str, Any]], actual: list[dict[str, Any]]) -> PaperVerdict:
    if not gold:
        return PaperVerdict("pass", "both empty") if not actual else PaperVerdict("mismatch", "nothing is stored")
    if not actual:
        return PaperVerdict("mismatch", "no rows returned")
    components = paper_components(template_id)
    checks = min((_checks(components, g, a) for g, a in _candidate_pairs(components, gold, actual)),
                 key=lambda found: badness(found, components))
    failed = next((check for check in checks if not check.passed), None)
    if failed is None:
        return PaperVerdict("pass", "best pair: " + "; ".join(_describe(check) for check in checks))
    return PaperVerdict("mismatch", f"best pair fails {_describe(failed)}")


def _checks(components: list[Component], gold_row: dict[str, Any], actual_row: dict[str, Any]) -> list[Check]:
    return [check_component(component, gold_row, actual_row) for component in components]


def _describe(check: Check) -> str:
    value = "n/a" if math.isinf(check.value) else f"{check.value:.4g}"
    return f"{check.component} {check.metric} {value} (tolerance {check.threshold})"


def _candidate_pairs(components: list[Component], gold: list[dict], actual: list[dict]) -> list[tuple[dict, dict]]:
    """Every pair when there are few; else pairs of the same feature and the nearest rows by the first
    component, which holds the best pair for the one-component templates that have large answers."""
    if len(gold) * len(actual) <= ALL_PAIRS_UP_TO:
        return [(g, a) for g in gold for a in actual]
    pairs = _same_identity(gold, actual)
    first = components[0]
    if first.metric is NAME:
        pairs += _near_names(first, gold, actual)
    elif first.metric is LOCATION:
        pairs += _near_points(first, gold, actual)
    else:
        pairs += _near_numbers(first, gold, actual)
    return pairs or [(gold[0], actual[0])]


def _same_identity(gold: list[dict], actual: list[dict]) -> list[tuple[dict, dict]]:
    stored = {}
    for row in gold:
        stored.setdefault(identity(row), row)
    stored.pop(None, None)
    return [(stored[identity(row)], row) for row in actual if identity(row) in stored]


def _tokens(row: dict, component: Component) -> Counter:
    return tokens(lookup(row, component.keys, False))


def _near_names(component: Component, gold: list[dict], actual: list[dict]) -> list[tuple[dict, dict]]:
    bags = [_tokens(row, component) for row in gold]
    exact = {frozenset(bag.items()): row for bag, row in zip(bags, gold, strict=True)}
    by_token = defaultdict(list)
    for index, bag in enumerate(bags):
        for token in bag:
            by_token[token].append(index)
    pairs = []
    for row in actual:
        bag = _tokens(row, component)
        if frozenset(bag.items()) in exact:
            return [(exact[frozenset(bag.items())], row)]  # F1 = 1: no pair can do better
        shared = Counter(index for token in bag for index in by_token.get(token, []))
        pairs += [(gold[index], row) for index, _ in shared.most_common(NAME_CANDIDATES)]
    return pairs


def _near_points(component: Component, gold: list[dict], actual: list[dict]) -> list[tuple[dict, dict]]:
    def latitude(row: dict) -> float:
        geometry = as_geometry(lookup(row, component.keys, True))
        return geometry.centroid.y if geometry is not None and not geometry.is_empty else math.inf

    ordered = sorted(gold, key=latitude)
    keys = [latitude(row) for row in ordered]
    pairs = []
    for row in actual:  # 5 m is 0.000045 degrees of latitude: the stored points within 0.0001 of it
        lat = latitude(row)
        low, high = bisect.bisect_left(keys, lat - 1e-4), bisect.bisect_right(keys, lat + 1e-4)
        pairs += [(ordered[i], row) for i in range(low, min(high, low + NAME_CANDIDATES))]
    return pairs


def _near_numbers(component: Component, gold: list[dict], actual: list[dict]) -> list[tuple[dict, dict]]:
    def number(row: dict) -> float:
        try:
            return float(lookup(row, component.keys, True))
        except (TypeError, ValueError):
            return math.inf

    ordered = sorted(gold, key=number)
    keys = [number(row) for row in ordered]
    pairs = []
    for row in actual:
        at = bisect.bisect_left(keys, number(row))
        around = {max(0, at - 1), min(len(ordered) - 1, at), 0, len(ordered) - 1}  # ends: angles wrap
        pairs += [(ordered[i], row) for i in sorted(around)]
    return pairs
