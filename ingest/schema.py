"""The reference schema, defined once: the five OSM tables, public.dem_us and our own bookkeeping.

Column names, order and types follow docs/REFERENCE-DB.md, Tables (the GS-QA schema JSON files, loader 1)
and "The DEM table" (raster2pgsql -F). Every tag column is VARCHAR(255); only pois and parks carry osm_id.
Spatial indexes are not created here: they are built after the bulk load (sql/40_post_load_indexes.sql
and the DEM stage), because building them first makes the load several times slower.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, DateTime, Integer, MetaData, String, Table, Text, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import UserDefinedType

READER_ROLE = "gsqa_reader"
# TOAST compression the loaders can give their big columns (tiles, geometries): lz4 loads faster, pglz is
# what raster2pgsql and loader 1 got. Values and query results are the same either way.
TOAST_COMPRESSIONS = ("lz4", "pglz")
BOOKKEEPING_SCHEMA = "gsqa"

metadata = MetaData()


class PostgisType(UserDefinedType):
    """A PostGIS column type, by the name its DDL spells. (GeoAlchemy2 has these, but importing it cost
    every command 0.4 s of start-up for two type names, and nothing here needs its ORM side.)"""

    cache_ok = True

    def __init__(self, spec: str) -> None:
        self.spec = spec

    def get_col_spec(self, **_: object) -> str:
        return self.spec


GEOGRAPHY = PostgisType("geography(GEOMETRY,4326)")
RASTER = PostgisType("raster")

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
    columns = [
        Column("id", Integer, primary_key=True),
        Column("geometry", GEOGRAPHY),
        Column(name_column, String(255)),
    ]
    if has_osm_id:
        columns.append(Column("osm_id", BigInteger))
    columns += [Column(tag, String(255)) for tag in tags]
    return Table(name, metadata, *columns, schema="public")


pois = _osm_table("pois", "poi_name", POI_TAGS, has_osm_id=True)
roads = _osm_table("roads", "road_name", ROAD_TAGS, has_osm_id=False)
parks = _osm_table("parks", "park_name", PARK_TAGS, has_osm_id=True)
lakes = _osm_table("lakes", "lake_name", LAKE_TAGS, has_osm_id=False)
regions = _osm_table("regions", "region_name", REGION_TAGS, has_osm_id=False)

dem_us = Table(
    "dem_us",
    metadata,
    Column("rid", Integer, primary_key=True),
    Column("rast", RASTER),
    Column("filename", Text),
    schema="public",
)

# One row per source file (a GeoTIFF, a GeoJSON part, a PBF) whose rows are in `target_table`.
# Written in the same transaction as the rows it describes, so it never claims more than was committed.
load_log = Table(
    "load_log",
    metadata,
    Column("target_table", Text, primary_key=True),
    Column("source_name", Text, primary_key=True),
    Column("source_size", BigInteger, nullable=False),
    Column("source_checksum", Text, nullable=False),
    Column("rows_written", BigInteger, nullable=False),
    Column("loaded_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # What later steps need to know about the source without reopening it (e.g. the DEM tile grid).
    Column("details", JSONB),
    schema=BOOKKEEPING_SCHEMA,
)

# pois rows as `ingest osm` parses them, before they are numbered in loader 1's order: all tourism matches,
# then all amenity matches, then all leisure matches, each in file and feature order (pass, source_name,
# seq = the feature's byte offset or index in its file). Kept after the load, so that a changed file is
# staged again on its own and the numbering redone, without parsing the other files again.
pois_stage = Table(
    "pois_stage",
    metadata,
    Column("source_name", Text, nullable=False),
    Column("pass", Integer, nullable=False),
    Column("seq", BigInteger, nullable=False),
    *[Column(column.name, column.type) for column in pois.columns if column.name != "id"],
    schema=BOOKKEEPING_SCHEMA,
)

# One row per stage of `ingest all` (init, fetch, dem, osm, finalize, check): its last run's state (running,
# done, failed, skipped), times, the fingerprint of the inputs a done load stage ran on (a rerun with the
# same fingerprint skips it), what it set out to load, and its report. Written after the stage's own commits.
stage_log = Table(
    "stage_log",
    metadata,
    Column("stage", Text, primary_key=True),
    Column("state", Text, nullable=False),
    Column("summary", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
    Column("fingerprint", Text),
    Column("expected", JSONB),
    Column("report", JSONB),
    schema=BOOKKEEPING_SCHEMA,
)

REFERENCE_TABLES = [pois, roads, parks, lakes, regions, dem_us]
