"""Known instability: why re-running a question may legitimately give another answer than the stored one
(docs/BENCHMARK-FORMAT.md, the last section)."""

from __future__ import annotations

import math
import re

from gsqa_core import dem_grid
from reproduce.judging.values import EXACT_GEOMETRY_TOL_DEG

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
