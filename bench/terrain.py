"""Synthetic DEM terrain for the benchmarks: the terrain kinds, the pixel-to-pixel steps that tell them apart,
and the terrain mix of the reference tile set.

Terrain kinds (parameters of `spectral_terrain`; steps are |height difference| between horizontally and
vertically adjacent pixels, measured by `steps` and printed by the benchmarks):
  gentle  180-330 m plus 1.5 m noise, like the plains (steps: median 1 m, 90th percentile 4 m)
  rugged  1,500-2,400 m plus 1.5 m noise, like the Appalachians (median 2 m, 90th percentile 4 m)
  rough   1,500-4,500 m plus 2.5 m noise, like the mountain west (median 3 m, 90th percentile 7 m; real
          mountain tiles are rougher still)

The terrain mix. The real tile list (dem/tile_list.txt, 1,182 names) is not in the repository; its extent is
(docs/REFERENCE-DB.md): SW corners 126-67 W, 24-49 N, the CONUS box, and it names the ASTER tiles of the
cells of that box that hold land (a land-cell count of the box misses it by about 5). LAND_SPANS models those
cells row by row (per degree of latitude, the west-east runs of cells that hold land: the Pacific, Atlantic
and Gulf coasts, Baja California and the Gulf of California, the Florida Keys and the Bahamas, Lake
Superior's and Lake Huron's open-water cells), from the coastlines' coordinates: 1,166 cells, 16 fewer than
the list (small islands it misses). Each cell's terrain follows its region:
  rough   SW corner at 105 W or further west: the Rockies' front range and everything west of it
  rugged  the Appalachian chain, a band of cells per latitude from Alabama (34 N) to Maine (46 N), APPALACHIANS
  gentle  every other cell: the plains, the Midwest, the coastal plains, Florida
which gives 441 rough, 65 rugged and 660 gentle cells: 38 %, 6 % and 57 % (`mix()`). A sample of N tiles
takes N cells evenly spread over the cells in name order, so it keeps the mix; past the modelled cells
(N > 1,166, only at scale 1.0) it takes the box's water cells in name order, with their region's terrain.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

TERRAINS = {
    "gentle": {"low_m": 180, "relief_m": 150},
    "rugged": {"low_m": 1500, "relief_m": 900},
    "rough": {"low_m": 1500, "relief_m": 3000, "noise_m": 2.5},
}

# SW corners: latitude -> runs of longitudes (inclusive) of the cells that hold land.
LAND_SPANS: dict[int, list[tuple[int, int]]] = {
    49: [(-126, -67)], 48: [(-125, -67)], 47: [(-125, -88), (-86, -67)], 46: [(-125, -67)], 45: [(-124, -67)],
    44: [(-125, -84), (-82, -67)], 43: [(-125, -69), (-67, -67)], 42: [(-125, -71)], 41: [(-125, -70)],
    40: [(-125, -72)], 39: [(-124, -75)], 38: [(-124, -76)], 37: [(-123, -76)], 36: [(-122, -76)],
    35: [(-122, -76)], 34: [(-121, -77)], 33: [(-120, -78)], 32: [(-119, -80)], 31: [(-117, -81)],
    30: [(-117, -115), (-113, -82)], 29: [(-116, -89), (-86, -81)], 28: [(-116, -96), (-90, -90), (-83, -81)],
    27: [(-116, -98), (-83, -81), (-79, -79)], 26: [(-114, -111), (-110, -98), (-83, -81), (-79, -77)],
    25: [(-113, -98), (-82, -77)], 24: [(-112, -98), (-83, -80), (-79, -76)],
}
BOX_LATITUDES, BOX_LONGITUDES = range(24, 50), range(-126, -66)
ROUGH_WEST_OF = -104  # a cell whose SW corner is west of this (105 W and beyond) is in the mountain west
# The Appalachian chain: latitude -> the longitudes (SW corners, inclusive) of its cells.
APPALACHIANS = {34: (-86, -83), 35: (-85, -81), 36: (-84, -79), 37: (-83, -79), 38: (-82, -78), 39: (-81, -77),
                40: (-80, -75), 41: (-79, -74), 42: (-76, -73), 43: (-75, -71), 44: (-75, -70), 45: (-72, -69),
                46: (-71, -68)}


def steps(heights: np.ndarray) -> np.ndarray:
    """Counts of each pixel-to-pixel step in metres (index = |difference|), over horizontal and vertical
    neighbours: adding two files' counts gives the steps of both."""
    heights = heights.astype(np.int32)
    return add_steps(np.bincount(np.abs(np.diff(heights, axis=1)).ravel()),
                     np.bincount(np.abs(np.diff(heights, axis=0)).ravel()))


def add_steps(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    size = max(len(left), len(right))
    return _padded(left, size) + _padded(right, size)


def step_summary(counts: np.ndarray) -> dict[str, float]:
    """Median, 90th percentile (the lowest step that many steps reach) and mean of step counts, in metres."""
    cumulative = np.cumsum(counts)
    total = int(cumulative[-1])
    return {"median_m": int(np.searchsorted(cumulative, total * 0.5)),
            "p90_m": int(np.searchsorted(cumulative, total * 0.9)),
            "mean_m": round(float(np.dot(np.arange(len(counts)), counts) / total), 2)}


def _padded(counts: np.ndarray, size: int) -> np.ndarray:
    return np.pad(counts, (0, max(0, size - len(counts))))


def terrain_of(lat: int, lon: int) -> str:
    """The terrain kind of the cell whose SW corner is (lon, lat)."""
    if lon < ROUGH_WEST_OF:
        return "rough"
    west, east = APPALACHIANS.get(lat, (0, -1))
    return "rugged" if west <= lon <= east else "gentle"


def land_cells() -> list[tuple[int, int]]:
    """The modelled land cells (lat, lon) of the box, in tile-name order (N before latitude, W longitude)."""
    cells = [(lat, lon) for lat, spans in LAND_SPANS.items() for west, east in spans for lon in range(west, east + 1)]
    return sorted(cells, key=_name_order)


def sample_cells(count: int) -> list[tuple[int, int]]:
    """`count` cells spread evenly over the land cells in name order (then the water cells), in name order."""
    land = land_cells()
    if count <= len(land):
        return [land[index * len(land) // count] for index in range(count)]
    water = sorted({(lat, lon) for lat in BOX_LATITUDES for lon in BOX_LONGITUDES} - set(land), key=_name_order)
    if count > len(land) + len(water):
        raise ValueError(f"the box has {len(land) + len(water)} cells, not {count}")
    return sorted(land + water[: count - len(land)], key=_name_order)


def mix(cells: list[tuple[int, int]]) -> dict[str, int]:
    counts = Counter(terrain_of(lat, lon) for lat, lon in cells)
    return {terrain: counts[terrain] for terrain in TERRAINS}


def _name_order(cell: tuple[int, int]) -> tuple[int, int]:
    lat, lon = cell
    return lat, -lon  # ASTGTMV003_N24W067 < ... < N24W126 < N25W067: names sort by latitude, then |longitude|
