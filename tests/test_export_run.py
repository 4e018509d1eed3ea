"""`ingest export` killed (-9) while it writes, and on a full disk: files appear complete or not at all, and
the same command finishes the export, writing only what was not complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from load_helpers import BIN, ingest, wait_for

from testkit.tools import missing


@pytest.fixture(scope="module")
def checked_demo(demo_db: tuple[str, Path]) -> str:
    """The module's demo database, analyzed again (a copy does not take its statistics along)."""
    finalized = ingest("finalize", "--dsn", demo_db[0])
    assert finalized.returncode == 0, finalized.stderr
    return demo_db[0]


@pytest.fixture(scope="module")
def reference(checked_demo: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export run without interruption, to compare with."""
    folder = tmp_path_factory.mktemp("reference") / "out"
    done = ingest("export", str(folder), "--dsn", checked_demo)
    assert done.returncode == 0, done.stderr
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and ".export" not in path.parts}


def test_killed_while_writing_a_cog_then_the_same_command_finishes(checked_demo: str, reference: Path,
                                                                   tmp_path: Path) -> None:
    folder = tmp_path / "out"
    process = subprocess.Popen([str(BIN / "ingest"), "export", str(folder), "--dsn", checked_demo],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    in_the_making = lambda: any((folder / "dem").glob("*.partial")) if (folder / "dem").is_dir() else False  # noqa: E731
    assert wait_for(in_the_making, process), process.communicate()
    process.send_signal(signal.SIGKILL)
    process.wait()
    left = files_of(folder)
    complete = {name: data for name, data in left.items() if not name.endswith(".partial")}
    wanted = files_of(reference)
    assert "export.json" not in complete and len(complete) >= 5  # the five tables came first
    assert all(data == wanted[name] for name, data in complete.items())  # what is there is whole
    again = ingest("export", str(folder), "--dsn", checked_demo, "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert sorted(report["kept"]) == sorted(complete)
    assert sorted(report["written"]) == sorted(set(wanted) - set(complete) - {"export.json"})
    assert {name: data for name, data in files_of(folder).items() if name != "export.json"} == \
        {name: data for name, data in wanted.items() if name != "export.json"}
    assert ingest("export", "--check", str(folder), "--dsn", checked_demo).returncode == 0


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` (root only)."""
    if os.geteuid() != 0:
        missing("root", "a full disk is made by mounting a small tmpfs")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                             text=True)
    if mounted.returncode:
        missing("mount", f"cannot mount a tmpfs ({mounted.stderr.strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def test_a_full_disk_stops_in_one_line_and_keeps_the_complete_files(checked_demo: str, reference: Path,
                                                                    tmp_path: Path) -> None:
    """1.5 MB: the five tables (56 kB) and one COG (1.2 MB) fit, the second COG does not (one COG writer, so
    that the first is written alone)."""
    with small_disk(tmp_path / "disk", "1536k") as disk:
        folder = disk / "out"
        full = ingest("export", str(folder), "--dsn", checked_demo, "--workers", "1")
        assert (full.returncode, full.stdout) == (2, "")
        last = full.stderr.splitlines()[-1]
        assert last.startswith(f"error: {folder}: the disk is full (") and last.endswith(
            " bytes free); the files already complete are kept: free some space and run the same command again")
        kept = files_of(folder)
        wanted = files_of(reference)
        assert sorted(kept) == sorted([*(f"vector/{t}.parquet" for t in ("lakes", "parks", "pois", "regions",
                                                                          "roads")),
                                       sorted(name for name in wanted if name.endswith("_dem.tif"))[0]])
        assert all(data == wanted[name] for name, data in kept.items())
