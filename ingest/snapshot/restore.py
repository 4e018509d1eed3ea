"""`ingest snapshot restore`: the preflight (can the database take the snapshot: the server's versions
or build, the tables it holds), the restore of a dump into a database, and the finish of a physical snapshot
once its server runs on the data directory physical.py extracted it into.

Restore checks every part's size and sha256 against the manifest before it touches the database, then runs
`pg_restore -j` on the parts where they are (hard-linked into a scratch dump directory; a cut table's data goes
in by COPY from its parts, so no file is written out whole again), makes the DEM's raster constraints as the
DEM stage does, re-applies `ingest init` (the sandbox roles and grants, which are cluster-wide and not in a
dump), runs VACUUM ANALYZE (a dump holds no statistics) and `ingest check`. While it runs, the database's
comment says which snapshot is being restored, so that a rerun after kill -9 knows the tables it finds are its
own and starts them over; when it is done, the comment names the snapshot and its manifest's sha256 (`ingest
status` shows it). docs/SNAPSHOTS.md has the why.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from gsqa_core import schema
from gsqa_core.db import connect, where
from gsqa_core.errors import GsqaError
from ingest import check, initdb
from ingest.dem.constraints import reconcile
from ingest.snapshot import physical
from ingest.snapshot.manifest import (
    MANIFEST,
    Part,
    check_parts,
    dbname_args,
    origin_of,
    read_manifest,
    server_versions,
    set_origin,
    sha256_of,
    version_differences,
)
from ingest.snapshot.physical import run_tool

# What preflight answers for a database that is already the snapshot's finished restore.
RESTORED = "restored"
_RESTORE_LOCK = "gsqa snapshot restore"


@dataclass
class RestoreReport:
    source: str
    target: str = ""
    manifest_sha256: str = ""
    version_changes: list[str] = field(default_factory=list)
    analyzed: list[str] = field(default_factory=list)  # physical: tables whose activity statistics were missing
    checks: list[Any] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed_checks(self) -> list[Any]:
        return [result for result in self.checks if not result.ok]

    def as_json(self) -> dict[str, Any]:
        return {"source": self.source, "database": self.target, "manifest_sha256": self.manifest_sha256,
                "version_changes": self.version_changes, "analyzed": self.analyzed,
                "checks": [result.as_json() for result in self.checks],
                "seconds": round(self.seconds, 3)}


def preflight(folder: Path, dsn: str | None, replace: bool = False, allow_version_change: bool = False) -> str:
    """Whether the database can take the snapshot (the server's versions, the tables it holds), without
    restoring anything; returns the snapshot's format, from which `make db FROM=` picks the way to restore, or
    RESTORED for a database that is already its finished restore (a rerun after a kill as the restore ended),
    which `make db FROM=` then only finishes again."""
    manifest = read_manifest(folder)
    manifest_sha256 = sha256_of(folder / MANIFEST)
    with connect(dsn, autocommit=True) as conn:
        if manifest["format"] == "physical":
            _refuse_another_build(conn, manifest, allow_version_change)
        else:
            _refuse_other_versions(conn, manifest["server"], allow_version_change)
        if not replace and _restored_from(conn, manifest_sha256):
            return RESTORED
        _refuse_tables(conn, replace or _is_ours(conn, manifest, manifest_sha256))
    return manifest["format"]


def restore_folder(folder: Path, source: str, dsn: str | None, jobs: int, replace: bool = False,
                   allow_version_change: bool = False, data_dir: Path | None = None) -> RestoreReport:
    """The snapshot in `folder` into the database, or a physical one into `data_dir` (then, once the server
    runs on it, into the database to finish); see the module docstring."""
    manifest = read_manifest(folder)
    report = RestoreReport(source, manifest_sha256=sha256_of(folder / MANIFEST))
    started = time.monotonic()
    if manifest["format"] == "dump":
        if data_dir is not None:
            raise GsqaError(_format_mismatch(source, "dump", dsn))
        check_parts(folder, manifest["parts"], jobs)
        _restore_dump(report, folder, manifest, dsn, jobs, replace, allow_version_change)
    elif data_dir is not None:
        check_parts(folder, manifest["parts"], jobs)
        physical.restore_cluster(folder, [part.path for part in manifest["parts"]], data_dir, replace,
                                 manifest.get("compression"))
        report.target = str(data_dir)
    elif _runs_the_snapshot(dsn, manifest):
        _finish_physical(report, manifest, dsn, allow_version_change)
    else:
        raise GsqaError(_format_mismatch(source, "physical", dsn))
    report.seconds = time.monotonic() - started
    return report


def _format_mismatch(source: str, snapshot_format: str, dsn: str | None) -> str:
    if snapshot_format == "dump":
        return f"{source} is a dump snapshot: it restores into a database (--dsn), not into a data directory"
    return (f"{source} is a physical snapshot (a whole cluster's data directory, for the server build of the Docker "
            f"database): restore it with `make db FROM={source}`; into {_where_of(dsn)} restore a dump snapshot "
            "(`ingest snapshot create DIR --format dump`)")


def _where_of(dsn: str | None) -> str:
    with connect(dsn) as conn:
        return where(conn)


def _runs_the_snapshot(dsn: str | None, manifest: dict[str, Any]) -> bool:
    """The database's server runs the snapshot's data directory (restored with --data-dir, then started)."""
    with connect(dsn, autocommit=True) as conn:
        return _system_identifier(conn) == manifest["cluster"]["system_identifier"]


def _system_identifier(conn: psycopg.Connection) -> str:
    return str(conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()[0])


def _is_ours(conn: psycopg.Connection, manifest: dict[str, Any], manifest_sha256: str) -> bool:
    """The tables are a killed restore's of this snapshot: a dump restore's (the comment says so), or the
    snapshot's own cluster not yet finished (a physical restore killed after the data directory was replaced)."""
    origin = origin_of(conn) or {}
    if manifest["format"] == "physical":
        finished = origin.get("state") == "restored" and origin.get("manifest_sha256") == manifest_sha256
        return _system_identifier(conn) == manifest["cluster"]["system_identifier"] and not finished
    return origin.get("state") == "restoring" and origin.get("manifest_sha256") == manifest_sha256


def _restored_from(conn: psycopg.Connection, manifest_sha256: str) -> bool:
    """The database is this snapshot's finished restore: nothing is left to restore."""
    origin = origin_of(conn) or {}
    return origin.get("state") == "restored" and origin.get("manifest_sha256") == manifest_sha256


def _restore_dump(report: RestoreReport, folder: Path, manifest: dict[str, Any], dsn: str | None, jobs: int,
                  replace: bool, allow_version_change: bool) -> None:
    with connect(dsn, autocommit=True) as conn:
        report.target = where(conn)
        if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [_RESTORE_LOCK]).fetchone()[0]:
            raise GsqaError(f"another `ingest snapshot restore` is writing into {report.target} right now")
        report.version_changes = _refuse_other_versions(conn, manifest["server"], allow_version_change)
        if not replace and _restored_from(conn, report.manifest_sha256):  # by a run killed as it ended
            report.checks = check.run_checks(dsn)
            return
        _clear_target(conn, manifest, report.manifest_sha256, replace)
        set_origin(conn, {"state": "restoring", "source": report.source, "manifest_sha256": report.manifest_sha256})
        _create_extensions(conn, folder, manifest["parts"])
        _pg_restore(folder, manifest["parts"], dsn, jobs)
        _respell_raster_constraints(conn)
        initdb.initialize(dsn)  # the sandbox roles (cluster-wide, not in a dump) and their grants
        run_tool(["vacuumdb", "--analyze", f"--jobs={jobs}", *dbname_args(dsn)], "vacuumdb")
        _set_restored(conn, report, manifest)
    report.checks = check.run_checks(dsn)


def _finish_physical(report: RestoreReport, manifest: dict[str, Any], dsn: str | None,
                     allow_version_change: bool) -> None:
    """The started server runs the snapshot's cluster: the reader's password as a build sets it, ANALYZE
    where the activity statistics are missing, the origin, then `ingest check`."""
    with connect(dsn, autocommit=True) as conn:
        report.target = where(conn)
        _refuse_another_build(conn, manifest, allow_version_change)
        initdb.initialize(dsn)
        report.analyzed = _analyze_where_missing(conn)
        _set_restored(conn, report, manifest)
    report.checks = check.run_checks(dsn)


def _refuse_another_build(conn: psycopg.Connection, manifest: dict[str, Any], allow_version_change: bool) -> None:
    if allow_version_change:
        raise GsqaError("--allow-version-change does not apply to a physical snapshot: a data directory runs only on "
                        "the server build that wrote it; restore a dump snapshot instead")
    differences = physical.build_differences(manifest["server"], server_versions(conn))
    if differences:
        raise GsqaError(f"the physical snapshot was made by another server build (image "
                        f"{manifest['image'] or 'not recorded'}): {'; '.join(differences)}; restore it with the image "
                        "that built it, or restore a dump snapshot")


def _analyze_where_missing(conn: psycopg.Connection) -> list[str]:
    """ANALYZE the tables that were analyzed (the planner's statistics say so) but whose activity statistics
    lost it (`ingest check` reads those): none when the cluster was shut down cleanly, as create requires, for
    it keeps them in pg_stat/. Tables never analyzed stay so, as in the snapshotted database."""
    tables = [name for (name,) in conn.execute(
        "SELECT relid::regclass::text FROM pg_stat_user_tables s WHERE coalesce(last_analyze, last_autoanalyze) "
        "IS NULL AND EXISTS (SELECT 1 FROM pg_statistic WHERE starelid = s.relid) ORDER BY 1")]
    for table in tables:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(table)))
    return tables


def _set_restored(conn: psycopg.Connection, report: RestoreReport, manifest: dict[str, Any]) -> None:
    set_origin(conn, {"state": "restored", "source": report.source, "manifest_sha256": report.manifest_sha256,
                       "format": manifest["format"], "created": manifest["created"],
                       "restored": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def _respell_raster_constraints(conn: psycopg.Connection) -> None:
    """A dump spells a negative scale in a CHECK constraint differently from PostGIS, and raster_columns
    parses PostGIS's spelling: the constraints that came back otherwise are made again as the DEM stage
    makes them (ingest.dem.constraints.reconcile)."""
    grids = check.dem_grids(conn)
    if grids:
        with conn.transaction():
            reconcile(conn, schema.dem_us.schema, schema.dem_us.name, grids, extent=True)


def _refuse_other_versions(conn: psycopg.Connection, built: dict[str, Any], allowed: bool) -> list[str]:
    differences = version_differences(built, server_versions(conn))
    if differences and not allowed:
        raise GsqaError(f"the snapshot was built on another server: {'; '.join(differences)}; answers may differ "
                        "in the last digits: restore on a matching server (make db) or give --allow-version-change")
    return differences


def user_tables(conn: psycopg.Connection) -> list[str]:
    """Tables of the database that no extension owns (spatial_ref_sys is PostGIS's)."""
    return [name for (name,) in conn.execute(
        "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') "
        "AND n.nspname NOT LIKE 'pg\\_%' AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = "
        "'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e') ORDER BY 1")]


def _refuse_tables(conn: psycopg.Connection, allowed: bool) -> list[str]:
    tables = user_tables(conn)
    if tables and not allowed:
        raise GsqaError(f"{where(conn)} already holds {len(tables)} tables ({', '.join(tables[:3])}"
                        f"{', ...' if len(tables) > 3 else ''}): restore into an empty database, or give --replace "
                        "to drop them first")
    return tables


def _clear_target(conn: psycopg.Connection, manifest: dict[str, Any], manifest_sha256: str, replace: bool) -> None:
    """Refuse a database holding tables, unless --replace or they are a killed restore's of this snapshot;
    then drop them (and the gsqa schema, which the dump creates)."""
    for table in _refuse_tables(conn, replace or _is_ours(conn, manifest, manifest_sha256)):
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(table)))
    conn.execute("DROP SCHEMA IF EXISTS gsqa CASCADE")


# --- pg_restore of a dump's parts --------------------------------------------------------------------------


def _toc_list(folder: Path, parts: list[Part]) -> list[str]:
    """`pg_restore -l` of the dump: one line per entry."""
    toc = next(part for part in parts if part.dump_file == "toc.dat")
    with tempfile.TemporaryDirectory(prefix="gsqa-toc-") as scratch:
        shutil.copyfile(folder / toc.path, Path(scratch) / "toc.dat")
        result = subprocess.run(["pg_restore", "--list", scratch], capture_output=True, text=True)
    if result.returncode != 0:
        raise GsqaError(f"{folder / toc.path}: pg_restore cannot read it: {result.stderr.strip()}")
    return result.stdout.splitlines()


# Entries restore leaves to others: extensions exist on the target first (CREATE EXTENSION IF NOT EXISTS),
# and grants to gsqa_reader, a cluster-wide role the target may not have yet, are `ingest init`'s.
_NOT_RESTORED = re.compile(r"^\d+; \d+ \d+ (EXTENSION|COMMENT - EXTENSION|ACL|DEFAULT ACL) ")
_EXTENSION = re.compile(r"^\d+; \d+ \d+ EXTENSION - (\S+) ")


def _create_extensions(conn: psycopg.Connection, folder: Path, parts: list[Part]) -> None:
    for line in _toc_list(folder, parts):
        match = _EXTENSION.match(line)
        if match:
            conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(match[1])))


_TABLE_DATA = re.compile(r"^(\d+); \d+ \d+ TABLE DATA (\S+) (\S+) ")


@dataclass(frozen=True)
class StreamedTable:
    """A table whose data file was cut into parts: COPY is fed from the parts themselves."""

    entry: str  # its TOC line
    schema: str
    table: str
    paths: list[Path]
    compressed: bool


def _pg_restore(folder: Path, parts: list[Part], dsn: str | None, jobs: int) -> None:
    """pg_restore -j of the dump's entries; the data of a table whose file was cut goes in by COPY straight
    from its parts before the indexes and constraints (post-data), so that no file is written out whole
    again (the peak disk stays the snapshot's plus the database's)."""
    entries = [line for line in _toc_list(folder, parts) if not _NOT_RESTORED.match(line)]
    pieces: dict[str, list[Path]] = {}
    for part in parts:
        pieces.setdefault(part.dump_file, []).append(folder / part.path)
    streamed = _streamed_tables(entries, pieces)
    with _scratch_beside(folder) as scratch:
        _link_whole_files(pieces, scratch / "dump")
        listing = scratch / "entries.list"
        listing.write_text("\n".join(line for line in entries if line not in {t.entry for t in streamed}) + "\n")

        def sections(*names: str) -> None:
            # At least 2 jobs: only a parallel pg_restore truncates before COPY.
            run_tool(["pg_restore", "--no-owner", "--exit-on-error", f"--jobs={max(2, jobs)}",
                       *(f"--section={name}" for name in names), f"--use-list={listing}", *dbname_args(dsn),
                       str(scratch / "dump")], f"pg_restore ({', '.join(names)})")

        # One run for the tables and their data: pg_restore truncates a table it created in the same run
        # before its COPY, which keeps the rows in order (see _copy_in).
        sections("pre-data", "data")
        with ThreadPoolExecutor(max(1, min(jobs, len(streamed))), thread_name_prefix="gsqa-copy") as pool:
            list(pool.map(functools.partial(_copy_in, dsn), streamed))
        sections("post-data")


def _streamed_tables(entries: list[str], pieces: dict[str, list[Path]]) -> list[StreamedTable]:
    streamed = []
    for line in entries:
        match = _TABLE_DATA.match(line)
        for suffix in (".dat.gz", ".dat"):
            paths = pieces.get(f"{match[1]}{suffix}", []) if match else []
            if len(paths) > 1:
                streamed.append(StreamedTable(line, match[2], match[3], sorted(paths), suffix.endswith(".gz")))
    unexpected = set(name for name, paths in pieces.items() if len(paths) > 1) - {
        table.paths[0].name.rsplit(".part", 1)[0] for table in streamed}
    if unexpected:
        raise GsqaError(f"the snapshot's file {sorted(unexpected)[0]} is cut into parts but is no table's data")
    return streamed


def _copy_in(dsn: str | None, streamed: StreamedTable) -> None:
    """COPY from the parts, after a TRUNCATE in the same transaction, as pg_restore does: into a new file,
    COPY appends every row instead of filling earlier pages' free space, so the rows keep the dump's (heap)
    order, which `ingest check` requires of dem_us."""
    table = sql.Identifier(streamed.schema, streamed.table)
    with connect(dsn) as conn, conn.cursor() as cursor:
        cursor.execute(sql.SQL("TRUNCATE ONLY {}").format(table))
        _copy_parts(cursor, table, streamed)


def _copy_parts(cursor: psycopg.Cursor, table: sql.Identifier, streamed: StreamedTable) -> None:
    with cursor.copy(sql.SQL("COPY {} FROM STDIN").format(table)) as copy:
        inflate = zlib.decompressobj(wbits=31) if streamed.compressed else None  # 31: gzip's framing
        for path in streamed.paths:
            with open(path, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    copy.write(inflate.decompress(chunk) if inflate else chunk)


@contextlib.contextmanager
def _scratch_beside(folder: Path) -> Iterator[Path]:
    """A scratch folder inside the snapshot folder (same file system: parts can be hard-linked), else in
    the temporary directory. It is named after this process; those of processes that are gone (a restore
    killed with -9) are deleted."""
    for stale in folder.glob(".restore-*"):
        pid = stale.name.removeprefix(".restore-").split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(stale, ignore_errors=True)
    try:
        scratch = tempfile.TemporaryDirectory(prefix=f".restore-{os.getpid()}-", dir=folder)
    except OSError:
        scratch = tempfile.TemporaryDirectory(prefix="gsqa-restore-")
    with scratch as path:
        yield Path(path)


def _link_whole_files(pieces: dict[str, list[Path]], dump: Path) -> None:
    """The dump directory as pg_restore wants it (regular files: it refuses links and FIFOs): each file that
    is one part hard-linked to it (copied if the file systems differ)."""
    dump.mkdir()
    for name, paths in pieces.items():
        if len(paths) == 1:
            try:
                os.link(paths[0], dump / name)
            except OSError:
                shutil.copyfile(paths[0], dump / name)
