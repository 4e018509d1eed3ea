"""The declared DEM grid against the published reference (docs/REFERENCE-DB.md, "The DEM table")."""

from gsqa_core import dem_grid, schema
from ingest import check


def test_an_aster_file_is_cut_into_raster2pgsqls_225_tiles():
    assert dem_grid.ASTER_SIZE == 3601 and dem_grid.TILE == 256
    assert dem_grid.tile_sizes(dem_grid.ASTER_SIZE, dem_grid.ASTER_SIZE) == {
        (256, 256): 196, (17, 256): 14, (256, 17): 14, (17, 17): 1}
    assert dem_grid.TILES_PER_FILE == 225


def test_the_reference_totals_follow_from_the_grid():
    assert schema.REFERENCE_DEM_TILES == 265_950
    assert check.REFERENCE_CENSUS == {(256, 256): 231_672, (17, 256): 16_548, (256, 17): 16_548, (17, 17): 1_182}


def test_an_aster_file_reaches_half_a_pixel_beyond_its_cell():
    assert dem_grid.aster_origin(41, -88) == (-88 - 1 / 7200, 42 + 1 / 7200)
