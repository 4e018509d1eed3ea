"""ingest/indexes.py through `ingest osm`: each table comes out indexed and analyzed once its layer is in; a
table rewritten from its first row loses its index first and gets a new one; a layer with a failed file is
left to the rerun that loads it; --no-index leaves all of it to `ingest finalize`."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
from load_helpers import ingest
from osm_helpers import feature, point, write_layer, write_rule_layers

TABLES = ["pois", "roads", "parks", "lakes", "regions"]


def load(source: Path, dsn: str, *options: str, exit_code: int = 0) -> dict:
    result = ingest("osm", str(source), "--dsn", dsn, "--json", *options)
    assert result.returncode == exit_code, result.stderr
    return {name: layer["indexed"] for name, layer in json.loads(result.stdout)["layers"].items()}


def gist_indexes(dsn: str) -> dict[str, int]:
    """Table -> the oid of its GiST index: a new oid is an index built anew."""
    with psycopg.connect(dsn) as conn:
        return dict(conn.execute("SELECT indrelid::regclass::text, indexrelid::int FROM pg_index "
                                 "WHERE indexrelid::regclass::text LIKE '%\\_geometry\\_gix'"))


def analyzed(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {name for (name,) in conn.execute("SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(%s) "
                                                 "AND last_analyze IS NOT NULL", [TABLES])}


def test_tables_are_indexed_once_loaded_and_again_only_when_rewritten(new_database, tmp_path: Path) -> None:
    source = write_rule_layers(tmp_path / "src")
    dsn = new_database("indexes_rewritten", initialized=True)
    assert load(source, dsn, "--no-index") == dict.fromkeys(TABLES, False)
    assert gist_indexes(dsn) == {} and analyzed(dsn) == set()
    # Nothing to load, but every table lacks its index: the rerun builds them and analyzes.
    assert all(load(source, dsn).values())
    first = gist_indexes(dsn)
    assert set(first) == set(TABLES) and analyzed(dsn) == set(TABLES)
    assert not any(load(source, dsn).values()) and gist_indexes(dsn) == first  # nothing changed, nothing done
    # Roads' first file changes: the table is rewritten from its first row (new index). A new pois file
    # renumbers every poi (new index). The other tables keep theirs.
    write_layer(source / "roads" / "part-0.geojson", [feature(
        {"type": "LineString", "coordinates": [[-74.0, 40.7], [-74.02, 40.72]]}, 13, {"highway": "track"})] * 2)
    write_layer(source / "pois" / "c.geojson", [feature(point(-80, 30), 99, {"name": "New", "leisure": "garden"})])
    indexed = load(source, dsn)
    assert indexed == {"pois": True, "roads": True, "parks": False, "lakes": False, "regions": False}
    second = gist_indexes(dsn)
    assert {table for table in TABLES if second[table] != first[table]} == {"pois", "roads"}
    check = ingest("check", "--dsn", dsn, "--json")
    assert {c["check"] for c in json.loads(check.stdout) if c["check"].endswith((".index", ".analyzed"))
            and not c["ok"]} == set()


def test_a_layer_with_a_failed_file_waits_for_the_rerun(new_database, tmp_path: Path) -> None:
    source = write_rule_layers(tmp_path / "src")
    truncated = write_layer(source / "roads" / "z.geojson", [feature(point(-74, 41), 20, {"name": "Cut"})] * 3)
    truncated.write_bytes(truncated.read_bytes()[:-40])
    dsn = new_database("indexes_failed", initialized=True)
    indexed = load(source, dsn, exit_code=1)  # the truncated file
    assert not indexed["roads"] and all(indexed[table] for table in TABLES if table != "roads")
    assert set(gist_indexes(dsn)) == set(TABLES) - {"roads"}
    truncated.unlink()
    assert load(source, dsn)["roads"] and set(gist_indexes(dsn)) == set(TABLES)
