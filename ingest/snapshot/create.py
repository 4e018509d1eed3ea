"""`ingest snapshot create`: a built and checked database as a snapshot folder (manifest.py says what
it holds). The database is checked (`ingest check`: only a database that passes is snapshotted) and described
while the server runs (kept in DIR/.work/described.json), its data is written as parts, the parts are hashed,
and the dataset card (card.py) and the manifest are written, the manifest last: a folder with a manifest is
complete.

A dump: create dumps into DIR/.work/dump (a dump that finished is marked, so a rerun after kill -9 does not
dump again), then moves each file into data/ (cutting the large ones). A physical snapshot's parts are
physical.copy_cluster's (physical.py).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from gsqa_core.db import connect
from gsqa_core.errors import GsqaError
from ingest import check
from ingest.snapshot import physical
from ingest.snapshot.card import card
from ingest.snapshot.manifest import (
    CARD,
    DATA,
    MANIFEST,
    PART_SIZE,
    SNAPSHOT_VERSION,
    WORK,
    Part,
    dbname_args,
    read_manifest,
    server_versions,
    sha256_of,
)
from ingest.snapshot.physical import run_tool


@dataclass
class CreateReport:
    folder: str
    parts: int = 0
    bytes: int = 0
    manifest_sha256: str = ""
    already: bool = False  # the folder held a finished snapshot
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "parts": self.parts, "bytes": self.bytes,
                "manifest_sha256": self.manifest_sha256, "already_created": self.already,
                "seconds": round(self.seconds, 3)}


def create(folder: Path, dsn: str | None, jobs: int, verify_summary: Path | None = None,
           part_size: int = PART_SIZE, image: str | None = None, snapshot_format: str = "dump",
           data_dir: Path | None = None) -> CreateReport:
    """A snapshot of the database in `folder`; see the module docstring (and physical's)."""
    started = time.monotonic()
    report = CreateReport(str(folder))
    if (folder / MANIFEST).is_file():
        return _finished(folder, report, started, already=True)
    if (snapshot_format == "physical") != (data_dir is not None):
        raise GsqaError("--data-dir PGDATA (the server's data directory) goes with --format physical, and only "
                        "with it")
    verify = _read_verify_summary(verify_summary) if verify_summary else None
    _prepare_folder(folder)
    described = _described_once(folder / WORK, dsn, snapshot_format, verify, image)
    if data_dir is None:
        _cut_into_parts(_dump_once(folder / WORK, dsn, jobs), folder / DATA, part_size)
    else:
        physical.copy_cluster(data_dir, folder / DATA, folder / WORK, described["cluster"]["system_identifier"],
                              part_size)
    manifest = {**described, "parts": [part.__dict__ for part in _hash_parts(folder, jobs)]}
    _write_atomically(folder / CARD, card(manifest))
    _write_atomically(folder / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(folder / WORK)
    return _finished(folder, report, started, already=False)


def _described_once(work: Path, dsn: str | None, snapshot_format: str, verify: Any,
                    image: str | None) -> dict[str, Any]:
    """The manifest but its parts, from the running server, kept in work/: a physical create stops the server,
    and its rerun after kill -9 must not need it."""
    kept = work / "described.json"
    if kept.is_file():
        return json.loads(kept.read_text())
    results = check.run_checks(dsn)
    failed = [result for result in results if not result.ok]
    if failed:
        raise GsqaError(f"the database fails {len(failed)} of {len(results)} checks (first: {failed[0].name}: "
                        f"{failed[0].detail}): only a database that passes `ingest check` is snapshotted")
    with connect(dsn, autocommit=True) as conn:
        described = _describe(conn, snapshot_format, [result.as_json() for result in results], verify, image)
    _write_atomically(kept, json.dumps(described))
    return described


def _finished(folder: Path, report: CreateReport, started: float, already: bool) -> CreateReport:
    manifest = read_manifest(folder)
    report.parts, report.bytes = len(manifest["parts"]), sum(part.size for part in manifest["parts"])
    report.manifest_sha256, report.already = sha256_of(folder / MANIFEST), already
    report.seconds = time.monotonic() - started
    return report


def _read_verify_summary(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise GsqaError(f"--verify {path}: expected the JSON of `reproduce verify --json-out` "
                        f"({error.__class__.__name__}: {error})") from None


def _prepare_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise GsqaError(f"{folder}: not a directory")
    # A killed create's files: its work, its parts and, beside its work, the card written just before the manifest.
    ours = {WORK, DATA} | ({CARD, f"{CARD}.partial", f"{MANIFEST}.partial"} if (folder / WORK).is_dir() else set())
    if folder.is_dir() and any(path.name not in ours for path in folder.iterdir()):
        raise GsqaError(f"{folder}: holds other files and no finished snapshot: give an empty or new folder")
    try:
        (folder / WORK).mkdir(parents=True, exist_ok=True)
        (folder / DATA).mkdir(exist_ok=True)
    except OSError as error:
        raise GsqaError(f"{folder}: cannot write the snapshot there ({error.strerror})") from None


def _dump_once(work: Path, dsn: str | None, jobs: int) -> Path:
    """work/dump, a finished `pg_dump -Fd`; an unfinished one (a killed run) is deleted and dumped again."""
    dump, finished = work / "dump", work / "dump.finished"
    if finished.exists():
        return dump
    shutil.rmtree(dump, ignore_errors=True)
    run_tool(["pg_dump", "--format=directory", f"--jobs={jobs}", f"--file={dump}", *dbname_args(dsn)], "pg_dump")
    finished.touch()
    return dump


def _cut_into_parts(dump: Path, data: Path, part_size: int) -> None:
    """Each file of the dump moved into data/, a table's data file larger than part_size cut into
    NAME.partNNN pieces (restore feeds them to COPY in order; the table of contents stays whole).
    A file is removed from the dump only once it is wholly in data/, so a rerun redoes at most that file."""
    for source in sorted(dump.iterdir()):
        size = source.stat().st_size
        if size <= part_size or not source.name.startswith(tuple("0123456789")):  # only a table's data is cut
            os.replace(source, data / source.name)
            continue
        with open(source, "rb") as handle:
            for number in range((size + part_size - 1) // part_size):
                _copy_piece(handle, data / f"{source.name}.part{number:03d}", part_size)
        source.unlink()


def _copy_piece(handle: Any, target: Path, size: int) -> None:
    scratch = target.with_name(target.name + ".partial")
    with open(scratch, "wb") as out:
        left = size
        while left and (chunk := handle.read(min(left, 1 << 20))):
            out.write(chunk)
            left -= len(chunk)
    os.replace(scratch, target)


def _hash_parts(folder: Path, jobs: int) -> list[Part]:
    paths = sorted(path for path in (folder / DATA).iterdir() if not path.name.endswith(".partial"))

    def part(path: Path) -> Part:
        return Part(str(path.relative_to(folder)), path.stat().st_size, sha256_of(path))

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(part, paths))


def _describe(conn: psycopg.Connection, snapshot_format: str, checks: list[dict], verify: Any,
              image: str | None) -> dict[str, Any]:
    load_log = {table: {"files": files, "rows": rows, "source_bytes": size} for table, files, rows, size in
                conn.execute("SELECT target_table, count(*), sum(rows_written)::bigint, sum(source_size)::bigint "
                             "FROM gsqa.load_log GROUP BY 1 ORDER BY 1")}
    stage_log = [{"stage": stage, "state": state, "summary": summary,
                  "finished": finished.isoformat() if finished else None}
                 for stage, state, summary, finished in conn.execute(
                     "SELECT stage, state, summary, finished_at FROM gsqa.stage_log ORDER BY started_at")]
    return {
        "snapshot_version": SNAPSHOT_VERSION, "format": snapshot_format,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "database": {"name": conn.info.dbname,
                     "bytes": conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]},
        "server": server_versions(conn), "image": image,
        "load_log": load_log, "stage_log": stage_log, "check": checks, "verify": verify,
        **({"cluster": physical.describe_cluster(conn), "compression": physical.COMPRESSION}
           if snapshot_format == "physical" else {}),
    }


def _write_atomically(path: Path, text: str) -> None:
    scratch = path.with_name(path.name + ".partial")
    scratch.write_text(text)
    os.replace(scratch, path)
