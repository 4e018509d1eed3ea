"""What `ingest osm` reports (load.py fills them): per table, the files loaded, left as they were and failed,
the rows written and the features read, and the features skipped (all counted, the first REPORTED_SKIPS in
detail); for the whole load its warnings, time and exit code. ingest/report.py prints them."""

from __future__ import annotations

from dataclasses import dataclass, field

from gsqa_core.errors import EXIT_OK, EXIT_SOME_FAILED

REPORTED_SKIPS = 10_000  # skipped features listed in the report (all are counted)


@dataclass
class LayerReport:
    table: str
    files: int = 0
    loaded: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    rows_written: int = 0
    features_read: int = 0
    skipped: list[dict] = field(default_factory=list)
    skipped_count: int = 0
    ready_seconds: float | None = None  # building the index and analyzing, when this run did
    errors_said: set[str] = field(default_factory=set, repr=False, compare=False)  # the load's (OsmLoadReport)

    def add_skipped(self, count: int, listed: list[dict]) -> None:
        self.skipped_count += count
        self.skipped += listed[:max(0, REPORTED_SKIPS - len(self.skipped))]

    def as_json(self) -> dict:
        return {"table": self.table, "files": self.files, "loaded": self.loaded, "unchanged": self.unchanged,
                "failed": self.failed, "rows_written": self.rows_written, "features_read": self.features_read,
                "skipped_count": self.skipped_count, "skipped": self.skipped,
                "indexed": self.ready_seconds is not None,
                "index_seconds": None if self.ready_seconds is None else round(self.ready_seconds, 3)}


@dataclass
class OsmLoadReport:
    source: str
    layers: dict[str, LayerReport] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Errors already on stderr, one set for all layers: the sources of one unreadable extract fail alike.
    errors_said: set[str] = field(default_factory=set, repr=False, compare=False)

    def add_layer(self, name: str, table: str, files: int) -> LayerReport:
        self.layers[name] = LayerReport(table=table, files=files, errors_said=self.errors_said)
        return self.layers[name]

    @property
    def exit_code(self) -> int:
        troubled = any(layer.failed or layer.skipped_count for layer in self.layers.values())
        return EXIT_SOME_FAILED if troubled else EXIT_OK

    def as_json(self) -> dict:
        return {"source": self.source, "layers": {name: layer.as_json() for name, layer in self.layers.items()},
                "warnings": self.warnings, "seconds": round(self.seconds, 3)}


def describe_skip(entry: dict) -> str:
    """A skipped feature in one line: its file, its place in it and why."""
    where = f"feature {entry['feature']}" + (f" (byte {entry['byte']})" if entry.get("byte") is not None else "")
    return f"{entry['file']}: {where}: {entry['reason']}"
