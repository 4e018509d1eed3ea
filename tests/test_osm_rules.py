"""The OSM rules of ingest/osm/rules.py without a database: loader 1's, feature by feature, and the osmx
classification (with the osm2pgsql style of bench/ that mirrors it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.osm import rules
from ingest.osm.rules import (
    AREAS,
    LAYERS,
    MISSING,
    NODES,
    POI_PASSES,
    WAYS,
    BadFeature,
    OsmxRule,
    may_yield_rows,
    python_str,
    rows_of,
)

POIS, ROADS, PARKS, REGIONS = LAYERS["pois"], LAYERS["roads"], LAYERS["parks"], LAYERS["regions"]


def row(layer, tags, feature_id=1) -> dict[str, object]:
    (_, values), = rows_of(layer, feature_id, tags)
    return {layer.attribute_columns[index]: value for index, value in values.items()}


@pytest.mark.parametrize("key, value", [(key, value) for key, values in POI_PASSES for value in values])
def test_every_listed_category_passes_with_a_name(key: str, value: str) -> None:
    number = [k for k, _ in POI_PASSES].index(key)
    assert [n for n, _ in rows_of(POIS, 1, {"name": "x", key: value})] == [number]
    assert rows_of(POIS, 1, {key: value}) == []  # no name: not a pois row


@pytest.mark.parametrize("tags", [
    {"name": "x", "tourism": "Museum"}, {"name": "x", "tourism": "museum "}, {"name": "x", "amenity": "bar"},
    {"name": "x", "leisure": "pitch"}, {"name": "x", "shop": "museum"}, {"name": "x", "tourism": ["museum"]},
])
def test_near_misses_are_not_pois(tags: dict) -> None:
    assert rows_of(POIS, 1, tags) == []


def test_a_feature_in_two_or_three_lists_is_a_row_per_pass() -> None:
    tags = {"name": "x", "tourism": "hotel", "amenity": "cafe", "leisure": "park"}
    assert [number for number, _ in rows_of(POIS, 1, tags)] == [0, 1, 2]
    assert [number for number, _ in rows_of(POIS, 1, {"name": "x", "tourism": "zoo", "leisure": "garden"})] == [0, 2]


def test_values_are_python_str_of_the_decoded_json() -> None:
    values = row(POIS, {"name": "N", "tourism": "museum", "capacity": 12, "wheelchair": True, "fee": None,
                        "cuisine": 1.5, "website": " Spaced "})
    assert values == {"poi_name": "N", "osm_id": 1, "tourism": "museum", "capacity": "12", "wheelchair": "True",
                      "fee": "None", "cuisine": "1.5", "website": " Spaced "}
    assert python_str({"a": 1}) == "{'a': 1}" and python_str(1e16) == "1e+16"


def test_addr_columns_read_colon_tags_and_the_name_column_prefers_name() -> None:
    values = row(ROADS, {"addr:city": "Austin", "addr_city": "ignored", "addr:housenumber": "7", "road_name": "raw",
                         "name": "Main", "tiger:cfcc": "A41"})
    assert values == {"road_name": "Main", "addr_city": "Austin", "addr_housenumber": "7"}
    assert row(ROADS, {"road_name": "raw"}) == {"road_name": "raw"}  # loader 1 looked the column name up too


def test_osm_id_only_where_the_table_has_it() -> None:
    assert "osm_id" in POIS.columns and "osm_id" in PARKS.columns
    assert "osm_id" not in ROADS.columns and "osm_id" not in REGIONS.columns
    assert row(PARKS, {"leisure": "park"}, feature_id="42")["osm_id"] == 42
    assert row(ROADS, {"highway": "service"}, feature_id="not a number") == {"highway": "service"}


@pytest.mark.parametrize("layer, feature_id, tags, message", [
    (PARKS, "abc", {}, "not an integer"),
    (PARKS, 1.5, {}, "not an integer"),
    (PARKS, True, {}, "not an integer"),
    (PARKS, 2**63, {}, "BIGINT"),
    (ROADS, MISSING, {}, "missing"),
    (ROADS, 1, {"highway": "x" * 256}, "256 characters"),
    (ROADS, 1, {"name": "a\x00b"}, "NUL"),
    (ROADS, 1, None, "tagsMap"),
    (ROADS, 1, ["a"], "tagsMap"),
])
def test_what_loader_1_could_not_insert_is_a_bad_feature(layer, feature_id, tags, message: str) -> None:
    with pytest.raises(BadFeature, match=message):
        rows_of(layer, feature_id, tags)


def test_255_characters_fit_and_only_stored_tags_count() -> None:
    assert row(ROADS, {"highway": "x" * 255})["highway"] == "x" * 255
    assert row(ROADS, {"highway": "a", "note": "y" * 1000}) == {"highway": "a"}  # note is not a roads column


def test_the_pois_prefilter_never_drops_a_feature_the_rules_keep() -> None:
    assert may_yield_rows(POIS, b'{"tagsMap": {"name": "x", "tourism": "museum"}}')
    assert not may_yield_rows(POIS, b'{"tagsMap": {"tourism": "museum"}}')
    assert not may_yield_rows(POIS, b'{"tagsMap": {"name": "x", "shop": "bakery"}}')
    assert may_yield_rows(POIS, b'{"tagsMap": {"n\\u0061me": "x", "tourism": "museum"}}')  # escapes: parse it
    assert may_yield_rows(ROADS, b"anything")
    assert may_yield_rows(POIS, b'{"tagsMap": {"name": "x", "amenity" :\n "cafe"}}')  # JSON's whitespace
    assert not may_yield_rows(POIS, b'{"tagsMap": {"name": "x", "amenity": "museum"}}')  # a tourism value
    assert not may_yield_rows(POIS, b'{"tagsMap": {"name": "x", "amenity": "bench", "leisure": "pitch"}}')
    assert may_yield_rows(POIS, b'{"tagsMap": {"name": "x", "note": "amenity", "amenity": "cafe"}}')
    assert may_yield_rows(POIS, b'{"id": {"amenity": "no"}, "tagsMap": {"name": "x", "amenity": "cafe"}}')
    assert may_yield_rows(POIS, b'{"tagsMap": {"name": "x", "leisure": 5}}')  # not a string: the rules decide


# The osmx classification, written out independently of the declaration: (objects, tags) -> (layer, rule shape).
CLASSIFIED = [
    (NODES, {"amenity": "bench"}, []),
    (NODES, {"amenity": "cafe", "name": "C"}, [("pois", "point")]),
    (NODES, {"tourism": "x", "name": "T"}, [("pois", "point")]),
    (NODES, {"leisure": "park"}, [("parks", "point")]),
    (NODES, {"leisure": "park", "name": "P"}, [("pois", "point"), ("parks", "point")]),
    (NODES, {"highway": "crossing", "name": "N"}, []),
    (WAYS, {"highway": "residential"}, [("roads", "line, or ring when closed")]),
    (WAYS, {"waterway": "river"}, [("lakes", "line")]),
    (WAYS, {"waterway": "riverbank"}, []),
    (WAYS, {"building": "yes", "natural": "water"}, []),
    (AREAS, {"natural": "water"}, [("lakes", "area")]),
    (AREAS, {"natural": "lagoon"}, []),
    (AREAS, {"waterway": "riverbank"}, [("lakes", "area")]),
    (AREAS, {"waterway": "river"}, []),
    (AREAS, {"landuse": "reservoir", "leisure": "marina"}, [("lakes", "area"), ("parks", "area")]),
    (AREAS, {"boundary": "protected_area"}, [("parks", "area")]),
    (AREAS, {"boundary": "administrative"}, [("postal_codes", "area")]),
    (AREAS, {"boundary": "postal_code", "natural": "bay"}, [("lakes", "area"), ("postal_codes", "area")]),
    (AREAS, {"boundary": "political"}, []),
]


@pytest.mark.parametrize("objects, tags, expected", CLASSIFIED)
def test_the_osmx_classification(objects: str, tags: dict, expected: list) -> None:
    found = rules.matching(rules.rules_for(objects), tags)
    assert [(rule.layer, rule.shape) for rule in found] == expected


def test_what_the_readers_filter_on_derives_from_the_declaration() -> None:
    assert rules.KIND_LAYERS == {"nodes": ("pois", "parks"), "ways": ("roads", "lakes", "parks", "postal_codes"),
                                 "areas": ("lakes", "parks", "postal_codes")}
    assert rules.NODE_KEYS == ("tourism", "amenity", "leisure")
    assert rules.AREA_KEYS == ("natural", "waterway", "landuse", "leisure", "boundary")
    assert rules.WAY_KEYS == {"roads": ("highway",), "lakes": ("waterway", "natural", "landuse"),
                              "parks": ("leisure", "boundary"), "postal_codes": ("boundary",)}


def test_a_new_rule_is_one_entry_and_changes_the_rules_version() -> None:
    lagoon = OsmxRule("lakes", AREAS, "natural", ("lagoon",))
    extended = (*rules.OSMX_RULES, lagoon)
    assert rules.matching(tuple(rule for rule in extended if rule.objects == AREAS), {"natural": "lagoon"}) == [lagoon]
    assert rules.rules_version(extended) != rules.RULES_VERSION == rules.rules_version(rules.OSMX_RULES)
    assert len(rules.RULES_VERSION) == 16


@pytest.mark.parametrize("rule", [dict(layer="regions", objects=AREAS, key="boundary"),
                                  dict(layer="roads", objects=NODES, key="highway"),
                                  dict(layer="roads", objects=WAYS, key="highway", shape="area")])
def test_a_rule_names_a_layer_folder_and_a_shape_its_objects_can_have(rule: dict) -> None:
    with pytest.raises(ValueError, match="no such layer, or a shape its objects cannot have"):
        OsmxRule(**rule)


def lua_set(values: tuple[str, ...]) -> str:
    return "{ " + ", ".join(f"['{value}'] = true" for value in values) + " }" if values else "{}"


def lua_rules() -> str:
    """The classification as the Lua of bench/osm2pgsql_flex.lua, between its OSMX_RULES lines."""
    lines = ["local rules = {"]
    for objects in (NODES, WAYS, AREAS):
        lines.append(f"    {objects} = {{")
        lines += [f"        {{ layer = '{rule.layer}', key = '{rule.key}', values = {lua_set(rule.values)}, "
                  f"except_values = {lua_set(rule.except_values)}, "
                  f"with_tag = {repr(rule.with_tag) if rule.with_tag else 'nil'}, "
                  f"ring_when_closed = {str(rule.shape == rules.LINE_OR_RING).lower()} }},"
                  for rule in rules.rules_for(objects)]
        lines.append("    },")
    return "\n".join([*lines, "}", f"local area_relation_types = {lua_set(rules.AREA_RELATION_TYPES)}"])


def test_the_osm2pgsql_style_of_the_benchmark_mirrors_the_declaration() -> None:
    style = (Path(__file__).resolve().parent.parent / "bench" / "osm2pgsql_flex.lua").read_text()
    block = style.split("-- BEGIN OSMX_RULES\n", 1)[1].split("\n-- END OSMX_RULES", 1)[0]
    assert block == lua_rules(), f"bench/osm2pgsql_flex.lua: replace its OSMX_RULES block with\n{lua_rules()}"
