"""`ingest export DIR`: the stage. Preflight, the files to write, resume, progress, the manifest last.

Only a database that passes `ingest check` is exported. DIR/.export/identity names the database the folder is
an export of: a folder holding another database's export (or other files) is refused before anything is
written. Each file is written under a temporary name (`NAME.partial`) and renamed when complete, then recorded
in DIR/.export/journal.jsonl (its manifest entry, size and mtime), so files appear complete or not at all and
a rerun, even after kill -9, writes only the files that are missing or no longer what it recorded (a file
whose size or mtime changed is written again). A folder with a manifest but no journal (copied elsewhere) has
its files' sha256 checked against the manifest instead. A full disk stops the run in one line; the files
already complete are kept.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from tqdm import tqdm

from gsqa_core import schema
from gsqa_core.db import connect, where
from gsqa_core.errors import GsqaError
from ingest import check
from ingest.export import flatgeobuf, geojson, vector
from ingest.export.manifest import MANIFEST, describe_database, file_entry, read_manifest, write_manifest
from ingest.ordered_pool import JobStream, OrderedPool
from ingest.snapshot.manifest import sha256_of

if TYPE_CHECKING:  # ingest.export.dem loads rasterio (GDAL), which only an export of the DEM needs
    from ingest.export import dem

WORK = ".export"
JOURNAL = "journal.jsonl"
IDENTITY = "identity"
PARTIAL = ".partial"
VECTOR_DIR = "vector"
DEM_DIR = "dem"
WHAT = ("vector", "dem")
FORMATS = ("parquet", "geojson", "flatgeobuf")  # of the vector tables
OURS = {MANIFEST, f"{MANIFEST}.partial", WORK, VECTOR_DIR, DEM_DIR, geojson.FOLDER, flatgeobuf.FOLDER}


@dataclass
class ExportReport:
    folder: str
    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    manifest_sha256: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "written": self.written, "kept": self.kept, "files": self.files,
                "bytes": self.bytes, "manifest_sha256": self.manifest_sha256, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class Job:
    """One file of the export: where it goes and what writes it (to the path given, returning what it holds)."""

    path: str  # relative to the folder
    write: Callable[[Path], dict[str, Any]]
    done: Callable[[], Any] = lambda: None  # after the file was written or found intact (a progress bar)


class Journal:
    """The files finished so far (DIR/.export/journal.jsonl), each with its manifest entry, size and mtime."""

    def __init__(self, folder: Path, database_identity: str) -> None:
        self.folder = folder
        self.entries: dict[str, dict[str, Any]] = {}
        self._refuse_another_database(database_identity)
        (folder / WORK).mkdir(parents=True, exist_ok=True)
        (folder / WORK / IDENTITY).write_text(database_identity + "\n")
        self.path = folder / WORK / JOURNAL
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    recorded = json.loads(line)
                except ValueError:  # the last line of a killed run may be cut
                    continue
                self.entries[recorded["entry"]["path"]] = recorded

    def _refuse_another_database(self, database_identity: str) -> None:
        if self.folder.exists() and not self.folder.is_dir():
            raise GsqaError(f"{self.folder}: not a directory")
        kept = self.folder / WORK / IDENTITY
        claimed = kept.read_text().strip() if kept.is_file() else None
        manifest = None
        if (self.folder / MANIFEST).is_file():
            manifest = read_manifest(self.folder)
            claimed = claimed or manifest["database"]["identity"]
        if claimed and claimed != database_identity:
            raise GsqaError(f"{self.folder}: holds the export of another database (identity {claimed[:12]}, this "
                            f"one is {database_identity[:12]}): give an empty or new folder")
        others = sorted(path.name for path in self.folder.iterdir() if path.name not in OURS) \
            if self.folder.is_dir() else []
        if others:
            raise GsqaError(f"{self.folder}: holds other files ({', '.join(others[:3])}) and no export of this "
                            "database: give an empty or new folder")
        if manifest and not (self.folder / WORK / JOURNAL).is_file():  # a finished export copied here
            self.entries = {entry["path"]: {"entry": entry, "mtime_ns": None} for entry in manifest["files"]}

    def intact(self, relative: str) -> bool:
        recorded, path = self.entries.get(relative), self.folder / relative
        if recorded is None or not path.is_file() or path.stat().st_size != recorded["entry"]["size"]:
            return False
        if recorded["mtime_ns"] is None:
            return sha256_of(path) == recorded["entry"]["sha256"]
        return path.stat().st_mtime_ns == recorded["mtime_ns"]

    def record(self, entry: dict[str, Any]) -> None:
        recorded = {"entry": entry, "mtime_ns": (self.folder / entry["path"]).stat().st_mtime_ns}
        with open(self.path, "a") as journal:
            journal.write(json.dumps(recorded) + "\n")
            journal.flush()
            os.fsync(journal.fileno())
        self.entries[entry["path"]] = recorded


@dataclass
class Run:
    """What the jobs of one export share."""

    dsn: str | None
    conn: psycopg.Connection
    journal: Journal
    pool: OrderedPool | None  # the COG writers
    progress: bool
    workers: int  # processes writing COGs, threads writing GeoParquet files


def export(folder: Path, dsn: str | None, what: tuple[str, ...] = WHAT, formats: tuple[str, ...] = ("parquet",),
           progress: bool = True, workers: int | None = None) -> ExportReport:
    """The export of the database into `folder`; see the module docstring."""
    started = time.monotonic()
    report = ExportReport(str(folder))
    _require_checked(dsn)
    # The COG writers are forked before this process opens its connection (ordered_pool.py).
    workers = workers or os.cpu_count() or 1
    pool = OrderedPool(workers, _cog_work, GsqaError, name="ingest-export",
                       passed_on=(OSError,)) if "dem" in what else None
    try:
        with contextlib.ExitStack() as stack:
            if pool is not None:
                stack.enter_context(pool)
            manifest = _export(folder, dsn, (what, formats), (pool, progress, workers), report)
    except BaseException:
        _remove_partial_files(folder)  # the pool's files in the making, its processes ended
        raise
    report.files, report.bytes = len(manifest["files"]), sum(entry["size"] for entry in manifest["files"])
    report.manifest_sha256, report.seconds = sha256_of(folder / MANIFEST), time.monotonic() - started
    return report


def _export(folder: Path, dsn: str | None, selected: tuple[tuple[str, ...], tuple[str, ...]],
            running: tuple[OrderedPool | None, bool, int], report: ExportReport) -> dict[str, Any]:
    """Within the pool's life: the jobs of `selected` (parts, formats), the manifest."""
    with connect(dsn) as conn, _disk_full_as_one_line(folder):
        if not conn.execute("SELECT EXISTS (SELECT FROM gsqa.load_log)").fetchone()[0]:
            raise GsqaError(f"the database {where(conn)} is not built (its load log is empty): build it first "
                            "(`make db`, `ingest all DATA_DIR`)")
        database = describe_database(conn)
        conn.commit()
        journal = Journal(folder, database["identity"])
        _remove_partial_files(folder)  # a killed run's files in the making
        paths = []
        jobs = _jobs(Run(dsn, conn, journal, *running), *selected)
        with contextlib.closing(jobs):  # closed on an error too: its bar ends its line before the error's
            for job in jobs:  # made as they come: a table's bar starts when its file does
                if journal.intact(job.path):
                    report.kept.append(job.path)
                else:
                    journal.record(_write(folder, job))
                    report.written.append(job.path)
                job.done()
                paths.append(job.path)
        entries = [journal.entries[path]["entry"] for path in paths]
        return _kept_manifest(folder, database, entries) or write_manifest(folder, database, entries)


def _kept_manifest(folder: Path, database: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The folder's manifest if it already says what a new one would (a rerun of a finished export)."""
    if not (folder / MANIFEST).is_file():
        return None
    manifest = read_manifest(folder)
    same = manifest["database"] == database and manifest["files"] == sorted(entries, key=lambda entry: entry["path"])
    return manifest if same else None


def _require_checked(dsn: str | None) -> None:
    results = check.run_checks(dsn)
    failed = [result for result in results if not result.ok]
    if failed:
        raise GsqaError(f"the database fails {len(failed)} of {len(results)} checks (first: {failed[0].name}: "
                        f"{failed[0].detail}): only a built database that passes `ingest check` is exported")


def _write(folder: Path, job: Job) -> dict[str, Any]:
    """The job's file under its temporary name, renamed when complete; its manifest entry."""
    path = folder / job.path
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = _scratch(path)
    try:
        holds = job.write(scratch)
        with open(scratch, "rb") as written:
            os.fsync(written.fileno())
    except BaseException:
        scratch.unlink(missing_ok=True)
        raise
    os.replace(scratch, path)
    return file_entry(folder, path, **holds)


def _remove_partial_files(folder: Path) -> None:
    for leftover in [*folder.glob(f"*/*{PARTIAL}*"), *folder.glob(f"{geojson.FOLDER}/*/*{PARTIAL}")]:
        leftover.unlink(missing_ok=True)


def _scratch(path: Path) -> Path:
    return path.with_name(path.name + PARTIAL)


@contextmanager
def _disk_full_as_one_line(folder: Path) -> Iterator[None]:
    try:
        yield
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.EDQUOT) and "No space left" not in str(error):
            raise
        free = shutil.disk_usage(folder).free if folder.exists() else 0
        raise GsqaError(f"{folder}: the disk is full ({free:,} bytes free); the files already complete are kept: "
                        "free some space and run the same command again") from None


def _jobs(run: Run, what: tuple[str, ...], formats: tuple[str, ...]) -> Iterator[Job]:
    if "vector" in what and "parquet" in formats:
        yield from _parquet_jobs(run)
    if "vector" in what and "geojson" in formats:
        yield from _geojson_jobs(run)
    if "vector" in what and "flatgeobuf" in formats:
        yield from _flatgeobuf_jobs(run)
    if "dem" in what:
        yield from _dem_jobs(run)


def _parquet_jobs(run: Run) -> Iterator[Job]:
    """A job per table, whose file threads write ahead (each with its own connection, largest table first, as
    many at once as there are workers: the server sorts one table while this process packs another)."""
    crs = vector.crs()
    logged = dict(run.conn.execute("SELECT target_table, sum(rows_written)::bigint FROM gsqa.load_log GROUP BY 1"))
    run.conn.commit()
    paths = {table.name: f"{VECTOR_DIR}/{table.name}.parquet" for table in schema.VECTOR_TABLES}
    pending = sorted((table for table in schema.VECTOR_TABLES if not run.journal.intact(paths[table.name])),
                     key=lambda table: -logged.get(table.fullname, 0))
    threads = ThreadPoolExecutor(max(1, min(run.workers, len(pending))), thread_name_prefix="ingest-export")
    try:
        written = {table.name: threads.submit(_write_vector, run, table,
                                              _scratch(run.journal.folder / paths[table.name]), crs,
                                              logged.get(table.fullname, 0), position)
                   for position, table in enumerate(pending)}
        for table in schema.VECTOR_TABLES:
            yield Job(paths[table.name], lambda path, table=table: written[table.name].result())
    finally:
        threads.shutdown(cancel_futures=True)


def _geojson_jobs(run: Run) -> Iterator[Job]:
    for table in schema.VECTOR_TABLES:
        parts = geojson.part_ranges(run.conn, table)
        run.conn.commit()
        folder = f"{geojson.FOLDER}/{geojson.layer_folder(table)}"
        with tqdm(total=len(parts), unit="part", desc=f"ingest export -> {folder}/", file=sys.stderr,
                  disable=not run.progress) as bar:
            for index, ids in enumerate(parts):
                yield Job(f"{folder}/{geojson.part_name(index)}",
                          lambda path, table=table, ids=ids: {
                              "table": table.fullname, "format": "geojson", "ids": list(ids),
                              "rows": geojson.write_part(run.conn, table, ids, path)}, bar.update)


def _flatgeobuf_jobs(run: Run) -> Iterator[Job]:
    for table in schema.VECTOR_TABLES:
        yield Job(f"{flatgeobuf.FOLDER}/{table.name}.fgb",
                  lambda path, table=table: _write_flatgeobuf(run, table, path))


def _write_flatgeobuf(run: Run, table: schema.Table, path: Path) -> dict[str, Any]:
    with tqdm(unit="rows", unit_scale=True, desc=f"ingest export -> {flatgeobuf.FOLDER}/{table.name}.fgb",
              file=sys.stderr, disable=not run.progress) as bar:
        rows = flatgeobuf.write_table(run.conn, table, path, bar.update)
    return {"table": table.fullname, "format": "flatgeobuf", "rows": rows}


def _dem_jobs(run: Run) -> Iterator[Job]:
    """A job per source file, whose COG the pool's processes write ahead (all but those intact already), then
    the VRT."""
    from ingest.export import dem

    files = dem.dem_files(run.conn)
    run.conn.commit()
    if not files:
        return
    (run.journal.folder / DEM_DIR).mkdir(parents=True, exist_ok=True)
    paths = {source.name: f"{DEM_DIR}/{source.cog_name}" for source in files}
    pending = [source for source in files if not run.journal.intact(paths[source.name])]
    assert run.pool is not None
    streams = dict(zip([source.name for source in pending], run.pool.streams(
        [(run.dsn, source, str(_scratch(run.journal.folder / paths[source.name]))) for source in pending]),
        strict=True))
    with tqdm(total=len(files), unit="file", desc=f"ingest export -> {DEM_DIR}/", file=sys.stderr,
              disable=not run.progress) as bar:
        for source in files:
            written = streams.get(source.name)
            yield Job(paths[source.name], lambda path, source=source, written=written: _cog_entry(source, written),
                      bar.update)
        yield Job(f"{DEM_DIR}/{dem.VRT_NAME}", lambda path: _write_vrt(files, path))


_worker_connection: psycopg.Connection | None = None


def _cog_work(job: tuple[str | None, dem.DemFile, str]) -> Iterator[None]:
    """In a pool process: one source file's COG at its scratch path; its pixel checksum. The process keeps one
    connection for all its files."""
    from ingest.export import dem

    global _worker_connection
    yield from ()
    dsn, source, scratch = job
    if _worker_connection is None:
        _worker_connection = connect(dsn)
    pixels, checksum = dem.read_pixels(_worker_connection, source)
    dem.write_cog(pixels, source, Path(scratch))
    return checksum


def _cog_entry(source: dem.DemFile, written: JobStream | None) -> dict[str, Any]:
    """What a COG its pool process has written holds."""
    assert written is not None  # a job is only written when it was not intact, and then it is pending
    grid = source.grid.grid
    return {"table": schema.dem_us.fullname, "format": "cog", "source": source.name, "width": grid.width,
            "height": grid.height, "pixels": source.pixels, "tiles": source.tiles,
            "pixel_checksum": written.outcome()}


def _write_vector(run: Run, table: schema.Table, path: Path, crs: dict, rows: int, position: int) -> dict[str, Any]:
    """In a thread, with its own connection: the table as GeoParquet at `path`; what it holds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with connect(run.dsn) as conn, tqdm(total=rows, unit="rows", unit_scale=True, desc=f"ingest export -> {table.name}",
                                        file=sys.stderr, disable=not run.progress, position=position) as bar:
        found = vector.write_table(conn, table, path, crs, bar.update)
    return {"table": table.fullname, "format": "geoparquet", "rows": found.rows,
            "geometry_types": sorted(found.geometry_types), "bbox": found.extent}


def _write_vrt(files: list[dem.DemFile], path: Path) -> dict[str, Any]:
    from ingest.export import dem

    dem.write_vrt(files, path)
    return {"table": schema.dem_us.fullname, "format": "vrt", "sources": len(files)}
