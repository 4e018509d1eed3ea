"""The DEM as Cloud-Optimized GeoTIFFs, one per source file reassembled from its tiles, and a VRT mosaic.

A source file's tiles (225 for an ASTER file) are a contiguous rid range (files load in name order, tiles in
raster2pgsql's order), read with a server-side cursor and placed by their upper-left corner on the file's grid
(its gsqa.load_log row): the pixels, the size, the geotransform and the NODATA value of the file come back as
they were. Tiles the loader skipped (all NODATA) are NODATA again. The file is written as rio-cogeo writes one
(DEFLATE with the horizontal predictor: lossless; 512-pixel blocks, nearest-neighbour overviews), to a temporary
name renamed when done. Memory: one source file's pixels (26 MB for ASTER) and GDAL's, per worker process (run.py).

The pixel checksum of a file: the md5 of each written tile's pixels (Int16 little-endian, row by row), in the
file's tile order, joined by newlines, then sha256. The server computes the tiles' digests from their WKB
(`tile_digests`), this module from the tiles as it writes them and from a COG's pixels (`cog_digests`).

The VRT (`dem_us.vrt`) lists every COG at its place on the common grid; where no file lies it is NODATA.
Neighbouring ASTER files overlap by one pixel; a VRT paints its sources in order, the last on top, and dem_us
answers a point query with the tile first in rid order (the earlier file name), so the sources are listed in
reverse name order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
import psycopg
import rasterio
import rasterio.shutil
from rasterio.crs import CRS
from rasterio.enums import Resampling
from rasterio.io import MemoryFile
from rasterio.windows import Window

from gsqa_core.dem_grid import SRID, TILE, Grid, tiles_across
from gsqa_core.errors import GsqaError
from ingest.dem.constraints import TileGrid
from ingest.dem.tiles import BAND_OUT_DB, PIXTYPE_16BSI, TILE_HEADER

VRT_NAME = "dem_us.vrt"
# The VRT's NODATA where the files have none: between files (the ocean, Canada: no ASTER file in the tile list)
# dem_us has no tile and ST_Value gives NULL; the mosaic gives this, masked. Int16's lowest value, which no
# ASTER pixel holds (voids are -9999).
UNCOVERED = -32768
BLOCK = 512
COG_OPTIONS = {"COPY_SRC_OVERVIEWS": "YES", "TILED": "YES", "BLOCKXSIZE": BLOCK, "BLOCKYSIZE": BLOCK,
               "COMPRESS": "DEFLATE", "PREDICTOR": 2, "BIGTIFF": "IF_SAFER"}
_PIXELS_AT = TILE_HEADER.size  # a one-band Int16 tile's pixels follow its header and its band's


class TileError(GsqaError):
    """A tile that is not what its file's grid says; the message names it."""


@dataclass(frozen=True)
class DemFile:
    """A source file of dem_us: its name, its rids and its grid from the load log."""

    name: str
    first_rid: int
    last_rid: int
    tiles: int
    grid: TileGrid

    @property
    def cog_name(self) -> str:
        return self.name if self.name.lower().endswith((".tif", ".tiff")) else f"{self.name}.tif"

    @property
    def pixels(self) -> int:
        return self.grid.grid.width * self.grid.grid.height


def dem_files(conn: psycopg.Connection) -> list[DemFile]:
    """The files of dem_us in name order, with their grids; TileError if a file's rids are not one run."""
    grids = {name: TileGrid.from_log(details) for name, details in conn.execute(
        "SELECT source_name, details FROM gsqa.load_log WHERE target_table = 'public.dem_us'")}
    files = []
    for name, first, last, count in conn.execute(
            "SELECT filename, min(rid), max(rid), count(*) FROM public.dem_us GROUP BY filename ORDER BY filename"):
        if name not in grids:
            raise TileError(f"dem_us: {count} tiles of {name}, which the load log does not name")
        if last - first + 1 != count:
            raise TileError(f"dem_us: the tiles of {name} are not one run of rids ({first}..{last}, {count} tiles)")
        files.append(DemFile(name, first, last, count, grids[name]))
    return files


def _tile_index(grid: Grid, ulx: float, uly: float, width: int, height: int, name: str) -> tuple[int, int, int]:
    """(pixel column, pixel row, index in the file's tile order) of the tile whose corner is (ulx, uly)."""
    gt = grid.geotransform
    col, row = round((ulx - gt[0]) / gt[1]), round((uly - gt[3]) / gt[5])
    if col % TILE or row % TILE or not (0 <= col < grid.width and 0 <= row < grid.height) \
            or (width, height) != (min(TILE, grid.width - col), min(TILE, grid.height - row)):
        raise TileError(f"{name}: a {width}x{height} tile at ({ulx}, {uly}) is not on the file's grid")
    return col, row, (row // TILE) * tiles_across(grid.width) + col // TILE


def read_pixels(conn: psycopg.Connection, source: DemFile) -> tuple[np.ndarray, str]:
    """The file's pixels from its tiles, and their pixel checksum."""
    grid = source.grid.grid
    pixels = np.full((grid.height, grid.width), grid.nodata or 0, dtype="<i2")
    digests: dict[int, str] = {}
    with conn.transaction(), conn.cursor(name="export_dem", binary=True) as cursor:
        cursor.itersize = tiles_across(grid.width)
        cursor.execute("SELECT ST_AsBinary(rast) FROM public.dem_us WHERE rid BETWEEN %s AND %s ORDER BY rid",
                       [source.first_rid, source.last_rid])
        for (wkb,) in cursor:
            _, _, bands, _, _, ulx, uly, _, _, srid, width, height, pixtype, _ = TILE_HEADER.unpack_from(wkb)
            if bands != 1 or srid != SRID or pixtype & 0x0F != PIXTYPE_16BSI or pixtype & BAND_OUT_DB:
                raise TileError(f"{source.name}: a tile at ({ulx}, {uly}) is not one in-db 16BSI band in SRID {SRID}")
            col, row, index = _tile_index(grid, ulx, uly, width, height, source.name)
            block = memoryview(wkb)[_PIXELS_AT:_PIXELS_AT + width * height * 2]
            digests[index] = hashlib.md5(block).hexdigest()
            pixels[row:row + height, col:col + width] = np.frombuffer(block, dtype="<i2").reshape(height, width)
    return pixels, pixel_checksum(digests)


def pixel_checksum(tile_digests: dict[int, str]) -> str:
    return hashlib.sha256("\n".join(tile_digests[index] for index in sorted(tile_digests)).encode()).hexdigest()


def tile_digests(conn: psycopg.Connection, source: DemFile) -> dict[int, str]:
    """The md5 of each of the file's tiles' pixels by tile index, computed by the server (only the digests
    travel); pixel_checksum of them is the file's."""
    grid = source.grid.grid
    digests = {}
    for ulx, uly, width, height, digest in conn.execute(
            "SELECT ST_UpperLeftX(rast), ST_UpperLeftY(rast), ST_Width(rast), ST_Height(rast), "
            "md5(substring(ST_AsBinary(rast) FROM %s)) FROM public.dem_us WHERE rid BETWEEN %s AND %s",
            [_PIXELS_AT + 1, source.first_rid, source.last_rid]):
        digests[_tile_index(grid, ulx, uly, width, height, source.name)[2]] = digest
    return digests


def write_cog(pixels: np.ndarray, source: DemFile, path: Path) -> None:
    """The pixels as a COG at `path` (overwritten), with the file's georeference and NODATA: as rio-cogeo makes
    one, a tiled GeoTIFF with its overviews in memory, copied with its overviews first (GDAL marks the layout
    COG). GDAL writes the COG in memory too (one compressed file, a fraction of the pixels) and Python writes it
    to disk, so that a full disk is an OSError that says so, not a GDAL message."""
    grid = source.grid.grid
    profile = {"driver": "GTiff", "width": grid.width, "height": grid.height, "count": 1, "dtype": "int16",
               "crs": CRS.from_epsg(SRID), "transform": rasterio.Affine.from_gdal(*grid.geotransform),
               "nodata": grid.nodata, "tiled": True, "blockxsize": BLOCK, "blockysize": BLOCK}
    with MemoryFile() as memory, memory.open(**profile) as staged, MemoryFile() as cog:
        staged.write(pixels, 1)
        staged.build_overviews(overview_factors(grid.width, grid.height), Resampling.nearest)
        rasterio.shutil.copy(staged, cog.name, driver="GTiff", **COG_OPTIONS)
        with open(path, "wb") as out:
            out.write(cog.getbuffer())


def overview_factors(width: int, height: int) -> list[int]:
    """2, 4, 8, ... until the overview fits in one block (rio-cogeo's rule; 3601 pixels: 2, 4, 8)."""
    factors = [2]
    while max(width, height) / factors[-1] > BLOCK:
        factors.append(factors[-1] * 2)
    return factors


def cog_digests(path: Path, source: DemFile) -> dict[int, str]:
    """The md5 of each tile's pixels of a COG read as a file of `source`'s grid, the skipped tiles excepted
    (those must be NODATA). ValueError if the COG's size or georeference differ."""
    grid = source.grid.grid
    digests = {}
    with rasterio.open(path) as cog:
        if (cog.width, cog.height, cog.count, cog.dtypes[0]) != (grid.width, grid.height, 1, "int16") \
                or tuple(cog.transform.to_gdal()) != tuple(grid.geotransform) or cog.nodata != grid.nodata:
            raise ValueError(f"{cog.width}x{cog.height}, {cog.count} band(s) of {cog.dtypes[0]}, geotransform "
                             f"{tuple(cog.transform.to_gdal())}, NODATA {cog.nodata}; the tiles' file is "
                             f"{grid.width}x{grid.height} Int16, {tuple(grid.geotransform)}, NODATA {grid.nodata}")
        across = tiles_across(grid.width)
        for top in range(0, grid.height, TILE):
            strip = cog.read(1, window=Window(0, top, grid.width, min(TILE, grid.height - top))).astype("<i2")
            for left in range(0, grid.width, TILE):
                index, block = (top // TILE) * across + left // TILE, strip[:, left:left + TILE]
                if index in source.grid.skipped:
                    if not (block == grid.nodata).all():
                        raise ValueError(f"the tile at pixel ({left}, {top}) has data where dem_us has no tile")
                    continue
                digests[index] = hashlib.md5(np.ascontiguousarray(block).tobytes()).hexdigest()
    return digests


def write_vrt(files: list[DemFile], path: Path) -> None:
    """The mosaic of the files' COGs (beside it) at `path`."""
    path.write_text(vrt_text(files))


def vrt_text(files: list[DemFile]) -> str:
    """The VRT of the files' COGs, which lie beside it."""
    grids = [source.grid.grid for source in files]
    step_x, step_y = grids[0].geotransform[1], grids[0].geotransform[5]
    left = min(grid.geotransform[0] for grid in grids)
    top = max(grid.geotransform[3] for grid in grids)
    right = max(grid.geotransform[0] + grid.width * step_x for grid in grids)
    bottom = min(grid.geotransform[3] + grid.height * step_y for grid in grids)
    width, height = round((right - left) / step_x), round((bottom - top) / step_y)
    nodata = grids[0].nodata if grids[0].nodata is not None else UNCOVERED
    sources = [_vrt_source(source, left, top) for source in reversed(files)]
    band = ['  <VRTRasterBand dataType="Int16" band="1">', f"    <NoDataValue>{nodata}</NoDataValue>", *sources,
            "  </VRTRasterBand>"]
    lines = [f'<VRTDataset rasterXSize="{width}" rasterYSize="{height}">',
             f'  <SRS dataAxisToSRSAxisMapping="2,1">{escape(CRS.from_epsg(SRID).to_wkt())}</SRS>',
             f"  <GeoTransform>{left!r}, {step_x!r}, 0.0, {top!r}, 0.0, {step_y!r}</GeoTransform>",
             *band, "</VRTDataset>"]
    return "\n".join(lines) + "\n"


def _vrt_source(source: DemFile, left: float, top: float) -> str:
    grid = source.grid.grid
    x_off = round((grid.geotransform[0] - left) / grid.geotransform[1])
    y_off = round((grid.geotransform[3] - top) / grid.geotransform[5])
    kind = "ComplexSource" if grid.nodata is not None else "SimpleSource"
    nodata = f"<NODATA>{grid.nodata}</NODATA>" if grid.nodata is not None else ""
    return (f'    <{kind}><SourceFilename relativeToVRT="1">{escape(source.cog_name)}</SourceFilename>'
            f"<SourceBand>1</SourceBand>"
            f'<SourceProperties RasterXSize="{grid.width}" RasterYSize="{grid.height}" DataType="Int16" '
            f'BlockXSize="512" BlockYSize="512"/>'
            f'<SrcRect xOff="0" yOff="0" xSize="{grid.width}" ySize="{grid.height}"/>'
            f'<DstRect xOff="{x_off}" yOff="{y_off}" xSize="{grid.width}" ySize="{grid.height}"/>{nodata}'
            f"</{kind}>")
