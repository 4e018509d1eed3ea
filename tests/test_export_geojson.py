"""`ingest export --format geojson` and `--format flatgeobuf`: the vector tables as GeoJSON parts in the published
layers' layout and as FlatGeobuf files, every
row with its columns and its exact geometry; parts by id range, each written and resumed on its own."""

from __future__ import annotations

import json
from pathlib import Path

import geopandas
import psycopg
import pyogrio
import pytest
import shapely
from load_helpers import ingest

from gsqa_core import schema
from ingest.export import geojson, run

LAYERS = {"pois": "pois", "roads": "roads", "parks": "parks", "lakes": "lakes", "regions": "postal_codes"}


@pytest.fixture(scope="module")
def checked_demo(demo_db: tuple[str, Path]) -> str:
    finalized = ingest("finalize", "--dsn", demo_db[0])  # a copy of a database has no statistics: check wants them
    assert finalized.returncode == 0, finalized.stderr
    return demo_db[0]


def rows_by_id(dsn: str, table: schema.Table) -> dict[int, tuple[dict, bytes]]:
    """Each row's non-NULL columns but the geometry, and the geometry's WKB."""
    names = [column.name for column in table.columns if column.type is not schema.GEOGRAPHY]
    quoted = ", ".join(f'"{name}"' for name in names)
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(f"SELECT ST_AsBinary(geometry), {quoted} FROM {table.fullname}").fetchall()
    return {row[1]: ({name: value for name, value in zip(names, row[1:], strict=True) if value is not None}, row[0])
            for row in rows}


def test_each_table_as_geojson_parts_in_the_published_layout(checked_demo: str, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    done = ingest("export", str(folder), "--format", "geojson", "--what", "vector", "--dsn", checked_demo)
    assert done.returncode == 0, done.stderr
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*.geojson")) == sorted(
        f"geojson/{layer}/part-00000.geojson" for layer in LAYERS.values())
    for table in schema.VECTOR_TABLES:
        part = folder / "geojson" / LAYERS[table.name] / "part-00000.geojson"
        features = json.loads(part.read_text())["features"]
        wanted = rows_by_id(checked_demo, table)
        got = {f["properties"]["id"]: (f["properties"], shapely.to_wkb(shapely.geometry.shape(f["geometry"]),
                                                                        byte_order=1, output_dimension=2))
               for f in features}
        assert [f["properties"]["id"] for f in features] == sorted(wanted)  # in id order
        assert got == wanted
        assert len(geopandas.read_file(part)) == len(wanted)  # GDAL's GeoJSON driver reads it as it is
    manifest = json.loads((folder / "export.json").read_text())
    assert {(e["path"], e["format"], e["rows"], tuple(e["ids"])) for e in manifest["files"]} == {
        ("geojson/pois/part-00000.geojson", "geojson", 262, (1, 262)),
        ("geojson/roads/part-00000.geojson", "geojson", 10, (1, 10)),
        ("geojson/parks/part-00000.geojson", "geojson", 5, (1, 5)),
        ("geojson/lakes/part-00000.geojson", "geojson", 5, (1, 5)),
        ("geojson/postal_codes/part-00000.geojson", "geojson", 2, (1, 2))}
    checked = ingest("export", "--check", str(folder), "--dsn", checked_demo)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_parts_by_id_range_are_written_and_resumed_one_by_one(checked_demo: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(geojson, "PART_ROWS", 100)
    folder = tmp_path / "out"
    report = run.export(folder, checked_demo, ("vector",), ("geojson",), progress=False)
    pois = [f"geojson/pois/part-{n:05d}.geojson" for n in range(3)]
    assert [path for path in report.written if path.startswith("geojson/pois/")] == pois
    counts = [len(json.loads((folder / path).read_text())["features"]) for path in pois]
    assert counts == [100, 100, 62]
    (folder / pois[1]).unlink()
    again = run.export(folder, checked_demo, ("vector",), ("geojson",), progress=False)
    assert again.written == [pois[1]] and len(again.kept) == 6


def test_each_table_as_flatgeobuf(checked_demo: str, tmp_path: Path) -> None:
    """--format flatgeobuf: every row with its columns and its geometry, as GDAL reads them back."""
    folder = tmp_path / "out"
    done = ingest("export", str(folder), "--format", "flatgeobuf", "--what", "vector", "--dsn", checked_demo)
    assert done.returncode == 0, done.stderr
    for table in schema.VECTOR_TABLES:
        frame = pyogrio.read_dataframe(folder / "flatgeobuf" / f"{table.name}.fgb")
        wanted = rows_by_id(checked_demo, table)
        got = {int(row["id"]): ({name: _plain(value) for name, value in row.items()
                                 if name != "geometry" and value is not None and value == value},
                                shapely.to_wkb(row["geometry"], byte_order=1, output_dimension=2))
               for row in frame.to_dict("records")}
        assert got == wanted
        assert frame.crs.to_epsg() == 4326
    checked = ingest("export", "--check", str(folder), "--dsn", checked_demo)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _plain(value: object) -> object:
    """numpy's integers as Python's, as psycopg gives them."""
    return int(value) if hasattr(value, "item") and isinstance(value.item(), int) else value
