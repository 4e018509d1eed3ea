"""The DEM's grid, declared once: ASTER GDEM v3 files, cut into tiles as `raster2pgsql -t 256x256` cuts them.

An ASTER file is named after the south-west corner of its integer-degree cell and holds 3601x3601 Int16
pixels of 1/3600 degree (one arc-second) whose centres fall on whole arc-seconds: it reaches half a pixel
beyond its cell on every side, so neighbouring files share their edge column or row (the 1-pixel overlap).
raster2pgsql anchors the tiles at a file's upper-left pixel corner, emits them row by row from the
north-west and does not pad the edge tiles: 3601 = 14 x 256 + 17, so a file is 15 x 15 = 225 tiles
(docs/REFERENCE-DB.md, "The DEM table"). The loader, `ingest check` and the verifier derive their numbers
from here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

SRID = 4326
TILE = 256  # pixels a side of a whole tile (raster2pgsql -t)
PIXELS_PER_DEGREE = 3600  # one pixel per arc-second
PIXEL = 1 / PIXELS_PER_DEGREE  # degrees
OVERLAP = 1  # pixels a file shares with its neighbour on each side
ASTER_SIZE = PIXELS_PER_DEGREE + OVERLAP  # pixels a side of an ASTER file


def tiles_across(pixels: int) -> int:
    """Tiles along a side of `pixels`, the last one narrower unless the side is a multiple of TILE."""
    return -(-pixels // TILE)


TILES_PER_FILE = tiles_across(ASTER_SIZE) ** 2


def tile_windows(width: int, height: int) -> Iterator[tuple[int, int, int, int]]:
    """(pixel column, pixel row, width, height) of every tile of a width x height file, in raster2pgsql's
    order: row by row from the north-west."""
    for row in range(0, height, TILE):
        for col in range(0, width, TILE):
            yield col, row, min(TILE, width - col), min(TILE, height - row)


def tile_sizes(width: int, height: int) -> Counter[tuple[int, int]]:
    """How many tiles of each (width, height) a width x height file is cut into."""
    return Counter((w, h) for _, _, w, h in tile_windows(width, height))


def aster_origin(lat: int, lon: int) -> tuple[float, float]:
    """Upper-left corner (x, y) of the ASTER file of the cell whose south-west corner is (lon, lat)."""
    return lon - PIXEL / 2, lat + 1 + PIXEL / 2


@dataclass(frozen=True)
class Grid:
    """A source file's pixel grid: size, GDAL geotransform and NODATA value."""

    width: int
    height: int
    geotransform: tuple[float, ...]
    nodata: int | None

    def tiles(self) -> Iterator[tuple[int, int, int, int]]:
        """(pixel column, pixel row, width, height) of every tile, row by row from the north-west."""
        return tile_windows(self.width, self.height)

    def tile_origin(self, col: int, row: int) -> tuple[float, float]:
        """Upper-left corner of the tile at pixel (col, row), computed as GDALApplyGeoTransform does."""
        gt = self.geotransform
        return gt[0] + col * gt[1] + row * gt[2], gt[3] + col * gt[4] + row * gt[5]
