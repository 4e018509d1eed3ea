"""What both snapshot formats share: the folder and its manifest, the checks of the parts against it,
the server's versions and what their differences may change in answers, the database's comment naming the
snapshot it was restored from (origin_of, set_origin; `ingest status` shows it), and the target as the
PostgreSQL tools' --dbname.

A snapshot folder holds

    manifest.json   what it is: format, sha256 and size of every part, the server's PostgreSQL, PostGIS,
                    GEOS, PROJ and GDAL versions and collation, the image, the load and stage log summaries,
                    the `ingest check` report and, with --verify, a `reproduce verify --json-out` summary
    README.md       the dataset card (the hub shows it; card.py)
    data/           the parts: the files of a directory-format dump (`pg_dump -Fd`); a table's data file
                    larger than PART_SIZE is cut into NAME.part000, NAME.part001, ...; or, in the physical
                    format, a cold copy of the cluster's data directory, a zstd-compressed tar cut into
                    cluster.tar.zst.part000, ... (physical.py, which has its create and restore)

The manifest is written last (create.py): a folder with a manifest is complete. Restore checks every part's
size and sha256 against the manifest (check_parts) before it touches the database. docs/SNAPSHOTS.md has the
why.
"""

from __future__ import annotations

import hashlib
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from gsqa_core.db import resolve_dsn
from gsqa_core.errors import GsqaError

FORMATS = ("dump", "physical")
MANIFEST = "manifest.json"
CARD = "README.md"
DATA = "data"
WORK = ".work"
PART_SIZE = 2 * 1000**3  # a hub upload and a download resume part by part
SNAPSHOT_VERSION = 1
_PART = re.compile(r"(.+)\.part(\d{3})")
# What must match between the snapshot's server and the one restored into, and why answers may differ if not.
VERSION_KEYS = {
    "major": "the dump format and the planner (KNN tie order, plan-dependent row order)",
    "postgis": "geography areas and lengths, ST_MakeValid output",
    "geos": "ST_MakeValid, ST_Buffer and overlay results in the last digits",
    "proj": "ST_Transform and geography measurements in the last digits",
}
_COMMENT_KEY = "gsqa_snapshot"


# --- what the server is ------------------------------------------------------------------------------------


def server_versions(conn: psycopg.Connection) -> dict[str, Any]:
    """PostgreSQL, PostGIS, GEOS, PROJ and GDAL of the server, and the database's collation. PostGIS says
    them: in a database without it, it is created for the question and rolled back."""
    with conn.transaction(force_rollback=True):
        conn.execute("CREATE EXTENSION IF NOT EXISTS postgis; CREATE EXTENSION IF NOT EXISTS postgis_raster")
        row = conn.execute(
            "SELECT current_setting('server_version_num')::int / 10000, current_setting('server_version'), "
            "version(), postgis_lib_version(), postgis_geos_version(), postgis_proj_version(), postgis_gdal_version(), "
            "datcollate, datctype FROM pg_database WHERE datname = current_database()").fetchone()
    keys = ("major", "server_version", "server_build", "postgis", "geos", "proj", "gdal", "collation", "ctype")
    return dict(zip(keys, row, strict=True))


def version_differences(built: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """`name: snapshot X, server Y` for each of VERSION_KEYS that differs."""
    return [f"{key} {built.get(key)} in the snapshot, {here.get(key)} on this server"
            for key in VERSION_KEYS if str(built.get(key)) != str(here.get(key))]


# --- the manifest ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    path: str  # relative to the snapshot folder: data/NAME or data/NAME.partNNN
    size: int
    sha256: str

    @property
    def dump_file(self) -> str:
        """The file of the dump this part is (a piece of)."""
        name = Path(self.path).name
        match = _PART.fullmatch(name)
        return match[1] if match else name


def sha256_of(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        manifest["parts"] = [Part(**part) for part in manifest["parts"]]
    except FileNotFoundError:
        raise GsqaError(f"{path}: missing: not a snapshot folder, or its `ingest snapshot create` has not "
                        "finished (run it again)") from None
    except (ValueError, KeyError, TypeError) as error:
        raise GsqaError(f"{path}: not a snapshot manifest ({error.__class__.__name__}: {error})") from None
    if manifest.get("format") not in FORMATS:
        raise GsqaError(f"{path}: format {manifest.get('format')!r}, expected one of {', '.join(FORMATS)}")
    return manifest


def check_parts(folder: Path, parts: list[Part], jobs: int) -> None:
    """Every part present with the manifest's size and sha256; else one line naming the first bad part."""
    def problem(part: Part) -> str | None:
        local = folder / part.path
        if not local.is_file():
            return f"{part.path} is missing"
        if local.stat().st_size != part.size:
            return f"{part.path} has {local.stat().st_size:,} bytes, the manifest says {part.size:,}"
        actual = sha256_of(local)
        return None if actual == part.sha256 else f"{part.path} is damaged (sha256 {actual}, the manifest says " \
                                                  f"{part.sha256})"

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        problems = [found for found in pool.map(problem, parts) if found]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise GsqaError(f"snapshot {folder}: {problems[0]}{more}; nothing was restored")


# --- where the database's snapshot came from ---------------------------------------------------------------


def origin_of(conn: psycopg.Connection) -> dict[str, Any] | None:
    """What the database's comment says about the snapshot it was restored from, if anything."""
    comment = conn.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                           "WHERE datname = current_database()").fetchone()[0]
    try:
        return json.loads(comment)[_COMMENT_KEY] if comment else None
    except (ValueError, KeyError, TypeError):
        return None


def set_origin(conn: psycopg.Connection, origin: dict[str, Any]) -> None:
    conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(
        sql.Identifier(conn.info.dbname), sql.Literal(json.dumps({_COMMENT_KEY: origin}))))


# --- the external tools ------------------------------------------------------------------------------------


def dbname_args(dsn: str | None) -> list[str]:
    """The target as the --dbname of pg_dump, pg_restore and vacuumdb."""
    resolved = resolve_dsn(dsn)
    return [f"--dbname={resolved}"] if resolved else []  # "" leaves the target to libpq's PG* variables
