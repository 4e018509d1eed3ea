"""The report files, one table of formats (option -> renderer), and how they are written: to a temporary name
beside the target and then renamed, so that a report is never half written."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from gsqa_core.errors import GsqaError
from reproduce.reports import csv_report, html_report, json_report, junit_report
from reproduce.reports.model import Report

# the option naming a report file (its parameter in reproduce/cli.py) -> the renderer of its format
FORMATS: dict[str, Callable[[Report], str]] = {"json_out": json_report.render, "csv_out": csv_report.render,
                                                "junit": junit_report.render, "html": html_report.render}


def check_writable(paths: Iterable[Path | None]) -> None:
    """Refuse before a run the output files its end could not write (a run can take hours)."""
    for path in filter(None, paths):
        folder = Path(path).resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise GsqaError(f"cannot write {path}: folder {folder} does not exist or is not writable")


def write(report: Report, paths: dict[str, Path | None]) -> None:
    """Each report file asked for (a FORMATS name -> its path, or None)."""
    for name, path in paths.items():
        if path:
            write_atomically(path, FORMATS[name](report))


def write_atomically(path: Path, text: str) -> None:
    """Write through a temporary file and a rename; the file gets the permissions a new file gets under the
    umask (0644 usually), not the temporary file's 0600."""
    path = Path(path)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent or ".", prefix=f".{path.name}.",
                                     delete=False) as handle:
        handle.write(text)
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(handle.name, 0o666 & ~umask)
    os.replace(handle.name, path)
