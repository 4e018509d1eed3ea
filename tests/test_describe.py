"""`reproduce schema`: the description of the demo database gives that database's figures (checked against SQL
counts), in text, markdown and JSON; on an empty or half-built database it says what is missing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from demo_helpers import build_demo
from psycopg.conninfo import conninfo_to_dict
from sandbox_helpers import MODEL_SESSION_SETTINGS

from gsqa_core import schema
from ingest.demo import write_demo
from reproduce import describe
from testkit.cli import reproduce

PIXEL = 1 / 3600


def reproduce_schema(*argv: str) -> subprocess.CompletedProcess[str]:
    return reproduce("schema", *argv)


def sql_figures(dsn: str, table: str) -> tuple[int, dict[str, int], tuple[float, ...]]:
    """Rows, geometry types with their rows, and the extent, as plain SQL gives them."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        types = dict(conn.execute(f"SELECT GeometryType(geometry::geometry), count(*) FROM {table} GROUP BY 1"))
        extent = conn.execute(f"SELECT ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e) FROM (SELECT "
                              f"ST_Extent(geometry::geometry) AS e FROM {table}) s").fetchone()
    return rows, types, extent


def test_the_description_gives_the_figures_of_the_demo_database(demo_dsn: str, tmp_path: Path) -> None:
    written = write_demo(tmp_path)  # what `ingest demo-data` writes: the figures the database must show
    found = describe.describe(demo_dsn)
    tables = {table.name: table for table in found.tables}
    assert list(tables) == [table.fullname for table in schema.REFERENCE_TABLES]
    for table in schema.VECTOR_TABLES:
        described = tables[table.fullname]
        rows, types, extent = sql_figures(demo_dsn, table.fullname)
        assert (described.rows, described.geometries.types) == (rows, types)
        assert described.geometries.extent == pytest.approx(extent, abs=1e-12)
        assert described.geometries.srid == 4326 and rows > 0
        assert [column.name for column in described.columns] == [column.name for column in table.columns]
        assert [column.type for column in described.columns] == [column.type.catalog for column in table.columns]
    assert tables["public.pois"].rows == written["pois"]
    assert tables["public.pois"].geometries.types == {"POINT": written["pois"]}
    dem = tables["public.dem_us"]
    with psycopg.connect(demo_dsn) as conn:
        tiles, *extent = conn.execute("SELECT n, ST_XMin(e), ST_YMin(e), ST_XMax(e), ST_YMax(e) FROM (SELECT "
                                      "count(*) AS n, ST_Extent(ST_Envelope(rast)) AS e FROM dem_us) s").fetchone()
    assert dem.rows == dem.raster.tiles == tiles == written["tiles"] * 225  # 15 x 15 tiles per ASTER file
    assert dem.raster.extent == pytest.approx(extent, abs=1e-9)
    assert (dem.raster.srid, dem.raster.tile_width, dem.raster.tile_height, dem.raster.bands, dem.raster.band_type,
            dem.raster.nodata, dem.raster.reference_tiles) == (4326, 256, 256, 1, "16BSI", None, None)
    assert (dem.raster.pixel_width, dem.raster.pixel_height) == pytest.approx((PIXEL, PIXEL), rel=1e-12)
    assert found.session == {"user": "gsqa_model", **MODEL_SESSION_SETTINGS}
    assert found.problems == []


def test_schema_in_three_formats(demo_dsn: str) -> None:
    expected = describe.describe(demo_dsn)
    as_json = reproduce_schema("--dsn", demo_dsn, "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == json.loads(json.dumps(describe.as_json(expected)))
    text = reproduce_schema("--dsn", demo_dsn)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("PostgreSQL ") and f"with PostGIS {expected.postgis}" in lines[0]
    where = conninfo_to_dict(demo_dsn)
    assert where["dbname"] not in text.stdout and f":{where['port']}" not in text.stdout  # the same prompt anywhere
    assert "Table public.dem_us (450 tiles)" in lines and "  poi_name character varying(255)" in lines
    assert "  -- geometry: SRID 4326; geometry types present: POINT (262)" in lines
    assert "  -- rast: 1 band of 16BSI; nodata not set (no pixel reads as NULL)" in lines
    assert ("  -- rast: SRID 4326; tiles of 256x256 pixels (edge tiles may be smaller); pixel size 0.000277777778 "
            "degrees (1/3600)") in lines
    assert lines[-1] == ("Queries run as gsqa_model, which may only read: statement_timeout 2min, temp_file_limit "
                         "2GB, work_mem 64MB; one query per call (SELECT, WITH, VALUES, TABLE).")
    markdown = reproduce_schema("--dsn", demo_dsn, "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    blocks = markdown.stdout.split("\n## ")
    assert [block.splitlines()[0] for block in blocks[1:]] == [t.fullname for t in schema.REFERENCE_TABLES] + ["Limits"]
    assert "| geometry | geography(Geometry,4326) |  |  |" in blocks[1] and "450 tiles." in blocks[6]
    ddl = reproduce_schema("--dsn", demo_dsn, "--format", "sql")
    assert ddl.returncode == 0, ddl.stderr
    assert "CREATE TABLE public.pois (\n  id integer PRIMARY KEY,\n  geometry geography(Geometry,4326),\n" in ddl.stdout
    assert ddl.stdout.count("CREATE TABLE ") == len(schema.REFERENCE_TABLES)


def test_the_description_says_what_a_query_writer_needs(demo_dsn: str) -> None:
    """Shares of NULLs, a tag column's values, numbers stored as text (from the planner's statistics), the
    indexes, units and casts; PostGIS's own tables left out."""
    with psycopg.connect(demo_dsn) as conn:
        tourism = dict(conn.execute("SELECT tourism, count(*) FROM pois GROUP BY 1"))
        rows = sum(tourism.values())
    found = {table.name: table for table in describe.describe(demo_dsn).tables}
    pois = {column.name: column for column in found["public.pois"].columns}
    assert pois["amenity"].null_share == 1.0 and pois["poi_name"].null_share == 0.0
    assert dict(pois["tourism"].frequent) == pytest.approx({value: count / rows for value, count in tourism.items()},
                                                           abs=1e-4)
    regions = {column.name: column for column in found["public.regions"].columns}
    assert regions["admin_level"].numbers_as_text and not regions["region_name"].numbers_as_text
    assert not any(column.numbers_as_text for column in found["public.pois"].columns if column.name in ("id", "osm_id"))
    assert found["public.pois"].indexes == ["GiST (geometry)", "primary key, B-tree (id)"]
    assert found["public.dem_us"].indexes == ["primary key, B-tree (rid)", "GiST (st_convexhull(rast))"]
    text = reproduce_schema("--dsn", demo_dsn).stdout
    assert "PostGIS's own tables (spatial_ref_sys, geometry_columns, raster_columns, ...) are left out." in text
    assert "spatial_ref_sys " not in text.split("left out.", 1)[1]
    assert "  amenity character varying(255) -- NULL in every row sampled" in text.splitlines()
    assert f"  tourism character varying(255) -- values: museum {tourism['museum'] / rows:.0%}, hotel " \
           f"{tourism['hotel'] / rows:.0%}" in text.splitlines()
    assert f"  -- geometry is {describe.GEOGRAPHY_USAGE}" in text.splitlines()
    assert f"  -- rast: {describe.RASTER_USAGE}" in text.splitlines()
    assert "  -- indexes: GiST (geometry); primary key, B-tree (id) (ST_DWithin, ST_Intersects and the " \
           "nearest-neighbour ORDER BY geometry <-> point use the GiST one)" in text.splitlines()


def test_an_unknown_format_is_a_usage_error(demo_dsn: str) -> None:
    result = reproduce_schema("--dsn", demo_dsn, "--format", "yaml")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: Invalid value for --format: 'yaml' is not one of text, markdown, json, "
                                    "sql")


@contextmanager
def stage_log_changed(dsn: str, change: str) -> Iterator[None]:
    """gsqa.stage_log as `change` leaves it, for the time of the block."""
    with psycopg.connect(dsn) as conn:
        saved = conn.execute("SELECT stage, state, expected FROM gsqa.stage_log").fetchall()
        conn.execute(change)
    try:
        yield
    finally:
        with psycopg.connect(dsn) as conn:
            for stage, state, expected in saved:
                conn.execute("UPDATE gsqa.stage_log SET state = %s, expected = %s WHERE stage = %s",
                             [state, psycopg.types.json.Jsonb(expected) if expected else None, stage])


def test_against_the_reference_tile_list_it_counts_the_tiles_of_the_reference(demo_dsn: str) -> None:
    loaded_the_reference = (f"UPDATE gsqa.stage_log SET expected = jsonb_set(expected, '{{files}}', "
                            f"'{schema.REFERENCE_DEM_FILES}') WHERE stage = 'dem'")
    with stage_log_changed(demo_dsn, loaded_the_reference):
        result = reproduce_schema("--dsn", demo_dsn)
    assert result.returncode == 1
    assert "Table public.dem_us (450 of the reference's 265,950 tiles)" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == "Not ready: public.dem_us holds 450 of the reference's 265,950 tiles"


def test_a_complete_reference_dem_is_described_as_the_reference(demo_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo DEM standing in for the reference: its two files and 450 tiles declared as the published ones."""
    monkeypatch.setattr(schema, "REFERENCE_DEM_FILES", 2)
    monkeypatch.setattr(schema, "REFERENCE_DEM_TILES", 450)
    found = describe.describe(demo_dsn)
    assert found.tables[-1].raster.reference_tiles == 450 and found.problems == []
    assert "Table public.dem_us (450 tiles, as the reference)" in describe.as_text(found).splitlines()


def test_a_stage_that_did_not_finish_is_missing(demo_dsn: str) -> None:
    with stage_log_changed(demo_dsn, "UPDATE gsqa.stage_log SET state = 'failed' WHERE stage = 'osm'"):
        found = describe.describe(demo_dsn)
    assert found.problems == ["stage osm of `ingest all` is failed: 284 rows written; 0 features skipped as loader 1 "
                              "would (listed in the stage report)"]


def test_a_half_built_database_says_what_is_missing(new_database, tmp_path: Path) -> None:
    dsn = new_database("half built")
    build_demo(dsn, tmp_path, "--what", "dem")
    result = reproduce_schema("--dsn", dsn, "--format", "json")
    assert result.returncode == 1, result.stderr
    found = json.loads(result.stdout)
    assert found["problems"] == [f"table {table.fullname} is empty" for table in schema.VECTOR_TABLES]
    assert [table["rows"] for table in found["tables"]] == [0, 0, 0, 0, 0, 450]


def test_an_empty_database_says_what_is_missing(new_database) -> None:
    result = reproduce_schema("--dsn", new_database("no tables"))
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert [line for line in lines if line.startswith("Table ")] == [
        f"Table {table.fullname}: missing" for table in schema.REFERENCE_TABLES]
    assert [line for line in lines if line.startswith("Not ready: table")] == [
        f"Not ready: table {table.fullname} is missing" for table in schema.REFERENCE_TABLES]


def test_a_database_without_postgis_is_one_line_and_exit_2(fresh_dsn: str) -> None:
    result = reproduce_schema("--dsn", fresh_dsn)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: PostGIS is not installed in ") and result.stderr.count("\n") == 1
