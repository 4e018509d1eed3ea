"""The dataset card of a snapshot: README.md in its folder, the page the Hugging Face hub shows (what the
snapshot is, how to restore it, the server build it was made with and which servers take it, its tables).
"""

from __future__ import annotations

from typing import Any

# What the card says of each format: what it is, how to restore it, which servers take it.
_HOW = {
    "dump": {
        "what": "a directory-format dump",
        "restore": "make db FROM=hf:OWNER/NAME          # into the Docker database\n"
                   "ingest snapshot restore hf:OWNER/NAME --dsn postgresql://postgres@localhost/gsqa   # your server",
        "versions": "A server with another PostgreSQL major version, PostGIS, GEOS or PROJ may give other last digits "
                    "for\ngeography areas and lengths, ST_MakeValid output and KNN tie order: restore refuses it "
                    "unless\n`--allow-version-change`.",
    },
    "physical": {
        "what": "a cold copy of the server's data directory (tar, zstd-compressed)",
        "restore": "make db FROM=hf:OWNER/NAME          # replaces the Docker database's data directory",
        "versions": "It runs only on the same server build (the image above): restore refuses any other. For a "
                    "server of\nyour own, restore the dump snapshot of the same database.",
    },
}


def card(manifest: dict[str, Any]) -> str:
    """The dataset card (README.md) of a snapshot."""
    server = manifest["server"]
    size = sum(part["size"] for part in manifest["parts"])
    tables = "\n".join(f"| `{table}` | {log['files']:,} | {log['rows'] or 0:,} |"
                       for table, log in manifest["load_log"].items())
    passed = sum(result["ok"] for result in manifest["check"])
    return f"""---
license: odbl
pretty_name: GS-QA2 reference database (snapshot)
tags: [postgis, geospatial, text-to-sql]
---
# GS-QA2 reference database, snapshot of {manifest['created']}

A PostgreSQL {server['server_version']} + PostGIS {server['postgis']} database built by
[gsqa-refdb](https://github.com/) (`ingest all`) and checked (`ingest check`: {passed} of
{len(manifest['check'])} checks passed), as {_HOW[manifest['format']]['what']} in {len(manifest['parts'])} parts
({size / 1e9:.2f} GB); `manifest.json` lists every part's sha256.

Restore it (downloads, checks every part, restores, sets the read-only role `gsqa_reader`'s password and runs
`ingest check`):

```sh
{_HOW[manifest['format']]['restore']}
```

Built with: PostgreSQL {server['server_build']}; PostGIS {server['postgis']}; GEOS {server['geos']};
PROJ {server['proj']}; {server['gdal']}; collation {server['collation']}; image {manifest['image'] or 'unknown'}.
{_HOW[manifest['format']]['versions']}

| table | source files | rows |
|---|---|---|
{tables}

Data: OpenStreetMap contributors (ODbL), NASA/METI ASTER GDEM v3.
"""
