"""A data directory in the published layout of Zoe/GS-QA2-source, small enough for tests: synthetic ASTER
tiles (600 x 600 px instead of 3601, so 9 tiles each) named in dem/tile_list.txt, and the rule layers of
tests/osm_helpers.py under osm/osm_extract/."""

from __future__ import annotations

from pathlib import Path

from dem_helpers import write_neighbours
from osm_helpers import write_rule_layers


def write_published_layout(root: Path, lons: tuple[int, ...] = (-100, -99), size: int = 600,
                           osm: bool = True) -> Path:
    tiles = write_neighbours(root / "dem" / "tiles", size=size, lons=lons)
    (root / "dem" / "tile_list.txt").write_text("".join(f"{path.name}\n" for path in tiles))
    if osm:
        write_rule_layers(root / "osm" / "osm_extract")
    return root
