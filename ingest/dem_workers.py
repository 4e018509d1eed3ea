"""Encoder processes for `ingest dem`: read and encode files in parallel, hand the tiles over in file order.

Each file is one job of an OrderedPool (ordered_pool.py): a worker streams the file one band row of tiles
at a time (about 2 MB), so memory stays bounded however many and large the files are, and the writer
starts on a file as soon as its first row is encoded. The job's result is the file's checksum and the
tiles it skipped (all NODATA).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

from ingest.dem_tiles import BadRaster, Grid, TileRow, encode_rows
from ingest.load_state import file_checksum
from ingest.ordered_pool import OrderedPool


class EncoderPool(OrderedPool):
    def __init__(self, workers: int) -> None:
        super().__init__(workers, _encode_file, BadRaster, name="ingest-dem-encoder")


def _encode_file(job: tuple[Path, Grid]) -> Generator[TileRow, None, tuple[str, list[int]]]:
    path, grid = job
    try:
        checksum = file_checksum(path)
        skipped: list[int] = []
        for row in encode_rows(path, grid):
            skipped += row.skipped
            yield row
    except OSError as error:
        raise BadRaster(f"{path}: cannot read ({error.strerror or error})") from None
    return checksum, skipped

