"""Checks before a PBF load or export starts: each input is a whole, readable OpenStreetMap PBF file, the
extracts' names keep their sources apart, and --bbox reaches at least one of them. One line for the first
problem, before anything is read or written."""

from __future__ import annotations

import os
from pathlib import Path

from gsqa_core.errors import GsqaError
from ingest.osm.pbf.native import native_reader
from ingest.osm.pbf.sources import source_name

PBF_MAGIC = b"OSMHeader"


def all_pbf(sources: list[Path]) -> bool:
    """Are the sources PBF extracts (by content, or by a .pbf name: the checks then refuse a file that is
    not one, with its reason)? False for one folder of GeoJSON layers; several folders are refused."""
    if any(is_pbf(source) or source.name.endswith(".pbf") for source in sources):
        return True
    if len(sources) == 1:
        return False
    raise GsqaError("give one folder of GeoJSON layers, or one or more OpenStreetMap PBF extracts")


def is_pbf(path: Path) -> bool:
    """An OSM PBF file: its first blob header names the OSMHeader block (whatever the file is called)."""
    try:
        with open(path, "rb") as handle:
            return PBF_MAGIC in handle.read(64)
    except OSError:
        return False


def check_inputs(paths: list[Path], bbox: tuple[float, float, float, float] | None) -> None:
    """One line for the first input that cannot be read whole, or a box none of the extracts reach."""
    for path in paths:
        if not path.is_file():
            raise GsqaError(f"{path}: no such file")
        if path.stat().st_size == 0:
            raise GsqaError(f"{path}: empty file, expected an OpenStreetMap PBF extract")
        if not is_pbf(path):
            raise GsqaError(f"{path}: not an OpenStreetMap PBF file (no OSMHeader block at its start)")
        try:
            _header_box(path)
        except RuntimeError as error:
            raise GsqaError(f"{path}: not a readable OpenStreetMap PBF file ({error})") from None
        _check_blobs(path)
    names = [path.name for path in paths]
    if len(set(names)) != len(names):
        raise GsqaError("two input extracts have the same file name; their layers would be confused")
    stems = [source_name(path, "nodes").removesuffix(".1-nodes.geojson") for path in paths]
    for stem in stems:
        longer = next((other for other in stems if other.startswith(stem + ".")), None)
        if longer:  # "us" and "us.2": the sources of the two would interleave in name order
            raise GsqaError(f"the extract names {stem!r} and {longer!r}: one continues the other after a dot, so "
                            "their layer sources would not sort apart; rename one")
    if bbox is not None and not any(_box_reaches(path, bbox) for path in paths):
        raise GsqaError(f"--bbox {','.join(map(str, bbox))} holds none of the features of the extracts "
                        f"(they cover {'; '.join(extent(path) for path in paths)})")


def _check_blobs(path: Path) -> None:
    """Walk the file's blob headers (a seek per block, under a second for the US): a download cut short
    ends inside a block, and is refused here rather than after hours of loading."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        while (position := handle.tell()) < size:
            head = handle.read(4)
            length = int.from_bytes(head, "big") if len(head) == 4 else -1
            header = handle.read(length) if 0 < length < 64 * 1024 else b""
            data_size = _blob_data_size(header) if len(header) == length else None
            if data_size is None or position + 4 + length + data_size > size:
                raise GsqaError(f"{path}: truncated or damaged at byte {position:,} of {size:,} (an incomplete "
                                "download?); expected a whole OpenStreetMap PBF file")
            handle.seek(data_size, os.SEEK_CUR)


def _blob_data_size(header: bytes) -> int | None:
    """The `datasize` field (3) of a BlobHeader protobuf message; None if the bytes are not one."""
    position = 0
    try:
        while position < len(header):
            key, position = _varint(header, position)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, position = _varint(header, position)
                if number == 3:
                    return value
            elif wire == 2:
                length, position = _varint(header, position)
                position += length
            else:
                return None
    except IndexError:
        return None
    return None


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _header_box(path: Path) -> tuple[float, float, float, float] | None:
    """The header's bounding box, W,S,E,N (None: it has none); RuntimeError when the header cannot be read. Read
    by the native reader where it is built: pyosmium's import is a tenth of a small load's start-up."""
    native = native_reader()
    if native is not None:
        box = native.header_box(str(path))
        return None if box is None else tuple(box)
    import osmium

    header = osmium.io.Reader(osmium.io.File(str(path), "pbf"), osmium.osm.NOTHING).header().box()
    if not header.valid():
        return None
    return header.bottom_left.lon, header.bottom_left.lat, header.top_right.lon, header.top_right.lat


def _box_reaches(path: Path, bbox: tuple[float, float, float, float]) -> bool:
    """Does the extract's header box overlap W,S,E,N? (No box in the header: assume it does.)"""
    box = _header_box(path)
    if box is None:
        return True
    return box[0] <= bbox[2] and box[2] >= bbox[0] and box[1] <= bbox[3] and box[3] >= bbox[1]


def extent(path: Path) -> str:
    """The extract's bounding box as its header gives it, W,S,E,N."""
    box = _header_box(path)
    if box is None:
        return f"{path.name}: no bounding box in its header"
    return f"{path.name}: {','.join(f'{value:.4f}' for value in box)}"
