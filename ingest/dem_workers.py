"""Encoder processes for `ingest dem`: read and encode files in parallel, hand the tiles over in file order.

Files are dealt round-robin to N processes. Each streams its current file, one band row of tiles at a
time, through its own bounded queue, and the writer reads the queues in file order. So memory stays
bounded (QUEUE_ROWS rows of about 2 MB per process) however many and large the files are, nothing is
copied whole between processes, and the writer starts on a file as soon as its first row is encoded.
Processes rather than threads because reading, numpy slicing and WKB packing hold the GIL. They are
forked (on Linux) when the load starts, before the parent opens any dataset or connection, so they
cost no interpreter start-up; elsewhere they are spawned.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from ingest.dem_tiles import BadRaster, Grid, TileRow, encode_rows, file_checksum

QUEUE_ROWS = 4


class FileStream:
    """The encoded rows of one file as they arrive; afterwards its checksum and skipped tiles."""

    def __init__(self, results: multiprocessing.Queue) -> None:
        self._results = results
        self.finished = False
        self.checksum = ""
        self.skipped: list[int] = []

    def rows(self) -> Iterator[TileRow]:
        """Yields every row; raises BadRaster if the worker could not read the file."""
        while not self.finished:
            kind, *payload = self._results.get()
            if kind == "row":
                yield payload[0]
                continue
            self.finished = True
            if kind == "error":
                raise BadRaster(payload[0])
            self.checksum, self.skipped = payload

    def drain(self) -> None:
        """Consume what is left of this file, so the worker's queue is at the next one."""
        try:
            for _ in self.rows():
                pass
        except BadRaster:
            pass


class EncoderPool:
    def __init__(self, workers: int) -> None:
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self._jobs = [context.Queue() for _ in range(workers)]
        self._results = [context.Queue(maxsize=QUEUE_ROWS) for _ in range(workers)]
        self._processes = [
            context.Process(target=_work, args=(jobs, results), daemon=True, name=f"ingest-dem-encoder-{n}")
            for n, (jobs, results) in enumerate(zip(self._jobs, self._results, strict=True))
        ]
        for process in self._processes:
            process.start()

    def streams(self, files: list[tuple[Path, Grid]]) -> Iterator[FileStream]:
        """A FileStream per file, in the given order; each must be read or drained before the next."""
        for number, job in enumerate(files):
            self._jobs[number % len(self._jobs)].put(job)
        for number in range(len(files)):
            yield FileStream(self._results[number % len(self._results)])

    def close(self) -> None:
        for process in self._processes:
            process.terminate()  # mid-file workers may be blocked on a full queue; nothing of theirs persists
        for process in self._processes:
            process.join()

    def __enter__(self) -> EncoderPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _work(jobs: multiprocessing.Queue, results: multiprocessing.Queue) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    for path, grid in iter(jobs.get, None):
        try:
            checksum = file_checksum(path)
            skipped: list[int] = []
            for row in encode_rows(path, grid):
                skipped += row.skipped
                results.put(("row", row))
            results.put(("done", checksum, skipped))
        except BadRaster as error:
            results.put(("error", str(error)))
        except OSError as error:
            results.put(("error", f"{path}: cannot read ({error.strerror or error})"))


def _die_with_parent() -> None:
    """A killed loader must not leave encoders behind (Linux: PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
