"""`ingest all`: every stage of the reference build in order, each recorded in gsqa.stage_log.

Stages: init, fetch (not with --offline), dem, osm, finalize, check. A stage's row says running, done or
failed, with its start, end, the fingerprint of its inputs, what it expects to load and its report. The row
is written after the stage's own work has committed, so it never claims more than is in the database.

A rerun continues where the last run stopped: every stage resumes by itself (fetch skips verified files, dem
and osm skip the files in their load log), and a load stage recorded as done with the same fingerprint (the
names, sizes and mtimes of its inputs) is skipped without re-hashing its 18 or 53 GB.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from gsqa_core import schema
from gsqa_core.db import connect
from gsqa_core.errors import EXIT_OK, EXIT_SOME_FAILED, GsqaError
from ingest import check, fetch, initdb
from ingest.snapshot.manifest import origin_of

STAGES = ("init", "fetch", "dem", "osm", "finalize", "check")
_RUN_LOCK = "gsqa ingest all"


@dataclass
class StageResult:
    """What one stage did: its state (done, failed, skipped), one line for people, its report for machines."""

    stage: str
    state: str
    summary: str
    report: Any = None
    fingerprint: str | None = None  # of the inputs a done load stage ran on
    expected: Any = None  # what the stage set out to load, for `ingest status`
    seconds: float = 0.0


@dataclass
class BuildReport:
    data_dir: str
    stages: list[StageResult] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return EXIT_SOME_FAILED if any(stage.state == "failed" for stage in self.stages) else EXIT_OK

    def as_json(self) -> dict:
        return {"data_dir": self.data_dir, "stages": [
            {"stage": s.stage, "state": s.state, "summary": s.summary, "seconds": round(s.seconds, 3),
             "report": s.report} for s in self.stages]}


@dataclass
class BuildOptions:
    data_dir: Path
    what: tuple[str, ...] = fetch.WHAT  # the parts to build: dem, osm
    offline: bool = False
    bbox: fetch.BBox | None = None
    workers: int | None = None
    compression: str = "lz4"
    progress: bool = True


class StageFailed(Exception):
    """A stage ran but did not finish its job; the build stops after recording it."""

    def __init__(self, summary: str, report: Any = None) -> None:
        super().__init__(summary)
        self.report = report


def build(options: BuildOptions, dsn: str | None, announce: Callable[[str], None]) -> BuildReport:
    """Run the stages in order, stop at the first that fails; see the module docstring."""
    report = BuildReport(data_dir=str(options.data_dir))
    if not options.data_dir.is_dir() and options.offline:
        raise GsqaError(f"{options.data_dir}: not a directory (with --offline the sources must already be there)")
    started, clock = time.time(), time.monotonic()
    initialized = initdb.initialize(dsn)  # creates gsqa.stage_log too: then it is recorded like the other stages
    with connect(dsn, autocommit=True) as conn:
        if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [_RUN_LOCK]).fetchone()[0]:
            raise GsqaError("another `ingest all` is building this database right now")
        summary = ["schema in place", *(f"repaired {item}" for item in initialized.repaired),
                   *(f"not repaired: {item}" for item in initialized.left)]
        init = StageResult("init", "done", "; ".join(summary), seconds=time.monotonic() - clock)
        _record(conn, init, started, time.time())
        report.stages.append(init)
        for stage, run in _stage_runners(options, dsn):
            announce(f"== ingest all: {stage}")
            result = _run_stage(conn, stage, run)
            report.stages.append(result)
            announce(f"== {stage}: {result.state}: {result.summary}")
            if result.state == "failed":
                break
    return report


Runner = Callable[[str | None], "StageResult"]  # takes the fingerprint of the stage's last done run


def _stage_runners(options: BuildOptions, dsn: str | None) -> Iterator[tuple[str, Runner]]:
    if options.offline:
        yield "fetch", lambda done: StageResult("fetch", "skipped", "--offline: the sources already in DATA_DIR")
    else:
        yield "fetch", lambda done: _fetch_stage(options)
    for part, run in (("dem", _dem_stage), ("osm", _osm_stage)):
        if part in options.what:
            yield part, lambda done, run=run: run(done, options, dsn)
        else:
            yield part, lambda done, part=part: StageResult(part, "skipped", f"not in --what {','.join(options.what)}")
    yield "finalize", lambda done: _finalize_stage(dsn)
    yield "check", lambda done: _check_stage(dsn)


def _run_stage(conn: psycopg.Connection, stage: str, run: Runner) -> StageResult:
    started, clock = time.time(), time.monotonic()
    done = done_fingerprint(conn, stage)
    _record(conn, StageResult(stage, "running", ""), started, None)
    try:
        result = run(done)
    except (GsqaError, StageFailed) as error:
        result = StageResult(stage, "failed", str(error), getattr(error, "report", None))
    result.stage, result.seconds = stage, time.monotonic() - clock
    _record(conn, result, started, time.time())
    return result


def _record(conn: psycopg.Connection, result: StageResult, started: float, finished: float | None) -> None:
    """The stage's row in gsqa.stage_log (a rerun overwrites it). `expected` survives a running row."""
    conn.execute(
        "INSERT INTO gsqa.stage_log (stage, state, summary, started_at, finished_at, fingerprint, expected, report) "
        "VALUES (%s, %s, %s, to_timestamp(%s), to_timestamp(%s), %s, %s, %s) ON CONFLICT (stage) DO UPDATE SET "
        "state = excluded.state, summary = excluded.summary, started_at = excluded.started_at, "
        "finished_at = excluded.finished_at, fingerprint = excluded.fingerprint, "
        "expected = coalesce(excluded.expected, gsqa.stage_log.expected), report = excluded.report",
        [result.stage, result.state, result.summary, started, finished, result.fingerprint,
         None if result.expected is None else Jsonb(result.expected),
         None if result.report is None else Jsonb(result.report)])


def done_fingerprint(conn: psycopg.Connection, stage: str) -> str | None:
    row = conn.execute("SELECT fingerprint FROM gsqa.stage_log WHERE stage = %s AND state = 'done'", [stage]).fetchone()
    return row[0] if row else None


def fingerprint(files: list[Path], *settings: object) -> str:
    """Names, sizes and mtimes of the inputs plus the settings: what a done stage was run on."""
    digest = hashlib.sha256(json.dumps([str(setting) for setting in settings]).encode())
    for path in sorted(files):
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _fetch_stage(options: BuildOptions) -> StageResult:
    report = fetch.fetch(options.data_dir, list(options.what), bbox=options.bbox, progress=options.progress)
    summary = (f"{len(report.downloaded)} files downloaded ({report.bytes_downloaded:,} bytes), "
               f"{len(report.present)} already present")
    if report.failed or report.missing:
        first = next(iter(sorted(report.failed.items())), None)
        detail = f"{first[0]}: {first[1]}" if first else f"{report.missing[0]} is missing on the hub"
        raise StageFailed(f"{len(report.failed)} files failed and {len(report.missing)} are missing (first: "
                          f"{detail}); the others are in place: run the build again to retry", report.as_json())
    return StageResult("fetch", "done", summary, report.as_json())


def dem_inputs(options: BuildOptions) -> list[Path]:
    """The DEM files of the build: those dem/tile_list.txt names (in --bbox), all of which must be present."""
    tile_list = options.data_dir / fetch.TILE_LIST
    if not tile_list.is_file():
        raise GsqaError(f"{tile_list} is missing: it names the DEM tile set (fetch it, or put the published "
                        "file there)")
    names = fetch.read_tile_names(tile_list)
    if options.bbox is not None:
        names = [name for name in names if fetch.tile_in_bbox(name, options.bbox)]
    if not names:
        raise GsqaError(f"{tile_list} names no tile{' in --bbox' if options.bbox else ''}")
    files = [options.data_dir / fetch.TILES_DIR / name for name in sorted(set(names))]
    absent = [path for path in files if not path.is_file()]
    if absent:
        raise GsqaError(f"{len(absent)} of the {len(files)} DEM tiles named by {tile_list} are not in "
                        f"{absent[0].parent} (first: {absent[0].name}); fetch them (drop --offline) or put them there")
    return files


def _dem_stage(done: str | None, options: BuildOptions, dsn: str | None) -> StageResult:
    # Imported here, not at the top: the DEM loader brings rasterio and numpy, 0.27 s (median of 7 imports
    # after ingest.build, 0.20-0.34 s, on a shared 2-core machine) that `ingest status` need not pay.
    from ingest.dem.load import load_dem

    files = dem_inputs(options)
    expected = {"files": len(files), "tables": {schema.dem_us.fullname: len(files)}}
    stamp = fingerprint(files, options.compression)
    if done == stamp:
        return StageResult("dem", "done", f"{len(files)} files already loaded (inputs unchanged)", None, stamp,
                           expected)
    report = load_dem(files, dsn, workers=options.workers, compression=options.compression,
                      progress=options.progress)
    if report.failed:
        name, error = next(iter(sorted(report.failed.items())))
        raise StageFailed(f"{len(report.failed)} of {len(files)} DEM files failed (first: {name}: {error})",
                          report.as_json())
    return StageResult("dem", "done", f"{len(report.loaded)} files loaded ({report.tiles_written:,} tiles), "
                       f"{len(report.unchanged)} already loaded", report.as_json(), stamp, expected)


def osm_inputs(source: Path) -> dict[str, list[Path]]:
    """The GeoJSON files under `source`, by table."""
    from ingest.osm.geojson import layer_files
    from ingest.osm.load import find_layer_folders
    from ingest.osm.rules import LAYERS

    folders = find_layer_folders(source)
    return {LAYERS[name].table.fullname: layer_files(folder) for name, folder in folders.items()}


def _osm_stage(done: str | None, options: BuildOptions, dsn: str | None) -> StageResult:
    """The published GeoJSON layers (osm/osm_extract/), or else OpenStreetMap extracts (osm/*.osm.pbf), read
    straight into the tables."""
    from ingest.osm.load import load_osm, load_pbf
    from ingest.osm.pbf.sources import layer_sources
    from ingest.osm.rules import LAYERS

    extracts = sorted((options.data_dir / "osm").glob("*.osm.pbf"))
    geojson = (options.data_dir / fetch.OSM_DIR).is_dir()
    if not geojson and not extracts:
        return StageResult("osm", "skipped", f"no {fetch.OSM_DIR}/ and no osm/*.osm.pbf in {options.data_dir}: "
                           "the vector tables stay empty")
    inputs = [path for paths in osm_inputs(options.data_dir).values() for path in paths] if geojson else extracts
    stamp = fingerprint(inputs, options.compression, options.bbox)
    if done == stamp:
        return StageResult("osm", "done", f"{len(inputs)} files already loaded (inputs unchanged)", None, stamp)
    read = None
    if geojson:
        by_table = {table: len(paths) for table, paths in osm_inputs(options.data_dir).items()}
        report = load_osm(options.data_dir, dsn, workers=options.workers, compression=options.compression,
                          progress=options.progress, bbox=options.bbox)
    else:
        by_table = {layer.table.fullname: len(layer_sources(extracts, layer.folder))
                    for layer in LAYERS.values()}
        report, read = load_pbf(extracts, dsn, compression=options.compression, progress=options.progress,
                                bbox=options.bbox, work=options.data_dir / "osm")
    expected = {"files": sum(by_table.values()), "tables": by_table}
    details = {**({"pbf": read.as_json()} if read else {}), **report.as_json()}
    failed = {name: error for layer in report.layers.values() for name, error in layer.failed.items()}
    if failed:
        raise StageFailed(f"{len(failed)} of {expected['files']} OSM sources failed (first: "
                          f"{next(iter(failed.values()))})", details)
    skipped = sum(layer.skipped_count for layer in report.layers.values())
    rows = sum(layer.rows_written for layer in report.layers.values())
    summary = f"{rows:,} rows written; {skipped:,} features skipped as loader 1 would (listed in the stage report)"
    if read:
        summary += f"; from {len(read.sources)} extract(s), {sum(read.broken.values()):,} objects not built"
    return StageResult("osm", "done", summary, details, stamp, expected)


def _finalize_stage(dsn: str | None) -> StageResult:
    initdb.finalize(dsn)
    return StageResult("finalize", "done", "vector indexes in place, tables analyzed")


def _check_stage(dsn: str | None) -> StageResult:
    results = check.run_checks(dsn)
    failed = [result for result in results if not result.ok]
    report = [result.as_json() for result in results]
    if failed:
        raise StageFailed(f"{len(failed)} of {len(results)} checks failed (first: {failed[0].name}: "
                          f"{failed[0].detail}); `ingest check` lists them", report)
    return StageResult("check", "done", f"{len(results)} checks passed", report)


def status(dsn: str | None) -> dict[str, Any]:
    """Every stage (done, failed, running, interrupted or pending, with times), what is loaded against
    what the last `ingest all` set out to load, and the snapshot the database was restored from, if any."""
    with connect(dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('gsqa.stage_log')").fetchone()[0] is None:
            raise GsqaError("no build is recorded in this database: run `ingest all DATA_DIR` (or `ingest init`)")
        running = not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [_RUN_LOCK]).fetchone()[0]
        rows = {row[0]: row for row in conn.execute(
            "SELECT stage, state, summary, started_at, finished_at, expected FROM gsqa.stage_log")}
        loaded = {target: (files, rows_written) for target, files, rows_written in conn.execute(
            "SELECT target_table, count(*), sum(rows_written)::bigint FROM gsqa.load_log GROUP BY target_table")}
        origin = origin_of(conn)
    stages = []
    for stage in STAGES:
        if stage not in rows:
            stages.append({"stage": stage, "state": "pending"})
            continue
        _, state, summary, started, finished, expected = rows[stage]
        if state == "running" and not running:
            state, summary = "interrupted", "the run stopped during this stage; run `ingest all` again to continue"
        stages.append({"stage": stage, "state": state, "summary": summary, "expected": expected,
                       "started": started.isoformat(), "finished": finished.isoformat() if finished else None,
                       "seconds": round((finished - started).total_seconds(), 1) if finished else None})
    tables = {table.fullname: {"files": loaded.get(table.fullname, (0, 0))[0], "rows": loaded.get(table.fullname,
              (0, 0))[1]} for table in schema.REFERENCE_TABLES}
    return {"running": running, "stages": stages, "loaded": tables, "snapshot": origin}
