"""The tile grid and WKB of ingest.dem.tiles, checked against PostGIS's own reading of them."""

from __future__ import annotations

import binascii
from pathlib import Path

import psycopg
import pytest

from gsqa_core.dem_grid import ASTER_SIZE, Grid
from ingest.dem.synthetic import aster_transform, cheap_terrain, write_aster_tile
from ingest.dem.tiles import BadRaster, encode_rows, read_facts


def aster_grid(nodata: int | None = None) -> Grid:
    return Grid(ASTER_SIZE, ASTER_SIZE, aster_transform(40, -100).to_gdal(), nodata)


def test_a_full_aster_file_has_raster2pgsqls_225_tiles() -> None:
    sizes = [(width, height) for _, _, width, height in aster_grid().tiles()]
    assert len(sizes) == 225
    assert {size: sizes.count(size) for size in set(sizes)} == {(256, 256): 196, (17, 256): 14, (256, 17): 14,
                                                                (17, 17): 1}
    assert sizes[14] == (17, 256) and sizes[-1] == (17, 17)  # row by row from the north-west


def test_tile_origins_follow_the_geotransform() -> None:
    grid = aster_grid()
    assert grid.tile_origin(0, 0) == (grid.geotransform[0], grid.geotransform[3])
    x, y = grid.tile_origin(3584, 256)
    assert x == pytest.approx(-100 - 1 / 7200 + 3584 / 3600, abs=1e-12)
    assert y == pytest.approx(41 + 1 / 7200 - 256 / 3600, abs=1e-12)


@pytest.fixture(scope="module")
def full_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_aster_tile(tmp_path_factory.mktemp("tiles"), 40, -100, cheap_terrain(ASTER_SIZE, 5))


def test_wkb_sizes_and_postgis_reading(full_file: Path, scratch_dsn: str) -> None:
    facts = read_facts(full_file)
    rows = list(encode_rows(full_file, facts.grid))
    tiles = [bytes(tile) for row in rows for tile in row.tiles()]
    assert len(rows) == 15 and len(tiles) == 225
    assert (len(tiles[0]), len(tiles[14]), len(tiles[-1])) == (131_136, 8_768, 642)
    with psycopg.connect(scratch_dsn) as conn:
        meta = conn.execute(
            "SELECT (m).upperleftx, (m).upperlefty, (m).width, (m).height, (m).scalex, (m).scaley, (m).srid, "
            "(m).numbands, ST_BandPixelType(r), ST_BandNoDataValue(r), ST_Value(r, 1, 3, 2) "
            "FROM (SELECT %s::raster AS r) s, ST_MetaData(r) AS m",
            [binascii.hexlify(tiles[14]).decode()]).fetchone()
    x, y = facts.grid.tile_origin(3584, 0)
    pixels = cheap_terrain(ASTER_SIZE, 5)
    assert meta == (x, y, 17, 256, 1 / 3600, -1 / 3600, 4326, 1, "16BSI", None, int(pixels[1, 3584 + 2]))


def test_nodata_tag_is_kept_and_empty_tiles_skipped(tmp_path: Path, scratch_dsn: str) -> None:
    data = cheap_terrain(512, 1)
    data[256:, :256] = -9999
    path = write_aster_tile(tmp_path, 40, -100, data, nodata=-9999)
    facts = read_facts(path)
    rows = list(encode_rows(path, facts.grid))
    assert [row.skipped for row in rows] == [[], [2]]
    tile = bytes(next(rows[1].tiles()))
    with psycopg.connect(scratch_dsn) as conn:
        nodata = conn.execute("SELECT ST_BandNoDataValue(%s::raster)", [binascii.hexlify(tile).decode()]).fetchone()
    assert nodata == (-9999.0,)


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda folder: (folder / "x.tif").write_bytes(b"II*\x00garbage"), "not a readable GeoTIFF"),
        (lambda folder: write_aster_tile(folder, 1, 1, cheap_terrain(64, 1), crs="EPSG:32633"), "expected EPSG:4326"),
        (lambda folder: write_aster_tile(folder, 1, 1, cheap_terrain(64, 1).astype("uint8"), dtype="uint8"),
         "expected Int16"),
    ],
)
def test_bad_headers_name_the_file_and_the_expectation(tmp_path: Path, make, expected: str) -> None:
    make(tmp_path)
    path = next(tmp_path.iterdir())
    with pytest.raises(BadRaster) as caught:
        read_facts(path)
    assert str(path) in str(caught.value) and expected in str(caught.value)


def test_truncated_pixels_are_reported_while_encoding(full_file: Path, tmp_path: Path) -> None:
    cut = tmp_path / full_file.name
    cut.write_bytes(full_file.read_bytes()[: full_file.stat().st_size // 3])
    facts = read_facts(cut)  # the header is intact
    with pytest.raises(BadRaster, match="truncated or corrupt"):
        list(encode_rows(cut, facts.grid))
