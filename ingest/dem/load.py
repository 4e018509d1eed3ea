"""`ingest dem`: load ASTER GDEM GeoTIFFs into public.dem_us as `raster2pgsql -s 4326 -I -C -M -F -t 256x256`.

The table comes out identical to raster2pgsql's for the same files in sorted name order: the same tiles
(tiles.py), rid = position among the tiles written, heap order = rid order, the same raster
constraints (constraints.py), index and VACUUM ANALYZE. What differs is how it gets there:

- stager processes read, encode and store files in parallel, each over its own connection into an
  UNLOGGED staging table per file, where their backends build and compress the rasters (stagers.py);
  one writer connection appends the staged files to the table in name order (_append_stage), taking the
  compressed values over as they are: a single writer keeps the heap in rid order, and the stagers keep
  both cores busy;
- `rast` is stored with lz4 TOAST compression (or pglz, as raster2pgsql, with --compression pglz): TOAST
  compression decides the server time, and lz4 costs a fraction of pglz's CPU for a larger table; pixels and
  query results are the same (docs/PERFORMANCE.md has both);
- the raster constraints and the GiST index exist before the tiles arrive, so PostgreSQL checks each
  tile in memory while it is inserted instead of re-reading the whole table afterwards;
- each file is one transaction that also writes its gsqa.load_log row, so a rerun skips the files
  whose size and checksum match and reloads the rest.

Where the time goes (docs/PERFORMANCE.md, "Where the time goes", has the profile's figures):
- the load is CPU-bound on both cores, so the speed-up over raster2pgsql is at most 2 x its wall / our CPU
  (client and server). raster2pgsql's time is mostly pglz compression, whose speed differs more between VMs
  than ours, so the ratio depends on the CPU; a competing CPU-bound process slows both tools alike;
- the writer's append is the critical path, while the stagers' backends build and compress the rasters;
- the start (interpreter and imports, then each stager's backend loading PostGIS's raster library while the
  main connection makes the table, its index and the constraints; the writer begins a file only once it is
  staged whole): from the end of the imports both cores are busy, so staging the first file sooner would only
  delay the next ones;
- the finish (max-extent constraint, heap-order check, the stages' drop, VACUUM ANALYZE, which raster2pgsql's
  -M pays too): the TOAST table's VACUUM runs on a second connection beside the table's VACUUM ANALYZE
  (_vacuum_analyze), so the two overlap.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from tqdm import tqdm

from gsqa_core import schema
from gsqa_core.db import connect, relation_exists, resolve_dsn, run_together
from gsqa_core.errors import EXIT_OK, EXIT_SOME_FAILED, GsqaError
from gsqa_core.schema import BOOKKEEPING_SCHEMA, refuse_other_columns
from ingest.dem.constraints import TileGrid, reconcile
from ingest.dem.stagers import Staged, StageJob, StagerPool
from ingest.dem.tiles import BadRaster, RasterFacts, read_facts
from ingest.diskspace import check_room
from ingest.load_state import (
    forget_log,
    lock_target,
    plan_from_first_change,
    read_log,
    refuse_unknown_rows,
    require_bookkeeping,
    unchanged,
    write_log,
)
from ingest.ordered_pool import JobStream

log = logging.getLogger(__name__)

DEFAULT_TABLE = schema.dem_us.fullname


@dataclass
class DemLoadReport:
    table: str
    loaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    tiles_written: int = 0
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_SOME_FAILED if self.failed else EXIT_OK

    def as_json(self) -> dict:
        return {
            "table": self.table, "loaded": self.loaded, "unchanged": self.unchanged, "failed": self.failed,
            "warnings": self.warnings, "tiles_written": self.tiles_written, "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Target:
    """The raster table to load, e.g. public.dem_us."""

    schema: str
    name: str

    @classmethod
    def parse(cls, qualified: str) -> Target:
        schema_name, _, name = qualified.rpartition(".")
        if not name:
            raise GsqaError(f"--table {qualified!r}: expected [schema.]table")
        return cls(schema_name or "public", name)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def index(self) -> sql.Identifier:
        return sql.Identifier(f"{self.name}_st_convexhull_idx")  # the name raster2pgsql -I gets

    @property
    def stage_prefix(self) -> str:
        """Staging tables (gsqa schema) of this target's files: the prefix and the file's plan position."""
        return f"dem_stage_{hashlib.md5(self.qualified.encode()).hexdigest()[:8]}_"

    def stage(self, position: int) -> tuple[str, str]:
        return BOOKKEEPING_SCHEMA, f"{self.stage_prefix}{position}"


def discover(paths: Sequence[Path]) -> list[Path]:
    """GeoTIFF files named directly or found as *.tif in named directories, sorted by file name."""
    found: dict[str, Path] = {}
    for path in paths:
        if not path.exists():
            raise GsqaError(f"{path}: no such file or directory")
        for file in sorted(path.glob("*.tif")) if path.is_dir() else [path]:
            if file.name in found and found[file.name] != file:
                raise GsqaError(f"{file} and {found[file.name]} have the same name; filename must be unique")
            found[file.name] = file
    if not found:
        raise GsqaError(f"no *.tif files in {', '.join(map(str, paths))}")
    return [found[name] for name in sorted(found)]


def load_dem(
    paths: Sequence[Path],
    dsn: str | None = None,
    *,
    table: str = DEFAULT_TABLE,
    workers: int | None = None,
    replace: bool = False,
    compression: str = "lz4",
    check_disk: bool = True,
    progress: bool = True,
) -> DemLoadReport:
    """Load the GeoTIFFs in `paths` into `table`; see the module docstring. Raises GsqaError before any
    write when nothing can start; per-file problems end up in the report instead."""
    started = time.monotonic()
    target = Target.parse(table)
    report = DemLoadReport(table=target.qualified)
    inputs = discover(paths)
    workers = workers or os.cpu_count() or 1
    # The stagers start first: forked before any dataset or connection is open (see stagers.py).
    dsn = resolve_dsn(dsn)  # the stagers connect on their own
    with StagerPool(workers, dsn) as pool:
        facts = _read_headers(inputs, report)
        with connect(dsn, autocommit=True) as conn:
            lock_target(conn, "dem", target.qualified)
            require_bookkeeping(conn)
            if replace:
                _drop_table(conn, target)
            if not relation_exists(conn, target.qualified):
                _create_table(conn, target)
            logged = read_log(conn, target.qualified)
            _refuse_foreign_contents(conn, target, logged, {path.name for path in inputs})
            _prepare_table(conn, target, compression)
            same = unchanged({name: (path, header.size) for name, (path, header) in facts.items()}, logged, workers)
            plan = plan_from_first_change(facts, same)
            if plan and check_disk:
                _check_disk(conn, [facts[name] for name in plan], workers, report)
            _drop_stages(conn, target)  # left by an interrupted run
            try:
                # The stagers start on the files while the constraints are put in place.
                streams = pool.streams([StageJob(facts[name][0], facts[name][1].grid, target.stage(position),
                                                 compression, dsn) for position, name in enumerate(plan)])
                _expect_files(conn, target, facts, logged, same)
                _publish(conn, target, [facts[name][1] for name in plan], streams, same, report, progress)
            finally:
                pool.close()  # no stager may create a table after the cleanup
                _drop_stages(conn, target, quietly=True)
            finish(conn, target, dsn)
    report.seconds = time.monotonic() - started
    return report


def _read_headers(inputs: list[Path], report: DemLoadReport) -> dict[str, tuple[Path, RasterFacts]]:
    facts = {}
    for path in inputs:
        try:
            facts[path.name] = (path, read_facts(path))
        except BadRaster as error:
            _fail(report, path.name, str(error))
            continue
        for warning in facts[path.name][1].warnings:
            report.warnings.append(warning)
            log.warning("warning: %s", warning)
    if not facts:
        raise GsqaError(f"no readable input: none of the {len(inputs)} files is a GeoTIFF dem_us can hold")
    return facts


def _fail(report: DemLoadReport, name: str, message: str) -> None:
    report.failed[name] = message
    log.error("error: %s", message)


def _drop_table(conn: psycopg.Connection, target: Target) -> None:
    """--replace: the table and its load log go together, in one transaction."""
    with conn.transaction():
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(target.ident))
        forget_log(conn, target.qualified)


def _create_table(conn: psycopg.Connection, target: Target) -> None:
    """Create the table as schema.dem_us defines it, forgetting load-log rows of an earlier table of that
    name (they describe tiles that are gone)."""
    if not conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [target.schema]).fetchone():
        raise GsqaError(f"--table {target.qualified}: schema {target.schema} does not exist")
    with conn.transaction():
        conn.execute(_definition(target).create_sql())
        forget_log(conn, target.qualified)


def _definition(target: Target) -> schema.Table:
    return schema.dem_us.renamed(target.schema, target.name)


def _prepare_table(conn: psycopg.Connection, target: Target, compression: str) -> None:
    """Check the table's columns, choose the TOAST compression, build the GiST index."""
    refuse_other_columns(conn, _definition(target), "Use --table to load elsewhere, or drop it.")
    with conn.transaction():
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN rast SET COMPRESSION {}").format(
            target.ident, sql.SQL(compression)))
        # A tile over 2 kB that compresses below it would stay inside its row, and rows of different sizes
        # let the free-space map put a later row into a gap on an earlier page (see _plug_free_space). With
        # this target every tile but the tiny corner ones goes out of line, so a file's rows are alike.
        conn.execute(sql.SQL("ALTER TABLE {} SET (toast_tuple_target = 128)").format(target.ident))
        # A VACUUM during the load would reopen the gaps that _plug_free_space filled.
        conn.execute(sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(target.ident))
        _ensure_index(conn, target)


def _ensure_index(conn: psycopg.Connection, target: Target) -> None:
    """raster2pgsql -I's GiST index; kept during the load, so each tile is indexed from memory."""
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} USING gist (st_convexhull(rast))").format(
        target.index, target.ident))


def _refuse_foreign_contents(conn: psycopg.Connection, target: Target, logged: dict, inputs: set[str]) -> None:
    rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(target.ident)).fetchone()[0]
    refuse_unknown_rows(target.qualified, rows, logged, inputs, "tiles", "dem")


def _check_disk(conn: psycopg.Connection, files: list[tuple[Path, RasterFacts]], workers: int,
                report: DemLoadReport) -> None:
    # Incompressible tiles (steep, noisy terrain) are stored at their raw size plus a few header bytes.
    raw = [facts.grid.width * facts.grid.height * 2 for _, facts in files]
    # Each stager holds at most two staged files besides the one it stages (stagers.py), and the stages
    # of finished files are dropped a few at a time.
    staged = sum(sorted(raw, reverse=True)[:3 * workers + _STAGES_DROPPED_TOGETHER])
    warning = check_room(conn, int((sum(raw) + staged) * 1.05), f"loading {len(files)} files")
    if warning:
        report.warnings.append(warning)
        log.warning("warning: %s", warning)


def _expect_files(conn: psycopg.Connection, target: Target, facts: dict, logged: dict, unchanged: set) -> None:
    """Put the raster constraints of the finished table in place before loading (extent excepted), so that
    each tile is checked in memory as it arrives."""
    grids = [TileGrid.from_log(logged[name].details) if name in unchanged else TileGrid(facts[name][1].grid)
             for name in sorted(facts)]
    with conn.transaction():
        reconcile(conn, target.schema, target.name, grids, extent=False)


# Dropping tables makes the commit wait until the WAL is on disk (their files go once the commit is
# durable): 20-35 ms per file here, so the stages of finished files are dropped eight at a time.
_STAGES_DROPPED_TOGETHER = 8


def _publish(
    conn: psycopg.Connection,
    target: Target,
    plan: list[RasterFacts],
    streams: Iterator[JobStream],
    unchanged: set[str],
    report: DemLoadReport,
    progress: bool,
) -> None:
    """Write the planned files in name order as their tiles arrive, one transaction each."""
    rewriting = False  # becomes True once a file has been written: later files must then follow it
    consumed: list[sql.Identifier] = []  # stages whose file is done with, not yet dropped
    started = time.monotonic()
    # A with block: the bar ends its line before an error message is printed, not at exit after it.
    with tqdm(total=len(plan), unit="file", desc=f"ingest dem -> {target.qualified}",
              disable=not (progress and plan)) as bar:
        for position, (facts, stream) in enumerate(zip(plan, streams, strict=True)):
            stage = sql.Identifier(*target.stage(position))
            if facts.name in unchanged and not rewriting:
                report.unchanged.append(facts.name)
            elif _write_file(conn, target, facts, stream, stage, report, first_write=not rewriting):
                rewriting = True
            stream.drain()  # the stager has committed (or given up on) the file's stage
            consumed.append(stage)
            if len(consumed) == _STAGES_DROPPED_TOGETHER or position == len(plan) - 1:
                _drop(conn, consumed)
                consumed.clear()
            bar.update()
            bar.set_postfix_str(f"{report.tiles_written / (time.monotonic() - started):,.0f} tiles/s")
    report.unchanged += sorted(unchanged - {facts.name for facts in plan})


def _write_file(conn: psycopg.Connection, target: Target, facts: RasterFacts, stream: JobStream,
                stage: sql.Identifier, report: DemLoadReport, *, first_write: bool) -> bool:
    """One transaction: (on the first write, drop this and every later file), the tiles, the log row."""
    try:
        staged: Staged = stream.outcome()  # BadRaster if the stager could not read the file
        with conn.transaction():
            # The file and its load-log row commit together, so a commit lost in a server crash loses
            # both and the rerun loads the file again: no need to wait for each commit's WAL flush.
            conn.execute("SET LOCAL synchronous_commit = off")
            if first_write:
                _forget_from(conn, target, facts.name)
            _plug_free_space(conn, target)
            _append_stage(conn, target, facts.name, stage)
            _log_file(conn, target, facts, staged)
    except BadRaster as error:  # the stager could not read the file: its COPY was aborted
        _fail(report, facts.name, str(error))
        return False
    except psycopg.errors.IntegrityError as error:  # a raster constraint rejected a tile
        _fail(report, facts.name, f"{facts.name}: rejected by {target.qualified}: {error.diag.message_primary}")
        return False
    report.loaded.append(facts.name)
    report.tiles_written += staged.tiles
    return True


def _forget_from(conn: psycopg.Connection, target: Target, name: str) -> None:
    later = forget_log(conn, target.qualified, from_name=name)
    if later:
        conn.execute(sql.SQL("DELETE FROM {} WHERE filename = ANY(%s)").format(target.ident), [later])


# Heap order must follow rid order (LIMIT 1 and ST_Union read tiles in physical order). raster2pgsql gets
# that for free: its one transaction created the table, so COPY skips the free-space map. Our per-file
# transactions cannot, and rows differ in size (a 17x17 tile, 642 bytes, stays inside its row; larger
# tiles go to TOAST): when a big row does not fit at the end of a page, it starts a new page, the map
# notes the gap, and a later small row would be put into it, ahead of rows with lower rids. So before
# each file, dummy rows are inserted until one lands on a brand-new page, then rolled back: the aborted
# dummies keep every gap full (until VACUUM), and the file's rows continue on the new page. The dummies go
# in batches of 64 rows per INSERT, because each statement prepares the table's raster constraints anew
# (a row per INSERT costs 30 ms per file); the last batch leaves at most 63 dead dummies, some 2 kB, at the
# start of the new page.
_PLUG_GAPS = """
DO $plug$
DECLARE
    last_block bigint := pg_relation_size({table}) / current_setting('block_size')::int - 1;
    block bigint := -1;
    dummies int := 0;
BEGIN
    BEGIN
        WHILE block <= last_block AND dummies < 100000 LOOP
            WITH plugged AS (
                INSERT INTO {ident} (rid) SELECT -dummies - g FROM generate_series(1, 64) AS g
                RETURNING (ctid::text::point)[0] AS block)
            SELECT max(plugged.block) INTO block FROM plugged;
            dummies := dummies + 64;
        END LOOP;
        RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = 'roll the dummies back';
    EXCEPTION WHEN raise_exception THEN
        NULL;
    END;
END
$plug$
"""


def _plug_free_space(conn: psycopg.Connection, target: Target) -> None:
    conn.execute(sql.SQL(_PLUG_GAPS).format(table=sql.Literal(target.qualified), ident=target.ident))


# The whole-row reference `tile` makes PostgreSQL fetch each staged value once, still compressed, into
# memory (it flattens the row): the raster constraints then read it from there, and the insert stores the
# compressed bytes as they are instead of compressing the tile again. Selecting the column itself would
# hand each constraint a pointer into the stage's TOAST table, which every one of them would fetch and
# decompress anew: on 8 rugged files the writer's backend spends 1.45-1.64 s of CPU this way, 1.78-1.83 s
# selecting the column, and one backend doing everything (no stagers) 2.77-2.92 s. OFFSET 0 keeps the planner
# from folding the subqueries, which would turn the field selections back into plain columns. The inner ORDER
# BY sorts small rows (TOAST pointers), not the fetched values.
_APPEND = """
INSERT INTO {target} (rid, rast, filename)
SELECT {first_rid} - 1 + (staged.tile).n, (staged.tile).rast, {filename}
FROM (SELECT tile FROM (SELECT n, rast FROM {stage} ORDER BY n OFFSET 0) AS tile OFFSET 0) AS staged
"""


def _append_stage(conn: psycopg.Connection, target: Target, filename: str, stage: sql.Identifier) -> None:
    """Append the staged tiles of one file after the table's last rid."""
    last_rid = conn.execute(sql.SQL("SELECT coalesce(max(rid), 0) FROM {}").format(target.ident)).fetchone()[0]
    conn.execute(sql.SQL(_APPEND).format(target=target.ident, first_rid=sql.Literal(last_rid + 1),
                                         filename=sql.Literal(filename), stage=stage))


def _drop_stages(conn: psycopg.Connection, target: Target, *, quietly: bool = False) -> None:
    """Drop the target's staging tables; `quietly` after an error, when the connection may be gone too."""
    try:
        names = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s AND starts_with(tablename, %s)",
                             [BOOKKEEPING_SCHEMA, target.stage_prefix]).fetchall()
        _drop(conn, [sql.Identifier(BOOKKEEPING_SCHEMA, name) for (name,) in names])
    except psycopg.Error:
        if not quietly:
            raise


def _drop(conn: psycopg.Connection, stages: list[sql.Identifier]) -> None:
    """One statement, so one commit: a commit that drops tables waits for the WAL flush."""
    if stages:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(", ").join(stages)))


def _log_file(conn: psycopg.Connection, target: Target, facts: RasterFacts, staged: Staged) -> None:
    details = TileGrid(facts.grid, frozenset(staged.skipped)).log_details()
    write_log(conn, target.qualified, facts.name, facts.size, staged.checksum, staged.tiles, details)


def finish(conn: psycopg.Connection, target: Target, dsn: str) -> None:
    """What raster2pgsql does after the tiles (-I -C -M), made idempotent: a rerun after a crash in here
    redoes it. Heap order is verified and restored (CLUSTER) if a rerun had to replace files."""
    with conn.transaction():
        # The files committed without waiting for their WAL (_write_file); this commit waits for all of it,
        # even on a server whose synchronous_commit is off, so that VACUUM can mark every page all-visible,
        # which it cannot while the commit of a page's rows is not yet flushed.
        conn.execute("SET LOCAL synchronous_commit = on")
        _restore_heap_order(conn, target)
        grids = [TileGrid.from_log(entry.details) for entry in read_log(conn, target.qualified).values()]
        reconcile(conn, target.schema, target.name, grids, extent=True)
        _ensure_index(conn, target)
        conn.execute(sql.SQL("SELECT setval(pg_get_serial_sequence(%s, 'rid'), coalesce(max(rid), 1), "
                             "max(rid) IS NOT NULL) FROM {}").format(target.ident), [target.qualified])
        # Load-time settings (see _prepare_table) go, so the table's options are raster2pgsql's again.
        conn.execute(sql.SQL("ALTER TABLE {} RESET (autovacuum_enabled, toast_tuple_target)").format(target.ident))
    _vacuum_analyze(conn, target, dsn)


_PINNED_PAGES = 64  # (or 1 % of the pages) short of all-visible after the VACUUMs: pinned ones, vacuumed again


def _vacuum_analyze(conn: psycopg.Connection, target: Target, dsn: str) -> None:
    """raster2pgsql -M's VACUUM ANALYZE, as two statements on two connections at once: VACUUM of the TOAST
    table, which holds the pixels, beside VACUUM ANALYZE of the table itself, whose ANALYZE reads every
    sampled tile for the statistics of the index expression. Each locks only its own relation, so neither
    waits for the other, and together they take the longer one's time instead of the sum."""
    toast = conn.execute("SELECT nspname, relname FROM pg_class JOIN pg_namespace ON pg_namespace.oid = relnamespace "
                         "WHERE pg_class.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = %s::regclass)",
                         [target.qualified]).fetchone()
    vacuum_toast = sql.SQL("VACUUM {}").format(sql.Identifier(*toast))
    with connect(dsn, autocommit=True) as toast_conn:
        run_together([lambda: toast_conn.execute(vacuum_toast),
                      lambda: conn.execute(sql.SQL("VACUUM (ANALYZE, PROCESS_TOAST false) {}").format(target.ident))],
                     [toast_conn, conn], "ingest-dem-vacuum")
    # VACUUM leaves a page it could not lock for cleanup (pinned by that ANALYZE reading a sampled tile, or by
    # the checkpointer writing the page out) without its all-visible bit: a few pages, which a second VACUUM
    # visits alone, now that nothing else reads them. Many pages short means a snapshot older than the load
    # holds them back (another session's open transaction), which a second VACUUM would not change.
    short, pages = conn.execute("SELECT relpages - relallvisible, relpages FROM pg_class WHERE oid = %s::regclass",
                                [".".join(toast)]).fetchone()
    if 0 < short <= max(_PINNED_PAGES, pages // 100):
        conn.execute(vacuum_toast)


def _restore_heap_order(conn: psycopg.Connection, target: Target) -> None:
    """`LIMIT 1` and ST_Union read tiles in physical order, so it must be rid order."""
    out_of_order = conn.execute(sql.SQL(
        "SELECT count(*) FROM (SELECT ctid < lag(ctid) OVER (ORDER BY rid) AS back FROM {}) s WHERE back"
    ).format(target.ident)).fetchone()[0]
    if out_of_order:
        log.warning("restoring the physical order of %s (%d tiles out of rid order)", target.qualified, out_of_order)
        conn.execute(sql.SQL("CLUSTER {} USING {}").format(target.ident, sql.Identifier(f"{target.name}_pkey")))
        conn.execute(sql.SQL("ALTER TABLE {} SET WITHOUT CLUSTER").format(target.ident))
