"""`ingest dem`: load ASTER GDEM GeoTIFFs into public.dem_us as `raster2pgsql -s 4326 -I -C -M -F -t 256x256`.

The table comes out identical to raster2pgsql's for the same files in sorted name order: the same tiles
(dem_tiles.py), rid = position among the tiles written, heap order = rid order, the same raster
constraints (raster_constraints.py), index and VACUUM ANALYZE. What differs is how it gets there:

- encoder processes read and encode files in parallel while one connection streams their tiles, file
  after file, as binary WKB through COPY (_COPY_ROUTE): a single writer keeps the heap in rid order;
- `rast` is stored with lz4 TOAST compression (or pglz, as raster2pgsql, with --compression pglz):
  about 3x faster to load, about 45 % more disk on synthetic terrain; pixels and query results are the
  same (docs/PERFORMANCE.md);
- the raster constraints and the GiST index exist before the tiles arrive, so PostgreSQL checks each
  tile in memory while it is inserted instead of re-reading the whole table afterwards;
- each file is one transaction that also writes its gsqa.load_log row, so a rerun skips the files
  whose size and checksum match and reloads the rest.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from sqlalchemy import MetaData, Table
from tqdm import tqdm

from ingest import schema
from ingest.db import connect, relation_exists
from ingest.dem_tiles import BadRaster, Grid, RasterFacts, read_facts
from ingest.dem_workers import EncoderPool
from ingest.diskspace import check_room
from ingest.errors import EXIT_OK, EXIT_SOME_FAILED, GsqaError
from ingest.initdb import create_table_sql, refuse_other_columns
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
from ingest.raster_constraints import TileGrid, reconcile

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
    # The encoders start first: forked before any dataset or connection is open (see dem_workers).
    with EncoderPool(workers) as pool:
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
                _check_disk(conn, [facts[name] for name in plan], report)
            streams = pool.streams([(facts[name][0], facts[name][1].grid) for name in plan])
            _expect_files(conn, target, facts, logged, same)
            _open_copy_route(conn, target)
            _publish(conn, target, [facts[name][1] for name in plan], streams, same, report, progress)
            finish(conn, target)
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
        conn.execute(create_table_sql(_definition(target)))
        forget_log(conn, target.qualified)


def _definition(target: Target) -> Table:
    return schema.dem_us.to_metadata(MetaData(), schema=target.schema, name=target.name)


def _prepare_table(conn: psycopg.Connection, target: Target, compression: str) -> None:
    """Check the table's columns, choose the TOAST compression, build the GiST index."""
    refuse_other_columns(conn, target.qualified, _definition(target), "Use --table to load elsewhere, or drop it.")
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


def _tile_grid(details: dict) -> TileGrid:
    grid = Grid(details["width"], details["height"], tuple(details["geotransform"]), details["nodata"])
    return TileGrid(grid, frozenset(details["skipped"]))


def _refuse_foreign_contents(conn: psycopg.Connection, target: Target, logged: dict, inputs: set[str]) -> None:
    rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(target.ident)).fetchone()[0]
    refuse_unknown_rows(target.qualified, rows, logged, inputs, "tiles", "dem")


def _check_disk(conn: psycopg.Connection, files: list[tuple[Path, RasterFacts]], report: DemLoadReport) -> None:
    # Incompressible tiles (steep, noisy terrain) are stored at their raw size plus a few header bytes.
    raw = sum(facts.grid.width * facts.grid.height * 2 for _, facts in files)
    warning = check_room(conn, int(raw * 1.05), f"loading {len(files)} files")
    if warning:
        report.warnings.append(warning)
        log.warning("warning: %s", warning)


def _expect_files(conn: psycopg.Connection, target: Target, facts: dict, logged: dict, unchanged: set) -> None:
    """Put the raster constraints of the finished table in place before loading (extent excepted), so that
    each tile is checked in memory as it arrives."""
    grids = [_tile_grid(logged[name].details) if name in unchanged else TileGrid(facts[name][1].grid)
             for name in sorted(facts)]
    with conn.transaction():
        reconcile(conn, target.schema, target.name, grids, extent=False)


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
    started = time.monotonic()
    # A with block: the bar ends its line before an error message is printed, not at exit after it.
    with tqdm(total=len(plan), unit="file", desc=f"ingest dem -> {target.qualified}",
              disable=not (progress and plan)) as bar:
        for facts, stream in zip(plan, streams, strict=True):
            if facts.name in unchanged and not rewriting:
                report.unchanged.append(facts.name)
            elif _write_file(conn, target, facts, stream, report, first_write=not rewriting):
                rewriting = True
            stream.drain()
            bar.update()
            bar.set_postfix_str(f"{report.tiles_written / (time.monotonic() - started):,.0f} tiles/s")
    report.unchanged += sorted(unchanged - {facts.name for facts in plan})


def _write_file(conn: psycopg.Connection, target: Target, facts: RasterFacts, stream: JobStream,
                report: DemLoadReport, *, first_write: bool) -> bool:
    """One transaction: (on the first write, drop this and every later file), the tiles, the log row."""
    try:
        with conn.transaction():
            # The file and its load-log row commit together, so a commit lost in a server crash loses
            # both and the rerun loads the file again: no need to wait for each commit's WAL flush.
            conn.execute("SET LOCAL synchronous_commit = off")
            if first_write:
                _forget_from(conn, target, facts.name)
            _plug_free_space(conn, target)
            tiles = _copy_tiles(conn, target, facts, stream)
            _log_file(conn, target, facts, stream, tiles)
    except BadRaster as error:  # the encoder could not read the file: its COPY was aborted
        _fail(report, facts.name, str(error))
        return False
    except psycopg.errors.IntegrityError as error:  # a raster constraint rejected a tile
        _fail(report, facts.name, f"{facts.name}: rejected by {target.qualified}: {error.diag.message_primary}")
        return False
    report.loaded.append(facts.name)
    report.tiles_written += tiles
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
# dummies keep every gap full (until VACUUM), and the file's rows continue on the new page.
_PLUG_GAPS = """
DO $plug$
DECLARE
    last_block bigint := pg_relation_size({table}) / current_setting('block_size')::int - 1;
    block bigint;
    dummies int := 0;
BEGIN
    BEGIN
        LOOP
            dummies := dummies + 1;
            INSERT INTO {ident} (rid) VALUES (-dummies) RETURNING (ctid::text::point)[0] INTO block;
            EXIT WHEN block > last_block OR dummies >= 100000;
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


# The raster type has no binary input function, so COPY into the table itself would need hex WKB as text:
# twice the bytes, and the server parses every character. Instead tiles go as binary WKB (bytea) into a
# temporary view whose INSTEAD OF trigger builds each raster with ST_RastFromWKB (the same decoder that
# raster_in uses after undoing the hex) and inserts it: the rows reach the table, its constraints and
# its index exactly as from COPY, at about half the server time (see docs/PERFORMANCE.md).
_COPY_ROUTE = """
CREATE OR REPLACE FUNCTION pg_temp.gsqa_dem_copy_insert() RETURNS trigger LANGUAGE plpgsql AS $route$
BEGIN
    INSERT INTO {table} (rid, rast, filename) VALUES (NEW.rid, ST_RastFromWKB(NEW.wkb), NEW.filename);
    RETURN NEW;
END
$route$;
CREATE OR REPLACE TEMP VIEW gsqa_dem_copy AS SELECT rid, NULL::bytea AS wkb, filename FROM {table};
CREATE TRIGGER gsqa_dem_copy_insert INSTEAD OF INSERT ON gsqa_dem_copy
    FOR EACH ROW EXECUTE FUNCTION pg_temp.gsqa_dem_copy_insert();
"""


def _open_copy_route(conn: psycopg.Connection, target: Target) -> None:
    conn.execute(sql.SQL(_COPY_ROUTE).format(table=target.ident))


def _copy_tiles(conn: psycopg.Connection, target: Target, facts: RasterFacts, stream: JobStream) -> int:
    """COPY the file's tiles as they are encoded; returns how many were written."""
    rid = conn.execute(sql.SQL("SELECT coalesce(max(rid), 0) FROM {}").format(target.ident)).fetchone()[0]
    first_rid = rid + 1
    with conn.cursor().copy("COPY gsqa_dem_copy (rid, wkb, filename) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "bytea", "text"])
        for row in stream.items():
            for wkb in row.tiles():
                rid += 1
                copy.write_row((rid, wkb, facts.name))
    return rid - first_rid + 1


def _log_file(conn: psycopg.Connection, target: Target, facts: RasterFacts, stream: JobStream, tiles: int) -> None:
    checksum, skipped = stream.result
    details = {"width": facts.grid.width, "height": facts.grid.height, "geotransform": list(facts.grid.geotransform),
               "nodata": facts.grid.nodata, "skipped": skipped}
    write_log(conn, target.qualified, facts.name, facts.size, checksum, tiles, details)


def finish(conn: psycopg.Connection, target: Target) -> None:
    """What raster2pgsql does after the tiles (-I -C -M), made idempotent: a rerun after a crash in here
    redoes it. Heap order is verified and restored (CLUSTER) if a rerun had to replace files."""
    with conn.transaction():
        _restore_heap_order(conn, target)
        grids = [_tile_grid(entry.details) for entry in read_log(conn, target.qualified).values()]
        reconcile(conn, target.schema, target.name, grids, extent=True)
        _ensure_index(conn, target)
        conn.execute(sql.SQL("SELECT setval(pg_get_serial_sequence(%s, 'rid'), coalesce(max(rid), 1), "
                             "max(rid) IS NOT NULL) FROM {}").format(target.ident), [target.qualified])
        # Load-time settings (see _prepare_table) go, so the table's options are raster2pgsql's again.
        conn.execute(sql.SQL("ALTER TABLE {} RESET (autovacuum_enabled, toast_tuple_target)").format(target.ident))
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(target.ident))


def _restore_heap_order(conn: psycopg.Connection, target: Target) -> None:
    """`LIMIT 1` and ST_Union read tiles in physical order, so it must be rid order."""
    out_of_order = conn.execute(sql.SQL(
        "SELECT count(*) FROM (SELECT ctid < lag(ctid) OVER (ORDER BY rid) AS back FROM {}) s WHERE back"
    ).format(target.ident)).fetchone()[0]
    if out_of_order:
        log.warning("restoring the physical order of %s (%d tiles out of rid order)", target.qualified, out_of_order)
        conn.execute(sql.SQL("CLUSTER {} USING {}").format(target.ident, sql.Identifier(f"{target.name}_pkey")))
        conn.execute(sql.SQL("ALTER TABLE {} SET WITHOUT CLUSTER").format(target.ident))
