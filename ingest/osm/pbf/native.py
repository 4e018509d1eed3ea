"""The native PBF reader (`_osmread.cpp`, libosmium, built at install where a compiler and libosmium's headers
are): a direct load's reader. It gives the same sources, rows and report as the pyosmium reader
(pyosmium.py), byte for byte: both follow the declarations of rules.py, which it receives here as data
(the osmx classification, loader 1's rules per layer, the batch bounds).

It exists for speed (docs/PERFORMANCE.md, the pyosmium rows against the native ones): pyosmium's calls per
object (an object wrapper, a Python call per tag as a NamedTuple, the WKB as hex) are most of that reader's
CPU; the native reader classifies and packs the rows in C++."""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ingest.osm.batches import Batch
from ingest.osm.native import fallback_note, layer_spec, limits, native_module
from ingest.osm.pbf.plans import ReadPlan, fail_sources, read_extracts
from ingest.osm.pbf.sources import KINDS, LISTED_BROKEN, PbfReport, source_name, unreadable
from ingest.osm.rules import (
    AREA_RELATION_TYPES,
    AREA_RULES,
    LAYER_BY_FOLDER,
    LINE_OR_RING,
    NODE_RULES,
    WAY_RULES,
    OsmxRule,
)

NATIVE_READER_PACKAGES = "g++ python3-dev libosmium2-dev libprotozero-dev zlib1g-dev"  # system-packages.txt, native


def native_reader() -> Any:
    """The native reader's module (ingest/osm/pbf/_osmread), or None when it is not built or switched off
    ($GSQA_NATIVE_READER=0)."""
    return native_module("pbf._osmread")


def reader_note() -> str | None:
    """One line for stderr when a direct load reads with pyosmium; None when the native reader reads."""
    return fallback_note("pbf._osmread", "PBF reader", "reading with pyosmium: the same rows, about 3 to 9 times the "
                         "native reader's reading CPU", NATIVE_READER_PACKAGES)


def read_natively(plan: ReadPlan, send: Callable[[str, str, tuple], None]) -> PbfReport:
    """A direct load: every extract of the plan read by the native reader, which gives the same sources, rows
    and report as the pyosmium reader (pyosmium.run_reader with copy_rows). Each source's batches go to
    `send`, then its end; an extract that cannot be read to its end fails its open sources, and those of
    every later extract (plans.read_extracts)."""
    native = native_reader()
    seen = native.Seen() if plan.several else None
    report, _ = read_extracts(plan, lambda path, layers: _read_extract(native, path, layers, plan, seen, send),
                              lambda layers, why: fail_sources(send, layers, why))
    return report


def _read_extract(native: Any, path: Path, layers: dict[str, set[str]], plan: ReadPlan, seen: Any,
                  send: Callable[[str, str, tuple], None]) -> PbfReport:
    """The extract read for plan.reads (the objects it claims), the sources of `layers` sent. RuntimeError
    when it cannot be read to its end (a damaged block), once its open sources have failed: those it ended
    stand."""
    open_sources = {(kind, layer) for kind in KINDS for layer in layers.get(kind, ())}

    def emit(kind: str, layer: str, data: bytes, rows: int, features: int, skipped: list, skipped_count: int,
             done: bool) -> None:
        send(kind, layer, ("item", Batch(data, rows, features, list(skipped), skipped_count)))
        if done:
            send(kind, layer, ("done", None))
            open_sources.discard((kind, layer))

    specs = [{layer: {**native_layer_rules(layer, path), "sent": layer in layers.get(kind, ())}
              for layer in sorted(plan.reads.get(kind, ()))} for kind in KINDS]
    try:
        return _native_report(native.read_extract(str(path), plan.index or "flex_mem", native_classification(),
                                                  *specs, plan.bbox, limits(LISTED_BROKEN), seen, emit))
    except RuntimeError as error:
        for kind, layer in sorted(open_sources):
            send(kind, layer, ("failed", unreadable(path, error)))
        raise


def native_layer_rules(folder: str, path: Path) -> dict[str, Any]:
    """Loader 1's rules for one layer as the native reader takes them (the pois staging rows carry their source)."""
    return layer_spec(LAYER_BY_FOLDER[folder], source_name(path, "nodes"))


@functools.cache
def native_classification() -> dict[str, Any]:
    """The osmx classification (rules.OSMX_RULES) as the native reader takes it: the rules of each kind of
    object, in the order of the declaration."""

    def spec(rule: OsmxRule) -> dict[str, Any]:
        return {"layer": rule.layer, "key": rule.key, "values": list(rule.values),
                "except_values": list(rule.except_values), "with_tag": rule.with_tag,
                "ring_when_closed": rule.shape == LINE_OR_RING}

    return {"nodes": [spec(rule) for rule in NODE_RULES], "ways": [spec(rule) for rule in WAY_RULES],
            "areas": [spec(rule) for rule in AREA_RULES], "area_relation_types": list(AREA_RELATION_TYPES)}


def _native_report(found: dict[str, Any]) -> PbfReport:
    part = PbfReport(sources=[])
    part.features = Counter(found["features"])
    part.broken = Counter({kind: count for kind, count in found["broken"].items() if count})
    part.broken_listed = list(found["broken_listed"])
    part.duplicates, part.outside = found["duplicates"], found["outside"]
    part.wanted_relations, part.built_relations = set(found["wanted_relations"]), set(found["built_relations"])
    return part
