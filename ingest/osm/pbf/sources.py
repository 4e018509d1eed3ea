"""The sources of the PBF path and the readers' report. What one reader produces for one extract, one kind of
object (KINDS) and one layer is a "source" named `<extract stem>.<n>-<kind>.geojson` (source_name): with
--export-geojson it is that file in `<layer>/`, in a direct load a stream of binary COPY rows loaded under that
name, one transaction each (load.py). Both load in name order, so both give the same rows."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.osm.rules import AREAS, KIND_LAYERS, LAYERS, NODES, WAYS

FOLDERS = tuple(layer.folder for layer in LAYERS.values())  # the osmx layers, by folder
# The kinds of features, in the order a PBF file holds their objects (their sources are numbered so): of nodes
# (no node locations needed), of ways (lines, and closed ways' areas) and of relation areas (assembled from
# multipolygon and boundary relations).
KINDS = (NODES, WAYS, AREAS)
LISTED_BROKEN = 50


def source_name(path: Path, kind: str) -> str:
    """What one reader makes of one extract, for one layer: a file name in that layer's folder."""
    stem = path.name.removesuffix(".pbf").removesuffix(".osm")
    return f"{stem}.{KINDS.index(kind) + 1}-{kind}.geojson"


def kind_of(name: str) -> str:
    return name.removesuffix(".geojson").rsplit("-", 1)[1]


def layer_sources(paths: list[Path], layer: str) -> dict[str, Path]:
    """Source name -> extract, for every reader that serves the layer (folder name), in name order: the
    order they load in."""
    return dict(sorted((source_name(path, kind), path) for path in paths for kind in KINDS
                       if layer in KIND_LAYERS[kind]))


@dataclass
class PbfReport:
    sources: list[str]
    location_index: str = ""
    features: Counter = field(default_factory=Counter)  # layer -> features taken
    duplicates: int = 0  # objects skipped because an earlier extract had them
    broken: Counter = field(default_factory=Counter)  # node / way / relation -> objects that could not be built
    broken_listed: list[str] = field(default_factory=list)
    outside: int = 0  # features outside --bbox
    wanted_relations: set[int] = field(default_factory=set)  # multipolygon/boundary relations of the layers
    built_relations: set[int] = field(default_factory=set)  # ... and those osmium assembled
    failed: list[str] = field(default_factory=list)  # --export-geojson: why extracts were not read
    seconds: float = 0.0

    def merge(self, other: PbfReport) -> None:
        self.features += other.features
        self.duplicates += other.duplicates
        self.outside += other.outside
        self.wanted_relations |= other.wanted_relations
        self.built_relations |= other.built_relations
        for kind, count in other.broken.items():
            self.broken[kind] += count
        self.broken_listed = (self.broken_listed + other.broken_listed)[:LISTED_BROKEN]

    def merge_sent(self, part: PbfReport, layers: dict[str, set[str]]) -> None:
        """One extract's report (`layers`: kind -> the layers whose sources it sent); of an extract read only
        for the objects it claims, only the relations it assembled (a relation cut by a later extract may be
        whole in it)."""
        if any(layers.values()):
            self.merge(part)
        else:
            self.built_relations |= part.built_relations

    def note_broken(self, osm_type: str, osm_id: int, reason: str) -> None:
        self.broken[osm_type] += 1
        if len(self.broken_listed) < LISTED_BROKEN:
            self.broken_listed.append(f"{osm_type} {osm_id}: {reason}")

    def close_relations(self) -> None:
        """Relations of the layers that no extract could assemble (a relation cut by one extract may be
        whole in its neighbour, so this waits until every extract is read)."""
        for missing in sorted(self.wanted_relations - self.built_relations):
            self.note_broken("relation", missing, "its rings could not be assembled (broken, or cut by the extract)")
        self.wanted_relations, self.built_relations = set(), set()

    def as_json(self) -> dict[str, Any]:
        return {"sources": self.sources, "location_index": self.location_index, "features": dict(self.features),
                "duplicates": self.duplicates, "broken": dict(self.broken), "broken_listed": self.broken_listed,
                "outside_bbox": self.outside, "failed": self.failed, "seconds": round(self.seconds, 3)}


def unreadable(path: Path, error: Exception) -> str:
    return f"{path}: cannot be read to its end ({' '.join(str(error).split())}); expected a whole PBF file"
