"""--resume FILE: one JSON line per finished question after a header naming what the results depend on.

`reproduce verify` and `reproduce score` keep their results (results.Result, values clipped for reports),
`reproduce rebase` what each SQL returned in full (the new answers); each command's file names its format, so
none takes another's.
The header records the selection (config, templates, ids), the dataset checksum, the database fingerprint (row
counts per table) and the timeout.
A later run with the same file skips the questions already in it, and refuses (unless forced) when the
selection, the dataset, the database or the timeout differ, because mixing results of two setups would
mislead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from gsqa_core.errors import GsqaError

FORMAT = "gsqa-reproduce-resume/1"


class ResumeFile:
    """`entry` reads a line back (an object with `as_dict()`), `key` says which question it is (its `id`);
    `format` and `command` name the file."""

    def __init__(self, path: Path, header: dict[str, Any], force: bool,
                 entry: Callable[[dict[str, Any]], Any], format: str = FORMAT,
                 command: str = "reproduce verify", key: Callable[[Any], Any] = lambda entry: entry.id) -> None:
        self.path, self.entry, self.format, self.command, self.key = path, entry, format, command, key
        self.done: dict[str, Any] = {}
        existing = self._read() if path.exists() and path.stat().st_size else None
        if existing is not None:
            self._check(existing, header, force)
            drop_cut_line(path)
        self._file: IO[str] = path.open("a", encoding="utf-8")
        if existing is None:
            self._write({"format": self.format, **header})

    def _read(self) -> dict[str, Any]:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        try:
            header = json.loads(lines[0])
        except ValueError:
            header = {}
        if header.get("format") != self.format:
            raise GsqaError(f"--resume {self.path}: not a resume file of `{self.command}` (first line)")
        for number, line in enumerate(lines[1:], start=2):
            try:
                result = self.entry(json.loads(line))
            except (ValueError, KeyError):
                if number == len(lines):
                    break  # the last line was cut short by a kill: that question runs again
                raise GsqaError(f"--resume {self.path}:{number}: not a result line") from None
            self.done[self.key(result)] = result
        return header

    def _check(self, existing: dict[str, Any], header: dict[str, Any], force: bool) -> None:
        # A key an older file does not record is not held against it.
        differ = [key for key in header if key in existing and existing[key] != header[key]]
        if differ and not force:
            raise GsqaError(
                f"--resume {self.path} was written for another {', '.join(differ)} "
                f"({'; '.join(f'{k}: {existing.get(k)} now {header[k]}' for k in differ)}). "
                "Use a new file, or --force to reuse its results anyway."
            )

    def _write(self, data: dict[str, Any]) -> None:
        self._file.write(json.dumps(data, default=str) + "\n")
        self._file.flush()

    def add(self, result: Any) -> None:
        self._write(result.as_dict())

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()


def drop_cut_line(path: Path) -> None:
    """A kill can leave the last line without its end: cut it off, or the next line would be appended to it
    (its question runs again)."""
    with path.open("rb+") as handle:
        data = handle.read()
        if not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)
