"""The reference schema, defined once: the five OSM tables, public.dem_us and our own bookkeeping.

Column names, order and types follow docs/REFERENCE-DB.md, Tables (the GS-QA schema JSON files, loader 1)
and "The DEM table" (raster2pgsql -F). Every tag column is VARCHAR(255); only pois and parks carry osm_id.
Spatial indexes are not created here: they are built after the bulk load (ingest/indexes.py and the DEM
stage), because building them first makes the load several times slower. `refuse_other_columns` compares
an existing table with its declaration, for `ingest init` and the loaders alike.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import psycopg

from gsqa_core.dem_grid import TILES_PER_FILE
from gsqa_core.errors import SchemaConflict

# TOAST compression the loaders can give their big columns (tiles, geometries): lz4 loads faster, pglz is
# what raster2pgsql and loader 1 got. Values and query results are the same either way.
TOAST_COMPRESSIONS = ("lz4", "pglz")
BOOKKEEPING_SCHEMA = "gsqa"
MIN_POSTGIS = (3, 2)  # the benchmark SQL needs ST_DumpSegments
MIN_POSTGIS_TEXT = ".".join(map(str, MIN_POSTGIS))
# The published DEM (docs/REFERENCE-DB.md): dem/tile_list.txt names 1,182 ASTER files.
REFERENCE_DEM_FILES = 1_182
REFERENCE_DEM_TILES = REFERENCE_DEM_FILES * TILES_PER_FILE


# The tables are plain descriptions rendered to DDL here, not SQLAlchemy Core tables: importing SQLAlchemy
# costs every command a quarter of a second of start-up, for CREATE TABLE of nine tables and nothing else.


@dataclass(frozen=True)
class ColumnType:
    ddl: str  # as CREATE TABLE spells it
    catalog: str  # as PostgreSQL's format_type() spells it back, to compare an existing table with


INTEGER = ColumnType("INTEGER", "integer")
BIGINT = ColumnType("BIGINT", "bigint")
TEXT = ColumnType("TEXT", "text")
VARCHAR_255 = ColumnType("VARCHAR(255)", "character varying(255)")
TIMESTAMPTZ = ColumnType("TIMESTAMP WITH TIME ZONE", "timestamp with time zone")
JSONB = ColumnType("JSONB", "jsonb")
GEOGRAPHY = ColumnType("geography(GEOMETRY,4326)", "geography(Geometry,4326)")
RASTER = ColumnType("raster", "raster")


@dataclass(frozen=True)
class Column:
    name: str
    type: ColumnType
    nullable: bool = True
    default: str | None = None  # an SQL expression
    serial: bool = False  # INTEGER filled from its own sequence (SERIAL)

    def ddl(self) -> str:
        spelled = "SERIAL" if self.serial else self.type.ddl
        default = f" DEFAULT {self.default}" if self.default else ""
        return f"{quoted(self.name)} {spelled}{default}{'' if self.nullable else ' NOT NULL'}"


@dataclass(frozen=True)
class Table:
    schema: str
    name: str
    columns: tuple[Column, ...]
    primary_key: tuple[str, ...] = ()

    @property
    def fullname(self) -> str:
        return f"{self.schema}.{self.name}"

    def renamed(self, schema: str, name: str) -> Table:
        """The same columns under another name (`ingest dem --table`)."""
        return replace(self, schema=schema, name=name)

    def create_sql(self) -> str:
        lines = [column.ddl() for column in self.columns]
        if self.primary_key:
            lines.append(f"PRIMARY KEY ({', '.join(map(quoted, self.primary_key))})")
        return f"CREATE TABLE {quoted(self.schema)}.{quoted(self.name)} (\n\t" + ", \n\t".join(lines) + "\n)"


def refuse_other_columns(conn: psycopg.Connection, table: Table, advice: str) -> None:
    """SchemaConflict unless the existing table has exactly the columns `table` describes."""
    actual = table_columns(conn, table.fullname)
    expected = [(column.name, column.type.catalog) for column in table.columns]
    if actual != expected:
        raise SchemaConflict(
            f"table {table.fullname} exists but its columns differ from the reference schema "
            f"(first difference: {_first_difference(expected, actual)}). {advice}"
        )


def table_columns(conn: psycopg.Connection, qualified_name: str) -> list[tuple[str, str]]:
    """(name, type) of a table's columns in order, types as PostgreSQL's format_type spells them."""
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        [qualified_name],
    )
    return [(name, type_name) for name, type_name in rows]


def _first_difference(expected: list[tuple[str, str]], actual: list[tuple[str, str]]) -> str:
    for position, (want, have) in enumerate(zip(expected, actual, strict=False), start=1):
        if want != have:
            return f"column {position} is {' '.join(have)}, expected {' '.join(want)}"
    if len(actual) < len(expected):
        return f"column {len(actual) + 1} {' '.join(expected[len(actual)])} is missing"
    return f"extra column {' '.join(actual[len(expected)])}"


def quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _serial_key(name: str) -> Column:
    return Column(name, INTEGER, nullable=False, serial=True)


POI_TAGS = """amenity cuisine leisure historic description tourism information wheelchair building fee
opening_hours operator sport website capacity shop internet_access phone takeaway drive_through museum
official_name healthcare outdoor_seating delivery toilets parking emergency artwork_type restaurant sports
zoo wholesale school_type pastry_shop hairdresser resort fast_food wikidata addr_state addr_city
addr_postcode addr_street addr_housenumber""".split()

ROAD_TAGS = """wikidata wikipedia highway sidewalk foot bicycle cycleway oneway access maxspeed lanes horse
hgv maxheight expressway railway historic bridge is_in addr_country addr_state addr_county addr_city
addr_postcode addr_street addr_housenumber""".split()

PARK_TAGS = """wikidata wikipedia addr_country addr_state addr_county addr_city addr_postcode addr_street
addr_housenumber operator leisure sport area historic old_name short_name hunting heritage ele aland
awater trees primary_use secondary_use other_use note county golf acres elevation park tourism
camping""".split()

LAKE_TAGS = """wikidata waterway water oneway wetland wikipedia is_in man_made seasonal accuracy
official_name fishing addr_country addr_state addr_county addr_city addr_postcode addr_street
addr_housenumber""".split()

REGION_TAGS = """border_type wikidata wikipedia place is_in admin_level population official_name
postal_code capital timezone""".split()


def _osm_table(name: str, name_column: str, tags: list[str], *, has_osm_id: bool) -> Table:
    """id SERIAL, geometry GEOGRAPHY(GEOMETRY,4326), the name column, [osm_id BIGINT], the tag columns."""
    columns = [_serial_key("id"), Column("geometry", GEOGRAPHY), Column(name_column, VARCHAR_255)]
    if has_osm_id:
        columns.append(Column("osm_id", BIGINT))
    columns += [Column(tag, VARCHAR_255) for tag in tags]
    return Table("public", name, tuple(columns), primary_key=("id",))


pois = _osm_table("pois", "poi_name", POI_TAGS, has_osm_id=True)
roads = _osm_table("roads", "road_name", ROAD_TAGS, has_osm_id=False)
parks = _osm_table("parks", "park_name", PARK_TAGS, has_osm_id=True)
lakes = _osm_table("lakes", "lake_name", LAKE_TAGS, has_osm_id=False)
regions = _osm_table("regions", "region_name", REGION_TAGS, has_osm_id=False)

dem_us = Table("public", "dem_us", (_serial_key("rid"), Column("rast", RASTER), Column("filename", TEXT)),
               primary_key=("rid",))

# One row per source file (a GeoTIFF, a GeoJSON part, a PBF) whose rows are in `target_table`.
# Written in the same transaction as the rows it describes, so it never claims more than was committed.
load_log = Table(BOOKKEEPING_SCHEMA, "load_log", (
    Column("target_table", TEXT, nullable=False),
    Column("source_name", TEXT, nullable=False),
    Column("source_size", BIGINT, nullable=False),
    Column("source_checksum", TEXT, nullable=False),
    Column("rows_written", BIGINT, nullable=False),
    Column("loaded_at", TIMESTAMPTZ, nullable=False, default="now()"),
    # What later steps need to know about the source without reopening it (e.g. the DEM tile grid).
    Column("details", JSONB),
), primary_key=("target_table", "source_name"))

# pois rows as `ingest osm` parses them, before they are numbered in loader 1's order: all tourism matches,
# then all amenity matches, then all leisure matches, each in file and feature order (pass, source_name,
# seq = the feature's byte offset or index in its file). Kept after the load, so that a changed file is
# staged again on its own and the numbering redone, without parsing the other files again.
pois_stage = Table(BOOKKEEPING_SCHEMA, "pois_stage", (
    Column("source_name", TEXT, nullable=False),
    Column("pass", INTEGER, nullable=False),
    Column("seq", BIGINT, nullable=False),
    *[column for column in pois.columns if column.name != "id"],
))

# One row per stage of `ingest all` (init, fetch, dem, osm, finalize, check): its last run's state (running,
# done, failed, skipped), times, the fingerprint of the inputs a done load stage ran on (a rerun with the
# same fingerprint skips it), what it set out to load, and its report. Written after the stage's own commits.
stage_log = Table(BOOKKEEPING_SCHEMA, "stage_log", (
    Column("stage", TEXT, nullable=False),
    Column("state", TEXT, nullable=False),
    Column("summary", TEXT, nullable=False),
    Column("started_at", TIMESTAMPTZ, nullable=False),
    Column("finished_at", TIMESTAMPTZ),
    Column("fingerprint", TEXT),
    Column("expected", JSONB),
    Column("report", JSONB),
), primary_key=("stage",))

# The passwords `ingest init` gave the sandbox roles (gsqa_core/sandbox.py: their variable, or one it
# generated), a row per role: `reproduce` reads them through its admin connection to log the roles in over TCP
# where the socket refuses them (peer authentication). In gsqa, so that the roles themselves cannot read them.
role_login = Table(BOOKKEEPING_SCHEMA, "role_login", (Column("role", TEXT, nullable=False),
                                                      Column("password", TEXT, nullable=False)),
                   primary_key=("role",))
# What an older `ingest init` kept the reader's password in; the next init moves it into role_login.
LEGACY_READER_LOGIN = f"{BOOKKEEPING_SCHEMA}.reader_login"

VECTOR_TABLES = [pois, roads, parks, lakes, regions]
REFERENCE_TABLES = [*VECTOR_TABLES, dem_us]
ALL_TABLES = sorted([*REFERENCE_TABLES, load_log, pois_stage, role_login, stage_log],
                    key=lambda table: table.fullname)
