"""`ingest export` on the README's demo database: GeoParquet files that hold the tables row for row and open in
geopandas, pyarrow and DuckDB as they are; COGs pixel-identical to the source GeoTIFFs and to dem_us; the VRT;
the manifest; `--check`; the refusals."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import duckdb
import geopandas
import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import rasterio
import rasterio.crs
import shapely
from conftest import drop_database, make_scratch_database
from load_helpers import ingest
from rio_cogeo.cogeo import cog_validate

from gsqa_core import schema
from gsqa_core.dem_grid import Grid
from ingest.dem.constraints import TileGrid
from ingest.dem.synthetic import aster_transform, write_aster_tile
from ingest.export import dem, vector
from ingest.initdb import initialize
from ingest.snapshot.manifest import sha256_of

ARROW_TYPE_NAMES = {"integer": "int32", "bigint": "int64", "character varying(255)": "string",
                    "geography(Geometry,4326)": "binary"}


@pytest.fixture(scope="module")
def checked_demo(demo_db: tuple[str, Path]) -> tuple[str, Path]:
    """The module's demo database, analyzed again: a copy of a database does not take its statistics along, and
    `ingest check` (which export requires) wants them."""
    finalized = ingest("finalize", "--dsn", demo_db[0])
    assert finalized.returncode == 0, finalized.stderr
    return demo_db


@pytest.fixture(scope="module")
def exported(checked_demo: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    dsn, _ = checked_demo
    folder = tmp_path_factory.mktemp("export") / "out"
    done = ingest("export", str(folder), "--dsn", dsn)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{folder}: 8 files (") and "8 written, 0 already there" in done.stdout
    return folder


def table_rows(dsn: str, table: schema.Table) -> dict[int, tuple]:
    """Every row of the table by id, the geometry as WKB bytes."""
    columns = ", ".join(f"ST_AsBinary({c.name})" if c.type is schema.GEOGRAPHY else f'"{c.name}"'
                        for c in table.columns)
    with psycopg.connect(dsn) as conn:
        return {row[0]: row for row in conn.execute(f"SELECT {columns} FROM {table.fullname}")}


def test_the_folder_holds_one_file_per_table_and_dem_file_and_the_manifest_says_what_each_holds(
        exported: Path, demo_db: tuple[str, Path]) -> None:
    dsn, data = demo_db
    manifest = json.loads((exported / "export.json").read_text())
    paths = sorted(str(path.relative_to(exported)) for path in exported.rglob("*") if path.is_file()
                   and ".export" not in path.parts)
    sources = sorted(path.name for path in (data / "dem" / "tiles").glob("*.tif"))
    assert paths == sorted(["export.json", "dem/dem_us.vrt", *(f"dem/{name}" for name in sources),
                            *(f"vector/{table.name}.parquet" for table in schema.VECTOR_TABLES)])
    assert [entry["path"] for entry in manifest["files"]] == sorted(paths[:-1] if paths[-1] == "export.json"
                                                                     else [p for p in paths if p != "export.json"])
    with psycopg.connect(dsn) as conn:
        counts = {t.fullname: conn.execute(f"SELECT count(*) FROM {t.fullname}").fetchone()[0]
                  for t in schema.VECTOR_TABLES}
        postgis = conn.execute("SELECT postgis_lib_version()").fetchone()[0]
        tiles = dict(conn.execute("SELECT filename, count(*) FROM dem_us GROUP BY 1").fetchall())
    for entry in manifest["files"]:
        path = exported / entry["path"]
        assert (entry["size"], entry["sha256"]) == (path.stat().st_size, sha256_of(path))
        if entry["format"] == "geoparquet":
            assert entry["rows"] == counts[entry["table"]] == pq.ParquetFile(path).metadata.num_rows
        elif entry["format"] == "cog":
            assert (entry["source"], entry["tiles"], entry["pixels"]) == (path.name, tiles[path.name], 3601 * 3601)
    assert counts == {"public.pois": 262, "public.roads": 10, "public.parks": 5, "public.lakes": 5,
                      "public.regions": 2}
    assert manifest["database"]["server"]["postgis"] == postgis
    assert manifest["formats"]["geoparquet"] == "1.1.0" and manifest["export_version"] == 1


@pytest.mark.parametrize("table", schema.VECTOR_TABLES, ids=lambda table: table.name)
def test_each_geoparquet_file_holds_every_row_and_column_of_its_table(exported: Path, demo_db: tuple[str, Path],
                                                                      table: schema.Table) -> None:
    path = exported / "vector" / f"{table.name}.parquet"
    arrow = pq.read_table(path)
    with psycopg.connect(demo_db[0]) as conn:
        declared = schema.table_columns(conn, table.fullname)
    assert [(f.name, str(f.type)) for f in arrow.schema][:-1] == [(n, ARROW_TYPE_NAMES[t]) for n, t in declared]
    assert arrow.schema.field("bbox").type == vector.BBOX_TYPE
    rows = table_rows(demo_db[0], table)
    names = [column.name for column in table.columns]
    got = {row["id"]: tuple(row.values()) for row in arrow.select(names).to_pylist()}
    assert got == rows
    boxes = arrow.column("bbox").to_pylist()
    for wkb, box in zip(arrow.column("geometry").to_pylist(), boxes, strict=True):
        assert box == dict(zip(("xmin", "ymin", "xmax", "ymax"), shapely.from_wkb(wkb).bounds, strict=True))


def test_the_geo_metadata_is_geoparquet_1_1(exported: Path) -> None:
    geo = json.loads(pq.read_schema(exported / "vector" / "parks.parquet").metadata[b"geo"])
    column = geo["columns"]["geometry"]
    assert (geo["version"], geo["primary_column"], column["encoding"]) == ("1.1.0", "geometry", "WKB")
    assert column["geometry_types"] == ["Polygon"] and column["edges"] == "spherical"  # geography's arcs
    points = json.loads(pq.read_schema(exported / "vector" / "pois.parquet").metadata[b"geo"])["columns"]["geometry"]
    assert points["geometry_types"] == ["Point"] and "edges" not in points  # no edges to read either way
    assert column["crs"]["id"] == {"authority": "EPSG", "code": 4326}
    assert column["covering"] == {"bbox": {"xmin": ["bbox", "xmin"], "ymin": ["bbox", "ymin"],
                                           "xmax": ["bbox", "xmax"], "ymax": ["bbox", "ymax"]}}
    assert column["bbox"] == [-75.8, 39.2, -74.58, 39.220000000000006]  # the demo's parks: 0.02-degree squares


def test_geopandas_and_duckdb_read_the_files_as_they_are(exported: Path, demo_db: tuple[str, Path]) -> None:
    """geopandas reads the points quietly; of a table with edges it says, truly, that it reads them on the plane."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pois = geopandas.read_parquet(exported / "vector" / "pois.parquet")
        boxed = geopandas.read_parquet(exported / "vector" / "pois.parquet", bbox=(-75.5, 39.2, -75.3, 39.4))
    with pytest.warns(UserWarning, match="column 'geometry' has spherical edges") as said:
        regions = geopandas.read_parquet(exported / "vector" / "regions.parquet")
    assert len(said) == 1 and len(regions) == 2
    assert pois.crs.to_epsg() == 4326 and len(pois) == 262
    with psycopg.connect(demo_db[0]) as conn:
        wanted = sorted(row[0] for row in conn.execute(
            "SELECT poi_name FROM pois WHERE geometry::geometry && ST_MakeEnvelope(-75.5, 39.2, -75.3, 39.4, 4326)"))
        museum = conn.execute("SELECT ST_X(geometry::geometry), ST_Y(geometry::geometry) FROM pois "
                              "WHERE poi_name = 'Demo Museum 7'").fetchone()
    assert pois.loc[pois.poi_name == "Demo Museum 7", "geometry"].iloc[0].coords[0] == museum
    assert sorted(boxed.poi_name) == wanted and len(wanted) == 3
    counted = duckdb.sql(f"SELECT count(*), count(DISTINCT id), min(bbox.xmin) FROM "
                         f"'{exported / 'vector' / 'roads.parquet'}'").fetchall()
    assert counted == [(10, 10, -76.0)]


def test_rows_come_in_row_groups_in_spatial_order(demo_db: tuple[str, Path], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With row groups of 20 rows, the pois come in PostGIS's geometry order (a Hilbert curve), and a small
    box's read skips every row group whose bbox statistics lie outside it: all but the groups that hold its
    points or whose extent meets it (the demo's: 2 of 14)."""
    monkeypatch.setattr(vector, "ROW_GROUP_ROWS", 20)
    path = tmp_path / "pois.parquet"
    with psycopg.connect(demo_db[0]) as conn:
        vector.write_table(conn, schema.pois, path, {"id": {"authority": "EPSG", "code": 4326}}, lambda rows: None)
        order = [row[0] for row in conn.execute("SELECT id FROM pois ORDER BY geometry::geometry, id")]
        overlapping = [group for group, in conn.execute(  # the groups of 20 in that order whose extent meets the box
            "SELECT n / 20 FROM (SELECT row_number() OVER (ORDER BY geometry::geometry, id) - 1 AS n, geometry "
            "FROM pois) s GROUP BY 1 HAVING ST_Extent(geometry::geometry) && ST_MakeEnvelope(-75.5, 39.2, -75.3, 39.4) "
            "ORDER BY 1")]
    parquet = pq.ParquetFile(path)
    assert parquet.metadata.num_row_groups == math.ceil(262 / 20)
    assert parquet.read(columns=["id"]).column("id").to_pylist() == order
    box = (-75.5, 39.2, -75.3, 39.4)
    touched = []
    for index in range(parquet.metadata.num_row_groups):
        stats = {parquet.metadata.row_group(index).column(c).path_in_schema: parquet.metadata.row_group(index).column(c)
                 .statistics for c in range(parquet.metadata.num_columns)}
        if not (stats["bbox.xmin"].min > box[2] or stats["bbox.xmax"].max < box[0]
                or stats["bbox.ymin"].min > box[3] or stats["bbox.ymax"].max < box[1]):
            touched.append(index)
    dataset = ds.dataset(path)
    inside = dataset.to_table(filter=(pc.field("bbox", "xmin") <= box[2]) & (pc.field("bbox", "xmax") >= box[0])
                              & (pc.field("bbox", "ymin") <= box[3]) & (pc.field("bbox", "ymax") >= box[1]))
    holding = sorted({order.index(row_id) // 20 for row_id in inside.column("id").to_pylist()})
    assert inside.num_rows == 3 and set(holding) <= set(touched)
    assert touched == overlapping and len(touched) * 3 < parquet.metadata.num_row_groups


def test_each_cog_is_the_source_geotiff_pixel_for_pixel(exported: Path, demo_db: tuple[str, Path]) -> None:
    _, data = demo_db
    for source in sorted((data / "dem" / "tiles").glob("*.tif")):
        with rasterio.open(source) as original, rasterio.open(exported / "dem" / source.name) as cog:
            assert np.array_equal(cog.read(1), original.read(1))
            assert (cog.transform, cog.crs, cog.nodata, cog.dtypes) == (original.transform, original.crs,
                                                                        original.nodata, original.dtypes)
            assert cog.tags(ns="IMAGE_STRUCTURE")["LAYOUT"] == "COG"
            assert cog.profile["tiled"] and cog.block_shapes == [(512, 512)] and cog.overviews(1) == [2, 4, 8]
            assert cog.tags(ns="IMAGE_STRUCTURE")["COMPRESSION"] == "DEFLATE"
        assert cog_validate(exported / "dem" / source.name) == (True, [], [])  # rio-cogeo's validator


def test_the_vrt_opens_as_one_raster_whose_values_are_those_of_dem_us(exported: Path,
                                                                      demo_db: tuple[str, Path]) -> None:
    dsn, data = demo_db
    with psycopg.connect(dsn) as conn:
        points = conn.execute("SELECT ST_X(geometry::geometry), ST_Y(geometry::geometry) FROM pois ORDER BY id"
                              ).fetchall()
        # one point on the seam column the two files share: dem_us answers from the first file in rid order
        points.append((-75.0, 39.5))
        wanted = [conn.execute("SELECT ST_Value(rast, 1, ST_SetSRID(ST_MakePoint(%s, %s), 4326)) FROM dem_us "
                               "WHERE ST_Intersects(rast, ST_SetSRID(ST_MakePoint(%s, %s), 4326)) LIMIT 1",
                               [x, y, x, y]).fetchone()[0] for x, y in points]
    with rasterio.open(exported / "dem" / "dem_us.vrt") as mosaic:
        assert (mosaic.width, mosaic.height, mosaic.count, mosaic.crs.to_epsg()) == (7201, 3601, 1, 4326)
        sampled = [float(value[0]) for value in mosaic.sample(points)]
    assert sampled == wanted and len(sampled) == 263


def test_check_says_an_export_equals_its_database(exported: Path, demo_db: tuple[str, Path]) -> None:
    checked = ingest("export", "--check", str(exported), "--dsn", demo_db[0], "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert json.loads(checked.stdout)["differences"] == [] and json.loads(checked.stdout)["files"] == 8


def test_check_names_each_difference(exported: Path, demo_db: tuple[str, Path], tmp_path: Path) -> None:
    """A damaged COG, a missing file, and a parquet file rewritten with one value changed and its manifest entry
    made to match (only the rows against the table can tell)."""
    folder = tmp_path / "copy"
    shutil.copytree(exported, folder)
    cog = next((folder / "dem").glob("*.tif"))
    with open(cog, "r+b") as handle:
        handle.seek(cog.stat().st_size // 2)
        byte = handle.read(1)
        handle.seek(-1, 1)
        handle.write(bytes([byte[0] ^ 0xFF]))
    (folder / "vector" / "lakes.parquet").unlink()
    roads = folder / "vector" / "roads.parquet"
    table = pq.read_table(roads)
    names = pc.if_else(pc.equal(table.column("road_name"), "Demo Road 3"), "Demo Road 33", table.column("road_name"))
    pq.write_table(table.set_column(table.schema.get_field_index("road_name"), "road_name", names), roads)
    manifest = json.loads((folder / "export.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] == "vector/roads.parquet":
            entry["size"], entry["sha256"] = roads.stat().st_size, sha256_of(roads)
    (folder / "export.json").write_text(json.dumps(manifest))
    checked = ingest("export", "--check", str(folder), "--dsn", demo_db[0])
    assert checked.returncode == 1, checked.stderr
    lines = checked.stdout.splitlines()
    assert lines[0].startswith(f"DIFFERS dem/{cog.name}: sha256 ")
    assert lines[1] == "DIFFERS vector/lakes.parquet: missing"
    assert lines[2].startswith("DIFFERS vector/roads.parquet: 10 rows, checksum ")
    assert "; the table public.roads has 10 rows, checksum " in lines[2]
    assert lines[3] == f"{folder}: 8 files; differs from (3 differences) the database " + lines[3].split()[-1]


def test_a_rerun_writes_only_what_is_missing_or_changed(demo_db: tuple[str, Path], exported: Path,
                                                        tmp_path: Path) -> None:
    folder = tmp_path / "again"
    shutil.copytree(exported, folder)
    (folder / "vector" / "parks.parquet").unlink()
    cog = sorted((folder / "dem").glob("*.tif"))[0]
    cog.write_bytes(cog.read_bytes()[:1000])  # cut short
    (folder / "dem" / "leftover.tif.partial").write_bytes(b"a killed run's file")
    again = ingest("export", str(folder), "--dsn", demo_db[0], "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert sorted(report["written"]) == [f"dem/{cog.name}", "vector/parks.parquet"] and len(report["kept"]) == 6
    assert not list(folder.rglob("*.partial"))
    assert ingest("export", "--check", str(folder), "--dsn", demo_db[0]).returncode == 0
    finished = ingest("export", str(folder), "--dsn", demo_db[0], "--json")
    assert json.loads(finished.stdout)["written"] == []
    assert (folder / "export.json").read_bytes() == (exported / "export.json").read_bytes()


def test_refusals_are_one_line_and_write_nothing(demo_db: tuple[str, Path], demo_template: tuple[str, Path],
                                                 exported: Path, tmp_path: Path, server_dsn: str,
                                                 new_database) -> None:
    def refused(folder: Path, dsn: str) -> str:
        run = ingest("export", str(folder), "--dsn", dsn)
        assert (run.returncode, run.stdout, len(run.stderr.splitlines())) == (2, "", 1), run.stderr
        return run.stderr.removeprefix("error: ").rstrip("\n")

    before = sorted(path for path in exported.rglob("*"))
    bare = new_database("export_bare")
    assert "missing tables in " in refused(tmp_path / "a", bare)
    empty = new_database("export_empty", initialized=True)
    assert refused(tmp_path / "a", empty).endswith(
        " is not built (its load log is empty): build it first (`make db`, `ingest all DATA_DIR`)")
    assert not (tmp_path / "a").exists()
    other = make_scratch_database(server_dsn, demo_template[0], "export_other")
    try:
        initialize(other)
        unchecked = refused(tmp_path / "b", other)  # a copy of a database has no statistics yet
        assert unchecked.startswith("the database fails ") and " checks (first: pois.analyzed: " in unchecked
        assert unchecked.endswith(": only a built database that passes `ingest check` is exported")
        assert ingest("finalize", "--dsn", other).returncode == 0
        with psycopg.connect(other) as conn:
            conn.execute("UPDATE gsqa.load_log SET source_checksum = 'another' WHERE target_table = 'public.roads'")
        said = refused(exported, other)
    finally:
        drop_database(server_dsn, psycopg.conninfo.conninfo_to_dict(other)["dbname"])
    assert said.startswith(f"{exported}: holds the export of another database (identity ")
    assert said.endswith("): give an empty or new folder")
    assert sorted(path for path in exported.rglob("*")) == before
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    (crowded / "notes.txt").write_text("mine")
    assert refused(crowded, demo_db[0]) == (f"{crowded}: holds other files (notes.txt) and no export of this "
                                            "database: give an empty or new folder")
    assert sorted(path.name for path in crowded.iterdir()) == ["notes.txt"]


def test_an_unreachable_database_a_folder_without_manifest_and_a_bad_option_are_one_line(tmp_path: Path) -> None:
    unreachable = "postgresql://nobody@127.0.0.1:1/gsqa_nowhere"
    for argv, first in [(["export", str(tmp_path / "a"), "--dsn", unreachable], "error: cannot connect to PostgreSQL"),
                        (["export", "--check", str(tmp_path), "--dsn", unreachable],
                         f"error: {tmp_path}/export.json: missing: not an export, or its `ingest export` has not "
                         "finished (run it again)"),
                        (["export", str(tmp_path), "--format", "shp"], "error: Invalid value for --format: expected a "
                                                                         "comma-separated subset of "
                                                                         "parquet,geojson,flatgeobuf; "
                                                                         "see `ingest export --help`\n")]:
        run = ingest(*argv)
        assert (run.returncode, run.stdout, len(run.stderr.splitlines())) == (2, "", 1), run.stderr
        assert run.stderr.startswith(first), run.stderr
    assert not (tmp_path / "a").exists()


def test_a_finished_export_copied_without_its_journal_is_checked_by_sha256_and_kept(demo_db: tuple[str, Path],
                                                                                    exported: Path,
                                                                                    tmp_path: Path) -> None:
    folder = tmp_path / "copied"
    shutil.copytree(exported, folder, ignore=shutil.ignore_patterns(".export"))
    with open(folder / "vector" / "pois.parquet", "r+b") as handle:  # same size, one byte changed
        handle.seek(100)
        byte = handle.read(1)
        handle.seek(100)
        handle.write(bytes([byte[0] ^ 0x01]))
    again = ingest("export", str(folder), "--dsn", demo_db[0], "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["written"] == ["vector/pois.parquet"]
    assert (folder / "vector" / "pois.parquet").read_bytes() == (exported / "vector" / "pois.parquet").read_bytes()


def test_check_names_the_tile_whose_pixels_differ_and_a_vrt_that_is_not_the_mosaic(exported: Path,
                                                                                   demo_db: tuple[str, Path],
                                                                                   tmp_path: Path) -> None:
    """A COG written again with one pixel changed, and the VRT with its sources in another order, their manifest
    entries made to match: only the tiles and dem_us's files can tell."""
    folder = tmp_path / "copy"
    shutil.copytree(exported, folder)
    cog = sorted((folder / "dem").glob("*.tif"))[1]
    with rasterio.open(cog) as source:
        profile, pixels = source.profile, source.read(1)
    pixels[600, 300] += 1
    cog.unlink()
    with rasterio.open(cog, "w", **{**profile, "driver": "GTiff"}) as changed:
        changed.write(pixels, 1)
    vrt = folder / "dem" / "dem_us.vrt"  # and the mosaic with its sources in name order: the seam's pixels change
    lines = vrt.read_text().splitlines(keepends=True)
    sources = [n for n, line in enumerate(lines) if "<SimpleSource>" in line]
    lines[sources[0]], lines[sources[1]] = lines[sources[1]], lines[sources[0]]
    vrt.write_text("".join(lines))
    manifest = json.loads((folder / "export.json").read_text())
    for entry in manifest["files"]:
        if entry["path"] in (f"dem/{cog.name}", "dem/dem_us.vrt"):
            changed = folder / entry["path"]
            entry["size"], entry["sha256"] = changed.stat().st_size, sha256_of(changed)
    (folder / "export.json").write_text(json.dumps(manifest))
    checked = ingest("export", "--check", str(folder), "--dsn", demo_db[0])
    assert checked.returncode == 1, checked.stderr
    assert checked.stdout.splitlines()[:2] == [
        f"DIFFERS dem/{cog.name}: the pixels of the tile at pixel (256, 512) differ from its tile in dem_us (1 of 225 "
        "tiles differ)",
        "DIFFERS dem/dem_us.vrt: not the mosaic of dem_us's 2 files (the VRT `ingest export` writes for them)"]


def test_the_vrt_is_nodata_where_no_file_lies(tmp_path: Path) -> None:
    """Two files with a one-degree gap between them: the mosaic spans both, the gap is NODATA (dem_us has no
    tile there: ST_Value is NULL), the files' pixels are theirs."""
    files = []
    for seed, (lat, lon) in enumerate([(39, -76), (39, -74)]):
        path = write_aster_tile(tmp_path, lat, lon, np.full((600, 600), 100 + seed, dtype="int16"), size=600)
        grid = Grid(600, 600, tuple(aster_transform(lat, lon).to_gdal()), None)
        files.append(dem.DemFile(path.name, 1, 9, 9, TileGrid(grid)))
    dem.write_vrt(files, tmp_path / "mosaic.vrt")
    with rasterio.open(tmp_path / "mosaic.vrt") as mosaic:
        assert (mosaic.width, mosaic.nodata) == (2 * 3600 + 600, -32768)
        values = [int(v[0]) for v in mosaic.sample([(-75.95, 39.95), (-75.0, 39.95), (-73.95, 39.95)])]
    assert values == [100, -32768, 101]


def test_the_crs_kept_beside_the_writer_is_what_gdal_says_of_epsg_4326() -> None:
    assert vector.crs() == rasterio.crs.CRS.from_epsg(4326).to_dict(projjson=True)


def test_a_fetch_holds_about_fetch_bytes_whatever_its_rows_and_loads_neither_pandas_nor_gdal(
        demo_db: tuple[str, Path]) -> None:
    """In a process of its own: the pois in fetches sized from the last one's bytes (here 4 kB, so many), every row
    once and in order, as Arrow made without pyarrow.array(), which would import pandas (installed here), and
    without GDAL (rasterio), which a vector export does not need."""
    program = f"""
import sys
from ingest.export import vector
from gsqa_core import schema
import psycopg
vector.FETCH_BYTES = 4096
with psycopg.connect({demo_db[0]!r}) as conn:
    batches = list(vector.record_batches(conn, schema.pois, lambda rows: None))
    order = [row for row, in conn.execute("SELECT id FROM pois ORDER BY geometry::geometry, id")]
print([batch.num_rows for batch in batches][:2], max(batch.nbytes for batch in batches) < 2 * 4096,
      [i for batch in batches for i in batch.column("id").to_pylist()] == order, "pandas" in sys.modules,
      "rasterio" in sys.modules)
"""
    assert importlib.util.find_spec("pandas") is not None  # else the test would prove nothing of pyarrow.array
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[16, 14] True True False False\n"


def test_the_row_checksum_hexes_a_slice_of_wkb_with_its_nulls_in_place() -> None:
    wkb = pa.array([b"ab", None, b"\x01\x02", b"", None, b"zz"])[2:]  # validity bits starting mid-byte
    assert vector._hex(wkb).to_pylist() == ["0102", "", None, "7a7a"]
