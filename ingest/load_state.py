"""The load state of the resumable stages (`ingest dem`, `ingest osm`): gsqa.load_log and its rules.

Each source file loads in one transaction together with its load_log row (size, sha256, rows), so the log
never claims more than was committed. A rerun skips files whose size and checksum still match, and a
stage whose rows are numbered in file order reloads from the first new or changed file to the end. A source that
`ingest fetch` verified is logged with the sha256 its verified log holds (DATA_DIR/.fetch/verified.tsv: read here,
written by the fetch), not read again to be hashed.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from gsqa_core import schema
from gsqa_core.db import relation_exists, where
from gsqa_core.errors import GsqaError

LOAD_LOG = sql.Identifier(schema.BOOKKEEPING_SCHEMA, "load_log")
STAGING = ".fetch"  # `ingest fetch`'s folder in DATA_DIR: downloads in progress, and its verified log
VERIFIED_LOG = f"{STAGING}/verified.tsv"


@dataclass(frozen=True)
class LogEntry:
    """A file's row in gsqa.load_log."""

    size: int
    checksum: str
    rows: int
    details: Any


def file_checksum(path: Path) -> str:
    """The file's sha256: the one `ingest fetch` verified as it wrote the file, while the file is as it left
    it, so that a fetched source is not read a second time; else computed."""
    stat = path.stat()
    fetched = verified_sha256(path, stat.st_size, stat.st_mtime_ns)
    if fetched:
        return fetched
    key = (path.resolve(), stat.st_size, stat.st_mtime_ns)
    with _hashing_lock:
        lock = _hashing.setdefault(key, threading.Lock())
    with lock:  # the writer lanes of one extract's sources ask at once: one hashes it, the others wait for it
        return _checksum(*key)


_hashing: dict[tuple[Path, int, int], threading.Lock] = {}  # per file: one thread hashes it at a time
_hashing_lock = threading.Lock()


def read_verified(path: Path) -> dict[str, tuple[int, int, str]]:
    """A verified log's entries: layout path -> (size, mtime_ns, checksum); the last line of a path counts."""
    entries = {}
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
                entries[parts[0]] = (int(parts[1]), int(parts[2]), parts[3])
    return entries


@functools.lru_cache(maxsize=4)
def _verified_entries(path: Path, _size: int, _mtime_ns: int) -> dict[str, tuple[int, int, str]]:
    return read_verified(path)


def verified_sha256(path: Path, size: int, mtime_ns: int) -> str | None:
    """The sha256 `ingest fetch` computed as it wrote the file at `path`, when the verified log of the data
    folder holding it vouches for the file as it is now (same size and mtime); else None. So a stage that
    logs a source's checksum need not read the source again to compute it."""
    resolved = path.resolve()
    for folder in resolved.parents:
        log = folder / VERIFIED_LOG
        try:
            stat = log.stat()
        except (FileNotFoundError, NotADirectoryError):
            continue
        entry = _verified_entries(log, stat.st_size, stat.st_mtime_ns).get(str(resolved.relative_to(folder)))
        if entry is not None and entry[:2] == (size, mtime_ns) and len(entry[2]) == 64:  # sha256, not a blob id
            return entry[2]
        return None
    return None


@functools.lru_cache(maxsize=16)
def _checksum(path: Path, _size: int, _mtime_ns: int) -> str:
    """Remembered while the file stays the same (size, mtime): the layers of an OpenStreetMap extract are
    each logged with the extract's checksum, and hashing a US extract takes half a minute."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def lock_target(conn: psycopg.Connection, stage: str, target: str) -> None:
    """One loader per table: a second one would interleave rows and break their order. The lock belongs to
    the session, so it goes away with the connection, however the process ends."""
    if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [f"gsqa ingest {stage} {target}"]).fetchone()[0]:
        raise GsqaError(f"another `ingest {stage}` is loading into {target} right now")


def require_bookkeeping(conn: psycopg.Connection) -> None:
    if not relation_exists(conn, f"{schema.BOOKKEEPING_SCHEMA}.load_log"):
        raise GsqaError(f"the database {where(conn)} has no gsqa.load_log: run `ingest init` first")


def read_log(conn: psycopg.Connection, target: str) -> dict[str, LogEntry]:
    rows = conn.execute(
        sql.SQL("SELECT source_name, source_size, source_checksum, rows_written, details FROM {} "
                "WHERE target_table = %s ORDER BY source_name").format(LOAD_LOG), [target])
    return {name: LogEntry(size, checksum, written, details) for name, size, checksum, written, details in rows}


def forget_log(conn: psycopg.Connection, target: str, *, from_name: str | None = None,
               name: str | None = None) -> list[str]:
    """Delete the target's log rows (only that of file `name`, or those of files named `from_name` or
    later, in code point order as Python sorts them); returns their names."""
    query = sql.SQL("DELETE FROM {} WHERE target_table = %s").format(LOAD_LOG)
    params: list[Any] = [target]
    if from_name is not None:
        query += sql.SQL(" AND source_name >= %s COLLATE \"C\"")
        params.append(from_name)
    if name is not None:
        query += sql.SQL(" AND source_name = %s")
        params.append(name)
    return [row[0] for row in conn.execute(query + sql.SQL(" RETURNING source_name"), params)]


def write_log(conn: psycopg.Connection, target: str, name: str, size: int, checksum: str, rows: int,
              details: Any = None) -> None:
    conn.execute(
        sql.SQL("INSERT INTO {} (target_table, source_name, source_size, source_checksum, rows_written, details) "
                "VALUES (%s, %s, %s, %s, %s, %s)").format(LOAD_LOG),
        [target, name, size, checksum, rows, None if details is None else Jsonb(details)])


def unchanged(files: dict[str, tuple[Path, int]], logged: dict[str, LogEntry], workers: int) -> set[str]:
    """Names of logged files (name -> (path, size)) whose size and checksum still match (hashlib releases
    the GIL: threads suffice)."""
    same_size = [name for name, (_, size) in files.items() if name in logged and size == logged[name].size]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        checksums = list(pool.map(file_checksum, [files[name][0] for name in same_size]))
    return {name for name, checksum in zip(same_size, checksums, strict=True) if checksum == logged[name].checksum}


def plan_from_first_change(names: Iterable[str], unchanged_names: set[str]) -> list[str]:
    """Files to (re)load, in name order: from the first file that is new or changed to the end.

    Unchanged files after it are in the plan because rows are numbered and stored in name order: once an
    earlier file is (re)loaded, every later one must follow it again.
    """
    ordered = sorted(names)
    pending = [name for name in ordered if name not in unchanged_names]
    return [name for name in ordered if pending and name >= pending[0]]


def refuse_unknown_rows(target: str, rows: int, logged: dict[str, LogEntry], inputs: set[str], unit: str,
                        stage: str) -> None:
    """Never mix our rows with rows we did not load, or silently keep files the user did not name."""
    if rows and not logged:
        raise GsqaError(f"{target} holds {rows:,} {unit} that `ingest {stage}` did not load; "
                        "pass --replace to reload it from the given files")
    foreign = sorted(set(logged) - inputs)
    if foreign:
        raise GsqaError(f"{target} holds {unit} of {len(foreign)} files that are not among the inputs "
                        f"(first: {foreign[0]}); name them too, or pass --replace")
    if rows != sum(entry.rows for entry in logged.values()):
        raise GsqaError(f"{target} holds {rows:,} {unit} but its load log accounts for "
                        f"{sum(entry.rows for entry in logged.values()):,}; pass --replace to reload it")
