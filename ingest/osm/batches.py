"""What both readers (GeoJSON files, PBF extracts) hand the loader: per source, Batch items of binary COPY rows
of about BATCH_BYTES, each counting its features and the features skipped; SourceError when the whole source
cannot be loaded. The native PBF reader makes the same batches in C++, with these bounds (pbf/native.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

BATCH_BYTES = 1 << 20
MAX_REPORTED_PER_JOB = 1000  # skipped features are counted without limit; their details up to this


class SourceError(Exception):
    """The whole source (a GeoJSON file, or what one PBF reader makes of an extract) cannot be loaded; the
    message names the file and what was expected."""


@dataclass
class Batch:
    data: bytes  # binary COPY tuples, no header
    rows: int
    features: int
    skipped: list[tuple[int, int, str]] = field(default_factory=list)  # (feature in job, offset, reason)
    skipped_count: int = 0


class Batcher:
    """Collects encoded rows and skipped features into Batch items. `add` runs once per feature of a 53 GB
    load: it only appends; the counts a Batch carries are taken with it."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []  # a row each, or (absorb) many
        self.rows = 0
        self.size = 0
        self.features = 0  # in all batches so far
        self.taken = 0  # features in the batches already taken
        self.skipped: list[tuple[int, int, str]] = []
        self.skipped_count = 0

    def add(self, rows: list[bytes]) -> None:
        self.features += 1
        self.parts += rows
        self.rows += len(rows)
        self.size += sum(map(len, rows))

    def absorb(self, data: bytes, rows: int, features: int) -> None:
        """What the native encoder made of some features: their rows' data, none of them skipped."""
        self.parts.append(data)
        self.rows += rows
        self.size += len(data)
        self.features += features

    def pass_over(self) -> None:
        """A feature that yields no row."""
        self.features += 1

    def skip(self, offset: int, reason: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < MAX_REPORTED_PER_JOB:
            self.skipped.append((self.features, offset, reason))
        self.features += 1

    def full(self) -> bool:
        return self.size >= BATCH_BYTES

    def take(self) -> Batch:
        batch = Batch(b"".join(self.parts), self.rows, self.features - self.taken, self.skipped, self.skipped_count)
        self.parts, self.rows, self.size, self.taken, self.skipped, self.skipped_count = [], 0, 0, self.features, [], 0
        return batch
