"""Reading osmx GeoJSON layer files in parallel pieces: FeatureCollection -> batches of binary COPY rows.

Two layouts, told apart by the start of a file (`sniff`):

- lines (the fast path): the `features` array holds one feature per line, as extractors write them.
  The file is cut at line starts into byte ranges of about RANGE_BYTES that workers parse at the same
  time, a line at a time: by the native encoder (_lines.cpp, C++ with simdjson; native.py) where it is
  built, which hands the few lines it does not take without a doubt to the Python path, else with
  pysimdjson (no Python object per coordinate; features.py): the same rows either way. A malformed
  line is one skipped feature: the next line starts afresh. The range holding the end of the file must
  find the closing `]` of the array, or the file is truncated. Most pois lines, many small features, are
  rejected by a byte-level prefilter (rules.may_yield_rows) before any JSON parse.
- stream: anything else that is JSON (pretty-printed, one single line, ...): one worker reads the whole
  file with ijson's C backend, feature by feature, in constant memory. A JSON error here cannot be
  stepped over, so it fails the file.

Every job yields Batch items (batches.py) of about BATCH_BYTES, each counting its features; an input problem that
spoils the whole file (truncated, not JSON, unreadable) raises SourceError.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson
import simdjson

from ingest.osm.batches import Batch, Batcher, SourceError
from ingest.osm.features import encoder
from ingest.osm.native import line_encoder
from ingest.osm.rules import LAYERS, BadFeature, may_yield_rows

SNIFF_BYTES = 64 << 10  # where the `features` array starts
MAX_LINE_BYTES = 256 << 20  # a first line longer than this is not the one-feature-per-line layout
RANGE_BYTES = 8 << 20
_CLOSE = ord("]")
_STRIP = b" \t\r,"  # around a feature on its line (the separating comma); _lines.cpp strips the same
_FEATURES_START = re.compile(rb'"features"\s*:\s*\[')


@dataclass(frozen=True)
class Job:
    """A piece of a layer file: bytes [start, end) of a lines file, or a whole stream file."""

    path: str
    source_name: str
    layer: str
    layout: str
    start: int = 0
    end: int = 0
    last: bool = True
    bbox: tuple[float, float, float, float] | None = None  # keep only features whose envelope overlaps it
    native: bool = True  # the native encoder where it is built (False: the Python path, as where it is not)


def sniff(path: Path) -> tuple[str, int]:
    """("lines", offset where the features array's content starts) or ("stream", 0): lines when the first
    feature stands complete on a line of its own (after the `[`, or on the next line)."""
    with open(path, "rb") as handle:
        match = _FEATURES_START.search(handle.read(SNIFF_BYTES))
        if not match:
            return "stream", 0
        handle.seek(match.end())
        for _ in range(2):
            first = handle.readline(MAX_LINE_BYTES).strip(b" \t\r\n,")
            if first:
                break
    return ("lines", match.end()) if first.startswith(b"{") and _parses(first) else ("stream", 0)


def _parses(text: bytes) -> bool:
    try:
        simdjson.Parser().parse(text)
    except ValueError:
        return False
    return True


def jobs_for(path: Path, layer: str, range_bytes: int | None = None,
             bbox: tuple[float, float, float, float] | None = None) -> list[Job]:
    """The file's jobs: line-aligned ranges for the lines layout, one job otherwise."""
    range_bytes = range_bytes or RANGE_BYTES
    layout, body = sniff(path)
    size = path.stat().st_size
    if layout == "stream":
        return [Job(str(path), path.name, layer, "stream", 0, size, bbox=bbox)]
    starts = [body]
    with open(path, "rb") as handle:
        while starts[-1] + range_bytes < size:
            handle.seek(starts[-1] + range_bytes)
            handle.readline()  # to the start of the next line
            if handle.tell() >= size:
                break
            starts.append(handle.tell())
    ends = starts[1:] + [size]
    return [Job(str(path), path.name, layer, "lines", start, end, end == size, bbox)
            for start, end in zip(starts, ends, strict=True)]


def parse_job(job: Job) -> Generator[Batch, None, None]:
    """The pool's work function: the job's batches (the last one may be empty)."""
    try:
        reader = _read_lines if job.layout == "lines" else _read_stream
        batcher = Batcher()
        yield from reader(job, batcher)
        yield batcher.take()
    except OSError as error:
        raise SourceError(f"{job.path}: cannot read ({error.strerror or error})") from None


def _encode_safely(encode: Any, feature: Any, offset: int, batcher: Batcher) -> None:
    try:
        batcher.add(encode(feature, offset))
    except BadFeature as error:
        batcher.skip(offset, str(error))


class _Lines:
    """The lines of a piece of a lines file, one at a time, as the Python path takes them: the end of the
    features array, the pois prefilter, then the feature. The native encoder (_lines.cpp) takes the same lines
    the same way and hands this the ones it declines."""

    def __init__(self, job: Job, batcher: Batcher) -> None:
        self.layer, self.batcher = LAYERS[job.layer], batcher
        self.encode, self.parse = encoder(self.layer, job.source_name, job.bbox), simdjson.Parser().parse
        self.closed, self.last = False, job.start  # past the features array; where the last line seen starts

    def take(self, text: bytes, here: int) -> None:
        """One stripped, non-empty line before the end of the features array, starting at byte `here`."""
        self.last, batcher = here, self.batcher
        if text[0] == _CLOSE:
            self.closed = True  # the end of the features array; the rest is the collection's tail
        elif self.layer.in_passes and not may_yield_rows(self.layer, text):
            batcher.pass_over()
            self.closed = text.endswith(b"]}")
        else:
            try:
                batcher.add(self.encode(self.parse(text), here))
            except BadFeature as error:
                batcher.skip(here, str(error))
            except ValueError as error:  # simdjson: not valid JSON (or not UTF-8) on its own
                reason = " ".join(str(error).split())
                self.closed = _last_feature(self.parse, self.encode, text, here, batcher, reason)
            except RuntimeError as error:  # pysimdjson: a number it cannot hold (an integer beyond 64 bits)
                batcher.skip(here, f"not readable ({' '.join(str(error).split())})")


def _read_lines(job: Job, batcher: Batcher) -> Iterator[Batch]:
    """The features of a piece of a lines file. The piece holds whole lines (jobs_for cuts at line starts),
    so it is read at once; the native encoder takes it where it is built, else a loop here that runs once per
    feature of 53 GB."""
    lines = _Lines(job, batcher)
    with open(job.path, "rb") as handle:
        handle.seek(job.start)
        piece = handle.read(job.end - job.start)
    native = line_encoder(lines.layer, job.source_name, job.bbox) if job.native else None
    yield from (_encoded_natively(native, piece, job.start, lines) if native else _encoded(piece, job.start, lines))
    if job.last and not lines.closed:
        raise SourceError(f"{job.path}: truncated: its {job.end:,} bytes end inside the features array (the last "
                          f"line starts at byte {lines.last:,}); expected a complete GeoJSON FeatureCollection")


def _encoded(piece: bytes, start: int, lines: _Lines) -> Iterator[Batch]:
    offset, batcher = start, lines.batcher
    for line in piece.split(b"\n"):
        here, offset = offset, offset + len(line) + 1
        text = line.strip(_STRIP)
        if text and not lines.closed:
            lines.take(text, here)
            if batcher.full():
                yield batcher.take()


def _encoded_natively(native: Any, piece: bytes, start: int, lines: _Lines) -> Iterator[Batch]:
    """The native encoder's run of lines up to a full batch, the end of the array, or a line it declines,
    which the Python path then takes: the same batches, line for line."""
    position, batcher = 0, lines.batcher
    while position < len(piece) and not lines.closed:
        position, data, rows, features, last, closed, declined, text_start, text_end = native.encode(
            piece, position, start, batcher.size)
        batcher.absorb(data, rows, features)
        lines.closed, lines.last = closed, last if last >= 0 else lines.last
        if declined >= 0:
            lines.take(piece[text_start:text_end], start + declined)
        if batcher.full():
            yield batcher.take()


def _last_feature(parse: Any, encode: Any, text: bytes, offset: int, batcher: Batcher, reason: str) -> bool:
    """A line that is not JSON on its own: the last feature with the end of the collection (`{...}]}`),
    then True; otherwise a skipped feature."""
    closing = text.rfind(b"]")
    if closing > 0 and text.endswith(b"}"):
        try:
            feature = parse(text[:closing].rstrip())
        except ValueError:
            pass
        else:
            _encode_safely(encode, feature, offset, batcher)
            return True
    batcher.skip(offset, f"not valid JSON ({reason})")
    return False


def _read_stream(job: Job, batcher: Batcher) -> Iterator[Batch]:
    encode = encoder(LAYERS[job.layer], job.source_name, job.bbox)
    with open(job.path, "rb") as handle:
        try:
            for index, feature in enumerate(ijson.items(handle, "features.item", use_float=True)):
                _encode_safely(encode, feature, index, batcher)
                if batcher.full():
                    yield batcher.take()
        except (ijson.JSONError, UnicodeDecodeError) as error:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise SourceError(f"{job.path}: not valid JSON after {batcher.features} features ({first_line}); "
                              "expected a GeoJSON FeatureCollection") from None
    if not batcher.features and not _has_features_array(job.path):
        raise SourceError(f"{job.path}: no `features` array; expected a GeoJSON FeatureCollection")


def _has_features_array(path: str) -> bool:
    with open(path, "rb") as handle:
        return any(prefix == "features" and event == "start_array" for prefix, event, _ in ijson.parse(handle))


def layer_files(folder: Path) -> list[Path]:
    """The *.geojson files of a layer folder, sorted by name (loader 1 took glob()'s file system order)."""
    return sorted((folder / name for name in os.listdir(folder) if name.endswith(".geojson")),
                  key=lambda path: path.name)
