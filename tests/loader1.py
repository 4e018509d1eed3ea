"""Loader 1 re-told plainly, as the yardstick for `ingest osm`: what the benchmark's `*_processor.py`
scripts did (docs/REFERENCE-DB.md, Load rules), minus their SQL-string building.

Whole files through json.load, the pois filter and its three passes over all files, `shape(geometry).wkt`
cast as text into the geography column, `str(value)` for tag columns, `addr_x` from `addr:x`, the name
column from `name`, osm_id from `properties.id`, serial ids in insertion order. Files are taken in sorted
name order (loader 1 took glob()'s order). Rows go into `ref_<table>` tables shaped like the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from shapely.geometry import shape

from ingest.osm.rules import LAYERS, POI_PASSES


def _features(folder: Path) -> list[dict[str, Any]]:
    features: list[dict[str, Any]] = []
    for path in sorted(folder.glob("*.geojson")):
        features += json.loads(path.read_text(encoding="utf-8"))["features"]
    return features


def _insertion_order(layer: str, features: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if layer != "pois":
        return features
    ordered = []
    for key, values in POI_PASSES:
        ordered += [f for f in features if key in f["properties"]["tagsMap"]
                    and f["properties"]["tagsMap"][key] in values and "name" in f["properties"]["tagsMap"]]
    return ordered


def _row(layer: str, feature: dict[str, Any]) -> list[Any]:
    definition = LAYERS[layer]
    tags = dict(feature["properties"]["tagsMap"])
    if "name" in tags:
        tags[definition.name_column] = tags["name"]
    tags["osm_id"] = feature["properties"]["id"]
    values: list[Any] = [sql.Literal(shape(feature["geometry"]).wkt)]  # an untyped literal: geography_in
    for column in definition.attribute_columns:
        key = column.replace("_", ":") if "addr_" in column else column
        if key not in tags:
            values.append(sql.NULL)
        elif column == "osm_id":
            values.append(sql.Literal(int(tags[key])))
        else:
            values.append(sql.Literal(str(tags[key])))
    return values


def load_reference(dsn: str, source: Path, layers: list[str]) -> None:
    """ref_<table> for each layer, filled as loader 1 filled <table> (explicit ids 1, 2, ... in order)."""
    with psycopg.connect(dsn) as conn:
        for layer in layers:
            definition = LAYERS[layer]
            table = sql.Identifier(f"ref_{definition.name}")
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
            conn.execute(sql.SQL("CREATE TABLE {} (LIKE {})").format(table, sql.Identifier(definition.name)))
            columns = sql.SQL(", ").join(map(sql.Identifier, ("id", *definition.columns)))
            features = _insertion_order(layer, _features(source / definition.folder))
            for number, feature in enumerate(features, start=1):
                values = sql.SQL(", ").join([sql.Literal(number), *_row(layer, feature)])
                conn.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(table, columns, values))


def table_rows(dsn: str, table: str) -> list[tuple]:
    """Every row by id, geometry as its stored bytes."""
    with psycopg.connect(dsn) as conn:
        columns = [name for (name,) in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped "
            "ORDER BY attnum", [table])]
        select = sql.SQL(", ").join(sql.SQL("{}::bytea").format(sql.Identifier(c)) if c == "geometry"
                                    else sql.Identifier(c) for c in columns)
        return conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY id").format(
            select, sql.Identifier(*table.split(".")))).fetchall()
