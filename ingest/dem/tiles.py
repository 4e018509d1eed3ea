"""Reading ASTER-like GeoTIFFs and cutting them into PostGIS raster tiles exactly as raster2pgsql -t does.

The tile grid is raster2pgsql's (raster/loader/raster2pgsql.c, convert_raster), declared in gsqa_core.dem_grid:
anchored at the file's upper-left pixel corner, row by row from the north-west, edge tiles unpadded, each tile's corner
computed as GDALApplyGeoTransform does. A tile whose every pixel is the band's NODATA value is skipped when
the file has one. Each tile is written as PostGIS raster WKB (RFC2): the same bytes raster2pgsql sends as
hex, so the stored rasters are identical.

This module runs in the stager processes (stagers.py): it touches no database.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import rasterio
from rasterio.errors import RasterioError
from rasterio.windows import Window

from gsqa_core.dem_grid import ASTER_SIZE, SRID, TILE, Grid, tiles_across

GDAL_CACHE_MB = 64  # one band row of tiles is 1.8 MB; the cache only needs a few strips

# RFC2 raster WKB: endianness (1 = little), version 0, band count, scale x/y, upper-left x/y, skew x/y,
# SRID, width, height; then per band a pixel-type byte (with flag bits), the NODATA value, the pixels.
TILE_HEADER = struct.Struct("<BHHddddddiHH" "Bh")  # the raster header, then the band's pixel type and NODATA
PIXTYPE_16BSI = 5
BAND_HAS_NODATA = 0x40
BAND_OUT_DB = 0x80  # raster2pgsql -R: the pixels are in a file, not in the tile


class BadRaster(Exception):
    """A source file that cannot be loaded; the message names what was expected."""


@dataclass(frozen=True)
class RasterFacts:
    """What the header of a source GeoTIFF says, checked against what dem_us can hold."""

    name: str
    size: int  # bytes on disk
    grid: Grid

    @property
    def warnings(self) -> list[str]:
        if (self.grid.width, self.grid.height) == (ASTER_SIZE, ASTER_SIZE):
            return []
        return [f"{self.name}: {self.grid.width}x{self.grid.height} pixels, not the ASTER {ASTER_SIZE}x{ASTER_SIZE}"]


@dataclass
class TileRow:
    """One band row of tiles, encoded: the WKB of the written tiles back to back, where each one starts
    and ends (offsets has one entry more than there are tiles), and the indices of skipped tiles."""

    blob: bytearray
    offsets: list[int]
    skipped: list[int] = field(default_factory=list)  # indices in Grid.tiles() order of all-NODATA tiles

    def tiles(self) -> Iterator[memoryview]:
        view = memoryview(self.blob)
        for start, end in itertools.pairwise(self.offsets):
            yield view[start:end]


def read_facts(path: Path) -> RasterFacts:
    """Open the header only; BadRaster if it is not a single-band Int16 GeoTIFF in EPSG:4326."""
    try:
        with rasterio.open(path) as src:
            return _facts_of(path, src)
    except RasterioError as error:
        raise BadRaster(f"{path}: not a readable GeoTIFF ({_first_line(error)})") from None


def _facts_of(path: Path, src: rasterio.DatasetReader) -> RasterFacts:
    if src.driver != "GTiff":
        raise BadRaster(f"{path}: GDAL reads it as {src.driver}, expected a GeoTIFF")
    if src.count != 1:
        raise BadRaster(f"{path}: {src.count} bands, expected 1 (an ASTER GDEM _dem.tif)")
    if src.dtypes[0] != "int16":
        raise BadRaster(f"{path}: band 1 is {src.dtypes[0]}, expected Int16")
    epsg = src.crs.to_epsg() if src.crs else None
    if epsg != SRID:
        raise BadRaster(f"{path}: CRS is {src.crs.to_string() if src.crs else 'missing'}, expected EPSG:4326")
    nodata = src.nodata
    if nodata is not None and not (float(nodata).is_integer() and -32768 <= nodata <= 32767):
        raise BadRaster(f"{path}: NODATA tag {nodata} is not an Int16 value")
    grid = Grid(src.width, src.height, tuple(src.transform.to_gdal()), None if nodata is None else int(nodata))
    return RasterFacts(name=path.name, size=path.stat().st_size, grid=grid)


def encode_rows(path: Path, grid: Grid) -> Iterator[TileRow]:
    """Read the file a band row of tiles at a time (each strip is decoded once) and encode every tile that
    raster2pgsql would write, in its order. BadRaster if the pixels cannot be read."""
    index = 0
    with rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_MB):
        try:
            with rasterio.open(path) as src:
                for top in range(0, grid.height, TILE):
                    height = min(TILE, grid.height - top)
                    pixels = src.read(1, window=Window(0, top, grid.width, height)).astype("<i2", copy=False)
                    row = _encode_row(grid, top, pixels, index)
                    index += tiles_across(grid.width)
                    yield row
        except RasterioError as error:  # rasterio's own message points at the GDAL error it chains
            raise BadRaster(f"{path}: truncated or corrupt ({_first_line(error.__cause__ or error)})") from None


def _encode_row(grid: Grid, top: int, pixels: np.ndarray, first_index: int) -> TileRow:
    """Each tile's pixels are copied once, straight into the row's buffer (a tile a few bytes apart from
    its header would otherwise be copied three times)."""
    kept, skipped = [], []
    for index, left in enumerate(range(0, grid.width, TILE), start=first_index):
        block = pixels[:, left : left + TILE]
        if grid.nodata is not None and bool((block == grid.nodata).all()):
            skipped.append(index)
        else:
            kept.append((left, block))
    offsets = [0, *itertools.accumulate(TILE_HEADER.size + block.nbytes for _, block in kept)]
    blob = bytearray(offsets[-1])
    for (left, block), start in zip(kept, offsets, strict=False):
        _write_tile(blob, start, grid, left, top, block)
    return TileRow(blob, offsets, skipped)


def _write_tile(blob: bytearray, start: int, grid: Grid, col: int, row: int, block: np.ndarray) -> None:
    gt = grid.geotransform
    upper_left_x, upper_left_y = grid.tile_origin(col, row)
    height, width = block.shape
    flags = PIXTYPE_16BSI | (BAND_HAS_NODATA if grid.nodata is not None else 0)
    # Without a NODATA tag raster2pgsql still writes a NODATA field, as 0.
    TILE_HEADER.pack_into(blob, start, 1, 0, 1, gt[1], gt[5], upper_left_x, upper_left_y, gt[2], gt[4], SRID,
                           width, height, flags, grid.nodata or 0)
    pixels = np.frombuffer(blob, dtype="<i2", count=block.size, offset=start + TILE_HEADER.size)
    pixels.reshape(block.shape)[...] = block


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
