"""The demo database of README's "Try it in two minutes", built as a user builds it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from load_helpers import BIN, ingest


def build_demo(dsn: str, folder: Path, *options: str) -> None:
    """`ingest demo-data FOLDER`, then `ingest all FOLDER --offline OPTIONS...` into `dsn`."""
    subprocess.run([BIN / "ingest", "demo-data", folder], check=True, capture_output=True, timeout=300)
    built = ingest("all", str(folder), "--offline", "--dsn", dsn, *options)
    assert built.returncode == 0, built.stderr
