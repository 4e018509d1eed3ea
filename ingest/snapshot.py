"""`ingest snapshot`: a built and checked reference database as a folder of verified parts, and back.

A snapshot folder holds

    manifest.json   what it is: format, sha256 and size of every part, the server's PostgreSQL, PostGIS,
                    GEOS, PROJ and GDAL versions and collation, the image, the load and stage log summaries,
                    the `ingest check` report and, with --verify, a `reproduce verify --json-out` summary
    README.md       the dataset card (the hub shows it)
    data/           the parts: the files of a directory-format dump (`pg_dump -Fd`); a table's data file
                    larger than PART_SIZE is cut into NAME.part000, NAME.part001, ...; or, in the physical
                    format, a cold copy of the cluster's data directory, a zstd-compressed tar cut into
                    cluster.tar.zst.part000, ... (snapshot_physical.py, which has its create and restore)

The manifest and the checks of the parts are both formats'; the rest of this docstring is the dump's.
Create dumps into DIR/.work/dump (a dump that finished is marked, so a rerun after kill -9 does not dump
again), then moves each file into data/ (cutting the large ones), hashes the parts and writes the manifest
last: a folder with a manifest is complete. Restore checks every part's size and sha256 against the manifest
before it touches the database, then runs `pg_restore -j` on the parts where they are (hard-linked into a
scratch dump directory; a cut table's data goes in by COPY from its parts, so no file is written out whole
again), makes the DEM's raster constraints as the DEM stage does, re-applies `ingest init` (the sandbox roles
and grants, which are cluster-wide and not in a dump), runs VACUUM ANALYZE (a dump holds no statistics) and
`ingest check`. While it runs, the database's comment says which snapshot is being restored, so that a rerun
after kill -9 knows the tables it finds are its own and starts them over; when it is done, the comment names
the snapshot and its manifest's sha256 (`ingest status` shows it). docs/SNAPSHOTS.md has the why.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from gsqa_core import schema
from gsqa_core.db import connect, resolve_dsn, where
from gsqa_core.errors import GsqaError
from ingest import check, fetch, initdb
from ingest import snapshot_physical as physical
from ingest.dem.constraints import reconcile
from ingest.snapshot_physical import run_tool

FORMATS = ("dump", "physical")
MANIFEST = "manifest.json"
CARD = "README.md"
DATA = "data"
WORK = ".work"
PART_SIZE = 2 * 1000**3  # a hub upload and a download resume part by part
SNAPSHOT_VERSION = 1
_PART = re.compile(r"(.+)\.part(\d{3})")
# What must match between the snapshot's server and the one restored into, and why answers may differ if not.
VERSION_KEYS = {
    "major": "the dump format and the planner (KNN tie order, plan-dependent row order)",
    "postgis": "geography areas and lengths, ST_MakeValid output",
    "geos": "ST_MakeValid, ST_Buffer and overlay results in the last digits",
    "proj": "ST_Transform and geography measurements in the last digits",
}
_COMMENT_KEY = "gsqa_snapshot"
# What preflight answers for a database that is already the snapshot's finished restore.
RESTORED = "restored"
_RESTORE_LOCK = "gsqa snapshot restore"


# --- what the server is ------------------------------------------------------------------------------------


def server_versions(conn: psycopg.Connection) -> dict[str, Any]:
    """PostgreSQL, PostGIS, GEOS, PROJ and GDAL of the server, and the database's collation. PostGIS says
    them: in a database without it, it is created for the question and rolled back."""
    with conn.transaction(force_rollback=True):
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis; CREATE EXTENSION IF NOT EXISTS postgis_raster")
        row = conn.execute(
            "SELECT current_setting('server_version_num')::int / 10000, current_setting('server_version'), "
            "version(), postgis_lib_version(), postgis_geos_version(), postgis_proj_version(), postgis_gdal_version(), "
            "datcollate, datctype FROM pg_database WHERE datname = current_database()").fetchone()
    keys = ("major", "server_version", "server_build", "postgis", "geos", "proj", "gdal", "collation", "ctype")
    return dict(zip(keys, row, strict=True))


def version_differences(built: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """`name: snapshot X, server Y` for each of VERSION_KEYS that differs."""
    return [f"{key} {built.get(key)} in the snapshot, {here.get(key)} on this server"
            for key in VERSION_KEYS if str(built.get(key)) != str(here.get(key))]


# --- the manifest ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    path: str  # relative to the snapshot folder: data/NAME or data/NAME.partNNN
    size: int
    sha256: str

    @property
    def dump_file(self) -> str:
        """The file of the dump this part is (a piece of)."""
        name = Path(self.path).name
        match = _PART.fullmatch(name)
        return match[1] if match else name


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        manifest["parts"] = [Part(**part) for part in manifest["parts"]]
    except FileNotFoundError:
        raise GsqaError(f"{path}: missing: not a snapshot folder, or its `ingest snapshot create` has not "
                        "finished (run it again)") from None
    except (ValueError, KeyError, TypeError) as error:
        raise GsqaError(f"{path}: not a snapshot manifest ({error.__class__.__name__}: {error})") from None
    if manifest.get("format") not in FORMATS:
        raise GsqaError(f"{path}: format {manifest.get('format')!r}, expected one of {', '.join(FORMATS)}")
    return manifest


def check_parts(folder: Path, parts: list[Part], jobs: int) -> None:
    """Every part present with the manifest's size and sha256; else one line naming the first bad part."""
    def problem(part: Part) -> str | None:
        local = folder / part.path
        if not local.is_file():
            return f"{part.path} is missing"
        if local.stat().st_size != part.size:
            return f"{part.path} has {local.stat().st_size:,} bytes, the manifest says {part.size:,}"
        actual = sha256_of(local)
        return None if actual == part.sha256 else f"{part.path} is damaged (sha256 {actual}, the manifest says " \
                                                  f"{part.sha256})"

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        problems = [found for found in pool.map(problem, parts) if found]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise GsqaError(f"snapshot {folder}: {problems[0]}{more}; nothing was restored")


# --- create ------------------------------------------------------------------------------------------------


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
    """A snapshot of the database in `folder`; see the module docstring (and snapshot_physical's)."""
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
    run_tool(["pg_dump", "--format=directory", f"--jobs={jobs}", f"--file={dump}", *_dbname(dsn)], "pg_dump")
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


# What the card says of each format: what it is, how to restore it, which servers take it.
_HOW = {
    "dump": {
        "what": "a directory-format dump",
        "restore": "make db FROM=hf:OWNER/NAME          # into the Docker database\n"
                   "ingest snapshot restore hf:OWNER/NAME --dsn postgresql://postgres@localhost/gsqa   # your server",
        "versions": "A server with another PostgreSQL major version, PostGIS, GEOS or PROJ may give other last digits "
                    "for\ngeography areas and lengths, ST_MakeValid output and KNN tie order: restore refuses it "
                    "unless\n`--allow-version-change`.",
    },
    "physical": {
        "what": "a cold copy of the server's data directory (tar, zstd-compressed)",
        "restore": "make db FROM=hf:OWNER/NAME          # replaces the Docker database's data directory",
        "versions": "It runs only on the same server build (the image above): restore refuses any other. For a "
                    "server of\nyour own, restore the dump snapshot of the same database.",
    },
}


def card(manifest: dict[str, Any]) -> str:
    """The dataset card (README.md) of a snapshot."""
    server = manifest["server"]
    size = sum(part["size"] for part in manifest["parts"])
    tables = "\n".join(f"| `{table}` | {log['files']:,} | {log['rows'] or 0:,} |"
                       for table, log in manifest["load_log"].items())
    passed = sum(result["ok"] for result in manifest["check"])
    return f"""---
license: odbl
pretty_name: GS-QA2 reference database (snapshot)
tags: [postgis, geospatial, text-to-sql]
---
# GS-QA2 reference database, snapshot of {manifest['created']}

A PostgreSQL {server['server_version']} + PostGIS {server['postgis']} database built by
[gsqa-refdb](https://github.com/) (`ingest all`) and checked (`ingest check`: {passed} of
{len(manifest['check'])} checks passed), as {_HOW[manifest['format']]['what']} in {len(manifest['parts'])} parts
({size / 1e9:.2f} GB); `manifest.json` lists every part's sha256.

Restore it (downloads, checks every part, restores, sets the read-only role `gsqa_reader`'s password and runs
`ingest check`):

```sh
{_HOW[manifest['format']]['restore']}
```

Built with: PostgreSQL {server['server_build']}; PostGIS {server['postgis']}; GEOS {server['geos']};
PROJ {server['proj']}; {server['gdal']}; collation {server['collation']}; image {manifest['image'] or 'unknown'}.
{_HOW[manifest['format']]['versions']}

| table | source files | rows |
|---|---|---|
{tables}

Data: OpenStreetMap contributors (ODbL), NASA/METI ASTER GDEM v3.
"""


def _write_atomically(path: Path, text: str) -> None:
    scratch = path.with_name(path.name + ".partial")
    scratch.write_text(text)
    os.replace(scratch, path)


# --- the external tools --------------------------------------------------------------------------------------


def _dbname(dsn: str | None) -> list[str]:
    resolved = resolve_dsn(dsn)
    return [f"--dbname={resolved}"] if resolved else []  # "" leaves the target to libpq's PG* variables


# --- restore -------------------------------------------------------------------------------------------------


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
        _set_origin(conn, {"state": "restoring", "source": report.source, "manifest_sha256": report.manifest_sha256})
        _create_extensions(conn, folder, manifest["parts"])
        _pg_restore(folder, manifest["parts"], dsn, jobs)
        _respell_raster_constraints(conn)
        initdb.initialize(dsn)  # the sandbox roles (cluster-wide, not in a dump) and their grants
        run_tool(["vacuumdb", "--analyze", f"--jobs={jobs}", *_dbname(dsn)], "vacuumdb")
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
    _set_origin(conn, {"state": "restored", "source": report.source, "manifest_sha256": report.manifest_sha256,
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


def origin_of(conn: psycopg.Connection) -> dict[str, Any] | None:
    """What the database's comment says about the snapshot it was restored from, if anything."""
    comment = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                           "WHERE datname = current_database()").fetchone()[0]
    try:
        return json.loads(comment)[_COMMENT_KEY] if comment else None
    except (ValueError, KeyError, TypeError):
        return None


def _set_origin(conn: psycopg.Connection, origin: dict[str, Any]) -> None:
    conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(
        sql.Identifier(conn.info.dbname), sql.Literal(json.dumps({_COMMENT_KEY: origin}))))


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
                       *(f"--section={name}" for name in names), f"--use-list={listing}", *_dbname(dsn),
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


# --- sources ---------------------------------------------------------------------------------------------------

HF_PREFIX = "hf:"


def parse_hub_source(source: str) -> tuple[str, str | None]:
    """hf:OWNER/NAME[@REVISION] -> (OWNER/NAME, REVISION or None)."""
    match = re.fullmatch(r"hf:([\w.-]+/[\w.-]+)(?:@([\w./-]+))?", source)
    if match is None:
        raise GsqaError(f"{source}: expected a folder or hf:OWNER/NAME[@REVISION]")
    return match[1], match[2]


def local_folder(source: str, download_to: Path | None, workers: int,
                 announce: Callable[[str], None]) -> Path:
    """The folder holding the snapshot: the source itself, or where a hub source is fetched to (verified
    against the hub's checksums and resumed like `ingest fetch`)."""
    if not source.startswith(HF_PREFIX):
        folder = Path(source)
        if not folder.is_dir():
            raise GsqaError(f"{source}: not a folder (a snapshot is a folder or hf:OWNER/NAME[@REVISION])")
        return folder
    repo, revision = parse_hub_source(source)
    target = download_to or Path("gsqa-snapshots") / repo.replace("/", "--")
    report = fetch.fetch_repository(target, repo, revision, workers=workers)
    announce(f"{source}: {len(report.downloaded)} files downloaded, {len(report.present)} already present "
             f"in {target}")
    if report.failed or report.missing:
        path, reason = next(iter(sorted(report.failed.items())), (None, None))
        detail = f"{path}: {reason}" if path else f"{report.missing[0]} is missing on the hub"
        raise GsqaError(f"{source}: {len(report.failed) + len(report.missing)} files not downloaded (first: {detail}); "
                        "run again to resume")
    return target


# --- push ------------------------------------------------------------------------------------------------------


def push(folder: Path, repo: str, revision: str | None) -> str:
    """The finished snapshot in `folder` as the Hugging Face dataset `repo` (created if missing), its card as
    the repository's README; returns the commit. huggingface_hub's upload_folder is resumable: with hf_xet
    (a dependency of huggingface_hub) it commits in batches as parts are uploaded, and without it the LFS
    batch API skips the parts the hub already holds; so after an interruption the same command goes on."""
    from huggingface_hub import HfApi

    manifest = read_manifest(folder)
    api = HfApi()
    try:
        api.create_repo(repo, repo_type="dataset", exist_ok=True)
        commit = api.upload_folder(repo_id=repo, repo_type="dataset", folder_path=folder, revision=revision,
                                   allow_patterns=[MANIFEST, CARD, f"{DATA}/*"],
                                   commit_message=f"gsqa snapshot of {manifest['created']}")
    except Exception as error:  # noqa: BLE001 - any failure to reach or write the hub is one line
        raise GsqaError(f"cannot push {folder} to the dataset {repo} on the Hugging Face hub ({api.endpoint}): "
                        f"{' '.join(str(error).split()) or type(error).__name__}; run the same command again to "
                        "resume (parts already uploaded are not sent again)") from None
    return commit.oid
