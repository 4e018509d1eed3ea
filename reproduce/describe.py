"""`reproduce schema`: the description of the database a text-to-SQL prompt needs, read from the live database.

Each reference table with its columns and types (as PostgreSQL spells them) and its exact row count; for the
vector tables the geometry types present, their SRID and the extent (one pass over every geometry); for
public.dem_us the raster metadata (raster_columns, ST_MetaData and ST_BandMetaData of its first tile), the
extent and the tile count, against the 265,950 tiles of the reference when the last `ingest all` loaded the
reference tile list; and the limits a model's SQL runs under (as gsqa_model). What is missing (a table, rows,
a stage of `ingest all` that did not finish, the model login) is listed under `problems`.

Plain psycopg, no SQLAlchemy: the command starts as fast as the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from gsqa_core import schema
from gsqa_core.db import connect, identifier, relation_exists, where
from gsqa_core.sandbox import MODEL
from reproduce import readiness

FORMATS = ("text", "markdown", "json", "sql")
Box = tuple[float, float, float, float]  # xmin, ymin, xmax, ymax in degrees


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # format_type(): geography(Geometry,4326), character varying(255), ...
    not_null: bool
    primary_key: bool
    # From the planner's statistics (pg_stats, made by ANALYZE: `ingest finalize`), where it has them:
    null_share: float | None = None
    frequent: tuple[tuple[str, float], ...] = ()  # a tag column's most common values and their share of rows
    numbers_as_text: bool = False  # text whose common values are all numbers (population, ele, lanes, ...)


@dataclass(frozen=True)
class Geometries:
    column: str
    srid: int | None
    types: dict[str, int]  # geometry type present -> rows; "NULL" for rows without a geometry
    extent: Box | None


@dataclass(frozen=True)
class Raster:
    column: str
    srid: int
    tile_width: int  # the blocking of raster_columns; edge tiles may be smaller
    tile_height: int
    pixel_width: float  # degrees
    pixel_height: float
    bands: int
    band_type: str
    nodata: float | None
    extent: Box | None
    tiles: int
    reference_tiles: int | None  # the reference's tile count, when the load set out to load the reference DEM


@dataclass
class Table:
    name: str
    rows: int | None  # None: the table is missing
    columns: list[Column] = field(default_factory=list)
    geometries: Geometries | None = None
    raster: Raster | None = None
    indexes: list[str] = field(default_factory=list)  # "GiST (geometry)", ...: what a query can use


FREQUENT_SHOWN = 6  # most common values shown per tag column
TAG_DISTINCT_AT_MOST = 1_000  # a column with at most this many distinct values is a tag (amenity has hundreds)
# What a prompt must know to write SQL on the reference tables, declared once for every renderer.
GEOGRAPHY_USAGE = ("geography: ST_Distance, ST_DWithin, ST_Length and ST_Area on it measure in metres (square "
                   "metres); cast it to geometry (`geometry::geometry`) for raster functions and for results in "
                   "degrees")
RASTER_USAGE = ("band 1 is elevation in metres; raster functions take geometry: ST_Value(rast, 1, "
                "p.geometry::geometry), ST_Intersects(rast, p.geometry::geometry); ST_Slope and ST_Aspect give "
                "degrees (aspect clockwise from north, -1 on flat ground)")
LEFT_OUT = "PostGIS's own tables (spatial_ref_sys, geometry_columns, raster_columns, ...) are left out."


@dataclass
class Description:
    database: str  # host:port/database
    server: str
    postgis: str
    tables: list[Table]
    session: dict[str, str]  # what a session of the model role gets (gsqa_core.roles.Audit.settings)
    problems: list[str]


def describe(dsn: str | None, login: str | None = None,
             progress: Callable[[str], None] = lambda line: None) -> Description:
    """Read the description from the database `dsn` resolves to; `login` is the DSN of the role a model's
    SQL runs as, if not the main DSN logged in as gsqa_model. `progress` hears of each table before it is read."""
    ready = readiness.check(dsn, {MODEL: login})
    with connect(dsn, autocommit=True) as conn:
        tables = []
        for table in schema.REFERENCE_TABLES:
            progress(f"reading {table.fullname}")
            tables.append(_table(conn, table))
        server = conn.execute("SHOW server_version").fetchone()[0]
        problems = ready.problems + _unfinished_stages(conn) + _dem_problems(tables)
        return Description(where(conn), server, ready.postgis_version, tables, ready.audits[MODEL.name].settings,
                           problems)


def _table(conn: psycopg.Connection, table: schema.Table) -> Table:
    """Columns and rows; a vector table's geometries (counted as they are read), a raster table's metadata."""
    if not relation_exists(conn, table.fullname):
        return Table(table.fullname, None)
    statistics = _statistics(conn, table)
    columns = [Column(*row, **statistics.get(row[0], {})) for row in conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, "
        "coalesce(a.attnum = ANY(i.indkey), false) FROM pg_attribute a "
        "LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        [table.fullname])]
    indexes = _indexes(conn, table)
    geography = next((column.name for column in table.columns if column.type == schema.GEOGRAPHY), None)
    if geography:
        geometries = _geometries(conn, table.fullname, geography)
        return Table(table.fullname, sum(geometries.types.values()), columns, geometries=geometries, indexes=indexes)
    described = Table(table.fullname, _count(conn, table.fullname), columns, indexes=indexes)
    raster = next((column.name for column in table.columns if column.type == schema.RASTER), None)
    if raster and described.rows:
        described.raster = _raster(conn, table, raster, described.rows)
    return described


def _statistics(conn: psycopg.Connection, table: schema.Table) -> dict[str, dict[str, Any]]:
    """Per column, from pg_stats (no scan: ANALYZE's sample): the share of NULLs; for a text column of few
    distinct values its most common values; whether a text column's common values are all numbers."""
    rows = conn.execute(
        "SELECT s.attname, s.null_frac, s.n_distinct, s.most_common_vals::text::text[], s.most_common_freqs, "
        "coalesce(c.reltuples, 0) FROM pg_stats s JOIN pg_class c ON c.oid = %s::regclass "
        "WHERE s.schemaname = %s AND s.tablename = %s", [table.fullname, table.schema, table.name]).fetchall()
    text_columns = {column.name for column in table.columns if column.type in (schema.TEXT, schema.VARCHAR_255)}
    found = {}
    for name, null_share, distinct, values, shares, rows_estimated in rows:
        distinct_values = distinct if distinct >= 0 else -distinct * rows_estimated
        texts = values or []
        found[name] = {
            "null_share": round(null_share, 4),
            "frequent": tuple((value, round(share, 4)) for value, share in zip(texts, shares or [], strict=False)
                              )[:FREQUENT_SHOWN] if 0 < distinct_values <= TAG_DISTINCT_AT_MOST else (),
            "numbers_as_text": name in text_columns and bool(texts)
                               and all(_NUMBER.fullmatch(value) for value in texts),
        }
    return found


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")  # what `::numeric` reads (no nan, inf, 1_000)


def _indexes(conn: psycopg.Connection, table: schema.Table) -> list[str]:
    """The table's indexes as a query writer needs them: method and what they index."""
    rows = conn.execute(
        "SELECT am.amname, pg_get_indexdef(i.indexrelid, 0, true), i.indisprimary FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam "
        "WHERE i.indrelid = %s::regclass ORDER BY c.relname", [table.fullname]).fetchall()
    return [f"{'primary key, ' if primary else ''}{INDEX_METHODS.get(method, method)} "
            f"{definition.split(' USING ', 1)[1][len(method):].strip()}" for method, definition, primary in rows]


INDEX_METHODS = {"gist": "GiST", "btree": "B-tree", "spgist": "SP-GiST", "brin": "BRIN", "gin": "GIN"}


def _count(conn: psycopg.Connection, qualified_name: str) -> int:
    return conn.execute(sql.SQL("SELECT count(*) FROM {}").format(identifier(qualified_name))).fetchone()[0]


def _geometries(conn: psycopg.Connection, qualified_name: str, column: str) -> Geometries:
    """The geometry types present (rows of each) and the extent, in one pass; the SRID the column declares."""
    srid = conn.execute("SELECT srid FROM geography_columns WHERE f_table_schema = %s AND f_table_name = %s "
                        "AND f_geography_column = %s", [*qualified_name.split("."), column]).fetchone()
    rows = conn.execute(sql.SQL(
        "SELECT coalesce(GeometryType(g), 'NULL'), count(*), ST_XMin(ST_Extent(g)), ST_YMin(ST_Extent(g)), "
        "ST_XMax(ST_Extent(g)), ST_YMax(ST_Extent(g)) FROM (SELECT {}::geometry AS g FROM {}) s GROUP BY 1 ORDER BY 2 "
        "DESC, 1").format(sql.Identifier(column), identifier(qualified_name))).fetchall()
    boxes = [row[2:] for row in rows if row[2] is not None]
    return Geometries(column, srid and srid[0], {kind: count for kind, count, *_ in rows}, _union(boxes))


def _union(boxes: list[tuple[float, ...]]) -> Box | None:
    if not boxes:
        return None
    return (min(box[0] for box in boxes), min(box[1] for box in boxes), max(box[2] for box in boxes),
            max(box[3] for box in boxes))


def _raster(conn: psycopg.Connection, table: schema.Table, column: str, tiles: int) -> Raster:
    """raster_columns for the blocking, SRID and extent (the constraints `ingest dem` adds: computed from the
    tiles while they are not there), the first tile's metadata for the pixel size, band type and nodata."""
    blocking = conn.execute(
        "SELECT blocksize_x, blocksize_y, ST_XMin(extent), ST_YMin(extent), ST_XMax(extent), ST_YMax(extent) "
        "FROM raster_columns WHERE r_table_schema = %s AND r_table_name = %s AND r_raster_column = %s",
        [table.schema, table.name, column]).fetchone() or (None,) * 6
    first = sql.SQL("SELECT m.width, m.height, m.scalex, m.scaley, m.srid, m.numbands, b.pixeltype, b.nodatavalue "
                    "FROM (SELECT {column} FROM {table} ORDER BY {key} LIMIT 1) t, ST_MetaData(t.{column}) m, "
                    "ST_BandMetaData(t.{column}) b").format(column=sql.Identifier(column),
                                                            table=identifier(table.fullname),
                                                            key=sql.Identifier(table.primary_key[0]))
    width, height, scale_x, scale_y, srid, bands, band_type, nodata = conn.execute(first).fetchone()
    extent = blocking[2:] if blocking[2] is not None else _union([conn.execute(sql.SQL(
        "SELECT ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e) FROM (SELECT ST_Extent(ST_Envelope({})) AS e FROM {}) s"
    ).format(sql.Identifier(column), identifier(table.fullname))).fetchone()])
    return Raster(column, srid, blocking[0] or width, blocking[1] or height, scale_x, abs(scale_y), bands, band_type,
                  nodata, extent, tiles, _reference_tiles(conn))


def _reference_tiles(conn: psycopg.Connection) -> int | None:
    """265,950 when the last `ingest all` set out to load the reference tile list (all of its files)."""
    if not relation_exists(conn, "gsqa.stage_log"):
        return None
    files = conn.execute("SELECT (expected->>'files')::int FROM gsqa.stage_log WHERE stage = 'dem'").fetchone()
    return schema.REFERENCE_DEM_TILES if files and files[0] == schema.REFERENCE_DEM_FILES else None


def _unfinished_stages(conn: psycopg.Connection) -> list[str]:
    if not relation_exists(conn, "gsqa.stage_log"):
        return []
    rows = conn.execute("SELECT stage, state, summary FROM gsqa.stage_log WHERE state NOT IN ('done', 'skipped') "
                        "ORDER BY started_at").fetchall()
    return [f"stage {stage} of `ingest all` is {state}: {summary}" for stage, state, summary in rows]


def _dem_problems(tables: list[Table]) -> list[str]:
    return [f"{table.name} holds {table.raster.tiles:,} of the reference's {table.raster.reference_tiles:,} tiles"
            for table in tables if table.raster is not None and table.raster.reference_tiles is not None
            and table.raster.tiles != table.raster.reference_tiles]


# --- rendering ------------------------------------------------------------------------------------------


def as_json(description: Description) -> dict[str, Any]:
    return asdict(description)


def as_text(description: Description) -> str:
    """Plain text in the manner of the benchmark's schema prompt: one block per table, then the limits. No host,
    port or database name: a prompt is the same on every deployment of one database."""
    lines = [f"PostgreSQL {description.server} with PostGIS {description.postgis}. "
             f"{LEFT_OUT} Shares of NULLs and values are the planner's statistics (a sample).", ""]
    for table in description.tables:
        if table.rows is None:
            lines += [f"Table {table.name}: missing", ""]
            continue
        lines.append(f"Table {table.name} ({_rows(table)})")
        lines += [f"  {column.name} {column.type}{_column_notes(column)}"
                  + (f" -- {notes}" if (notes := _column_statistics(column)) else "") for column in table.columns]
        lines += [f"  -- {fact}" for fact in _facts(table)]
        lines.append("")
    lines.append(_limits(description.session))
    lines += [f"Not ready: {problem}" for problem in description.problems]
    return "\n".join(lines)


def as_markdown(description: Description) -> str:
    lines = [f"# {description.database}", "", f"PostgreSQL {description.server}, PostGIS {description.postgis}. "
             f"{LEFT_OUT}", ""]
    for table in description.tables:
        lines += [f"## {table.name}", ""]
        if table.rows is None:
            lines += ["Missing.", ""]
            continue
        lines += [f"{_rows(table).capitalize()}.", "", "| column | type | | statistics |", "|---|---|---|---|"]
        lines += [f"| {column.name} | {column.type} | {_column_notes(column).strip()} | {_column_statistics(column)} |"
                  for column in table.columns]
        lines += [""] + [f"- {fact}" for fact in _facts(table)] + [""]
    lines += ["## Limits", "", _limits(description.session)]
    if description.problems:
        lines += ["", "## Not ready", ""] + [f"- {problem}" for problem in description.problems]
    return "\n".join(lines)


def as_sql(description: Description) -> str:
    """The tables as CREATE TABLE statements, what each column holds as comments (the form many text-to-SQL
    prompts use)."""
    lines = [f"-- PostgreSQL {description.server} with PostGIS {description.postgis}. {LEFT_OUT}", ""]
    for table in description.tables:
        if table.rows is None:
            lines += [f"-- {table.name}: missing", ""]
            continue
        lines += [f"-- {_rows(table)}"] + [f"-- {fact}" for fact in _facts(table)]
        lines.append(f"CREATE TABLE {table.name} (")
        for number, column in enumerate(table.columns):
            comma = "," if number < len(table.columns) - 1 else ""
            notes = _column_statistics(column)
            lines.append(f"  {column.name} {column.type}{_column_notes(column).upper()}{comma}"
                         + (f"  -- {notes}" if notes else ""))
        lines += [");", ""]
    lines.append(f"-- {_limits(description.session)}")
    lines += [f"-- Not ready: {problem}" for problem in description.problems]
    return "\n".join(lines)


RENDERERS = {"text": as_text, "markdown": as_markdown, "sql": as_sql}


def _rows(table: Table) -> str:
    reference = table.raster.reference_tiles if table.raster is not None else None
    if reference is not None:
        return f"{table.rows:,} tiles, as the reference" if table.rows == reference else \
            f"{table.rows:,} of the reference's {reference:,} tiles"
    tiles = any(column.type == schema.RASTER.catalog for column in table.columns)
    return f"{table.rows:,} {'tiles' if tiles else 'rows'}"


def _column_notes(column: Column) -> str:
    return " primary key" if column.primary_key else (" not null" if column.not_null else "")


def _column_statistics(column: Column) -> str:
    """"62% NULL; values: museum 62%, hotel 38%; numbers stored as text (cast: ele::numeric)", or ""."""
    notes = []
    if column.null_share == 1:
        notes.append("NULL in every row sampled")
    elif column.null_share:
        notes.append(f"{_percent(column.null_share)} NULL")
    if column.frequent:
        notes.append("values: " + ", ".join(f"{value} {_percent(share)}" for value, share in column.frequent))
    if column.numbers_as_text:
        notes.append(f"numbers stored as text (cast: {column.name}::numeric)")
    return "; ".join(notes)


def _percent(share: float) -> str:
    if share < 0.01:
        return "<1%"
    return f"{share:.1%}" if share > 0.99 else f"{share:.0%}"  # 99.9% NULL is not always NULL


def _facts(table: Table) -> list[str]:
    facts = []
    if table.geometries is not None:
        found = table.geometries
        types = ", ".join(f"{kind} ({rows:,})" for kind, rows in found.types.items()) or "none (no rows)"
        facts = [f"{found.column}: SRID {found.srid}; geometry types present: {types}",
                 f"{found.column} extent: {_box(found.extent)}", f"{found.column} is {GEOGRAPHY_USAGE}"]
    if table.raster is not None:
        found = table.raster
        nodata = "not set (no pixel reads as NULL)" if found.nodata is None else f"{found.nodata:g}"
        facts = [f"{found.column}: SRID {found.srid}; tiles of {found.tile_width}x{found.tile_height} pixels (edge "
                 f"tiles may be smaller); pixel size {_pixel(found.pixel_width, found.pixel_height)}",
                 f"{found.column}: {found.bands} band{'s' if found.bands > 1 else ''} of {found.band_type}; "
                 f"nodata {nodata}",
                 f"{found.column} extent: {_box(found.extent)}", f"{found.column}: {RASTER_USAGE}"]
    if table.indexes:
        facts.append("indexes: " + "; ".join(table.indexes) + (
            " (ST_DWithin, ST_Intersects and the nearest-neighbour ORDER BY geometry <-> point use the GiST one)"
            if table.geometries is not None and any(index.startswith("GiST") for index in table.indexes) else ""))
    return facts


def _box(box: Box | None) -> str:
    if box is None:
        return "none"
    return f"lon {_number(box[0])} to {_number(box[2])}, lat {_number(box[1])} to {_number(box[3])}"


def _number(value: float) -> str:
    return f"{value:.12f}".rstrip("0").rstrip(".")


def _pixel(width: float, height: float) -> str:
    """"0.000277777778 degrees (1/3600)" for the square ASTER pixel."""
    per_degree = round(1 / width)
    fraction = f" (1/{per_degree})" if abs(per_degree * width - 1) < 1e-9 else ""
    if abs(width - height) < 1e-15:
        return f"{_number(width)} degrees{fraction}"
    return f"{_number(width)} x {_number(height)} degrees"


def _limits(session: dict[str, str]) -> str:
    if not session:
        return f"Queries run as {MODEL.name}, which cannot log in (see below)."
    return (f"Queries run as {session['user']}, which may only read: statement_timeout "
            f"{session['statement_timeout']}, temp_file_limit {session['temp_file_limit']}, work_mem "
            f"{session['work_mem']}; one query per call (SELECT, WITH, VALUES, TABLE).")
