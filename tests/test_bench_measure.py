"""bench/measure.py: the power-law projection, the phases of a measured command, disk by folder."""

import os

import pytest

from bench.measure import Disk, folder_bytes, medians, power_law, run_measured


def test_power_law_carries_the_measured_growth_to_the_full_size():
    assert power_law((0.05, 10.0), (0.1, 40.0)) == (4000.0, 2.0)
    assert power_law((0.1, 10.0), (0.05, 5.0)) == (100.0, 1.0)  # the points in either order
    value, exponent = power_law((0.05, 20.0), (0.1, 20.0))
    assert (value, exponent) == (20.0, 0.0)


def test_power_law_of_a_stage_absent_at_the_small_scale_is_linear():
    assert power_law((0.05, 0.0), (0.1, 3.0)) == (30.0, 1.0)


def test_a_command_is_measured_by_the_phases_its_stderr_announces(tmp_path):
    command = "echo preparing >&2; echo '== step: load' >&2; echo noise >&2; echo '== step: index' >&2"
    run = run_measured(command, name="whole", first_phase="start",
                       phase_of=lambda line: line.split(": ", 1)[1] if line.startswith("== step: ") else None,
                       disk=Disk({"here": tmp_path}))
    assert run.returncode == 0
    assert [phase.name for phase in run.phases] == ["start", "load", "index"]
    assert run.total.name == "whole"
    assert set(run.total.peak_disk_mb) == {"here", "total"}


def test_a_failed_command_stops_the_bench_with_its_last_lines():
    with pytest.raises(SystemExit, match="(?s)load failed \\(exit 3\\).*\n  the reason"):
        run_measured("echo 'the reason' >&2; exit 3", name="load", phase_of=lambda line: None)
    assert run_measured("exit 3", check=False).returncode == 3


def test_folder_bytes_counts_a_hard_linked_file_once(tmp_path):
    (tmp_path / "part").write_bytes(b"x" * 8192)
    os.link(tmp_path / "part", tmp_path / "link")
    assert folder_bytes(tmp_path) == os.lstat(tmp_path / "part").st_blocks * 512


def test_rounds_of_a_comparison_sum_up_to_medians_ranges_and_ratios():
    rounds = [{"anchor": {"tool": "a", "wall_s": wall * 2, "rows": 7}, "ours": {"tool": "o", "wall_s": wall,
                                                                               "rows": 5, "phases_s": None}}
              for wall in (1.0, 3.0, 2.0)]
    assert medians(rounds, "anchor", "ours") == {
        "anchor": {"wall_s": 4.0, "rows": 7, "wall_min_s": 2.0, "wall_max_s": 6.0},
        "ours": {"wall_s": 2.0, "rows": 5, "wall_min_s": 1.0, "wall_max_s": 3.0},
        "ratio_of_median_walls": 2.0, "ratios_per_round": [2.0, 2.0, 2.0]}
