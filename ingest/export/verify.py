"""`ingest export --check DIR`: does the folder equal its database?

Against the manifest: every file present with its size and sha256. Against the database (the one --dsn
names): the same identity (load log), the same DEM files; each table's rows and their order-independent
checksum computed by the server equal those computed from its GeoParquet file (vector.py); each COG's pixel
checksum equals that of its file's tiles computed by the server, and the manifest's (dem.py); the VRT is the
mosaic of dem_us's files; each GeoJSON part
holds as many rows as the table has in its id range (its bytes are the manifest's sha256). Every difference
is named, one line each.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from tqdm import tqdm

from gsqa_core import schema
from gsqa_core.db import connect, identifier, where
from ingest.export import dem, geojson, vector
from ingest.export.manifest import identity, read_manifest
from ingest.snapshot.manifest import sha256_of

_TABLES = {table.fullname: table for table in schema.VECTOR_TABLES}


@dataclass
class CheckReport:
    folder: str
    database: str
    files: int = 0
    differences: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {"folder": self.folder, "database": self.database, "files": self.files,
                "equal": not self.differences, "differences": self.differences}


def check_export(folder: Path, dsn: str | None, progress: bool = True) -> CheckReport:
    manifest = read_manifest(folder)
    entries = manifest["files"]
    with connect(dsn, autocommit=True) as conn:
        report = CheckReport(str(folder), where(conn), files=len(entries))
        ours = identity(conn)
        if manifest["database"]["identity"] != ours:
            report.differences.append(f"database: the export is of {manifest['database']['identity'][:12]}, "
                                      f"{where(conn)} is {ours[:12]} (another load log)")
        intact = [entry for entry in entries if _file_intact(folder, entry, report.differences)]
        has_cogs = any(entry["format"] == "cog" for entry in entries)
        sources = {source.name: source for source in dem.dem_files(conn)} if has_cogs else {}
        with tqdm(total=len(intact), unit="file", desc=f"ingest export --check {folder}", file=sys.stderr,
                  disable=not progress) as bar:
            for entry in intact:
                _compare_with_database(conn, folder, entry, sources, report.differences)
                bar.update()
        if has_cogs:
            missing = sorted(set(sources) - {entry["source"] for entry in entries if entry["format"] == "cog"})
            if missing:
                report.differences.append(f"dem: {len(missing)} files of dem_us have no COG (first: {missing[0]})")
    return report


def _file_intact(folder: Path, entry: dict[str, Any], differences: list[str]) -> bool:
    path = folder / entry["path"]
    if not path.is_file():
        differences.append(f"{entry['path']}: missing")
    elif path.stat().st_size != entry["size"]:
        differences.append(f"{entry['path']}: {path.stat().st_size:,} bytes, the manifest says {entry['size']:,}")
    elif (actual := sha256_of(path)) != entry["sha256"]:
        differences.append(f"{entry['path']}: sha256 {actual}, the manifest says {entry['sha256']}")
    else:
        return True
    return False


def _compare_with_database(conn: psycopg.Connection, folder: Path, entry: dict[str, Any],
                           sources: dict[str, dem.DemFile], differences: list[str]) -> None:
    found = _COMPARE[entry["format"]](conn, folder / entry["path"], entry, sources)
    differences += [f"{entry['path']}: {difference}" for difference in found]


def _table_differs(conn: psycopg.Connection, path: Path, entry: dict[str, Any], _: dict) -> list[str]:
    table = _TABLES[entry["table"]]
    in_table, in_file = vector.table_checksum(conn, table), vector.file_checksum(path, table)
    if in_table == in_file:
        return []
    return [f"{in_file[0]:,} rows, checksum {in_file[1]}; the table {table.fullname} has {in_table[0]:,} rows, "
            f"checksum {in_table[1]}"]


def _part_differs(conn: psycopg.Connection, path: Path, entry: dict[str, Any], _: dict) -> list[str]:
    ids = tuple(entry["ids"])
    in_table = geojson.rows_in(conn, _TABLES[entry["table"]], ids)
    return [] if in_table == entry["rows"] else \
        [f"{entry['rows']:,} rows; the table {entry['table']} has {in_table:,} with ids {ids[0]}..{ids[1]}"]


def _flatgeobuf_differs(conn: psycopg.Connection, path: Path, entry: dict[str, Any], _: dict) -> list[str]:
    import pyogrio  # the `export` extra; a folder with a FlatGeobuf file was written with it

    table = _TABLES[entry["table"]]
    in_table = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(identifier(table.fullname))).fetchone()[0]
    in_file = pyogrio.read_info(path)["features"]
    return [] if in_file == in_table else [f"{in_file:,} features; the table {table.fullname} has {in_table:,} rows"]


def _vrt_differs(conn: psycopg.Connection, path: Path, entry: dict[str, Any],
                 sources: dict[str, dem.DemFile]) -> list[str]:
    return [] if path.read_text() == dem.vrt_text(list(sources.values())) else \
        [f"not the mosaic of dem_us's {len(sources)} files (the VRT `ingest export` writes for them)"]


def _cog_differs(conn: psycopg.Connection, path: Path, entry: dict[str, Any],
                 sources: dict[str, dem.DemFile]) -> list[str]:
    source = sources.get(entry["source"])
    if source is None:
        return [f"dem_us has no tiles of {entry['source']}"]
    try:
        in_file = dem.cog_digests(path, source)
    except ValueError as error:
        return [str(error)]
    in_tiles = dem.tile_digests(conn, source)
    if in_file != in_tiles:
        index = min(i for i in set(in_file) | set(in_tiles) if in_file.get(i) != in_tiles.get(i))
        col, row, _, _ = list(source.grid.grid.tiles())[index]
        return [f"the pixels of the tile at pixel ({col}, {row}) differ from its tile in dem_us "
                f"({sum(in_file.get(i) != in_tiles.get(i) for i in in_tiles)} of {len(in_tiles)} tiles differ)"]
    if dem.pixel_checksum(in_file) != entry["pixel_checksum"]:
        return [f"pixel checksum {dem.pixel_checksum(in_file)}, equal to the tiles', the manifest says "
                f"{entry['pixel_checksum']}"]
    return []


_COMPARE = {"geoparquet": _table_differs, "geojson": _part_differs, "flatgeobuf": _flatgeobuf_differs,
            "vrt": _vrt_differs, "cog": _cog_differs}
