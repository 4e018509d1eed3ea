"""`ingest fetch` against a local hub (testkit/fake_hub.py): layout, checksums, resume, retries, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from load_helpers import partial_download, wait_for

from ingest import fetch
from ingest.load_state import file_checksum
from testkit.fake_hub import FakeHub

INGEST = str(Path(sys.executable).parent / "ingest")
TILES = ["ASTGTMV003_N40W100_dem.tif", "ASTGTMV003_N40W099_dem.tif", "ASTGTMV003_N45W070_dem.tif"]
# huggingface_hub writes what it receives in chunks of 10 MiB: a resumed download starts at a chunk boundary,
# so the files these tests interrupt are larger than one chunk.
CHUNK = 10 * 1024 * 1024


def source_files() -> dict[str, bytes]:
    files = {"dem/tile_list.txt": "".join(f"{name}\n" for name in TILES).encode(), "README.md": b"# source\n"}
    for number, name in enumerate(TILES):
        files[f"dem/tiles/{name}"] = bytes([number]) * 300_000 + os.urandom(1000)
    for layer in ("pois", "roads", "postal_codes"):
        files[f"osm/osm_extract/{layer}/part-00000.geojson"] = f'{{"layer": "{layer}"}}\n'.encode() * 500
    return files


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    with FakeHub(fetch.SOURCE_REPO, source_files()) as server:
        yield server


def hub_env(hub: FakeHub, tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HF_ENDPOINT": hub.endpoint(), "HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_XET": "1"}


def run_fetch(hub: FakeHub, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([INGEST, "fetch", str(tmp_path / "data"), *args], capture_output=True, text=True,
                          env=hub_env(hub, tmp_path), timeout=180)


# `ingest fetch` with an audit hook that lists every file of DATA_DIR opened for reading, to show that no
# download is read back to be hashed.
WATCH_READS = """
import os
import sys
from pathlib import Path
from ingest.cli import main

listing, data, reads = Path(sys.argv.pop()), Path(sys.argv[2]).resolve(), []

def hook(event, args):
    if event != "open" or isinstance(args[0], int):
        return
    reading = (args[2] & 3) == 0 if args[1] is None else args[1].strip("bt") == "r"  # os.open gives flags only
    path = Path(os.fsdecode(args[0])).resolve()
    if reading and path.is_relative_to(data):
        reads.append(str(path.relative_to(data)))

sys.addaudithook(hook)
try:
    main()
finally:
    listing.write_text("".join(read + chr(10) for read in reads))
"""


def run_fetch_watching_reads(hub: FakeHub, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                                                  list[str]]:
    """run_fetch(), and the files of DATA_DIR it opened for reading, in order (verified.tsv included)."""
    reads = tmp_path / "reads.txt"
    result = subprocess.run([sys.executable, "-c", WATCH_READS, "fetch", str(tmp_path / "data"), *args, str(reads)],
                            capture_output=True, text=True, env=hub_env(hub, tmp_path), timeout=180)
    return result, reads.read_text().splitlines()


def layout(data: Path) -> dict[str, str]:
    """Files of the published layout (staging excluded) -> sha256."""
    return {str(path.relative_to(data)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(data.rglob("*")) if path.is_file() and fetch.STAGING not in path.parts}


def expected_layout(hub: FakeHub, paths: list[str] | None = None) -> dict[str, str]:
    return {path: hashlib.sha256(body).hexdigest() for path, body in sorted(hub.files.items())
            if path != "README.md" and (paths is None or path in paths)}


def test_fetch_writes_the_published_layout_verified_and_a_rerun_downloads_nothing(hub: FakeHub, tmp_path: Path) -> None:
    first, reads = run_fetch_watching_reads(hub, tmp_path, "--json")
    assert first.returncode == 0, first.stderr
    assert reads == []  # every file hashed as it was written, none read back
    report = json.loads(first.stdout)
    assert report["files"] == 7 and len(report["downloaded"]) == 7 and not report["failed"] and not report["missing"]
    assert layout(tmp_path / "data") == expected_layout(hub)
    downloads = len([request for request in hub.requests if request[0] == "GET"])

    again, reads = run_fetch_watching_reads(hub, tmp_path, "--json")
    assert again.returncode == 0, again.stderr
    assert reads == [f"{fetch.STAGING}/verified.tsv"]  # the log vouches for every file: none is hashed again
    assert json.loads(again.stdout)["present"] == 7 and json.loads(again.stdout)["downloaded"] == []
    # Only tile_list.txt is read again (to know the tile set); no tile or layer is downloaded twice.
    assert [request[1] for request in hub.requests if request[0] == "GET"][downloads:] == ["dem/tile_list.txt"]


def test_a_file_changed_on_disk_is_verified_again_and_replaced(hub: FakeHub, tmp_path: Path) -> None:
    assert run_fetch(hub, tmp_path).returncode == 0
    damaged = tmp_path / "data" / "dem/tiles" / TILES[0]
    damaged.write_bytes(b"\0" * damaged.stat().st_size)  # same size, other bytes
    result, reads = run_fetch_watching_reads(hub, tmp_path, "--json")
    assert result.returncode == 0, result.stderr
    # The changed file is hashed once where it lies (and found wrong); its new download is not read back.
    assert reads == [f"{fetch.STAGING}/verified.tsv", f"dem/tiles/{TILES[0]}"]
    assert json.loads(result.stdout)["downloaded"] == [f"dem/tiles/{TILES[0]}"]
    assert layout(tmp_path / "data") == expected_layout(hub)


def test_the_stages_take_a_fetched_file_s_checksum_from_the_verified_log(hub: FakeHub, tmp_path: Path) -> None:
    assert run_fetch(hub, tmp_path).returncode == 0
    tile = tmp_path / "data" / "dem/tiles" / TILES[0]
    published = hashlib.sha256(hub.files[f"dem/tiles/{TILES[0]}"]).hexdigest()
    assert file_checksum(tile) == published
    # The log vouches for a file of the size and mtime it verified (as a rerun of fetch trusts it): other bytes
    # written with both kept are not read. Once the mtime moves, the file is hashed.
    stat = tile.stat()
    tile.write_bytes(b"\1" * stat.st_size)
    os.utime(tile, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_checksum(tile) == published
    os.utime(tile, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert file_checksum(tile) == hashlib.sha256(b"\1" * stat.st_size).hexdigest()
    assert file_checksum(tmp_path / "data" / "dem/tile_list.txt") == hashlib.sha256(  # the log has its blob id
        hub.files["dem/tile_list.txt"]).hexdigest()


def test_tiles_bbox_what_and_dry_run_select_files(hub: FakeHub, tmp_path: Path) -> None:
    dry = run_fetch(hub, tmp_path, "--what", "dem", "--bbox", "-98.9,40.2,-98.5,40.8", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"dem/tiles/{TILES[1]}" in dry.stdout and TILES[0] not in dry.stdout and TILES[2] not in dry.stdout
    assert "2 files" in dry.stdout and "2 to download" in dry.stdout
    assert not (tmp_path / "data").exists()

    chosen = tmp_path / "mine.txt"
    chosen.write_text(f"# a comment\n/some/where/{TILES[2]}\n")
    result = run_fetch(hub, tmp_path, "--what", "dem", "--tiles", str(chosen))
    assert result.returncode == 0, result.stderr
    assert layout(tmp_path / "data") == expected_layout(hub, ["dem/tile_list.txt", f"dem/tiles/{TILES[2]}"])


def big_file(hub: FakeHub, path: str) -> None:
    hub.files[path] = os.urandom(2 * CHUNK + 12345)


def test_a_connection_dropped_midway_resumes_with_a_range_request(hub: FakeHub, tmp_path: Path) -> None:
    path = f"dem/tiles/{TILES[1]}"
    big_file(hub, path)
    hub.faults.drop_midway.add(path)  # after half the file: one chunk written
    result = run_fetch(hub, tmp_path)
    assert result.returncode == 0, result.stderr
    assert hub.gets(path) == [None, f"bytes={CHUNK}-"]
    assert layout(tmp_path / "data") == expected_layout(hub)


def test_a_resume_answered_with_the_whole_file_is_hashed_from_its_start(hub: FakeHub, tmp_path: Path) -> None:
    path = f"dem/tiles/{TILES[1]}"
    big_file(hub, path)
    hub.faults.drop_midway.add(path)
    hub.faults.ignore_range.add(path)  # the resumed GET gets 200 and the whole file: the download starts over
    result, reads = run_fetch_watching_reads(hub, tmp_path)
    assert result.returncode == 0, result.stderr
    assert hub.gets(path) == [None, f"bytes={CHUNK}-"]
    assert reads == []
    assert layout(tmp_path / "data") == expected_layout(hub)


def test_a_server_error_is_retried_with_backoff(hub: FakeHub, tmp_path: Path) -> None:
    path = "osm/osm_extract/roads/part-00000.geojson"
    hub.faults.server_errors[path] = 1
    result = run_fetch(hub, tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(hub.gets(path)) == 2
    assert f"{path}: " in result.stderr and "attempt 2 in 1 s" in result.stderr
    assert layout(tmp_path / "data") == expected_layout(hub)


def test_a_wrong_checksum_is_refused_and_the_file_never_enters_the_layout(hub: FakeHub, tmp_path: Path) -> None:
    path = f"dem/tiles/{TILES[2]}"
    hub.faults.corrupt.add(path)
    result, reads = run_fetch_watching_reads(hub, tmp_path)
    assert result.returncode == 1
    assert reads == []  # the mismatch was found as the file was written
    failed = [line for line in result.stdout.splitlines() if "failed:" in line]
    assert len(failed) == 1 and path in failed[0] and "checksum mismatch" in failed[0]
    assert "Traceback" not in result.stderr
    assert layout(tmp_path / "data") == expected_layout(hub, [name for name in hub.files if name != path])
    assert not list((tmp_path / "data" / fetch.STAGING).rglob(TILES[2]))  # not kept in staging either

    hub.faults.corrupt.clear()  # the hub is fixed: a rerun completes the layout
    assert run_fetch(hub, tmp_path).returncode == 0
    assert layout(tmp_path / "data") == expected_layout(hub)


def test_a_tile_missing_on_the_hub_is_named_in_one_line(hub: FakeHub, tmp_path: Path) -> None:
    path = f"dem/tiles/{TILES[0]}"
    hub.faults.unlisted.add(path)
    result = run_fetch(hub, tmp_path)
    assert result.returncode == 1
    missing = [line for line in result.stdout.splitlines() if "missing:" in line]
    assert missing == [f"  missing: {path} is named by the tile list but is not in {fetch.SOURCE_REPO}@cccccccccccc"]
    assert len(layout(tmp_path / "data")) == 6


def test_unreachable_hub_and_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:1", "HF_HOME": str(tmp_path / "hf")}
    down = subprocess.run([INGEST, "fetch", str(tmp_path / "data")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert down.returncode == 2 and down.stderr.count("\n") == 1
    assert "cannot list the dataset Zoe/GS-QA2-source" in down.stderr and "--offline" in down.stderr
    for args, expected in ((["--bbox", "1,2,3"], "W,S,E,N"), (["--bbox", "5,0,4,1"], "west < east"),
                           (["--what", "dem,lidar"], "subset of dem,osm")):
        result = subprocess.run([INGEST, "fetch", str(tmp_path / "data"), *args], capture_output=True, text=True,
                                env=env, timeout=60)
        assert result.returncode == 2 and expected in result.stderr and "Traceback" not in result.stderr, args


def test_kill_9_during_a_download_then_rerun_resumes_and_completes(hub: FakeHub, tmp_path: Path) -> None:
    path = f"dem/tiles/{TILES[0]}"
    big_file(hub, path)
    hub.faults.slow[path] = 0.02  # about 8 s for the file: caught after its first chunk is written
    process = subprocess.Popen([INGEST, "fetch", str(tmp_path / "data"), "--workers", "1"], env=hub_env(hub, tmp_path),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # Only the big tile gets a first chunk written before it is finished (the others are one chunk).
        assert wait_for(lambda: partial_download(tmp_path / "data", CHUNK), process), "not caught midway"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert not (tmp_path / "data" / path).exists()  # a partial file never reaches the layout
    done_before = f"dem/tiles/{TILES[1]}"  # sorts before the big tile: downloaded and verified before the kill
    assert (tmp_path / "data" / done_before).exists()
    hub.faults.slow.clear()
    result = run_fetch(hub, tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(hub.gets(done_before)) == 1  # kept, not downloaded again
    assert layout(tmp_path / "data") == expected_layout(hub)
    assert not list((tmp_path / "data" / fetch.STAGING).rglob("*.incomplete"))  # the killed run's partial file


def test_tile_in_bbox_uses_the_south_west_corner_in_the_name() -> None:
    assert fetch.tile_in_bbox("ASTGTMV003_N40W100_dem.tif", (-99.9, 40.1, -99.8, 40.2))
    assert not fetch.tile_in_bbox("ASTGTMV003_N40W100_dem.tif", (-99.0, 40.1, -98.5, 40.2))  # touching is not in
    assert fetch.tile_in_bbox("ASTGTMV003_S01E010_dem.tif", (10.5, -0.5, 10.6, -0.4))
    assert not fetch.tile_in_bbox("not_a_tile.tif", (-180, -90, 180, 90))
