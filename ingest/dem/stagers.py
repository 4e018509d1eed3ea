"""Stager processes for `ingest dem`: read, encode and store files in parallel, ahead of the ordered writer.

Each file is one job of an OrderedPool (ingest/ordered_pool.py). A worker reads the file one band row of tiles at a
time (about 2 MB, so memory stays bounded however large the files are), encodes each tile as raster WKB and
COPYs it over the worker's own connection into an UNLOGGED staging table of the file's own. There the
worker's backend builds each raster and compresses it: the costly part of storing a tile, which a single
writer backend would otherwise do for every file in turn. The writer (load.py) then appends the staged tiles
to the table in rid order, taking the compressed values over as they are, and drops the stage.

A worker runs at most two of its files ahead of the writer, one staged and waiting in its result queue (of
one item), one being staged, so staged tiles never pile up on disk however far the writer lags: staging takes
at most a few files' worth of extra disk at a time. The job's result is a Staged record.

There is one worker per core (load.py's default): the writer's append is the critical path, and more stagers
do not shorten it (`bench/dem.py --files 24`). The stage's own page writes and reads (its extension, eviction
and fetch) are the price of compressing on both cores: one backend building and compressing everything would
spend far more CPU than the writer does (load.py, _APPEND).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from gsqa_core.db import connect
from gsqa_core.dem_grid import Grid
from gsqa_core.errors import DatabaseUnreachable
from ingest.dem.tiles import BadRaster, encode_rows
from ingest.load_state import file_checksum
from ingest.ordered_pool import OrderedPool


@dataclass(frozen=True)
class StageJob:
    path: Path
    grid: Grid
    stage: tuple[str, str]  # schema and name of the staging table to create
    compression: str  # the target column's, so that the writer can keep the compressed values as they are
    dsn: str


@dataclass(frozen=True)
class Staged:
    tiles: int  # numbered 1..tiles in the staging table's column n, in raster2pgsql's order
    checksum: str
    skipped: list[int]  # indices in Grid.tiles() order of the all-NODATA tiles left out


class StagerPool(OrderedPool):
    def __init__(self, workers: int, dsn: str) -> None:
        super().__init__(workers, _stage_file, BadRaster, queue_items=1, name="ingest-dem-stager",
                         passed_on=(psycopg.Error, DatabaseUnreachable), warm_up=functools.partial(_warm_up, dsn))


_connection: psycopg.Connection | None = None  # the worker process's own, opened as it starts (or at a job)


def _stage_file(job: StageJob) -> Generator[None, None, Staged]:
    yield from ()  # a job with a result but no items
    conn = _connect(job.dsn)
    try:
        checksum = file_checksum(job.path)
        with conn.transaction():  # a file that cannot be read leaves no staging table behind
            _create_stage(conn, job)
            tiles, skipped = _copy_tiles(conn, job)
    except OSError as error:
        raise BadRaster(f"{job.path}: cannot read ({error.strerror or error})") from None
    return Staged(tiles, checksum, skipped)


# The raster type has no binary input function, so COPY into a raster column would need hex WKB as text:
# twice the bytes, and the server parses every character. Instead tiles go as binary WKB (bytea) into a
# temporary view whose INSTEAD OF trigger builds each raster with ST_RastFromWKB (the decoder raster_in
# uses after undoing the hex) and inserts it into the file's staging table: 0.23-0.30 s of server time per
# file against 0.40-0.49 s for hex, side by side on the same tiles.
_ROUTE = """
CREATE FUNCTION pg_temp.gsqa_dem_stage_insert() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END';
CREATE TEMP VIEW gsqa_dem_stage AS SELECT NULL::int4 AS n, NULL::bytea AS wkb;
CREATE TRIGGER gsqa_dem_stage_insert INSTEAD OF INSERT ON gsqa_dem_stage
    FOR EACH ROW EXECUTE FUNCTION pg_temp.gsqa_dem_stage_insert();
"""
_ROUTE_TO_STAGE = """
CREATE OR REPLACE FUNCTION pg_temp.gsqa_dem_stage_insert() RETURNS trigger LANGUAGE plpgsql AS $route$
BEGIN
    INSERT INTO {stage} (n, rast) VALUES (NEW.n, ST_RastFromWKB(NEW.wkb));
    RETURN NEW;
END
$route$;
"""


def _warm_up(dsn: str) -> None:
    """Connect while the writer reads the headers and sets up the table: a new backend spends a noticeable
    time loading PostGIS's raster library (and GDAL) at its first raster function. A failure here is left to the
    first job, which reports it."""
    with contextlib.suppress(psycopg.Error, DatabaseUnreachable):
        _connect(dsn).execute("SELECT postgis_raster_lib_version()")


def _connect(dsn: str) -> psycopg.Connection:
    global _connection
    if _connection is None or _connection.closed:
        _connection = connect(dsn, autocommit=True)
        # Staging tables are UNLOGGED; only their catalog entries reach the WAL, and a stage lost in a
        # crash is made again by the rerun, so no commit needs to wait for a flush.
        _connection.execute("SET synchronous_commit = off")
        _connection.execute(_ROUTE)
    return _connection


def _create_stage(conn: psycopg.Connection, job: StageJob) -> None:
    stage = sql.Identifier(*job.stage)
    conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage))  # left by an interrupted run
    conn.execute(sql.SQL("CREATE UNLOGGED TABLE {} (n int4, rast raster) WITH (autovacuum_enabled = false)")
                 .format(stage))
    conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN rast SET COMPRESSION {}").format(
        stage, sql.SQL(job.compression)))
    conn.execute(sql.SQL(_ROUTE_TO_STAGE).format(stage=stage))


def _copy_tiles(conn: psycopg.Connection, job: StageJob) -> tuple[int, list[int]]:
    """COPY the file's tiles as they are encoded; returns how many were written and which were skipped."""
    tiles, skipped = 0, []
    with conn.cursor().copy("COPY gsqa_dem_stage (n, wkb) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "bytea"])
        for row in encode_rows(job.path, job.grid):
            skipped += row.skipped
            for wkb in row.tiles():
                tiles += 1
                copy.write_row((tiles, wkb))
    return tiles, skipped
