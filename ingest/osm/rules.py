"""The OSM rules, declared here as data: which OpenStreetMap object becomes a feature of which osmx layer
(OSMX_RULES, the PBF path only), and which feature becomes which rows of the five vector tables, with what
values (loader 1's rules, both paths).

"Loader 1" is the set of `*_processor.py` scripts that built the database the stored answers come from
(docs/REFERENCE-DB.md, Load rules). The GeoJSON reader (`geojson.py`) and the pyosmium PBF reader
(`pbf/pyosmium.py`) hand every feature to `rows_of`; the native PBF reader (`pbf/_osmread.cpp`) applies the same
rules in C++, given as data by `pbf/native.py` from the declarations here:

- each table column is looked up in the feature's tags: the name column from `name`, a column `addr_x`
  from the tag `addr:x` (every underscore becomes a colon), any other column from the tag of its own name;
  a missing tag is NULL;
- a value is stored as Python's `str(value)` of the decoded JSON value (so `12` -> "12", `true` -> "True",
  `null` -> "None"), unchanged: no trimming, no case folding;
- `osm_id` (pois and parks only) is the feature's `id`, an integer;
- pois keeps only named features whose `tourism`, `amenity` or `leisure` value is in loader 1's lists, in
  three category passes (tourism, amenity, leisure) over all files: a feature in two lists yields two rows;
- nothing is repaired, de-duplicated or coerced.

A feature loader 1 could not have inserted (its INSERT would have failed) raises BadFeature with the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from gsqa_core import schema

VARCHAR_LIMIT = 255

# Loader 1's category lists, in its pass order; matched exactly (case-sensitive), name required.
POI_PASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tourism", ("aquarium", "attraction", "viewpoint", "art_gallery", "theme_park", "museum",
                 "bed_and_breakfast", "gallery", "zoo", "hotel")),
    ("amenity", ("restaurant", "hospital", "university", "food", "fast_food", "coffee", "cafe")),
    ("leisure", ("park", "beach_resort", "golf_course", "nature_reserve", "garden", "stadium")),
)


class BadFeature(ValueError):
    """A feature that cannot become a row; the message says what was expected."""


MISSING = object()  # a feature without properties.id (loader 1 read it for every row it inserted)


@dataclass(frozen=True, eq=False)
class Layer:
    """One osmx layer folder and the table it fills. What the rules look up per feature is computed once
    here (compared and hashed by identity: a Layer is a constant)."""

    folder: str
    table: schema.Table
    name_column: str
    in_passes: bool = False  # pois: rows are numbered pass by pass over all files, not file by file
    columns: tuple[str, ...] = field(init=False)  # what a row carries, in table order after `id`: geometry first
    tag_columns: dict[str, int] = field(init=False)  # tag key -> position among the attribute columns
    osm_id_index: int | None = field(init=False)

    def __post_init__(self) -> None:
        columns = tuple(column.name for column in self.table.columns if column.name != "id")
        attributes = columns[1:]
        # `addr:x` fills addr_x, any other column the tag of its own name (the name column reads its own
        # name too, but only when there is no `name` tag).
        tags = {(column.replace("_", ":") if column.startswith("addr_") else column): index
                for index, column in enumerate(attributes) if column != "osm_id"}
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "tag_columns", tags)
        object.__setattr__(self, "osm_id_index", attributes.index("osm_id") if "osm_id" in attributes else None)

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def has_osm_id(self) -> bool:
        return self.osm_id_index is not None

    @property
    def attribute_columns(self) -> tuple[str, ...]:
        return self.columns[1:]


LAYERS: dict[str, Layer] = {
    "pois": Layer("pois", schema.pois, "poi_name", in_passes=True),
    "roads": Layer("roads", schema.roads, "road_name"),
    "parks": Layer("parks", schema.parks, "park_name"),
    "lakes": Layer("lakes", schema.lakes, "lake_name"),
    "regions": Layer("postal_codes", schema.regions, "region_name"),
}
LAYER_BY_FOLDER = {layer.folder: layer for layer in LAYERS.values()}


def python_str(value: Any) -> str:
    """What loader 1 stored for a decoded JSON value: str() of it (json.loads types)."""
    return value if isinstance(value, str) else str(value)


def poi_passes(tags: dict[str, Any]) -> list[int]:
    """The pass numbers (0 tourism, 1 amenity, 2 leisure) in which loader 1 inserts a pois feature."""
    if "name" not in tags:
        return []
    return [number for number, (key, values) in enumerate(POI_PASSES) if key in tags and tags[key] in values]


_POI_KEYS = tuple((f'"{key}"'.encode(), frozenset(value.encode() for value in values)) for key, values in POI_PASSES)
_STRING_AFTER_KEY = re.compile(rb'[ \t\r\n]*:[ \t\r\n]*"([^"]*)"')


def may_yield_rows(layer: Layer, raw: bytes) -> bool:
    """False when the raw JSON text of a feature cannot pass the layer's filter, so it need not be parsed:
    a pois feature must spell out `"name"` and a category key followed by one of its listed values. Anything
    unusual is parsed anyway: an escape sequence anywhere, a category key that appears twice or is not
    followed by `: "string"`."""
    if not layer.in_passes or b"\\" in raw:
        return True
    if b'"name"' not in raw:
        return False
    for key, values in _POI_KEYS:
        start = raw.find(key)
        if start < 0:
            continue
        value = _STRING_AFTER_KEY.match(raw, start + len(key))
        if value is None or value[1] in values or raw.find(key, start + 1) >= 0:
            return True
    return False


def osm_id_of(layer: Layer, feature_id: Any) -> int | None:
    """The osm_id column value; loader 1 wrote `id` unquoted into a BIGINT, so it must be an integer."""
    if feature_id is MISSING:
        raise BadFeature("properties.id is missing")
    if not layer.has_osm_id:
        return None
    if isinstance(feature_id, int) and not isinstance(feature_id, bool):
        number = feature_id
    elif isinstance(feature_id, str) and feature_id.strip().lstrip("-").isdigit() and feature_id.isascii():
        number = int(feature_id)
    else:
        raise BadFeature(f"properties.id {feature_id!r} is not an integer")
    if not -(2**63) <= number < 2**63:
        raise BadFeature(f"properties.id {feature_id!r} does not fit in a BIGINT")
    return number


def _text(layer: Layer, key: str, value: Any) -> str:
    text = value if type(value) is str else python_str(value)
    if len(text) > VARCHAR_LIMIT:
        raise BadFeature(f"tag {key!r} is {len(text)} characters long; {layer.name} columns hold {VARCHAR_LIMIT}")
    if "\x00" in text:
        raise BadFeature(f"tag {key!r} contains a NUL character, which PostgreSQL text cannot hold")
    return text


Values = dict[int, str | int]  # position among the attribute columns -> value; absent means NULL


def attribute_values(layer: Layer, feature_id: Any, tags: dict[str, Any]) -> Values:
    """The row's non-NULL values after geometry, by column position, as loader 1 computed them. The work
    is per tag present, not per column: most columns of most rows are NULL."""
    columns = layer.tag_columns
    osm_id = osm_id_of(layer, feature_id)  # loader 1 read the id of every feature it inserted, in every layer
    values: Values = {}
    for key, value in tags.items():
        index = columns.get(key)
        if index is not None:  # the common case, a short clean string, without a call
            unusual = type(value) is not str or len(value) > VARCHAR_LIMIT or "\x00" in value
            values[index] = _text(layer, key, value) if unusual else value
    if "name" in tags:
        values[columns[layer.name_column]] = _text(layer, "name", tags["name"])
    if osm_id is not None:
        values[layer.osm_id_index] = osm_id
    return values


def rows_of(layer: Layer, feature_id: Any, tags: Any) -> list[tuple[int, Values]]:
    """(pass number, attribute values) of each row a feature becomes: none, one, or (pois) up to three."""
    if not isinstance(tags, dict):
        raise BadFeature("properties.tagsMap is missing or not an object")
    passes = poi_passes(tags) if layer.in_passes else [0]
    if not passes:
        return []
    values = attribute_values(layer, feature_id, tags)
    return [(number, values) for number in passes]


# --- the osmx classification: which OSM object becomes a feature of which layer -----------------------------

NODES, WAYS, AREAS = "nodes", "ways", "areas"  # the objects a rule applies to
# Shapes: a node's Point; a way's LineString, or (LINE_OR_RING) a Polygon of its one ring when the way is closed
# (first node = last, 4 or more nodes); an area's Polygon: of a closed way's ring, or of a multipolygon or
# boundary relation's rings as osmium assembles them (a MultiPolygon for more than one outer ring).
POINT, LINE, LINE_OR_RING, AREA = "point", "line", "line, or ring when closed", "area"
SHAPES = {NODES: (POINT,), WAYS: (LINE, LINE_OR_RING), AREAS: (AREA,)}
AREA_RELATION_TYPES = ("multipolygon", "boundary")  # the relations osmium assembles into areas


@dataclass(frozen=True)
class OsmxRule:
    """An object of kind `objects` with the tag `key` becomes a feature of the osmx layer (folder) `layer`:
    when its value is one of `values` (any value when there are none) and not one of `except_values`, and
    the object also has the tag `with_tag` (when one is named)."""

    layer: str
    objects: str
    key: str
    values: tuple[str, ...] = ()
    except_values: tuple[str, ...] = ()
    shape: str = AREA
    with_tag: str = ""

    def __post_init__(self) -> None:
        if self.layer not in LAYER_BY_FOLDER or self.shape not in SHAPES.get(self.objects, ()):
            raise ValueError(f"{self}: no such layer, or a shape its objects cannot have")

    def matches(self, tags: dict[str, str]) -> bool:
        value = tags.get(self.key)
        return (value is not None and (not self.values or value in self.values)
                and value not in self.except_values and (not self.with_tag or self.with_tag in tags))


# What osmx made of OpenStreetMap, as the benchmark's answers show it (docs/REFERENCE-DB.md, The PBF path). A
# layer's features of one kind of object come in the order of the layers' first rules here; an object gives
# at most one feature per layer and kind (a closed way may give a line and an area of the same layer). pois
# needs a name: loader 1 keeps no others.
OSMX_RULES: tuple[OsmxRule, ...] = (
    OsmxRule("pois", NODES, "tourism", shape=POINT, with_tag="name"),
    OsmxRule("pois", NODES, "amenity", shape=POINT, with_tag="name"),
    OsmxRule("pois", NODES, "leisure", shape=POINT, with_tag="name"),
    OsmxRule("parks", NODES, "leisure", shape=POINT),
    OsmxRule("roads", WAYS, "highway", shape=LINE_OR_RING),
    OsmxRule("lakes", WAYS, "waterway", except_values=("riverbank",), shape=LINE),
    OsmxRule("lakes", AREAS, "natural", ("water", "bay", "wetland")),
    OsmxRule("lakes", AREAS, "waterway", ("riverbank",)),
    OsmxRule("lakes", AREAS, "landuse", ("reservoir",)),
    OsmxRule("parks", AREAS, "leisure"),
    OsmxRule("parks", AREAS, "boundary", ("national_park", "protected_area")),
    OsmxRule("postal_codes", AREAS, "boundary", ("administrative", "postal_code")),
)


def rules_for(objects: str) -> tuple[OsmxRule, ...]:
    return tuple(rule for rule in OSMX_RULES if rule.objects == objects)


def _unique(items: Any) -> tuple:
    return tuple(dict.fromkeys(items))


def matching(rules: tuple[OsmxRule, ...], tags: dict[str, str]) -> list[OsmxRule]:
    """The first matching rule of each layer, in the order of the declaration."""
    found: dict[str, OsmxRule] = {}
    for rule in rules:
        if rule.layer not in found and rule.matches(tags):
            found[rule.layer] = rule
    return list(found.values())


# Derived: the layers each kind of source of a PBF extract serves (areas: of relations; closed ways' areas come
# with the ways), the keys an object needs to be read at all, and the version of the rules a source was loaded
# with (a source loaded under other rules is loaded again).
NODE_RULES, WAY_RULES, AREA_RULES = rules_for(NODES), rules_for(WAYS), rules_for(AREAS)
KIND_LAYERS = {NODES: _unique(rule.layer for rule in NODE_RULES),
               WAYS: _unique(rule.layer for rule in WAY_RULES + AREA_RULES),
               AREAS: _unique(rule.layer for rule in AREA_RULES)}
NODE_KEYS = _unique(rule.key for rule in NODE_RULES)
AREA_KEYS = _unique(rule.key for rule in AREA_RULES)
WAY_KEYS = {layer: _unique(rule.key for rule in WAY_RULES + AREA_RULES if rule.layer == layer)
            for layer in KIND_LAYERS[WAYS]}  # a way without one of its layers' keys gives none of their features


def rules_version(rules: tuple[OsmxRule, ...]) -> str:
    """A hash of the classification, logged with every source a PBF load writes."""
    declared = [[*vars(rule).values()] for rule in rules] + [list(AREA_RELATION_TYPES)]
    return hashlib.sha256(json.dumps(declared).encode()).hexdigest()[:16]


RULES_VERSION = rules_version(OSMX_RULES)
