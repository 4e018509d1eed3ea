"""`ingest osm`: the five vector tables from the osmx GeoJSON layers (load_osm) or from OpenStreetMap PBF
extracts (load_pbf), row for row as loader 1 built them.

Loader 1 (docs/REFERENCE-DB.md, Load rules) inserted each layer's features file by file with a SERIAL id; pois in
three category passes over all files (tourism, amenity, leisure). We load the same rows (rules.py), in file
name order (loader 1 took the file system's order, which nobody can reproduce), and:

- GeoJSON: parser processes read several pieces of the files at once (geojson.py, ordered_pool.py) while a
  connection writes them in file order with binary COPY, so ids and the heap follow file and feature
  order; ids come from the table's sequence, set at the start of each file to the rows already there;
  two such writer lanes load different layers at the same time (_run_lanes);
- PBF: two reader processes (pbf/readers.py) turn the extracts into sources, one per extract, kind of object
  and layer (pbf/sources.py), each a stream of the same batches a GeoJSON file gives; one writer lane per
  layer loads its sources in name order, exactly as files (below, "file" is a file or a source);
- each file is one transaction together with its gsqa.load_log row (load_state.py): kill the load
  anywhere and a rerun resumes after the last committed file; a changed file is reloaded with every file
  after it (their ids follow it);
- pois rows go to gsqa.pois_stage first, one transaction per file, and are then numbered in one
  transaction in loader 1's order (category pass, file, position in file) into public.pois: the pass order
  spans all files, so ids are known only once every file has been read. A rerun redoes the numbering if
  the staged files changed; parsing is never repeated for unchanged files;
- once a lane has loaded a layer, it builds the table's GiST index and analyzes it (indexes.py) while the
  other lanes go on loading, unless --no-index or a file of the layer failed; a table rewritten from its
  first row drops its index in that transaction first, so that its rows are not indexed one by one.

The interpreter, imports and plan run on one core until the first COPY; from then on both cores are busy to
the end.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql
from tqdm import tqdm

from gsqa_core import schema
from gsqa_core.db import connect, identifier, relation_exists, run_together, where
from gsqa_core.errors import GsqaError
from ingest import indexes
from ingest.heap import release_free_heap
from ingest.load_state import (
    LogEntry,
    file_checksum,
    forget_log,
    lock_target,
    plan_from_first_change,
    read_log,
    refuse_unknown_rows,
    require_bookkeeping,
    unchanged,
    write_log,
)
from ingest.ordered_pool import JobStream, OrderedPool
from ingest.osm.batches import SourceError
from ingest.osm.features import COPY_HEADER, COPY_TRAILER
from ingest.osm.geojson import Job, jobs_for, layer_files, parse_job
from ingest.osm.native import lines_note
from ingest.osm.reports import LayerReport, OsmLoadReport
from ingest.osm.rules import LAYER_BY_FOLDER, LAYERS, RULES_VERSION, Layer

if TYPE_CHECKING:
    from ingest.osm.pbf.readers import Readers
    from ingest.osm.pbf.sources import PbfReport

log = logging.getLogger(__name__)

STAGE = schema.pois_stage.fullname
# Writer connections: each loads whole layers, so two tables fill at once and one lane's server backend works
# while the other lane waits for its parsers: on 2 cores two lanes keep about 1.8 cores busy, one writer 1.65
# (bench/osm_geojson.py). Split by bytes, the lanes are roads and the other four layers; on 285 MB they end
# 0.64 s apart with both cores busy to the end, and moving parks or lakes to the roads lane changes the wall
# by 0.02-0.04 s.
LANES = 2
# Batches a parser may hold ready: a whole piece of a file (RANGE_BYTES), so that while the writer drains one
# parser's piece the other parsers finish theirs instead of waiting on a full queue.
READY_BATCHES_PER_PARSER = 8
_LOGGED_SKIPS = 100  # skipped features a file's load_log row lists, for the reports of later reruns


# --- what to load -------------------------------------------------------------------------------------


def find_layer_folders(source: Path) -> dict[str, Path]:
    """Layer name -> folder. SOURCE holds the layer folders, or is a dataset root holding osm/osm_extract/."""
    if not source.exists():
        raise GsqaError(f"{source}: no such file or directory")
    if source.is_file():
        raise GsqaError(f"{source}: expected an OpenStreetMap PBF file, a folder holding the layer folders (pois/, "
                        "roads/, parks/, lakes/, postal_codes/) or a dataset root holding osm/osm_extract/")
    for root in (source / "osm" / "osm_extract", source / "osm_extract", source):
        if root.is_dir() and any((root / folder).is_dir() for folder in LAYER_BY_FOLDER):
            return _layer_folders(root)
    raise GsqaError(f"{source}: no layer folder in it; expected pois/, roads/, parks/, lakes/ or postal_codes/ "
                    "(here or under osm/osm_extract/)")


def _layer_folders(root: Path) -> dict[str, Path]:
    unknown = sorted(entry.name for entry in root.iterdir()
                     if entry.is_dir() and entry.name not in LAYER_BY_FOLDER and not entry.name.startswith("."))
    if unknown:
        raise GsqaError(f"{root}: unknown layer folder {unknown[0]}/; expected only "
                        f"{', '.join(f'{folder}/' for folder in LAYER_BY_FOLDER)}")
    return {layer.name: root / layer.folder for layer in LAYERS.values() if (root / layer.folder).is_dir()}


def select_layers(folders: dict[str, Path], wanted: list[str] | None, report: OsmLoadReport) -> list[Layer]:
    """The layers to load, in table order: those asked for (all must have a folder), else all present."""
    if wanted:
        names = [LAYER_BY_FOLDER[name].name if name in LAYER_BY_FOLDER else name for name in wanted]
        unknown = [name for name in names if name not in LAYERS]
        if unknown:
            raise GsqaError(f"--layers: unknown layer {unknown[0]!r}; expected some of {', '.join(LAYERS)}")
        missing = [name for name in names if name not in folders]
        if missing:
            raise GsqaError(f"--layers: SOURCE has no {LAYERS[missing[0]].folder}/ folder for {missing[0]}")
        return [layer for name, layer in LAYERS.items() if name in names]
    absent = [name for name in LAYERS if name not in folders]
    if absent:
        _warn(report, f"SOURCE has no folder for {', '.join(absent)}: not loaded")
    return [layer for name, layer in LAYERS.items() if name in folders]


def _warn(report: OsmLoadReport, message: str) -> None:
    report.warnings.append(message)
    log.warning("warning: %s", message)


# --- the load ------------------------------------------------------------------------------------------


@dataclass
class _Plan:
    layer: Layer
    files: dict[str, Path]  # name -> path, sorted by name
    logged: dict[str, LogEntry]
    bbox: tuple[float, float, float, float] | None = None  # a regional build keeps the features overlapping it
    # What a logged file was loaded with (the box; PBF: the rules): a file logged with other settings is
    # loaded again. Written into its load_log details.
    settings: dict = field(default_factory=dict)
    same: set[str] = field(default_factory=set)
    todo: list[str] = field(default_factory=list)
    jobs: dict[str, list[Job]] = field(default_factory=dict)  # the pieces of each file in todo
    copied: int = 0  # features sent to the server this run, for the progress bar (rolled-back files too)
    # Once a file is written every later one follows it: direct tables (their ids), and every layer of several
    # PBF extracts (a later source skips the objects the earlier ones claim).
    follows: bool = True

    @property
    def target(self) -> str:
        """Where the parsed rows go: the table, or for pois the staging table."""
        return STAGE if self.layer.in_passes else self.layer.table.fullname


def load_osm(source: Path, dsn: str | None = None, *, layers: list[str] | None = None, workers: int | None = None,
             replace: bool = False, compression: str = "lz4", progress: bool = True,
             bbox: tuple[float, float, float, float] | None = None, index: bool = True) -> OsmLoadReport:
    """Load the layers of `source`; see the module docstring. Raises GsqaError before any write when
    nothing can start; problems with files and features end up in the report instead."""
    started = time.monotonic()
    report = OsmLoadReport(source=str(source))
    folders = find_layer_folders(source)
    if note := lines_note():
        print(note, file=sys.stderr)
    selected = select_layers(folders, layers, report)
    files = {layer.name: {path.name: path for path in layer_files(folders[layer.name])} for layer in selected}
    for layer in selected:
        report.add_layer(layer.name, layer.table.fullname, len(files[layer.name]))
        if not files[layer.name]:
            _warn(report, f"{folders[layer.name]}: no *.geojson files")
    if not any(files.values()):
        raise GsqaError(f"no readable input: no *.geojson files in the layer folders of {source}")
    workers = workers or os.cpu_count() or 1
    lanes = _lanes(selected, files, min(LANES, workers))
    with contextlib.ExitStack() as stack:
        # The parsers start first: forked before any connection is open or thread started (ordered_pool).
        pools = [stack.enter_context(OrderedPool(max(1, workers // len(lanes)), parse_job, SourceError,
                                                 queue_items=READY_BATCHES_PER_PARSER,
                                                 name=f"ingest-osm-parser-{number}"))
                 for number in range(len(lanes))]
        control = stack.enter_context(connect(dsn, autocommit=True))  # holds the locks until the end
        plans = {plan.layer.name: plan for plan in _prepare(control, selected, files, replace, workers, compression,
                                                             bbox, {"bbox": _listed(bbox)})}
        writers = [stack.enter_context(connect(dsn, autocommit=True)) for _ in lanes]
        _run_lanes([_Lane(_GeoJsonFeed(pool), writer, [plans[layer.name] for layer in lane], number)
                    for number, (pool, writer, lane) in enumerate(zip(pools, writers, lanes, strict=True))],
                   report, progress, index)
    report.seconds = time.monotonic() - started
    return report


def load_pbf(paths: list[Path], dsn: str | None = None, *, layers: list[str] | None = None, replace: bool = False,
             compression: str = "lz4", progress: bool = True, bbox: tuple[float, float, float, float] | None = None,
             work: Path | None = None, index: bool = True) -> tuple[OsmLoadReport, PbfReport]:
    """Load OpenStreetMap extracts straight into the tables: the reader processes (pbf/readers.py) stream binary COPY
    rows, one writer connection per layer takes each source (extract x reader) in name order, one
    transaction each with its load_log row, as for GeoJSON files. A rerun skips sources logged with the
    same extract (size, checksum), box and rules; nodes are read again only if a nodes source is missing."""
    # Imported here, not with this module: a GeoJSON load starts sooner without pyosmium and libosmium.
    from ingest.osm.pbf.checks import check_inputs
    from ingest.osm.pbf.native import reader_note
    from ingest.osm.pbf.plans import reader_plans
    from ingest.osm.pbf.readers import Readers, ReadProgress
    from ingest.osm.pbf.sources import layer_sources

    started = time.monotonic()
    check_inputs(paths, bbox)
    if note := reader_note():
        print(note, file=sys.stderr)
    report = OsmLoadReport(source=", ".join(map(str, paths)))
    selected = select_layers(dict.fromkeys(LAYERS, Path()), layers, report)
    files = {layer.name: layer_sources(paths, layer.folder) for layer in selected}
    for layer in selected:
        report.add_layer(layer.name, layer.table.fullname, len(files[layer.name]))
    with contextlib.ExitStack() as stack:
        readers = stack.enter_context(Readers())  # forked before any connection is open
        control = stack.enter_context(connect(dsn, autocommit=True))  # holds the locks until the end
        plans = _prepare(control, selected, files, replace, 2, compression, bbox,
                         {"bbox": _listed(bbox), "rules": RULES_VERSION}, claims=len(paths) > 1)
        wanted = {plan.layer.folder: set(plan.todo) for plan in plans}
        readers.start(reader_plans(paths, wanted, work or paths[0].parent, bbox))
        writers = [stack.enter_context(connect(dsn, autocommit=True)) for _ in plans]
        with ReadProgress(readers, progress, lambda: sum(plan.copied for plan in plans)):
            _run_lanes([_Lane(_PbfFeed(readers), writer, [plan], number)
                        for number, (writer, plan) in enumerate(zip(writers, plans, strict=True))], report, False,
                       index)
        read = readers.report(paths)
    report.seconds = read.seconds = time.monotonic() - started
    return report, read


def _lanes(selected: list[Layer], files: dict[str, dict[str, Path]], count: int) -> list[list[Layer]]:
    """The layers split into `count` lanes of about equal bytes (largest first into the lightest lane),
    each lane in table order."""
    size = {layer.name: sum(path.stat().st_size for path in files[layer.name].values()) for layer in selected}
    lanes: list[list[Layer]] = [[] for _ in range(count)]
    weights = [0] * count
    for layer in sorted(selected, key=lambda item: -size[item.name]):
        lightest = weights.index(min(weights))
        lanes[lightest].append(layer)
        weights[lightest] += size[layer.name]
    return [sorted(lane, key=selected.index) for lane in lanes if lane]


class _GeoJsonFeed:
    """A lane's GeoJSON files: cut into pieces for its own parsers."""

    def __init__(self, pool: OrderedPool) -> None:
        self.pool = pool

    def jobs(self, plan: _Plan, name: str) -> list[Job]:
        return jobs_for(plan.files[name], plan.layer.name, bbox=plan.bbox)

    def streams(self, jobs: list[Job]) -> Iterator[JobStream]:
        return self.pool.streams(jobs)


class _PbfFeed:
    """A lane's sources of OpenStreetMap extracts: each the stream of one reader process (pbf/readers.py)."""

    def __init__(self, readers: Readers) -> None:
        self.readers = readers

    def jobs(self, plan: _Plan, name: str) -> list[Job]:
        return [Job(str(plan.files[name]), name, plan.layer.folder, "pbf")]

    def streams(self, jobs: list[Job]) -> Iterator[JobStream]:
        return (self.readers.stream(job.source_name, job.layer) for job in jobs)


@dataclass
class _Lane:
    """Layers written one after the other by one connection, fed by its own parsers or readers."""

    feed: _GeoJsonFeed | _PbfFeed
    conn: psycopg.Connection
    plans: list[_Plan]
    number: int


class _Stopped(Exception):
    """Another lane failed or the user interrupted: roll the file in progress back."""


def _run_lanes(lanes: list[_Lane], report: OsmLoadReport, progress: bool, index: bool) -> None:
    """Each lane in its own thread (psycopg and the parsers' pipes release the GIL), so that one lane's
    server backend works while the other's waits for its parsers: two tables fill at once, each in its
    own file order. On Ctrl-C or a failure every lane rolls its current file back before this returns."""
    stop = threading.Event()
    run_together([functools.partial(_load_lane, lane, report, progress, index, stop) for lane in lanes],
                 [lane.conn for lane in lanes], "ingest-osm-lane", stop.set)


def _load_lane(lane: _Lane, report: OsmLoadReport, progress: bool, index: bool, stop: threading.Event) -> None:
    # Every layer's pieces are queued at once, so the parsers work ahead across layer boundaries.
    for plan in lane.plans:
        plan.jobs = {name: lane.feed.jobs(plan, name) for name in plan.todo}
    streams = lane.feed.streams([job for plan in lane.plans for name in plan.todo for job in plan.jobs[name]])
    for plan in lane.plans:
        layer_report = report.layers[plan.layer.name]
        _load_layer(lane.conn, streams, plan, layer_report, lane.number if progress else False, stop)
        if index and not stop.is_set():
            _make_ready(lane.conn, plan, layer_report)


def _make_ready(conn: psycopg.Connection, plan: _Plan, report: LayerReport) -> None:
    """The table's index and statistics as soon as its layer is in, while the other lanes go on loading;
    not while a file of the layer failed (the rerun that loads it makes the table ready), and not again
    when nothing changed."""
    table = plan.layer.table
    if report.failed:
        return
    if not report.loaded and indexes.has_index(conn, table) and indexes.is_analyzed(conn, table):
        return
    started = time.monotonic()
    log.info("ingest osm: indexing and analyzing %s", table.fullname)
    indexes.make_ready(conn, table)
    report.ready_seconds = time.monotonic() - started


def _prepare(conn: psycopg.Connection, selected: list[Layer], files: dict[str, dict[str, Path]], replace: bool,
             workers: int, compression: str, bbox: tuple[float, float, float, float] | None,
             settings: dict, *, claims: bool = False) -> list[_Plan]:
    """Locks, checks and plans for every layer before anything is written."""
    require_bookkeeping(conn)
    for layer in selected:
        lock_target(conn, "osm", layer.table.fullname)
        if not relation_exists(conn, layer.table.fullname):
            raise GsqaError(f"table {layer.table.fullname} does not exist in {where(conn)}: run `ingest init` first")
    if not relation_exists(conn, STAGE):
        conn.execute(schema.pois_stage.create_sql())
    plans = [_Plan(layer, files[layer.name], {}, bbox, settings) for layer in selected]
    if not replace:
        for plan in plans:
            plan.logged = read_log(conn, plan.target)
            _refuse_foreign_rows(conn, plan)
    for plan in plans:
        if replace:
            _empty(conn, plan.layer)
        _set_compression(conn, plan, compression)
        same_box = {name: path for name, path in plan.files.items()
                    if name in plan.logged and _same_settings(plan.logged[name].details, settings)}
        plan.same = unchanged({name: (path, path.stat().st_size) for name, path in same_box.items()},
                              plan.logged, workers)
        plan.follows = not plan.layer.in_passes or claims
        if not plan.follows:
            plan.todo = [name for name in plan.files if name not in plan.same]
        else:
            plan.todo = plan_from_first_change(plan.files, plan.same)
    return plans


def _same_settings(details: dict | None, settings: dict) -> bool:
    return all((details or {}).get(key) == value for key, value in settings.items())


def _listed(bbox: tuple[float, float, float, float] | None) -> list[float] | None:
    """The box as the load log stores it (JSON): a file loaded with another box is loaded again."""
    return None if bbox is None else list(bbox)


def _set_compression(conn: psycopg.Connection, plan: _Plan, compression: str) -> None:
    """TOAST compression of the geometries to come (rows already stored keep theirs): lz4 costs the server
    a fraction of pglz's time on WKB doubles, which compress little either way; values are the same. Only
    altered when it differs: ALTER TABLE locks out readers."""
    for target in {plan.layer.table.fullname, plan.target}:
        current = conn.execute("SELECT attcompression FROM pg_attribute WHERE attrelid = %s::regclass "
                               "AND attname = 'geometry'", [target]).fetchone()[0]
        if current != compression[0]:  # 'l' or 'p'; '' is the server's default
            conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN geometry SET COMPRESSION {}").format(
                identifier(target), sql.SQL(compression)))


def _refuse_foreign_rows(conn: psycopg.Connection, plan: _Plan) -> None:
    """The table holds exactly the rows its log accounts for (pois: and its stage too)."""
    table, inputs = plan.layer.table.fullname, set(plan.files)
    if plan.layer.in_passes:
        refuse_unknown_rows(table, _count(conn, table), read_log(conn, table), inputs, "rows", "osm")
    refuse_unknown_rows(table, _count(conn, plan.target), plan.logged, inputs, "rows", "osm")


def _count(conn: psycopg.Connection, table: str) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(identifier(table))).fetchone()[0]


def _empty(conn: psycopg.Connection, layer: Layer) -> None:
    """--replace: the table (and for pois its staging rows) and their load log go, in one transaction."""
    with conn.transaction():
        targets = [layer.table.fullname] + ([STAGE] if layer.in_passes else [])
        for target in targets:
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY").format(identifier(target)))
            forget_log(conn, target)


def _load_layer(conn: psycopg.Connection, streams: Iterator[JobStream], plan: _Plan, report: LayerReport,
                bar_position: int | bool, stop: threading.Event) -> None:
    """Write the layer's planned files in name order as their pieces arrive, one transaction each."""
    report.unchanged = sorted(plan.same - set(plan.todo))
    total = sum(plan.files[name].stat().st_size for name in plan.todo)
    bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"ingest osm -> {plan.layer.table.fullname}",
               disable=bar_position is False or not total, position=int(bar_position))
    rewriting = False  # direct tables: once a file is written, every later one must follow it
    with ThreadPoolExecutor(1) as hasher, bar:  # the bar ends its line before an error message, not after
        for name in plan.todo:
            file_streams = [(job, next(streams)) for job in plan.jobs[name]]
            if name in plan.same and not rewriting:
                _drain(file_streams, bar)
                report.unchanged.append(name)
            else:
                checksum = hasher.submit(file_checksum, plan.files[name])
                if _write_file(conn, plan, name, file_streams, checksum, report, bar, stop,
                               first_write=not rewriting):
                    rewriting = plan.follows
            release_free_heap()  # the file's batches, loaded or not, are freed now: keep memory level (ingest/heap.py)
    report.unchanged.sort()
    for name in report.unchanged:  # what an earlier run skipped is still missing: say so again
        details = plan.logged[name].details or {}
        report.add_skipped(details.get("skipped_count", 0), details.get("skipped", []))
    if plan.layer.in_passes:
        _number_pois(conn)


def _drain(file_streams: list[tuple[Job, JobStream]], bar: tqdm) -> None:
    """Consume the pieces not read yet (so the parsers move on), counting their bytes as done."""
    for job, stream in file_streams:
        if not stream.finished:
            stream.drain()
            bar.update(job.end - job.start)


def _write_file(conn: psycopg.Connection, plan: _Plan, name: str, file_streams: list[tuple[Job, JobStream]],
                checksum: Future, report: LayerReport, bar: tqdm, stop: threading.Event, *,
                first_write: bool) -> bool:
    """One transaction: make room for the file, COPY its rows, log it. False if the file failed."""
    skipped = _Skipped()
    try:
        with conn.transaction():
            # The rows and their log row commit together, so a commit lost in a server crash loses both and
            # the rerun loads the file again: no need to wait for each commit's WAL flush.
            conn.execute("SET LOCAL synchronous_commit = off")
            _make_room(conn, plan, name, first_write)
            rows, features = _copy_file(conn, plan, file_streams, skipped, bar, stop)
            details = {"features": features, "skipped_count": skipped.count, "skipped": skipped.listed[:_LOGGED_SKIPS],
                       **plan.settings}
            write_log(conn, plan.target, name, plan.files[name].stat().st_size, checksum.result(), rows, details)
    except SourceError as error:
        _fail(report, name, str(error), file_streams, bar)
        return False
    except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as error:
        message = f"{plan.files[name]}: rejected by {plan.target}: {error.diag.message_primary} ({error.diag.context})"
        _fail(report, name, message, file_streams, bar)
        return False
    report.loaded.append(name)
    report.rows_written += rows
    report.features_read += features
    report.add_skipped(skipped.count, skipped.listed)
    return True


def _fail(report: LayerReport, name: str, message: str, file_streams: list[tuple[Job, JobStream]], bar: tqdm) -> None:
    report.failed[name] = message
    if message not in report.errors_said:
        report.errors_said.add(message)
        log.error("error: %s", message)
    _drain(file_streams, bar)


@dataclass
class _Skipped:
    """Features of one file that loader 1 could not have stored: how many, and the first ones in detail."""

    count: int = 0
    listed: list[dict] = field(default_factory=list)


def _make_room(conn: psycopg.Connection, plan: _Plan, name: str, first_write: bool) -> None:
    """Staging: drop this file's earlier rows. Direct: on the first write drop the rows of this file and
    every later one; then point the id sequence just past the rows that stay."""
    if plan.layer.in_passes:
        conn.execute(sql.SQL("DELETE FROM {} WHERE source_name = %s").format(identifier(STAGE)), [name])
        forget_log(conn, STAGE, name=name)
        return
    table = identifier(plan.target)
    if first_write:
        forget_log(conn, plan.target, from_name=name)
        kept = sum(entry.rows for entry in read_log(conn, plan.target).values())
        if not kept:
            indexes.drop_index(conn, plan.layer.table)
        conn.execute(sql.SQL("DELETE FROM {} WHERE id > %s").format(table), [kept])
    conn.execute(sql.SQL("SELECT setval(pg_get_serial_sequence(%s, 'id'), coalesce(max(id), 0) + 1, false) FROM {}")
                 .format(table), [plan.target])


def _copy_file(conn: psycopg.Connection, plan: _Plan, file_streams: list[tuple[Job, JobStream]],
               skipped: _Skipped, bar: tqdm, stop: threading.Event) -> tuple[int, int]:
    """COPY the rows of every piece of the file as they are parsed; returns (rows, features)."""
    columns = ("source_name", "pass", "seq") * plan.layer.in_passes + plan.layer.columns
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
        identifier(plan.target), sql.SQL(", ").join(map(sql.Identifier, columns)))
    rows = features = 0
    with conn.cursor().copy(statement) as copy:
        copy.write(COPY_HEADER)
        for job, stream in file_streams:
            base = features
            for batch in stream.items():
                if stop.is_set():
                    raise _Stopped
                copy.write(batch.data)
                rows, features = rows + batch.rows, features + batch.features
                plan.copied += batch.features
                skipped.count += batch.skipped_count
                skipped.listed += [{"file": job.source_name, "feature": base + index,
                                    "byte": offset if job.layout == "lines" else None, "reason": reason}
                                   for index, offset, reason in batch.skipped]
            bar.update(job.end - job.start)
        copy.write(COPY_TRAILER)
    return rows, features


# Loader 1's pois ids: the pass order (tourism, amenity, leisure) spans all files, then file, then feature.
# One statement numbers them: 1.3 s for the 114k pois rows of bench/osm_geojson.py's 1 GB (about 11 µs per
# row; about 3 s for the reference's 268k), while the other lane loads roads. The sort of the staged rows fits
# in work_mem (the reference's take about 48 MB) instead of going to disk, as it does at the default 4 MB.
_NUMBER_POIS = """
SET LOCAL work_mem = '256MB';
TRUNCATE {pois} RESTART IDENTITY;
INSERT INTO {pois} (id, {columns})
    SELECT row_number() OVER (ORDER BY pass, source_name COLLATE "C", seq), {columns}
    FROM {stage} ORDER BY pass, source_name COLLATE "C", seq;
SELECT setval(pg_get_serial_sequence({pois_name}, 'id'), greatest(max(id), 1), max(id) IS NOT NULL) FROM {pois};
DELETE FROM {log} WHERE target_table = {pois_name};
INSERT INTO {log} (target_table, source_name, source_size, source_checksum, rows_written, details)
    SELECT {pois_name}, source_name, source_size, source_checksum, rows_written, details
    FROM {log} WHERE target_table = {stage_name};
"""


def _number_pois(conn: psycopg.Connection) -> None:
    """One transaction: public.pois becomes the staged rows in loader 1's order, with the log to match.
    Skipped when public.pois already holds exactly the staged files."""
    pois = schema.pois.fullname
    staged, numbered = read_log(conn, STAGE), read_log(conn, pois)
    if staged == numbered and _count(conn, pois) == sum(entry.rows for entry in staged.values()):
        return
    columns = sql.SQL(", ").join(map(sql.Identifier, LAYERS["pois"].columns))
    with conn.transaction():
        indexes.drop_index(conn, schema.pois)
        conn.execute(sql.SQL(_NUMBER_POIS).format(
            pois=identifier(pois), stage=identifier(STAGE), columns=columns, pois_name=sql.Literal(pois),
            stage_name=sql.Literal(STAGE), log=sql.Identifier(schema.BOOKKEEPING_SCHEMA, "load_log")))
