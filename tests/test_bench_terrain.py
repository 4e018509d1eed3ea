"""bench/terrain.py: the pixel-step statistics and the terrain mix of the modelled tile set."""

import numpy as np
import pytest

from bench.terrain import (
    APPALACHIANS,
    LAND_SPANS,
    add_steps,
    land_cells,
    mix,
    sample_cells,
    step_summary,
    steps,
    terrain_of,
)
from ingest.dem.synthetic import aster_name


def test_steps_count_horizontal_and_vertical_neighbours():
    heights = np.array([[0, 3], [1, 1]], dtype=np.int16)  # across: 3, 0; down: 1, 2
    assert steps(heights).tolist() == [1, 1, 1, 1]
    assert step_summary(steps(heights)) == {"median_m": 1, "p90_m": 3, "mean_m": 1.5}


def test_step_counts_of_two_files_add_up():
    assert add_steps(np.array([1, 2]), np.array([0, 0, 5])).tolist() == [1, 2, 5]
    flat, steep = np.zeros((3, 3), dtype=np.int16), np.array([[0, 10, 20]] * 3, dtype=np.int16)
    both = add_steps(steps(flat), steps(steep))
    assert both[0] == 12 + 6 and both[10] == 6
    assert step_summary(both) == {"median_m": 0, "p90_m": 10, "mean_m": 2.5}


@pytest.mark.parametrize(("lat", "lon", "terrain"), [
    (40, -110, "rough"), (40, -105, "rough"), (40, -104, "gentle"), (35, -83, "rugged"), (30, -83, "gentle"),
    (44, -70, "rugged"), (44, -69, "gentle"), (49, -126, "rough"),
])
def test_terrain_of_a_cell_follows_its_region(lat, lon, terrain):
    assert terrain_of(lat, lon) == terrain


def test_modelled_land_cells_and_their_mix():
    cells = land_cells()
    assert len(cells) == len(set(cells)) == 1166
    assert mix(cells) == {"gentle": 660, "rugged": 65, "rough": 441}
    assert [aster_name(lat, lon) for lat, lon in cells] == sorted(aster_name(lat, lon) for lat, lon in cells)
    assert set(APPALACHIANS) <= set(LAND_SPANS)


def test_a_sample_spreads_over_the_land_cells_and_keeps_the_mix():
    assert mix(sample_cells(118)) == {"gentle": 66, "rugged": 7, "rough": 45}
    assert mix(sample_cells(12)) == {"gentle": 5, "rugged": 1, "rough": 6}
    assert sample_cells(1166) == land_cells()


def test_the_full_tile_count_takes_water_cells_after_the_land():
    cells = sample_cells(1182)
    assert len(set(cells)) == 1182
    assert set(land_cells()) < set(cells)
    with pytest.raises(ValueError, match="the box has 1560 cells, not 1561"):
        sample_cells(1561)
