"""The export's manifest (`export.json`) and the database it names.

    {"export_version": 1, "created": ..., "database": {...}, "formats": {...}, "files": [...]}

`database`: its identity (the sha256 of its load log: every source file's table, name, checksum and rows, so
two builds of the same sources, or a snapshot and its restore, are the same database), its name, the
PostgreSQL, PostGIS, GEOS, PROJ and GDAL versions, when `ingest check` last passed, and the snapshot it was
restored from, if it was. `formats`: GeoParquet's, Parquet's writer, GDAL's (the COG driver). `files`: every
file with its path in the folder, size, sha256 and what it holds (a table's rows; a DEM file's size in pixels,
tiles and pixel checksum). The manifest is written last, under a temporary name renamed: a folder with a
manifest is a finished export.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow

from gsqa_core.errors import GsqaError
from ingest.export.vector import GEOPARQUET_VERSION
from ingest.snapshot.manifest import origin_of, server_versions, sha256_of

MANIFEST = "export.json"
EXPORT_VERSION = 1


def identity(conn: psycopg.Connection) -> str:
    """The database's identity: the sha256 of its load log."""
    rows = conn.execute("SELECT target_table, source_name, source_checksum, rows_written FROM gsqa.load_log "
                        "ORDER BY target_table, source_name COLLATE \"C\"").fetchall()
    return hashlib.sha256("\n".join(" ".join(map(str, row)) for row in rows).encode()).hexdigest()


def describe_database(conn: psycopg.Connection) -> dict[str, Any]:
    checked = conn.execute("SELECT finished_at FROM gsqa.stage_log WHERE stage = 'check' AND state = 'done'"
                           ).fetchone()
    return {"identity": identity(conn), "name": conn.info.dbname, "server": server_versions(conn),
            "checked": checked[0].isoformat() if checked and checked[0] else None, "snapshot": origin_of(conn)}


def formats() -> dict[str, str]:
    import rasterio  # GDAL, loaded by the manifest at the end, not by a vector export's work

    return {"geoparquet": GEOPARQUET_VERSION, "parquet_writer": f"pyarrow {pyarrow.__version__}",
            "cog": f"GDAL {rasterio.__gdal_version__} COG driver", "vrt": f"GDAL {rasterio.__gdal_version__}"}


def file_entry(folder: Path, path: Path, **holds: Any) -> dict[str, Any]:
    """A file's manifest entry: its path in the folder, size, sha256 and what it holds."""
    return {"path": path.relative_to(folder).as_posix(), "size": path.stat().st_size, "sha256": sha256_of(path),
            **holds}


def write_manifest(folder: Path, database: dict[str, Any], files: list[dict[str, Any]]) -> dict[str, Any]:
    manifest = {"export_version": EXPORT_VERSION, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "database": database, "formats": formats(), "files": sorted(files, key=lambda entry: entry["path"])}
    scratch = folder / f"{MANIFEST}.partial"
    scratch.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(scratch, folder / MANIFEST)
    return manifest


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        manifest["database"]["identity"], manifest["files"]  # noqa: B018 - what every manifest has
    except FileNotFoundError:
        raise GsqaError(f"{path}: missing: not an export, or its `ingest export` has not finished (run it "
                        "again)") from None
    except (ValueError, KeyError, TypeError) as error:
        raise GsqaError(f"{path}: not an export manifest ({error.__class__.__name__}: {error})") from None
    return manifest
