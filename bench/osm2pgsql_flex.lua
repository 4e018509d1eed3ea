-- The five layers as `ingest osm FILE.osm.pbf` derives them, as an osm2pgsql flex style: the anchor of
-- bench/osm_pbf.py. The classification below mirrors ingest/osm/rules.py (OSMX_RULES, AREA_RELATION_TYPES);
-- tests/test_osm_rules.py checks the block between the two OSMX_RULES lines against the declaration and
-- prints the block to paste when they differ. Tags go to a jsonb column and geometries to geometry(4326)
-- columns (ingest osm writes geography and one column per tag, so the two do comparable work, not the same).
-- GSQA_BENCH_LOAD_ONLY=1: the tables are neither clustered by geometry nor indexed (osm2pgsql's defaults do
-- both), to compare the load alone with `ingest osm`, which does neither.
local load_only = os.getenv('GSQA_BENCH_LOAD_ONLY') == '1'
local function table_of(name, geometry)
    return osm2pgsql.define_table({ name = 'bench_' .. name, ids = { type = 'any', id_column = 'osm_id', type_column = 'osm_type' },
        cluster = load_only and 'no' or 'auto', indexes = load_only and {} or nil,
        columns = { { column = 'tags', type = 'jsonb' },
                    { column = 'geom', type = geometry, projection = 4326, not_null = true } } })
end
local tables = {  -- by osmx layer folder
    pois = table_of('pois', 'point'),
    roads = table_of('roads', 'geometry'),
    parks = table_of('parks', 'geometry'),
    lakes = table_of('lakes', 'geometry'),
    postal_codes = table_of('regions', 'geometry'),
}

-- BEGIN OSMX_RULES
local rules = {
    nodes = {
        { layer = 'pois', key = 'tourism', values = {}, except_values = {}, with_tag = 'name', ring_when_closed = false },
        { layer = 'pois', key = 'amenity', values = {}, except_values = {}, with_tag = 'name', ring_when_closed = false },
        { layer = 'pois', key = 'leisure', values = {}, except_values = {}, with_tag = 'name', ring_when_closed = false },
        { layer = 'parks', key = 'leisure', values = {}, except_values = {}, with_tag = nil, ring_when_closed = false },
    },
    ways = {
        { layer = 'roads', key = 'highway', values = {}, except_values = {}, with_tag = nil, ring_when_closed = true },
        { layer = 'lakes', key = 'waterway', values = {}, except_values = { ['riverbank'] = true }, with_tag = nil, ring_when_closed = false },
    },
    areas = {
        { layer = 'lakes', key = 'natural', values = { ['water'] = true, ['bay'] = true, ['wetland'] = true }, except_values = {}, with_tag = nil, ring_when_closed = false },
        { layer = 'lakes', key = 'waterway', values = { ['riverbank'] = true }, except_values = {}, with_tag = nil, ring_when_closed = false },
        { layer = 'lakes', key = 'landuse', values = { ['reservoir'] = true }, except_values = {}, with_tag = nil, ring_when_closed = false },
        { layer = 'parks', key = 'leisure', values = {}, except_values = {}, with_tag = nil, ring_when_closed = false },
        { layer = 'parks', key = 'boundary', values = { ['national_park'] = true, ['protected_area'] = true }, except_values = {}, with_tag = nil, ring_when_closed = false },
        { layer = 'postal_codes', key = 'boundary', values = { ['administrative'] = true, ['postal_code'] = true }, except_values = {}, with_tag = nil, ring_when_closed = false },
    },
}
local area_relation_types = { ['multipolygon'] = true, ['boundary'] = true }
-- END OSMX_RULES

local function matches(rule, tags)
    local value = tags[rule.key]
    if value == nil then return false end
    if next(rule.values) ~= nil and not rule.values[value] then return false end
    if rule.except_values[value] then return false end
    return rule.with_tag == nil or tags[rule.with_tag] ~= nil
end

-- The first matching rule of each layer, in the order of the declaration (rules.matching).
local function matching(kind_rules, tags)
    local found, taken = {}, {}
    for _, rule in ipairs(kind_rules) do
        if not taken[rule.layer] and matches(rule, tags) then
            taken[rule.layer] = true
            found[#found + 1] = rule
        end
    end
    return found
end

function osm2pgsql.process_node(object)
    for _, rule in ipairs(matching(rules.nodes, object.tags)) do
        tables[rule.layer]:insert({ tags = object.tags, geom = object:as_point() })
    end
end

function osm2pgsql.process_way(object)
    local tags = object.tags
    local closed = object.is_closed and #object.nodes >= 4
    for _, rule in ipairs(matching(rules.ways, tags)) do
        local ring = rule.ring_when_closed and closed
        tables[rule.layer]:insert({ tags = tags, geom = ring and object:as_polygon() or object:as_linestring() })
    end
    if closed then
        for _, rule in ipairs(matching(rules.areas, tags)) do
            tables[rule.layer]:insert({ tags = tags, geom = object:as_polygon() })
        end
    end
end

function osm2pgsql.process_relation(object)
    if area_relation_types[object.tags.type] then
        for _, rule in ipairs(matching(rules.areas, object.tags)) do
            tables[rule.layer]:insert({ tags = object.tags, geom = object:as_multipolygon() })
        end
    end
end
