"""`ingest osm FILE.osm.pbf`: the five osmx layers derived from OpenStreetMap extracts with pyosmium.

The published layers were made by UCR's osmx extractor, whose source is not available; the rules below are
what the benchmark's answers show (confirmed) or the nearest reading of them (inferred), docs/DESIGN.md
lists each. Every feature is written as osmx wrote it: `properties.id` (the OSM id, no type marker) and
`properties.tagsMap` (all tags), and the layers then load through loader 1's rules exactly as the published
GeoJSON does (ingest/osm_rules.py): the PBF path exports the layers first (`export`) and loads the export,
so loading a PBF and loading its `--export-geojson` output give the same rows by construction.

- pois (`pois/`): nodes with a `tourism`, `amenity` or `leisure` tag and a `name` (loader 1 keeps no others).
- roads: ways with `highway`: LineString; a closed way (first node = last, 4 or more nodes) a Polygon.
- lakes: ways with `waterway` (not `riverbank`): LineString; areas with `natural` = water, bay or wetland,
  `waterway=riverbank` or `landuse=reservoir`: (Multi)Polygon.
- parks: nodes with `leisure`: Point; areas with `leisure`, or `boundary` = national_park or protected_area.
- postal_codes (table regions): areas with `boundary` = administrative or postal_code.

Areas are closed ways and multipolygon/boundary relations assembled by osmium's area assembler; one ring
set is a Polygon, more a MultiPolygon. What cannot be built (a way with nodes outside the extract, a
relation whose rings do not close) is counted and listed by OSM type and id, never fatal. Several extracts
are read one after the other; an object already written from an earlier file ((type, id)) is skipped, as
neighbouring Geofabrik extracts share the objects that cross their border.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from ingest.errors import GsqaError

PBF_MAGIC = b"OSMHeader"
LAYERS = ("pois", "roads", "parks", "lakes", "postal_codes")
POI_KEYS = ("tourism", "amenity", "leisure")
LAKE_NATURAL = frozenset({"water", "bay", "wetland"})
PARK_BOUNDARIES = frozenset({"national_park", "protected_area"})
REGION_BOUNDARIES = frozenset({"administrative", "postal_code"})
# Only objects with one of these keys reach Python; area assembly considers relations with AREA_KEYS.
WANTED_KEYS = ("highway", "waterway", "natural", "leisure", "boundary", "landuse", "tourism", "amenity")
AREA_KEYS = ("natural", "waterway", "leisure", "boundary", "landuse")
IN_MEMORY_LIMIT = 2 * 1024**3  # input bytes above which node locations go to a file, not RAM
LISTED_BROKEN = 50
COMPLETE = ".complete"  # written last into an export folder: what it was made from
RULES_VERSION = 2  # raise when the rules below change: earlier exports are then made again


def all_pbf(sources: list[Path]) -> bool:
    """Are the sources PBF extracts (by content, or by a .pbf name: export then refuses a file that is not
    one, with its reason)? False for one folder of GeoJSON layers; several folders are refused."""
    if any(is_pbf(source) or source.name.endswith(".pbf") for source in sources):
        return True
    if len(sources) == 1:
        return False
    raise GsqaError("give one folder of GeoJSON layers, or one or more OpenStreetMap PBF extracts")


def default_folder(sources: list[Path]) -> Path:
    """Where the layers of a PBF load are written: beside the first extract."""
    first = sources[0]
    return first.parent / (first.name.removesuffix(".pbf").removesuffix(".osm") + ".layers")


def is_pbf(path: Path) -> bool:
    """An OSM PBF file: its first blob header names the OSMHeader block (whatever the file is called)."""
    try:
        with open(path, "rb") as handle:
            return PBF_MAGIC in handle.read(64)
    except OSError:
        return False


@dataclass
class ExportReport:
    sources: list[str]
    folder: str
    location_index: str = ""
    features: Counter = field(default_factory=Counter)  # layer -> features written
    duplicates: int = 0  # objects skipped because an earlier file had them
    broken: Counter = field(default_factory=Counter)  # node / way / relation -> objects that could not be built
    broken_listed: list[str] = field(default_factory=list)
    outside: int = 0  # features outside --bbox
    reused: bool = False  # an earlier complete export of the same inputs was used
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {"sources": self.sources, "folder": self.folder, "location_index": self.location_index,
                "features": dict(self.features), "duplicates": self.duplicates, "broken": dict(self.broken),
                "broken_listed": self.broken_listed, "outside_bbox": self.outside, "reused": self.reused,
                "seconds": round(self.seconds, 3)}


# --- the rules ------------------------------------------------------------------------------------------


def node_layers(tags: dict[str, str]) -> list[str]:
    layers = []
    if "name" in tags and any(key in tags for key in POI_KEYS):
        layers.append("pois")
    if "leisure" in tags:
        layers.append("parks")
    return layers


def way_layers(tags: dict[str, str]) -> list[str]:
    layers = []
    if "highway" in tags:
        layers.append("roads")
    if "waterway" in tags and tags["waterway"] != "riverbank":
        layers.append("lakes")
    return layers


def area_layers(tags: dict[str, str]) -> list[str]:
    layers = []
    if (tags.get("natural") in LAKE_NATURAL or tags.get("waterway") == "riverbank"
            or tags.get("landuse") == "reservoir"):
        layers.append("lakes")
    if "leisure" in tags or tags.get("boundary") in PARK_BOUNDARIES:
        layers.append("parks")
    if tags.get("boundary") in REGION_BOUNDARIES:
        layers.append("postal_codes")
    return layers


# --- geometries (GeoJSON text from osmium's C++ factory: no Python float per coordinate) ------------------


def _way_geometry(way: Any, layer: str, factory: Any) -> str:
    """LineString, or for a closed road a Polygon; InvalidLocationError when a node lies outside the extract."""
    import osmium

    line = factory.create_linestring(way, osmium.geom.use_nodes.ALL)
    if layer == "roads" and len(way.nodes) >= 4 and way.nodes[0].ref == way.nodes[-1].ref:
        return '{"type":"Polygon","coordinates":[' + line[line.index("[["):-1] + "]}"
    return line


def _area_geometry(area: Any, factory: Any) -> str:
    """Polygon for one outer ring (with its holes), MultiPolygon for more."""
    multipolygon = factory.create_multipolygon(area)
    polygons = json.loads(multipolygon)["coordinates"]
    if len(polygons) == 1:
        return json.dumps({"type": "Polygon", "coordinates": polygons[0]}, separators=(",", ":"))
    return multipolygon


def _overlaps(geometry: str, bbox: tuple[float, float, float, float]) -> bool:
    import shapely

    from ingest.osm_features import envelope_overlaps

    return envelope_overlaps(shapely.from_geojson(geometry), bbox)


# --- reading --------------------------------------------------------------------------------------------


class _Seen:
    """(kind, id) of every object written so far, in osmium's id sets, when there are several extracts (a
    set takes 512 kB per 4 M-id range it touches: up to about 1.4 GB for a US-wide id space; one extract has
    no duplicates and needs none)."""

    def __init__(self, extracts: int) -> None:
        import osmium.index

        kinds = ("node", "way", "way area", "relation area") if extracts > 1 else ()
        self.sets = {kind: osmium.index.IdSet() for kind in kinds}
        # Multipolygon/boundary relations of the layers, and those osmium assembled, over all extracts: a
        # relation cut by one extract may be whole in its neighbour.
        self.wanted_relations: set[int] = set()
        self.built_relations: set[int] = set()

    def first_time(self, kind: str, osm_id: int) -> bool:
        if not self.sets:
            return True
        ids = self.sets[kind]
        if osm_id in ids:
            return False
        ids.set(osm_id)
        return True


def location_index(paths: list[Path], work: Path) -> str:
    """In memory for small inputs; on disk (a sparse file array, 16 bytes per node) for large ones."""
    if sum(path.stat().st_size for path in paths) <= IN_MEMORY_LIMIT:
        return "flex_mem"
    return f"sparse_file_array,{work / 'node-locations.bin'}"


def _features(path: Path, index: str, seen: _Seen, report: ExportReport,
              bbox: tuple[float, float, float, float] | None, bar: tqdm) -> Iterator[tuple[str, str]]:
    """(layer, the feature as a line of GeoJSON) of every object of one extract."""
    import osmium
    from osmium.filter import KeyFilter

    factory = osmium.geom.GeoJSONFactory()
    processor = (osmium.FileProcessor(_pbf(path)).with_locations(index).with_areas(KeyFilter(*AREA_KEYS))
                 .with_filter(KeyFilter(*WANTED_KEYS)))
    for obj in processor:
        bar.update()
        tags = dict(obj.tags)
        if obj.is_relation():
            if tags.get("type") in ("multipolygon", "boundary") and area_layers(tags):
                seen.wanted_relations.add(obj.id)
            continue
        kind, layers = _kind_and_layers(obj, tags)
        if not layers:
            continue
        if obj.is_area() and not obj.from_way():
            seen.built_relations.add(obj.orig_id())
        osm_id = obj.orig_id() if obj.is_area() else obj.id
        if not seen.first_time(kind, osm_id):
            report.duplicates += 1
            continue
        yield from _build(obj, tags, kind, osm_id, layers, factory, report, bbox)


def _kind_and_layers(obj: Any, tags: dict[str, str]) -> tuple[str, list[str]]:
    if obj.is_node():
        return "node", node_layers(tags)
    if obj.is_way():
        return "way", way_layers(tags)
    return ("way area" if obj.from_way() else "relation area"), area_layers(tags)


def _build(obj: Any, tags: dict[str, str], kind: str, osm_id: int, layers: list[str], factory: Any,
           report: ExportReport, bbox: tuple[float, float, float, float] | None) -> Iterator[tuple[str, str]]:
    import osmium

    properties = f', "properties": {{"id": {osm_id}, "tagsMap": {json.dumps(tags, ensure_ascii=False)}}}}}'
    for layer in layers:
        try:
            if kind == "node":
                geometry = factory.create_point(obj)
            elif kind == "way":
                geometry = _way_geometry(obj, layer, factory)
            else:
                geometry = _area_geometry(obj, factory)
        except (osmium.InvalidLocationError, RuntimeError) as error:
            _broken(report, "relation" if kind == "relation area" else kind.split()[0], osm_id, _reason(obj, error))
            return
        if bbox is not None and not _overlaps(geometry, bbox):
            report.outside += 1
            continue
        yield layer, '{"type": "Feature", "geometry": ' + geometry + properties


def _reason(obj: Any, error: Exception) -> str:
    """Why an object has no geometry: for a way, its first node without a location."""
    if obj.is_way():
        missing = next((node.ref for node in obj.nodes if not node.location.valid()), None)
        if missing is not None:
            return f"node {missing} has no location (not in the extract)"
    return str(error)


def _broken(report: ExportReport, osm_type: str, osm_id: int, reason: str) -> None:
    report.broken[osm_type] += 1
    if len(report.broken_listed) < LISTED_BROKEN:
        report.broken_listed.append(f"{osm_type} {osm_id}: {reason}")


# --- export ---------------------------------------------------------------------------------------------


def fingerprint(paths: list[Path], bbox: tuple[float, float, float, float] | None) -> str:
    """What an export was made from: the inputs (name, size, mtime), the box and the version of the rules."""
    digest = hashlib.sha256(json.dumps([list(bbox) if bbox else None, RULES_VERSION]).encode())
    for path in paths:
        stat = path.stat()
        digest.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def export(paths: list[Path], folder: Path, bbox: tuple[float, float, float, float] | None = None,
           progress: bool = True) -> ExportReport:
    """Write osmx-style layers (`<layer>/<extract>.geojson`, one feature per line) to `folder`. An export
    of the same inputs that completed earlier is reused; an interrupted one is made again."""
    started = time.monotonic()
    _refuse_bad_inputs(paths)
    report = ExportReport(sources=[str(path) for path in paths], folder=str(folder))
    stamp = fingerprint(paths, bbox)
    done = folder / COMPLETE
    previous = json.loads(done.read_text()) if done.is_file() else {}
    if previous.get("fingerprint") == stamp:
        earlier = previous["report"]
        report.location_index, report.duplicates, report.outside = (earlier["location_index"], earlier["duplicates"],
                                                                    earlier["outside_bbox"])
        report.features, report.broken = Counter(earlier["features"]), Counter(earlier["broken"])
        report.broken_listed, report.reused = earlier["broken_listed"], True
        report.seconds = time.monotonic() - started
        return report
    folder.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    report.location_index = location_index(paths, folder)
    seen = _Seen(len(paths))
    with tqdm(unit=" objects", desc="ingest osm: reading OSM data", disable=not progress) as bar:
        bar.write(f"node locations: {report.location_index.split(',')[0]} "
                  f"({'in memory' if report.location_index == 'flex_mem' else 'on disk in ' + str(folder)})",
                  file=sys.stderr)
        for path in paths:
            with _layer_writers(folder, path) as writers:
                try:
                    for layer, feature in _features(path, report.location_index, seen, report, bbox, bar):
                        writers.write(layer, feature)
                        report.features[layer] += 1
                except RuntimeError as error:  # osmium: a damaged or truncated block
                    raise GsqaError(f"{path}: cannot be read to its end ({error}); nothing was loaded") from None
    for missing in sorted(seen.wanted_relations - seen.built_relations):
        _broken(report, "relation", missing, "its rings could not be assembled (broken, or cut by the extract)")
    if bbox is not None and not report.features:
        raise GsqaError(f"--bbox {','.join(map(str, bbox))} holds none of the features of the extracts "
                        f"(they cover {'; '.join(_extent(path) for path in paths)})")
    with contextlib.suppress(FileNotFoundError):
        (folder / "node-locations.bin").unlink()
    report.seconds = time.monotonic() - started
    done.write_text(json.dumps({"fingerprint": stamp, "report": report.as_json()}))
    return report


def _extent(path: Path) -> str:
    """The extract's bounding box as its header gives it, W,S,E,N."""
    import osmium

    box = osmium.io.Reader(_pbf(path), osmium.osm.NOTHING).header().box()
    if not box.valid():
        return f"{path.name}: no bounding box in its header"
    return (f"{path.name}: {box.bottom_left.lon:.4f},{box.bottom_left.lat:.4f},"
            f"{box.top_right.lon:.4f},{box.top_right.lat:.4f}")


def _pbf(path: Path) -> Any:
    """The file as PBF whatever its name says (osmium would guess the format from the suffix)."""
    import osmium

    return osmium.io.File(str(path), "pbf")


def _refuse_bad_inputs(paths: list[Path]) -> None:
    import osmium

    for path in paths:
        if not path.is_file():
            raise GsqaError(f"{path}: no such file")
        if path.stat().st_size == 0:
            raise GsqaError(f"{path}: empty file, expected an OpenStreetMap PBF extract")
        if not is_pbf(path):
            raise GsqaError(f"{path}: not an OpenStreetMap PBF file (no OSMHeader block at its start)")
        try:
            osmium.io.Reader(_pbf(path), osmium.osm.NOTHING).header()
        except RuntimeError as error:
            raise GsqaError(f"{path}: not a readable OpenStreetMap PBF file ({error})") from None
    names = [path.name for path in paths]
    if len(set(names)) != len(names):
        raise GsqaError("two input extracts have the same file name; their layer files would collide")


class _Writers:
    """One lines-layout FeatureCollection per layer, written to `.partial` and renamed when complete."""

    def __init__(self, folder: Path, source: Path) -> None:
        stem = source.name.removesuffix(".pbf").removesuffix(".osm")
        self.paths = {layer: folder / layer / f"{stem}.geojson" for layer in LAYERS}
        self.handles: dict[str, TextIO] = {}
        self.count: Counter = Counter()

    def write(self, layer: str, feature: str) -> None:
        handle = self.handles.get(layer)
        if handle is None:
            self.paths[layer].parent.mkdir(parents=True, exist_ok=True)
            handle = self.handles[layer] = open(self.paths[layer].with_suffix(".partial"), "w", encoding="utf-8")
            handle.write('{"type": "FeatureCollection", "features": [\n')
        handle.write((",\n" if self.count[layer] else "") + feature)
        self.count[layer] += 1

    def close(self, complete: bool) -> None:
        for layer, handle in self.handles.items():
            if complete:
                handle.write("\n]}\n")
            handle.close()
            partial = self.paths[layer].with_suffix(".partial")
            if complete:
                os.replace(partial, self.paths[layer])
            else:
                partial.unlink(missing_ok=True)


@contextlib.contextmanager
def _layer_writers(folder: Path, source: Path) -> Iterator[_Writers]:
    writers = _Writers(folder, source)
    try:
        yield writers
    except BaseException:
        writers.close(complete=False)
        raise
    writers.close(complete=True)
