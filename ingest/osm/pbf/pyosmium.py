"""The pyosmium PBF reader: OpenStreetMap extracts (`.osm.pbf`) -> the features of the five osmx layers, as the
declaration of rules.py (OSMX_RULES) classifies them, then loader 1's rows.

The portable reader: --export-geojson reads with it always, a direct load where the native reader
(native.py) is not built or is switched off; both give the same features, and a direct load the same rows,
byte for byte. Every feature is what osmx wrote: the OSM id (no type marker), all tags, a geometry; it becomes
rows through loader 1's rules (rows_of), exactly as a published GeoJSON feature does.

Areas are closed ways and multipolygon/boundary relations assembled by osmium's area assembler; one ring
set is a Polygon, more a MultiPolygon. What cannot be built (a way with nodes outside the extract, a
relation whose rings do not close) is counted and listed by OSM type and id, never fatal.

Several extracts: an object already taken from an earlier one ((type, id), in each reader's source name
order) is skipped, as neighbouring Geofabrik extracts share the objects that cross their border.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import repeat
from pathlib import Path
from typing import Any

import osmium
from osmium.area import AreaManager
from osmium.filter import EntityFilter, IdFilter, KeyFilter

from ingest.osm.batches import Batcher
from ingest.osm.features import envelope_overlaps, row_packer
from ingest.osm.pbf.plans import ReadPlan, read_extracts
from ingest.osm.pbf.sources import KINDS, PbfReport, source_name, unreadable
from ingest.osm.rules import (
    AREA_KEYS,
    AREA_RELATION_TYPES,
    AREA_RULES,
    KIND_LAYERS,
    LAYER_BY_FOLDER,
    LINE_OR_RING,
    NODE_KEYS,
    NODE_RULES,
    WAY_KEYS,
    WAY_RULES,
    BadFeature,
    matching,
    rows_of,
)

# --- geometries: osmium's C++ factories, GeoJSON text for an export, WKB for a load without the native reader ---

_POLYGON_OF_ONE_RING = b"\x01\x03\x00\x00\x00\x01\x00\x00\x00"  # little-endian Polygon, 1 ring


class Geometries:
    """Geometries of one output format (shapes: point, line, ring, multi), the same WKB as the native reader
    makes; InvalidLocationError or RuntimeError when an object has none (a node outside the extract, rings that
    do not close)."""

    def __init__(self, geojson: bool) -> None:
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
    import shapely  # here, not at the top: its import is a sixth of a load's start (see features.shapely_wkb)

    built = shapely.from_geojson(geometry) if isinstance(geometry, str) else shapely.from_wkb(geometry)
    return envelope_overlaps(built, bbox)


# --- reading --------------------------------------------------------------------------------------------


def _tags(data: Any) -> dict[str, str]:
    """The tags of an object's C++ data (`obj._pyosmium_data`). pyosmium's TagList iterator wraps each tag
    in Python objects (dict(obj.tags) is about 10 us per object, most of a reader's time); its C++
    accessors, mapped without a Python loop, cost a fifth of that. They are internal (pyosmium's 4.x API, as
    pyproject requires): the tests read tags of every kind through this."""
    return dict(map(data.tags_next, repeat(data.tags_begin(), data.tags_size())))


def _objects(layers: dict[str, set[str]], path: Path, index: str, report: PbfReport,
             sent_areas: set[str]) -> Iterator[Any]:
    """osmium reading one extract for one reader (`layers`: kind -> the layers it reads the extract for;
    `sent_areas`: the area layers whose relations it reports when not assembled), in the order of the file:
    nodes, ways, then the areas osmium assembles from multipolygon and boundary relations with area tags. C++
    filters let only the objects of the layers through to Python. Ways and areas need node locations; a node
    carries its own.

    The first read of the file takes the nodes (their locations), the ways, and hands the relations to the
    area manager's first pass (their member ways); for areas, a second read of the ways and relations feeds
    the area manager's second pass, the assembler, which sees only the member ways (pyosmium's FileProcessor
    hands it every closed way: assembling a city's buildings cost more than all the rest of the reading;
    closed ways' Polygons are made from the ways themselves). pyosmium keeps raw pointers to the handlers:
    all are held in variables until the end."""
    source = osmium.io.File(str(path), "pbf")  # the format from the content, whatever the name says
    kinds = {kind for kind, wanted in layers.items() if wanted}
    pool, manager, members = osmium.io.ThreadPool(), AreaManager(), _Members(report, sent_areas)
    index_map = osmium.index.create_map(index) if "ways" in kinds or "areas" in kinds else None
    locations = [osmium.NodeLocationsForWays(index_map)] if index_map is not None else []
    for handler in locations:
        handler.ignore_errors()
    candidates = KeyFilter(*AREA_KEYS).enable_for(osmium.osm.RELATION)
    relation_handlers = [candidates, members, manager.first_pass_handler()] if "areas" in kinds else []
    passing = EntityFilter((osmium.osm.NODE if "nodes" in kinds else osmium.osm.NOTHING)
                           | (osmium.osm.WAY if "ways" in kinds else osmium.osm.NOTHING))
    # Ways without a key of the layers (buildings, most of a real extract) go before their node locations
    # are looked up: a third of the reading time of a town.
    keys = sorted({key for layer in layers.get("ways", ()) for key in WAY_KEYS[layer]})
    way_keys = [KeyFilter(*keys).enable_for(osmium.osm.WAY)] if keys else []  # no ways read without keys
    node_keys = KeyFilter(*NODE_KEYS).enable_for(osmium.osm.NODE)
    read = osmium.osm.NODE | (osmium.osm.WAY if "ways" in kinds else osmium.osm.NOTHING) \
        | (osmium.osm.RELATION if relation_handlers else osmium.osm.NOTHING)
    with osmium.io.Reader(source, read, thread_pool=pool) as reader:
        yield from osmium.OsmFileIterator(reader, *way_keys, *locations, *relation_handlers, passing, node_keys)
    if not relation_handlers:
        return
    yield None  # the first read is over (read_features: FIRST_READ_OVER)
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
    """First pass: the relations with area rules and their ways; those of the layers sent are wanted, so that
    one not assembled is listed."""

    def __init__(self, report: PbfReport, sent: set[str]) -> None:
        self.report, self.sent = report, sent
        self.ways: set[int] = set()

    def relation(self, relation: Any) -> None:
        tags = _tags(relation._pyosmium_data)
        if tags.get("type") in AREA_RELATION_TYPES and (rules := matching(AREA_RULES, tags)):
            if any(rule.layer in self.sent for rule in rules):
                self.report.wanted_relations.add(relation.id)
            self.ways.update(member.ref for member in relation.members if member.type == "w")


class _Seen:
    """Ids already taken from an earlier extract, in osmium's id sets (512 kB per 4 M-id range touched),
    only when there are several extracts: one extract has no duplicates."""

    def __init__(self, extracts: int) -> None:
        self.sets = {kind: osmium.index.IdSet() for kind in ("node", "way", "relation")} \
            if extracts > 1 else {}

    def first_time(self, kind: str, osm_id: int) -> bool:
        ids = self.sets[kind]
        if osm_id in ids:
            return False
        ids.set(osm_id)
        return True


Feature = tuple[str, str, int, dict[str, str], Any]  # kind, layer, OSM id, tags, geometry
# Not a feature (no layer): the first read of an extract is over, the areas come next. The sources of nodes and
# ways end here, as the native reader ends them, so that both stand when the second read fails (unsorted ids).
FIRST_READ_OVER: Feature = ("areas", "", 0, {}, None)


def read_features(path: Path, layers: dict[str, set[str]], sent: dict[str, set[str]], index: str,
                  geometries: Geometries, seen: _Seen, report: PbfReport,
                  bbox: tuple[float, float, float, float] | None) -> Iterator[Feature]:
    """The features one reader takes from one extract (`layers`: kind -> layers read, for the objects it
    claims; `sent`: those whose features are wanted), in the order osmium hands them over: nodes, ways, then
    relation areas. RuntimeError when osmium cannot read the extract to its end. (The loop runs once per
    object of a US extract that passes the C++ filter: no call or wrapper it can do without.)"""
    kind_of_class = {osmium.osm.Node: "nodes", osmium.osm.Way: "ways", osmium.osm.Area: "areas"}
    first_time = seen.first_time if seen.sets else None
    whole = {kind: set(KIND_LAYERS[kind]) <= layers.get(kind, set()) for kind in KINDS}
    all_sent = {kind: layers.get(kind, set()) <= sent.get(kind, set()) for kind in KINDS}
    features = Counter()
    for obj in _objects(layers, path, index, report, sent.get("areas", set())):
        if obj is None:
            yield FIRST_READ_OVER
            continue
        data = obj._pyosmium_data
        tags = _tags(data)
        kind = kind_of_class[type(obj)]
        osm_id, osm_type, wanted = _classify(kind, data, tags)
        wanted = wanted if whole[kind] else [(layer, shape) for layer, shape in wanted if layer in layers.get(kind, ())]
        if not wanted:
            continue
        if osm_type == "relation":
            report.built_relations.add(osm_id)
        if first_time is not None and not first_time(osm_type, osm_id):
            report.duplicates += 1
            continue
        if not all_sent[kind]:
            wanted = [(layer, shape) for layer, shape in wanted if layer in sent.get(kind, ())]
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
    """OSM id, OSM type, and the (layer, shape) of each feature the object gives: a node a point, a way a
    line (or its ring, see way_features), a relation its areas (multi)."""
    if kind == "ways":
        return data.id(), "way", way_features(tags, data)
    if kind == "nodes":
        return data.id(), "node", [(rule.layer, "point") for rule in matching(NODE_RULES, tags)]
    return data.orig_id(), "relation", [(rule.layer, "multi") for rule in matching(AREA_RULES, tags)]


def way_features(tags: dict[str, str], way: Any) -> list[tuple[str, str]]:
    """(layer, shape) of each feature a way gives by the way rules: "line", or "ring" (a Polygon of the closed
    way); then, for a closed way, a "ring" for each layer of the area rules. `way`: pyosmium's C++ object."""
    lines, areas = matching(WAY_RULES, tags), matching(AREA_RULES, tags)
    if not areas and all(rule.shape != LINE_OR_RING for rule in lines):
        return [(rule.layer, "line") for rule in lines]
    closed = way.is_closed() and way.nodes().size(way) >= 4  # first node = last (by id), 4 or more nodes
    return ([(rule.layer, "ring" if closed and rule.shape == LINE_OR_RING else "line") for rule in lines]
            + [(rule.layer, "ring") for rule in areas if closed])


def _reason(obj: Any, error: Exception) -> str:
    """Why an object has no geometry: for a way, its first node without a location."""
    if obj.is_way():
        missing = next((node.ref for node in obj.nodes if not node.location.valid()), None)
        if missing is not None:
            return f"node {missing} has no location (not in the extract)"
    return str(error)


def run_reader(plan: ReadPlan, deliver: Callable[[Path, dict[str, set[str]], Iterator[Feature]], None],
               geojson: bool, fail: Callable[[dict[str, set[str]], str], None] = lambda layers, why: None,
               ) -> tuple[PbfReport, list[str]]:
    """Read every extract of the plan with pyosmium (for plan.reads); `deliver` consumes each extract's
    features of the layers wanted from it (GeoJSON text geometries or WKB) and, when osmium cannot read the
    extract to its end (a damaged block), ends what it started and raises: the extract is listed, and every
    later one too, unread (plans.read_extracts; `fail` gets their layers and why)."""
    geometries, seen = Geometries(geojson), _Seen(2 if plan.several else 1)

    def read_one(path: Path, layers: dict[str, set[str]]) -> PbfReport:
        part = PbfReport(sources=[])
        deliver(path, layers, read_features(path, plan.reads, layers, plan.index, geometries, seen, part, plan.bbox))
        return part

    return read_extracts(plan, read_one, fail)


def copy_rows(path: Path, layers: dict[str, set[str]], features: Iterator[Feature],
               send: Callable[[str, str, tuple], None]) -> None:
    """A direct load without the native reader: each source's features as binary COPY rows, in batches, then
    the end of the source (the native reader's batches, byte for byte)."""
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
    current = None
    for kind, layer, osm_id, tags, geometry in features:
        if kind != current:  # the ways are over: their sources end here, before the areas'
            for earlier in KINDS[:KINDS.index(kind)]:
                _end_sources(batchers, earlier, send)
            current = kind
        if not layer:  # FIRST_READ_OVER
            continue
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
