"""`ingest fetch`: the published sources (Hugging Face dataset Zoe/GS-QA2-source) into their published layout.

    DATA_DIR/dem/tile_list.txt               every DEM tile of the reference table (the tile set, never derived)
    DATA_DIR/dem/tiles/ASTGTMV003_*_dem.tif  the tiles named there (or those of --tiles / --bbox)
    DATA_DIR/osm/osm_extract/<layer>/*.geojson

Each file streams (huggingface_hub's http_get, which retries and resumes a dropped connection with a Range
request; plain HTTP, not Xet, whose client writes the file itself, out of a hasher's reach) into
DATA_DIR/.fetch/<path>.incomplete through a writer that hashes every byte as it is written: the checksum
(sha256 of the LFS object, or the git blob id of a small file) is ready when the last byte is, so no file is
read back to be hashed. A file moves into the layout only after its checksum matched the hub's; one that does
not match is deleted and named, so a stage never sees a partial or unverified file.
DATA_DIR/.fetch/verified.tsv remembers what was verified (path, size, mtime, checksum), so a rerun skips those
files and re-hashes only files that changed since, and the load stages log a fetched file's sha256 from it
(load_state.verified_sha256) instead of reading the file again. A partial file is not resumed across processes: a killed
run costs the files that were in flight (at most --workers files of 15-30 MB for the DEM), which the next run
deletes and downloads again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gsqa_core.errors import EXIT_OK, EXIT_SOME_FAILED, GsqaError
from ingest.load_state import STAGING, VERIFIED_LOG, read_verified

SOURCE_REPO = "Zoe/GS-QA2-source"
WHAT = ("dem", "osm")
TILE_LIST = "dem/tile_list.txt"
TILES_DIR = "dem/tiles"
OSM_DIR = "osm/osm_extract"
RETRY_DELAYS = (1, 2, 4, 8, 16)  # seconds before each new attempt after a server error or a dropped connection
_TILE_NAME = re.compile(r"ASTGTMV003_([NS])(\d{2})([EW])(\d{3})_dem\.tif")
log = logging.getLogger("ingest.fetch")


@dataclass(frozen=True)
class RemoteFile:
    """A file of the dataset at one commit, with the checksum the hub publishes for it."""

    path: str
    size: int
    sha256: str | None  # LFS objects (the tiles and layers)
    blob_id: str  # git blob sha1 of a file kept in git itself (tile_list.txt)

    def hasher(self) -> Any:
        """A fresh hash object of the kind the hub gives for this file, fed the file's bytes in order."""
        if self.sha256 is not None:
            return hashlib.sha256()
        return hashlib.sha1(f"blob {self.size}\0".encode())  # noqa: S324 - git's object id, not security

    def checksum_of(self, local: Path) -> str:
        """The local file's checksum in the form the hub gives for this file (the blob id of a file of the
        listed size: a file of another size never matches, as its size is checked first)."""
        with open(local, "rb") as handle:
            return hashlib.file_digest(handle, self.hasher).hexdigest()

    @property
    def expected(self) -> str:
        return self.sha256 or self.blob_id


@dataclass
class FetchReport:
    revision: str
    repository: str = SOURCE_REPO
    files: list[RemoteFile] = field(default_factory=list)  # every file selected
    present: list[str] = field(default_factory=list)  # verified earlier and unchanged
    downloaded: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # path -> reason
    missing: list[str] = field(default_factory=list)  # named by the tile list or --tiles, not on the hub
    bytes_downloaded: int = 0
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_SOME_FAILED if self.failed or self.missing else EXIT_OK

    @property
    def total_bytes(self) -> int:
        return sum(remote.size for remote in self.files)

    def as_json(self) -> dict[str, Any]:
        return {
            "repository": self.repository, "revision": self.revision, "files": len(self.files),
            "total_bytes": self.total_bytes, "present": len(self.present), "downloaded": self.downloaded,
            "bytes_downloaded": self.bytes_downloaded, "failed": self.failed, "missing": self.missing,
            "seconds": round(self.seconds, 3),
        }


BBox = tuple[float, float, float, float]


def parse_bbox(text: str) -> BBox:
    """W,S,E,N in degrees (EPSG:4326), as --bbox takes it."""
    try:
        west, south, east, north = (float(part) for part in text.split(","))
    except ValueError:
        raise GsqaError(f"--bbox {text!r}: expected W,S,E,N in degrees, e.g. -118.7,33.6,-117.9,34.4") from None
    if not (-180 <= west < east <= 180 and -90 <= south < north <= 90):
        raise GsqaError(f"--bbox {text!r}: expected west < east within -180..180 and south < north within -90..90")
    return west, south, east, north


def tile_in_bbox(name: str, bbox: BBox) -> bool:
    """Does the 1-degree cell of an ASTER tile (named after its SW corner) overlap the box?"""
    match = _TILE_NAME.fullmatch(name)
    if match is None:
        return False
    lat = int(match[2]) * (1 if match[1] == "N" else -1)
    lon = int(match[4]) * (1 if match[3] == "E" else -1)
    west, south, east, north = bbox
    return lon < east and lon + 1 > west and lat < north and lat + 1 > south


def read_tile_names(path: Path) -> list[str]:
    """Tile file names, one per line (a path keeps only its base name); blank lines and # comments skipped."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise GsqaError(f"{path}: cannot read the tile list ({error.__class__.__name__}: {error})") from None
    return [Path(line.strip()).name for line in lines if line.strip() and not line.lstrip().startswith("#")]


class Hub:
    """A dataset on the hub at one commit: its file list (under `tops`, None for all) and the downloads
    (huggingface_hub does HTTP)."""

    def __init__(self, repo: str = SOURCE_REPO, revision: str | None = None,
                 tops: tuple[str | None, ...] = WHAT, advice: str = "or put the files in place yourself and "
                 "build with --offline (make db OFFLINE=1)") -> None:
        from huggingface_hub import HfApi

        self.api, self.repo = HfApi(), repo
        try:
            self.revision = self.api.dataset_info(repo, revision=revision).sha
            self.files = {item.path: item for top in tops for item in self._tree(top)}
        except Exception as error:  # noqa: BLE001 - any failure to reach the hub is the same one-line message
            raise GsqaError(
                f"cannot list the dataset {repo}{'@' + revision if revision else ''} on the Hugging Face hub "
                f"({self.api.endpoint}): {_one_line(error)}. Check the network (or HF_ENDPOINT), {advice}"
            ) from None

    def _tree(self, top: str | None) -> Iterator[RemoteFile]:
        from huggingface_hub import RepoFile

        for item in self.api.list_repo_tree(self.repo, repo_type="dataset", revision=self.revision,
                                            path_in_repo=top, recursive=True):
            if isinstance(item, RepoFile):
                yield RemoteFile(item.path, item.size, item.lfs.sha256 if item.lfs else None, item.blob_id)

    def download(self, remote: RemoteFile, staging: Path, progress: Callable[[int], None]) -> tuple[Path, str]:
        """The file in `staging` and its checksum, hashed as it was written; retried with backoff on server and
        network errors, each new attempt resuming where the file stands."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.errors import RemoteEntryNotFoundError
        from huggingface_hub.file_download import http_get
        from huggingface_hub.utils import build_hf_headers

        url = hf_hub_url(self.repo, remote.path, repo_type="dataset", revision=self.revision)
        staged = staging / f"{remote.path}.incomplete"
        staged.parent.mkdir(parents=True, exist_ok=True)
        bar = _forwarding_bar(progress)
        try:
            with open(staged, "wb") as handle:
                writer = HashingWriter(handle, remote.hasher)
                for attempt, delay in enumerate((*RETRY_DELAYS, None), start=1):
                    try:
                        http_get(url, writer, resume_size=writer.written, headers=build_hf_headers(),
                                 expected_size=remote.size, tqdm_class=bar)
                        break
                    except RemoteEntryNotFoundError:
                        raise
                    except Exception as error:
                        status = getattr(getattr(error, "response", None), "status_code", None)
                        if delay is None or (status is not None and status < 500 and status not in (408, 429)):
                            raise
                        log.warning(f"{remote.path}: {_one_line(error)[:160]}; attempt {attempt + 1} in {delay} s")
                        time.sleep(delay)
        except BaseException:
            staged.unlink(missing_ok=True)  # a partial file is never resumed by another process
            raise
        return staged, writer.hexdigest() or remote.checksum_of(staged)

    def download_verified(self, remote: RemoteFile, staging: Path, progress: Callable[[int], None]) -> Path:
        """download(); a file whose checksum does not match the hub's is deleted and refused."""
        staged, actual = self.download(remote, staging, progress)
        if actual != remote.expected:
            staged.unlink()
            raise ChecksumMismatch(f"checksum mismatch: the hub says {remote.expected}, the download has {actual}; "
                                   "the file was discarded (run again to download it again)")
        return staged


class HashingWriter:
    """The file object http_get writes a download into: every byte goes to the file and to the hash on its way.
    http_get only appends, but when a server answers a resumed request with the whole file it seeks back to
    the start and truncates: the hash starts again with it. Any other seek makes the hash unknown (None), and
    the file is then hashed from disk."""

    def __init__(self, handle: Any, hasher: Callable[[], Any]) -> None:
        self.handle, self.hasher = handle, hasher
        self.hash: Any = hasher()
        self.written = 0  # bytes hashed, in order from the file's start

    def write(self, chunk: bytes) -> int:
        self.handle.write(chunk)
        if self.hash is not None:
            self.hash.update(chunk)
        self.written += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.handle.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        position = self.handle.seek(offset, whence)
        if position == 0:
            self.hash, self.written = self.hasher(), 0
        elif position != self.written:
            self.hash = None
        self.written = position
        return position

    def truncate(self, size: int | None = None) -> int:
        return self.handle.truncate(size)

    def hexdigest(self) -> str | None:
        return None if self.hash is None else self.hash.hexdigest()


def _forwarding_bar(progress: Callable[[int], None]) -> type:
    """A progress-bar class for huggingface_hub that forwards its counts to `progress` (the one combined bar);
    a bar opened again on a resumed attempt starts at `initial`, which is not counted twice."""
    counted = 0

    class Bar:
        def __init__(self, *args: Any, initial: int = 0, **kwargs: Any) -> None:
            nonlocal counted
            progress(initial - counted)
            counted = initial

        def update(self, n: int | float | None = 1) -> None:
            nonlocal counted
            counted += int(n or 0)
            progress(int(n or 0))

        def __enter__(self) -> Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def close(self) -> None:
            pass

    return Bar


class ChecksumMismatch(GsqaError):
    """A downloaded file is not the one the hub lists."""


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def select(hub: Hub, what: list[str], tile_names: list[str] | None, bbox: BBox | None,
           report: FetchReport, scratch: Path) -> list[RemoteFile]:
    """The files to have, in layout order; names the hub lacks go to report.missing."""
    selected: list[RemoteFile] = []
    if "dem" in what:
        if TILE_LIST not in hub.files:
            raise GsqaError(f"the dataset {SOURCE_REPO}@{hub.revision[:12]} has no {TILE_LIST}")
        tile_list = hub.files[TILE_LIST]
        selected.append(tile_list)
        if tile_names is None:
            try:
                tile_names = read_tile_names(hub.download_verified(tile_list, scratch, lambda n: None))
            except ChecksumMismatch as error:
                raise GsqaError(f"{TILE_LIST}: {error}") from None
        if bbox is not None:
            tile_names = [name for name in tile_names if tile_in_bbox(name, bbox)]
        for name in sorted(set(tile_names)):
            remote = hub.files.get(f"{TILES_DIR}/{name}")
            if remote is None:
                report.missing.append(f"{TILES_DIR}/{name}")
            else:
                selected.append(remote)
    if "osm" in what:
        selected += sorted((remote for path, remote in hub.files.items()
                            if path.startswith(f"{OSM_DIR}/") and path.endswith(".geojson")),
                           key=lambda remote: remote.path)
    return selected


class VerifiedLog:
    """DATA_DIR/.fetch/verified.tsv: path, size, mtime_ns and checksum of every file moved into the layout."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / VERIFIED_LOG
        self.entries = read_verified(self.path)
        self.lock = threading.Lock()

    def holds(self, remote: RemoteFile, local: Path) -> bool:
        """Is `local` the verified copy of `remote`? Hashes it only when the log does not vouch for it."""
        try:
            stat = local.stat()
        except FileNotFoundError:
            return False
        if stat.st_size != remote.size:
            return False
        if self.entries.get(remote.path) == (stat.st_size, stat.st_mtime_ns, remote.expected):
            return True
        if remote.checksum_of(local) != remote.expected:
            return False
        self.add(remote, local)
        return True

    def add(self, remote: RemoteFile, local: Path) -> None:
        stat = local.stat()
        with self.lock:
            self.entries[remote.path] = (stat.st_size, stat.st_mtime_ns, remote.expected)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as handle:
                handle.write(f"{remote.path}\t{stat.st_size}\t{stat.st_mtime_ns}\t{remote.expected}\n")


def fetch(data_dir: Path, what: list[str], tiles_file: Path | None = None, bbox: BBox | None = None,
          dry_run: bool = False, workers: int = 8, progress: bool = True) -> FetchReport:
    """Download what is selected and not yet verified in DATA_DIR; see the module docstring."""
    unknown = sorted(set(what) - set(WHAT))
    if unknown or not what:
        raise GsqaError(f"--what {','.join(what)}: expected a comma-separated subset of {','.join(WHAT)}")
    tile_names = read_tile_names(tiles_file) if tiles_file is not None else None
    _require_writable(data_dir, dry_run)
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        if not dry_run:
            stack.enter_context(_staging_lock(data_dir))
        return _fetch_locked(data_dir, what, tile_names, bbox, dry_run, workers, progress, started)


def _fetch_locked(data_dir: Path, what: list[str], tile_names: list[str] | None, bbox: BBox | None, dry_run: bool,
                  workers: int, progress: bool, started: float) -> FetchReport:
    hub = Hub()
    report = FetchReport(revision=hub.revision)
    with tempfile.TemporaryDirectory(prefix="gsqa-fetch-") as scratch:
        report.files = select(hub, what, tile_names, bbox, report, Path(scratch))
    verified = VerifiedLog(data_dir)
    pending = [remote for remote in report.files if not verified.holds(remote, data_dir / remote.path)]
    report.present = [remote.path for remote in report.files if remote not in pending]
    if not dry_run:
        _download_all(hub, pending, data_dir, verified, report, workers, progress)
    else:
        report.downloaded = [remote.path for remote in pending]  # what a real run would download
        report.bytes_downloaded = sum(remote.size for remote in pending)
    report.seconds = time.monotonic() - started
    return report


def fetch_repository(target: Path, repo: str, revision: str | None, workers: int = 8,
                     progress: bool = True) -> FetchReport:
    """Every file of a dataset repository at `revision` into `target`, verified and resumed as fetch() does
    (an `ingest snapshot` on the hub)."""
    _require_writable(target, dry_run=False)
    started = time.monotonic()
    with _staging_lock(target):
        hub = Hub(repo, revision, tops=(None,), advice="or download the snapshot folder yourself and restore "
                  "from it")
        report = FetchReport(revision=hub.revision, repository=repo, files=sorted(hub.files.values(),
                                                                                   key=lambda remote: remote.path))
        verified = VerifiedLog(target)
        pending = [remote for remote in report.files if not verified.holds(remote, target / remote.path)]
        report.present = [remote.path for remote in report.files if remote not in pending]
        _download_all(hub, pending, target, verified, report, workers, progress)
    report.seconds = time.monotonic() - started
    return report


def _require_writable(data_dir: Path, dry_run: bool) -> None:
    if data_dir.exists() and not data_dir.is_dir():
        raise GsqaError(f"{data_dir}: not a directory")
    if dry_run:
        return
    try:
        (data_dir / STAGING).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise GsqaError(f"{data_dir}: cannot write the downloads there ({error.strerror})") from None
    if not os.access(data_dir / STAGING, os.W_OK):
        raise GsqaError(f"{data_dir}: cannot write the downloads there (permission denied)")


@contextlib.contextmanager
def _staging_lock(data_dir: Path) -> Iterator[None]:
    """One fetch per DATA_DIR; partial files of an earlier, killed run are deleted (they cannot be resumed)."""
    staging = data_dir / STAGING
    with open(staging / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GsqaError(f"another `ingest fetch` is writing into {data_dir} right now") from None
        for stale in staging.rglob("*.incomplete"):
            stale.unlink()
        yield


def _download_all(hub: Hub, pending: list[RemoteFile], data_dir: Path, verified: VerifiedLog,
                  report: FetchReport, workers: int, progress: bool) -> None:
    staging = data_dir / STAGING
    bar = tqdm(total=sum(remote.size for remote in pending), unit="B", unit_scale=True,
               desc=f"ingest fetch {len(pending)} files", disable=not (progress and pending))
    bar_lock, report_lock = threading.Lock(), threading.Lock()

    def advance(n: int) -> None:
        with bar_lock:
            bar.update(n)

    def one(remote: RemoteFile) -> None:
        from huggingface_hub.errors import RemoteEntryNotFoundError

        try:
            staged = hub.download_verified(remote, staging, advance)
        except RemoteEntryNotFoundError:
            with report_lock:
                report.missing.append(remote.path)
            return
        except ChecksumMismatch as error:
            with report_lock:
                report.failed[remote.path] = str(error)
            return
        except Exception as error:  # noqa: BLE001 - reported per file; the other files go on
            with report_lock:
                report.failed[remote.path] = f"download failed: {_one_line(error)[:300]}"
            return
        final = data_dir / remote.path
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, final)
        verified.add(remote, final)
        with report_lock:
            report.downloaded.append(remote.path)
            report.bytes_downloaded += remote.size

    with bar, ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(one, pending))
    report.downloaded.sort()
    report.missing.sort()

