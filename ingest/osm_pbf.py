"""OpenStreetMap extracts (`.osm.pbf`) -> the five osmx layers, read with pyosmium.

The published layers were made by UCR's osmx extractor, whose source is not available; the rules below are
what the benchmark's answers show (confirmed) or the nearest reading of them (inferred), docs/DESIGN.md
lists each. Every feature is what osmx wrote: the OSM id (no type marker), all tags, a geometry; it then
becomes rows through loader 1's rules (ingest/osm_rules.py), exactly as a published GeoJSON feature does.

- pois: nodes with a `tourism`, `amenity` or `leisure` tag and a `name` (loader 1 keeps no others).
- roads: ways with `highway`: LineString; a closed way (first node = last, 4 or more nodes) a Polygon.
- lakes: ways with `waterway` (not `riverbank`): LineString; areas with `natural` = water, bay or wetland,
  `waterway=riverbank` or `landuse=reservoir`: (Multi)Polygon.
- parks: nodes with `leisure`: Point; areas with `leisure`, or `boundary` = national_park or protected_area.
- postal_codes (table regions): areas with `boundary` = administrative or postal_code.

Areas are closed ways and multipolygon/boundary relations assembled by osmium's area assembler; one ring
set is a Polygon, more a MultiPolygon. What cannot be built (a way with nodes outside the extract, a
relation whose rings do not close) is counted and listed by OSM type and id, never fatal.

Three kinds of features (KINDS): of nodes (pois, parks points: no node locations needed), of ways (roads,
waterway lines, closed ways' polygons) and of relation areas (lakes, parks and regions polygons), shared by
two reader processes (READERS). A direct load reads with the native reader (ingest/_osmread.cpp,
read_natively) where it was built at install, else (or with $GSQA_NATIVE_READER=0) with pyosmium;
--export-geojson always with pyosmium (read_features, C++ filters so that Python sees only the objects of its
layers). Both give the same features, and a direct load the same rows, byte for byte. What one reader produces
for one extract, one kind and one layer is a "source" named `<extract stem>.<n>-<kind>.geojson` (source_name):
with --export-geojson it is that file in `<layer>/`, in a direct load a stream of binary COPY rows loaded under
that name, one transaction each (ingest/osm.py). Both load in name order, so both give the same rows.

Several extracts: an object already taken from an earlier one ((type, id), in each reader's source name
order) is skipped, as neighbouring Geofabrik extracts share the objects that cross their border.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import struct
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from gsqa_core.errors import GsqaError

PBF_MAGIC = b"OSMHeader"
LAYERS = ("pois", "roads", "parks", "lakes", "postal_codes")
KINDS = ("nodes", "ways", "areas")
KIND_LAYERS = {"nodes": ("pois", "parks"), "ways": ("roads", "lakes", "parks", "postal_codes"),
               "areas": ("lakes", "parks", "postal_codes")}  # areas: of relations; closed ways are ways
POI_KEYS = ("tourism", "amenity", "leisure")
AREA_KEYS = ("natural", "waterway", "leisure", "boundary", "landuse")
WAY_KEYS = {"roads": ("highway",), "lakes": ("waterway", "natural", "landuse"), "parks": ("leisure", "boundary"),
            "postal_codes": ("boundary",)}  # a way without one of its layers' keys gives none of their features
LAKE_NATURAL = frozenset({"water", "bay", "wetland"})
PARK_BOUNDARIES = frozenset({"national_park", "protected_area"})
REGION_BOUNDARIES = frozenset({"administrative", "postal_code"})
# Input bytes above which node locations go to one file, not RAM. Below it two readers keep an index each:
# flex_mem takes about 16 bytes per node, so 1 GiB of PBF (about 130 M nodes) costs 2 x 2 GB.
IN_MEMORY_LIMIT = 1024**3
LISTED_BROKEN = 50
RULES_VERSION = 4  # raise when the rules change: sources loaded under other rules are loaded again
QUEUE_BATCHES = 8  # batches of about 1 MB a reader may hold ready per layer


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
                "outside_bbox": self.outside, "seconds": round(self.seconds, 3)}


# --- the rules ------------------------------------------------------------------------------------------


def node_layers(tags: dict[str, str]) -> list[str]:
    layers = []
    if "name" in tags and any(key in tags for key in POI_KEYS):
        layers.append("pois")
    if "leisure" in tags:
        layers.append("parks")
    return layers


def way_features(tags: dict[str, str], way: Any) -> list[tuple[str, str]]:
    """(layer, shape) of each feature a way gives: "line", or "ring" (a Polygon of the closed way). `way`:
    pyosmium's C++ object (see _tags)."""
    features = []
    closed = None
    if "highway" in tags:
        closed = _closed(way)
        features.append(("roads", "ring" if closed else "line"))
    if "waterway" in tags and tags["waterway"] != "riverbank":
        features.append(("lakes", "line"))
    layers = area_layers(tags)
    if layers and (closed if closed is not None else _closed(way)):
        features += [(layer, "ring") for layer in layers]
    return features


def _closed(way: Any) -> bool:
    """A ring: first node = last node (by id), 4 or more nodes."""
    return way.is_closed() and way.nodes().size(way) >= 4


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


# --- geometries: osmium's C++ factories, GeoJSON text for an export, WKB for a load without the native reader ---

_POLYGON_OF_ONE_RING = b"\x01\x03\x00\x00\x00\x01\x00\x00\x00"  # little-endian Polygon, 1 ring


class Geometries:
    """Geometries of one output format (shapes: point, line, ring, multi), the same WKB as the native reader
    makes; InvalidLocationError or RuntimeError when an object has none (a node outside the extract, rings that
    do not close)."""

    def __init__(self, geojson: bool) -> None:
        import osmium

        self.geojson = geojson
        self.factory = osmium.geom.GeoJSONFactory() if geojson else osmium.geom.WKBFactory()
        self.all_nodes = osmium.geom.use_nodes.ALL

    def build(self, obj: Any, shape: str) -> Any:
        if shape == "point":
            made = self.factory.create_point(obj)
            return made if self.geojson else bytes.fromhex(made)
        if shape == "multi":
            return self._area(obj)
        line = self.factory.create_linestring(obj, self.all_nodes)
        if shape == "line":
            return line if self.geojson else bytes.fromhex(line)
        if self.geojson:  # the closed way's nodes as the one ring of a Polygon
            return '{"type":"Polygon","coordinates":[' + line[line.index("[["):-1] + "]}"
        return _POLYGON_OF_ONE_RING + bytes.fromhex(line)[5:]

    def _area(self, area: Any) -> Any:
        """Polygon for one outer ring (with its holes), MultiPolygon for more."""
        made = self.factory.create_multipolygon(area)
        if self.geojson:
            polygons = json.loads(made)["coordinates"]
            if len(polygons) == 1:
                return json.dumps({"type": "Polygon", "coordinates": polygons[0]}, separators=(",", ":"))
            return made
        wkb = bytes.fromhex(made)
        return wkb[9:] if struct.unpack_from("<I", wkb, 5)[0] == 1 else wkb


def _overlaps(geometry: Any, bbox: tuple[float, float, float, float]) -> bool:
    import shapely

    from ingest.osm_features import envelope_overlaps

    built = shapely.from_geojson(geometry) if isinstance(geometry, str) else shapely.from_wkb(geometry)
    return envelope_overlaps(built, bbox)


# --- reading --------------------------------------------------------------------------------------------


def _tags(data: Any) -> dict[str, str]:
    """The tags of an object's C++ data (`obj._pyosmium_data`). pyosmium's TagList iterator wraps each tag
    in Python objects (dict(obj.tags) is about 10 us per object, most of a reader's time); its C++
    accessors, mapped without a Python loop, cost a fifth of that. They are internal: pyosmium is pinned to
    4.x, and the tests read tags of every kind through this."""
    return dict(map(data.tags_next, repeat(data.tags_begin(), data.tags_size())))


def locations_on_disk(paths: list[Path]) -> bool:
    return sum(path.stat().st_size for path in paths) > IN_MEMORY_LIMIT


def location_index(paths: list[Path], work: Path, reader: str) -> str:
    """In memory for small inputs; on disk (a sparse file array, 16 bytes per node) for large ones."""
    if not locations_on_disk(paths):
        return "flex_mem"
    return f"sparse_file_array,{work / f'node-locations-{reader}.bin'}"


def _objects(layers: dict[str, set[str]], path: Path, index: str, report: PbfReport) -> Iterator[Any]:
    """osmium reading one extract for one reader (`layers`: kind -> the layers it produces from this
    extract), in the order of the file: nodes, ways, then the areas osmium assembles from multipolygon and
    boundary relations with area tags. C++ filters let only the objects of the layers through to Python.
    Ways and areas need node locations; a node carries its own.

    Pass 1 reads the nodes (their locations), the ways, and hands the relations to the area manager's
    first pass (their member ways); for areas, pass 2 reads the ways and relations again for the
    assembler, which sees only the member ways (pyosmium's FileProcessor hands it every closed way:
    assembling a city's buildings cost more than all the rest of the reading; closed ways' Polygons are
    made from the ways themselves). pyosmium keeps raw pointers to the handlers: all are held in variables
    until the end."""
    import osmium
    from osmium.area import AreaManager
    from osmium.filter import EntityFilter, IdFilter, KeyFilter

    source = osmium.io.File(str(path), "pbf")  # the format from the content, whatever the name says
    kinds = {kind for kind, wanted in layers.items() if wanted}
    pool, manager, members = osmium.io.ThreadPool(), AreaManager(), _Members(report)
    index_map = osmium.index.create_map(index) if "ways" in kinds or "areas" in kinds else None
    locations = [osmium.NodeLocationsForWays(index_map)] if index_map is not None else []
    for handler in locations:
        handler.ignore_errors()
    candidates = KeyFilter(*AREA_KEYS).enable_for(osmium.osm.RELATION)
    first_pass = [candidates, members, manager.first_pass_handler()] if "areas" in kinds else []
    passing = EntityFilter((osmium.osm.NODE if "nodes" in kinds else osmium.osm.NOTHING)
                           | (osmium.osm.WAY if "ways" in kinds else osmium.osm.NOTHING))
    # Ways without a key of the layers (buildings, most of a real extract) go before their node locations
    # are looked up: a third of the reading time of a town.
    keys = sorted({key for layer in layers.get("ways", ()) for key in WAY_KEYS[layer]})
    way_keys = [KeyFilter(*keys).enable_for(osmium.osm.WAY)] if keys else []  # no ways read without keys
    node_keys = KeyFilter(*POI_KEYS).enable_for(osmium.osm.NODE)
    read = osmium.osm.NODE | (osmium.osm.WAY if "ways" in kinds else osmium.osm.NOTHING) \
        | (osmium.osm.RELATION if first_pass else osmium.osm.NOTHING)
    with osmium.io.Reader(source, read, thread_pool=pool) as reader:
        yield from osmium.OsmFileIterator(reader, *way_keys, *locations, *first_pass, passing, node_keys)
    if not first_pass:
        return
    tagged = KeyFilter(*AREA_KEYS)
    built = osmium.BufferIterator(tagged)
    only_members = IdFilter(members.ways).enable_for(osmium.osm.WAY)
    members.ways = set()
    assembler, member_ways = manager.second_pass_to_buffer(built), EntityFilter(osmium.osm.WAY)
    # The member ways come back to this loop (and are dropped), so that the areas' buffer drains as it fills.
    with osmium.io.Reader(source, osmium.osm.WAY | osmium.osm.RELATION, thread_pool=pool) as reader:
        for _ in osmium.OsmFileIterator(reader, only_members, *locations, assembler, member_ways):
            yield from _of_relations(built)
    yield from _of_relations(built)


def _of_relations(areas: Any) -> Iterator[Any]:
    """The areas of relations. The assembler also makes an area of each closed member way with area tags;
    that way is already a feature of its own (of the ways kind), and must not come back as a relation."""
    return (area for area in areas if not area.from_way())


class _Members:
    """First pass: the relations of the layers (wanted, so that one not assembled is listed) and their ways."""

    def __init__(self, report: PbfReport) -> None:
        self.report = report
        self.ways: set[int] = set()

    def relation(self, relation: Any) -> None:
        tags = _tags(relation._pyosmium_data)
        if tags.get("type") in ("multipolygon", "boundary") and area_layers(tags):
            self.report.wanted_relations.add(relation.id)
            self.ways.update(member.ref for member in relation.members if member.type == "w")


class _Seen:
    """Ids already taken from an earlier extract, in osmium's id sets (512 kB per 4 M-id range touched),
    only when there are several extracts: one extract has no duplicates."""

    def __init__(self, extracts: int) -> None:
        import osmium.index

        self.sets = {kind: osmium.index.IdSet() for kind in ("node", "way", "relation")} \
            if extracts > 1 else {}

    def first_time(self, kind: str, osm_id: int) -> bool:
        ids = self.sets[kind]
        if osm_id in ids:
            return False
        ids.set(osm_id)
        return True


Feature = tuple[str, str, int, dict[str, str], Any]  # kind, layer, OSM id, tags, geometry


def read_features(path: Path, layers: dict[str, set[str]], index: str, geometries: Geometries, seen: _Seen,
                  report: PbfReport, bbox: tuple[float, float, float, float] | None) -> Iterator[Feature]:
    """The features one reader takes from one extract (`layers`: kind -> layers wanted), in the order osmium
    hands them over: nodes, ways, then relation areas. RuntimeError when osmium cannot
    read the extract to its end. (The loop runs once per object of a US extract that passes the C++
    filter: no call or wrapper it can do without.)"""
    import osmium

    kind_of_class = {osmium.osm.Node: "nodes", osmium.osm.Way: "ways", osmium.osm.Area: "areas"}
    first_time = seen.first_time if seen.sets else None
    whole = {kind: set(KIND_LAYERS[kind]) <= layers.get(kind, set()) for kind in KINDS}
    features = Counter()
    for obj in _objects(layers, path, index, report):
        data = obj._pyosmium_data
        tags = _tags(data)
        kind = kind_of_class[type(obj)]
        osm_id, osm_type, wanted = _classify(kind, data, tags)
        if not whole[kind]:
            wanted = [(layer, shape) for layer, shape in wanted if layer in layers.get(kind, ())]
        if not wanted:
            continue
        if osm_type == "relation":
            report.built_relations.add(osm_id)
        if first_time is not None and not first_time(osm_type, osm_id):
            report.duplicates += 1
            continue
        for layer, shape in wanted:
            try:
                geometry = geometries.build(obj, shape)
            except (osmium.InvalidLocationError, RuntimeError) as error:
                report.note_broken(osm_type, osm_id, _reason(obj, error))
                break
            if bbox is not None and not _overlaps(geometry, bbox):
                report.outside += 1
                continue
            features[layer] += 1
            yield kind, layer, osm_id, tags, geometry
    report.features += features


def _classify(kind: str, data: Any, tags: dict[str, str]) -> tuple[int, str, list[tuple[str, str]]]:
    """OSM id, OSM type, and the (layer, shape) of each feature the object gives."""
    if kind == "ways":
        return data.id(), "way", way_features(tags, data)
    if kind == "nodes":
        return data.id(), "node", [(layer, "point") for layer in node_layers(tags)]
    return data.orig_id(), "relation", [(layer, "multi") for layer in area_layers(tags)]


def _reason(obj: Any, error: Exception) -> str:
    """Why an object has no geometry: for a way, its first node without a location."""
    if obj.is_way():
        missing = next((node.ref for node in obj.nodes if not node.location.valid()), None)
        if missing is not None:
            return f"node {missing} has no location (not in the extract)"
    return str(error)


# --- one reader: what it does with its features -----------------------------------------------------------

# The reader processes: name -> the layers each produces per kind, about equal work on real and on synthetic
# data. Ways and relation areas both need node locations, so each of the two keeps an index of its own (one
# reader for both, the other reading only nodes, read less in all but left that one idle: town 0.75x of
# osm2pgsql against 0.84x); the lakes' ways go to the second for balance. Each reader produces its sources in
# name order (an extract's nodes, then its ways, then its areas), as the writers take them.
READERS = {"ways": {"ways": ("roads", "parks", "postal_codes")},
           "nodes+areas": {"nodes": ("pois", "parks"), "ways": ("lakes",), "areas": ("lakes", "parks", "postal_codes")}}
# With node locations on disk (large inputs: a file of 16 bytes per node, about 24 GB for the US), one reader
# takes every kind that needs them: one such file instead of two, sorted and searched once, next to the page
# cache PostgreSQL needs; the other reader is lighter then.
READERS_ON_DISK = {"ways+areas": {"ways": KIND_LAYERS["ways"], "areas": KIND_LAYERS["areas"]},
                   "nodes": {"nodes": KIND_LAYERS["nodes"]}}


@dataclass(frozen=True)
class ReadPlan:
    """One reader's work: per extract (in source name order) the layers to produce per kind."""

    name: str  # in READERS or READERS_ON_DISK
    produces: dict[str, tuple[str, ...]]  # kind -> layers, its entry there
    extracts: list[tuple[Path, dict[str, set[str]]]]
    index: str  # of the node locations; "" for a reader that needs none
    bbox: tuple[float, float, float, float] | None
    several: bool  # more than one extract in the run: keep ids to skip duplicates


def extract_order(paths: list[Path]) -> list[Path]:
    """The extracts in the order of their sources' names (the same for every kind, see check_inputs)."""
    return sorted(paths, key=lambda path: source_name(path, "nodes"))


def reader_plans(paths: list[Path], wanted: dict[str, set[str]], work: Path,
                 bbox: tuple[float, float, float, float] | None) -> list[ReadPlan]:
    """`wanted`: layer -> the source names to produce. A reader with nothing to produce is not started."""
    plans = []
    for reader, produced in (READERS_ON_DISK if locations_on_disk(paths) else READERS).items():
        extracts = []
        for path in extract_order(paths):
            layers = {kind: {layer for layer in kind_layers if source_name(path, kind) in wanted.get(layer, ())}
                      for kind, kind_layers in produced.items()}
            if any(layers.values()):
                extracts.append((path, layers))
        if extracts:
            index = location_index(paths, work, reader) if {"ways", "areas"} & set(produced) else ""
            plans.append(ReadPlan(reader, produced, extracts, index, bbox, len(paths) > 1))
    return plans


NATIVE_READER_ENV = "GSQA_NATIVE_READER"  # 0: read with pyosmium even where the native reader is built
NATIVE_READER_PACKAGES = "g++ python3-dev libosmium2-dev libprotozero-dev zlib1g-dev"  # system-packages.txt, native


@functools.cache
def native_reader() -> Any:
    """The native reader's module (ingest/_osmread, built at install where a compiler and libosmium's headers
    are), or None when it is not built or switched off ($GSQA_NATIVE_READER=0)."""
    if os.environ.get(NATIVE_READER_ENV) == "0":
        return None
    try:
        from ingest import _osmread
    except ImportError:
        return None
    return _osmread


def reader_note() -> str | None:
    """One line for stderr when a direct load reads with pyosmium: why, what it costs, how to get the native
    reader; None when the native reader reads."""
    if native_reader() is not None:
        return None
    why = (f"{NATIVE_READER_ENV}=0 is set" if os.environ.get(NATIVE_READER_ENV) == "0"
           else "the native PBF reader was not built when this package was installed")
    return (f"ingest osm: {why}; reading with pyosmium: the same rows, about 3 to 9 times the reading CPU "
            f"(docs/PERFORMANCE.md). For the native reader: apt-get install {NATIVE_READER_PACKAGES}, then "
            "install this package again (make venv, or pip install .)")


def _copy_rows(path: Path, layers: dict[str, set[str]], features: Iterator[Feature],
               send: Callable[[str, str, tuple], None]) -> None:
    """A direct load without the native reader: each source's features as binary COPY rows, in batches, then
    the end of the source (the native reader's batches, byte for byte)."""
    from ingest.osm_features import row_packer
    from ingest.osm_geojson import Batcher
    from ingest.osm_rules import LAYER_BY_FOLDER

    sources = [(kind, layer) for kind in KINDS for layer in sorted(layers.get(kind, ()))]
    batchers = {source: Batcher() for source in sources}
    packers = {(kind, layer): (LAYER_BY_FOLDER[layer], row_packer(LAYER_BY_FOLDER[layer], source_name(path, kind)))
               for kind, layer in sources}  # the layer's rules and its row packer, found with one lookup
    try:
        _pack_features(features, batchers, packers, send)
    except RuntimeError as error:  # the extract cannot be read to its end: its open sources fail
        for (kind, layer), batcher in batchers.items():
            if batcher is not None:
                send(kind, layer, ("failed", unreadable(path, error)))
        raise


def _pack_features(features: Iterator[Feature], batchers: dict, packers: dict,
                   send: Callable[[str, str, tuple], None]) -> None:
    from ingest.osm_rules import BadFeature, rows_of

    current = None
    for kind, layer, osm_id, tags, geometry in features:
        if kind != current:  # the ways are over: their sources end here, before the areas'
            for earlier in KINDS[:KINDS.index(kind)]:
                _end_sources(batchers, earlier, send)
            current = kind
        batcher = batchers[(kind, layer)]
        rules, pack = packers[(kind, layer)]
        try:
            rows = rows_of(rules, osm_id, tags)
        except BadFeature as error:
            batcher.skip(osm_id, f"{kind[:-1]} {osm_id}: {error}")
            continue
        if rows:
            batcher.add(pack(rows, geometry, batcher.features))
        else:
            batcher.pass_over()
        if batcher.full():
            send(kind, layer, ("item", batcher.take()))
    for kind in KINDS:
        _end_sources(batchers, kind, send)


def _end_sources(batchers: dict, kind: str, send: Callable[[str, str, tuple], None]) -> None:
    """The last batch and the end of each source of `kind` (once)."""
    for source_kind, layer in list(batchers):
        if source_kind == kind and batchers[(kind, layer)] is not None:
            send(kind, layer, ("item", batchers[(kind, layer)].take()))
            send(kind, layer, ("done", None))
            batchers[(kind, layer)] = None


def read_natively(plan: ReadPlan, send: Callable[[str, str, tuple], None]) -> PbfReport:
    """A direct load: every extract of the plan read by the native reader (ingest/_osmread.cpp, libosmium),
    which gives the same sources, rows and report as read_features would (compared byte for byte on the
    extracts of tests/data/osm and bench/osm_pbf.py when it was written) in a seventh of the CPU: pyosmium's
    calls per object were most of a load. Each source's batches go to `send`, then its end; an extract that
    cannot be read to its end fails its open sources, and the reader goes on with the next one.
    (--export-geojson reads with pyosmium, so the test that loads a PBF and its exported layers checks the two
    readers against each other.)"""
    native = native_reader()
    report = PbfReport(sources=[str(path) for path, _ in plan.extracts], location_index=plan.index)
    seen = native.Seen() if plan.several else None
    for path, layers in plan.extracts:
        report.merge(_read_extract(native, path, layers, plan, seen, send))
    if plan.index.startswith("sparse_file_array,"):
        Path(plan.index.split(",", 1)[1]).unlink(missing_ok=True)
    return report


def _read_extract(native: Any, path: Path, layers: dict[str, set[str]], plan: ReadPlan, seen: Any,
                  send: Callable[[str, str, tuple], None]) -> PbfReport:
    from ingest.osm_geojson import Batch

    open_sources = {(kind, layer) for kind in KINDS for layer in layers.get(kind, ())}

    def emit(kind: str, layer: str, data: bytes, rows: int, features: int, skipped: list, skipped_count: int,
             done: bool) -> None:
        send(kind, layer, ("item", Batch(data, rows, features, list(skipped), skipped_count)))
        if done:
            send(kind, layer, ("done", None))
            open_sources.discard((kind, layer))

    specs = [{layer: _native_rules(layer, path) for layer in sorted(layers.get(kind, ()))} for kind in KINDS]
    try:
        return _native_report(native.read_extract(str(path), plan.index or "flex_mem", *specs, plan.bbox,
                                                  _native_limits(), seen, emit))
    except RuntimeError as error:  # a damaged block: the extract's open sources fail, the others stand
        for kind, layer in sorted(open_sources):
            send(kind, layer, ("failed", unreadable(path, error)))
        return PbfReport(sources=[])


def _native_rules(folder: str, path: Path) -> dict[str, Any]:
    """Loader 1's rules for one layer as the native reader takes them (declared in ingest/osm_rules.py)."""
    from ingest.osm_rules import LAYER_BY_FOLDER, POI_PASSES

    layer = LAYER_BY_FOLDER[folder]
    rules = {"table": layer.name, "attributes": len(layer.attribute_columns), "tag_columns": layer.tag_columns,
             "name_column": layer.tag_columns[layer.name_column],
             "osm_id_column": -1 if layer.osm_id_index is None else layer.osm_id_index}
    if layer.in_passes:
        rules["staged_as"] = source_name(path, "nodes")  # the pois staging rows carry their source
        rules["passes"] = [(key, list(values)) for key, values in POI_PASSES]
    return rules


def _native_limits() -> dict[str, int]:
    """Loader 1's column limit and the batch and report bounds of the Python side, for the native reader."""
    from ingest.osm_geojson import BATCH_BYTES, MAX_REPORTED_PER_JOB
    from ingest.osm_rules import VARCHAR_LIMIT

    return {"varchar": VARCHAR_LIMIT, "batch_bytes": BATCH_BYTES, "reported": MAX_REPORTED_PER_JOB,
            "listed_broken": LISTED_BROKEN}


def _native_report(found: dict[str, Any]) -> PbfReport:
    part = PbfReport(sources=[])
    part.features = Counter(found["features"])
    part.broken = Counter({kind: count for kind, count in found["broken"].items() if count})
    part.broken_listed = list(found["broken_listed"])
    part.duplicates, part.outside = found["duplicates"], found["outside"]
    part.wanted_relations, part.built_relations = set(found["wanted_relations"]), set(found["built_relations"])
    return part


def _geojson_files(path: Path, layers: dict[str, set[str]], features: Iterator[Feature], folder: Path) -> None:
    """--export-geojson: each source as an osmx-style file, one feature per line, written to `.partial` and
    renamed when complete."""
    targets = {(kind, layer): folder / layer / source_name(path, kind)
               for kind, kind_layers in layers.items() for layer in kind_layers}
    handles: dict[tuple[str, str], TextIO] = {}
    try:
        for source, target in targets.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            handles[source] = open(target.with_suffix(".partial"), "w", encoding="utf-8")
            handles[source].write('{"type": "FeatureCollection", "features": [\n')
        separator = dict.fromkeys(targets, "")
        for kind, layer, osm_id, tags, geometry in features:
            handles[(kind, layer)].write(
                f'{separator[(kind, layer)]}{{"type": "Feature", "geometry": {geometry}, "properties": '
                f'{{"id": {osm_id}, "tagsMap": {json.dumps(tags, ensure_ascii=False)}}}}}')
            separator[(kind, layer)] = ",\n"
        for source, handle in handles.items():
            handle.write("\n]}\n")
            handle.close()
            os.replace(targets[source].with_suffix(".partial"), targets[source])
    finally:
        for source, handle in handles.items():
            handle.close()
            targets[source].with_suffix(".partial").unlink(missing_ok=True)


def run_reader(plan: ReadPlan, deliver: Callable[[Path, dict[str, set[str]], Iterator[Feature]], None],
               geojson: bool) -> tuple[PbfReport, list[str]]:
    """Read every extract of the plan with pyosmium; `deliver` consumes each extract's features (GeoJSON text
    geometries or WKB) and, when osmium cannot read the extract to its end (a damaged block), ends what it
    started and raises: the extract is listed and the reader goes on with the next one."""
    report = PbfReport(sources=[str(path) for path, _ in plan.extracts], location_index=plan.index)
    geometries, seen = Geometries(geojson), _Seen(2 if plan.several else 1)
    failures = []
    for path, layers in plan.extracts:
        try:
            deliver(path, layers, read_features(path, layers, plan.index, geometries, seen, report, plan.bbox))
        except RuntimeError as error:
            failures.append(unreadable(path, error))
    if plan.index.startswith("sparse_file_array,"):
        Path(plan.index.split(",", 1)[1]).unlink(missing_ok=True)
    return report, failures


def unreadable(path: Path, error: Exception) -> str:
    return f"{path}: cannot be read to its end ({' '.join(str(error).split())}); expected a whole PBF file"


# --- the reader processes -----------------------------------------------------------------------------


class Readers:
    """The reader processes of a direct load (two: READERS or READERS_ON_DISK), forked (Linux) before the
    loader opens any connection and told their ReadPlan once the load is planned; they die with the loader.
    Per (kind, layer) a bounded queue of JobStream messages, one source after the other; their reports at
    the end."""

    def __init__(self) -> None:
        import multiprocessing

        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.queues = {(kind, layer): context.Queue(maxsize=QUEUE_BATCHES)
                       for kind in KINDS for layer in KIND_LAYERS[kind]}
        self.plans = [context.Queue() for _ in range(max(len(READERS), len(READERS_ON_DISK)))]
        self.reports: Any = context.Queue()
        self.processes = [context.Process(target=_serve_reader, daemon=True, name=f"ingest-osm-reader-{number}",
                                          args=(plans, self.queues, self.reports))
                          for number, plans in enumerate(self.plans, start=1)]
        for process in self.processes:
            process.start()
        self.sizes: dict[str, int] = {}  # reader -> bytes it will read
        self.pids: dict[str, int | None] = {}  # reader -> its process
        self.location_index = ""

    def start(self, plans: list[ReadPlan]) -> None:
        for number, queue in enumerate(self.plans):
            queue.put(plans[number] if number < len(plans) else None)
        self.sizes = {plan.name: sum(_passes(layers) * path.stat().st_size for path, layers in plan.extracts)
                      for plan in plans}
        self.pids = {plan.name: process.pid for plan, process in zip(plans, self.processes, strict=False)}
        self.location_index = next((plan.index for plan in plans if plan.index), "")

    def stream(self, name: str, layer: str) -> Any:
        from ingest.ordered_pool import JobStream
        from ingest.osm_geojson import SourceError

        return JobStream(self.queues[(kind_of(name), layer)], SourceError)

    def report(self, sources: list[Path]) -> PbfReport:
        """Every reader's report merged (after the streams are consumed)."""
        merged = PbfReport(sources=[str(path) for path in sources], location_index=self.location_index)
        for _ in self.sizes:
            merged.merge(self.reports.get())
        merged.close_relations()
        return merged

    def close(self) -> None:
        for process in self.processes:
            process.terminate()  # a reader may be blocked on a full queue; nothing of its persists
        for process in self.processes:
            process.join()

    def __enter__(self) -> Readers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _passes(layers: dict[str, set[str]]) -> int:
    """Times a reader reads an extract: once, twice for relation areas (see _objects)."""
    return 2 if layers.get("areas") else 1


def _serve_reader(plans: Any, queues: dict[tuple[str, str], Any], reports: Any) -> None:
    from ingest.ordered_pool import _die_with_parent

    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's to handle
    plan = plans.get()
    if plan is None:
        return

    def send(kind: str, layer: str, message: tuple) -> None:
        queues[(kind, layer)].put(message)

    try:
        if native_reader() is not None:
            report = read_natively(plan, send)
        else:
            report, _ = run_reader(plan, lambda path, layers, features: _copy_rows(path, layers, features, send),
                                   geojson=False)
    except Exception as error:  # a bug: tell the writers rather than leave them waiting
        for kind, layers in plan.produces.items():
            for layer in layers:
                send(kind, layer, ("crashed", f"{type(error).__name__}: {error} (in the {plan.name} reader)"))
        raise
    reports.put(report)


class ReadProgress:
    """One bar on stderr for the readers: the bytes of the extracts they have read (from /proc/PID/io on
    Linux; osmium does not say where it is in a file), with the rate and the time left, and the features
    sent to the tables so far (`features()`)."""

    def __init__(self, readers: Readers, enabled: bool, features: Callable[[], int]) -> None:
        self.readers, self.features = readers, features
        self.bar = tqdm(total=sum(readers.sizes.values()), unit="B", unit_scale=True, disable=not enabled,
                        desc="ingest osm: reading the extracts")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True, name="ingest-osm-progress")

    def __enter__(self) -> ReadProgress:
        if not self.bar.disable:
            index = self.readers.location_index
            if index:
                where = "in memory" if index == "flex_mem" else f"on disk in {index.split(',', 1)[1]}"
                self.bar.write(f"node locations: {index.split(',')[0]} ({where})", file=sys.stderr)
            self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        if exc_info[0] is None:
            self._advance_to(self.bar.total)
        self.bar.close()

    def _poll(self) -> None:
        read = dict.fromkeys(self.readers.sizes, 0)
        while not self.stop.wait(0.5):
            for reader, limit in self.readers.sizes.items():
                read[reader] = max(read[reader], min(limit, _bytes_read(self.readers.pids[reader])))
            self._advance_to(sum(read.values()))

    def _advance_to(self, bytes_read: int) -> None:
        self.bar.set_postfix_str(f"{self.features():,} features", refresh=False)
        self.bar.update(bytes_read - self.bar.n)


def _bytes_read(pid: int | None) -> int:
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/io") as stats:
            for line in stats:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    return 0


# --- export ---------------------------------------------------------------------------------------------


def export(paths: list[Path], folder: Path, bbox: tuple[float, float, float, float] | None = None,
           progress: bool = True) -> PbfReport:
    """--export-geojson: write the osmx-style layers (`<layer>/<source name>`, one feature per line) to
    `folder`, the readers (reader_plans) at the same time."""
    started = time.monotonic()
    check_inputs(paths, bbox)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {layer: set(layer_sources(paths, layer)) for layer in LAYERS}
    plans = reader_plans(paths, wanted, folder, bbox)
    report = PbfReport(sources=[str(path) for path in paths])
    failures: list[str] = []
    with _export_pool(len(plans)) as pool, tqdm(total=len(plans), unit=" readers", disable=not progress,
                                                desc="ingest osm: exporting") as bar:
        for part, failed in pool.imap_unordered(_export_one, [(plan, folder) for plan in plans]):
            report.merge(part)
            report.location_index = report.location_index or part.location_index
            failures += failed
            bar.update()
    if failures:
        raise GsqaError(failures[0])
    report.close_relations()
    if bbox is not None and not report.features:
        raise GsqaError(f"--bbox {','.join(map(str, bbox))} holds none of the features of the extracts "
                        f"(they cover {'; '.join(extent(path) for path in paths)})")
    report.seconds = time.monotonic() - started
    return report


def _export_pool(processes: int) -> Any:
    import multiprocessing

    return multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn").Pool(processes)


def _export_one(task: tuple[ReadPlan, Path]) -> tuple[PbfReport, list[str]]:
    plan, folder = task
    return run_reader(plan, lambda path, layers, features: _geojson_files(path, layers, features, folder),
                      geojson=True)


# --- checks before anything starts ------------------------------------------------------------------------


def check_inputs(paths: list[Path], bbox: tuple[float, float, float, float] | None) -> None:
    """One line for the first input that cannot be read whole, or a box none of the extracts reach."""
    import osmium

    for path in paths:
        if not path.is_file():
            raise GsqaError(f"{path}: no such file")
        if path.stat().st_size == 0:
            raise GsqaError(f"{path}: empty file, expected an OpenStreetMap PBF extract")
        if not is_pbf(path):
            raise GsqaError(f"{path}: not an OpenStreetMap PBF file (no OSMHeader block at its start)")
        try:
            osmium.io.Reader(osmium.io.File(str(path), "pbf"), osmium.osm.NOTHING).header()
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


def _header_box(path: Path) -> Any:
    import osmium

    return osmium.io.Reader(osmium.io.File(str(path), "pbf"), osmium.osm.NOTHING).header().box()


def _box_reaches(path: Path, bbox: tuple[float, float, float, float]) -> bool:
    """Does the extract's header box overlap W,S,E,N? (No box in the header: assume it does.)"""
    box = _header_box(path)
    if not box.valid():
        return True
    return (box.bottom_left.lon <= bbox[2] and box.top_right.lon >= bbox[0]
            and box.bottom_left.lat <= bbox[3] and box.top_right.lat >= bbox[1])


def extent(path: Path) -> str:
    """The extract's bounding box as its header gives it, W,S,E,N."""
    box = _header_box(path)
    if not box.valid():
        return f"{path.name}: no bounding box in its header"
    return (f"{path.name}: {box.bottom_left.lon:.4f},{box.bottom_left.lat:.4f},"
            f"{box.top_right.lon:.4f},{box.top_right.lat:.4f}")
