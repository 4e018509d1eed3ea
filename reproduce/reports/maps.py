"""A location answer's small map for the HTML page: the predicted (red) and stored (green) points as an inline
SVG with a legend and a scale bar; no tiles, no network."""

from __future__ import annotations

import math
from typing import Any

from reproduce.judging import values
from reproduce.judging.tolerances import LOCATION, components_of, haversine_m
from reproduce.judging.values import as_geometry
from reproduce.results import ROWS_KEPT, Result


def location_map(result: Result, record: Any, width: int = 320, height: int = 200) -> str:
    """An inline SVG of the predicted (red) and stored (green) points of a location answer, with the distance
    between the nearest pair; no tiles, no network. Empty for other templates."""
    component = components_of(result.template_id)[0]
    if component.metric is not LOCATION:
        return ""
    rows = result.detail.get("rows") or result.detail.get("answer") or []
    predicted = _points(rows, component.keys)
    stored = _points(record.answers, component.keys)
    if not predicted or not stored:
        return ""
    distance = min(haversine_m(p.wkt, s.wkt) for p in predicted for s in stored)
    cy = (max(p.y for p in predicted + stored) + min(p.y for p in predicted + stored)) / 2
    shrink = max(math.cos(math.radians(cy)), 1e-6)  # a degree of longitude is this much of one of latitude
    xs = [p.x * shrink for p in predicted + stored]
    ys = [p.y for p in predicted + stored]
    span = max(max(xs) - min(xs), max(ys) - min(ys), 1e-6) * 1.2
    cx = (max(xs) + min(xs)) / 2
    def at(point: Any) -> tuple[float, float]:  # the same metres per pixel both ways
        return (width / 2 + (point.x * shrink - cx) / span * (height - 20),
                height / 2 - (point.y - cy) / span * (height - 20))
    marks = [f"<circle cx='{x:.1f}' cy='{y:.1f}' r='5' fill='#2a2'/>" for x, y in map(at, stored)]
    marks += [f"<path d='M{x - 5:.1f},{y - 5:.1f}L{x + 5:.1f},{y + 5:.1f}M{x - 5:.1f},{y + 5:.1f}L{x + 5:.1f},"
              f"{y - 5:.1f}' stroke='#c22' stroke-width='2'/>" for x, y in map(at, predicted)]
    label = f"nearest predicted to stored: {distance:,.1f} m (tolerance {LOCATION.threshold:g} m)"
    metres, pixels = _scale_bar(span / (height - 20))
    legend = (f"<circle cx='12' cy='12' r='5' fill='#2a2'/><text x='22' y='16' font-size='11'>stored</text>"
              f"<path d='M67,7L77,17M67,17L77,7' stroke='#c22' stroke-width='2'/>"
              f"<text x='82' y='16' font-size='11'>predicted</text>"
              f"<path d='M{width - 10 - pixels:.1f},{height - 10}h{pixels:.1f}' stroke='#333' stroke-width='2'/>"
              f"<text x='{width - 10 - pixels:.1f}' y='{height - 14}' font-size='11'>{_metres(metres)}</text>")
    return (f"<svg class='map' width='{width}' height='{height + 20}' viewBox='0 0 {width} {height + 20}' "
            f"role='img' aria-label='{label}'><rect width='{width}' height='{height}' fill='#f4f8fb' "
            f"stroke='#ccc'/>{''.join(marks)}{legend}<text x='4' y='{height + 15}' font-size='12'>{label}</text></svg>")


def _scale_bar(degrees_per_pixel: float) -> tuple[float, float]:
    """A round length in metres for a scale bar of about 60 pixels, and its length in pixels (degrees of
    latitude per pixel: the map shows longitude at its latitude's scale)."""
    metres_per_pixel = degrees_per_pixel * math.pi / 180 * values.EARTH_RADIUS_M
    wanted = 60 * metres_per_pixel
    step = 10 ** math.floor(math.log10(wanted))
    metres = max(factor * step for factor in (1, 2, 5) if factor * step <= wanted)
    return metres, metres / metres_per_pixel


def _metres(metres: float) -> str:
    return f"{metres / 1000:g} km" if metres >= 1000 else f"{metres:g} m"


def _points(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[Any]:
    points = []
    for row in rows[:ROWS_KEPT] if isinstance(rows, list) else []:
        geometry = as_geometry(values.lookup(row, keys, True)) if isinstance(row, dict) else None
        if geometry is not None and not geometry.is_empty:
            point = geometry if geometry.geom_type == "Point" else geometry.centroid
            if math.isfinite(point.x) and math.isfinite(point.y):
                points.append(point)
    return points
