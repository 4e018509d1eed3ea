"""bench/code_sandbox.py end to end at a tiny size, on the demo database's export: every measure gets its row,
each kind of call its anchor's time and ratio, and the exit code says whether the targets line says met (no
timing is asserted)."""

import subprocess
import sys
from pathlib import Path

import pytest
from test_python_sandbox import image  # noqa: F401 - the fixture: the sandbox image, built where missing

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.docker
KINDS = ["print(1)", "pyarrow: one row group", "geopandas: pois whole", "rasterio: a point"]


def test_the_bench_measures_each_kind_of_call_against_a_container_per_call(demo_export: Path,
                                                                        image: str) -> None:  # noqa: F811
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "code_sandbox.py"), "--runs", "1", "--calls", "1",
                           "--export", str(demo_export)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = done.stdout.splitlines()
    rows = {line[:40].rstrip(): line[40:].split() for line in lines[2:-2]}
    assert list(rows) == ["first call (container start)", *KINDS, "container peak MB",
                          "episode end (container removed)"], done.stdout + done.stderr
    assert all(len(rows[kind]) == 6 and float(rows[kind][-1]) > 0 for kind in KINDS), rows
    assert lines[-2].startswith("4 episodes at once, ms per print(1)")
    assert lines[-1].startswith("targets: later calls < 150 ms")
    assert done.returncode == (0 if lines[-1].endswith(": met") else 1), done.stderr
