-- The five layers as `ingest osm FILE.osm.pbf` derives them (ingest/osm_pbf.py), as an osm2pgsql flex style:
-- the anchor of bench/osm_pbf.py. Tags go to a jsonb column and geometries to geometry(4326) columns
-- (ingest osm writes geography and one column per tag, so the two do comparable work, not the same).
-- GSQA_BENCH_LOAD_ONLY=1: the tables are neither clustered by geometry nor indexed (osm2pgsql's defaults do
-- both), to compare the load alone with `ingest osm`, which does neither.
local load_only = os.getenv('GSQA_BENCH_LOAD_ONLY') == '1'
local tables = {}
local function table_of(name, geometry)
    return osm2pgsql.define_table({ name = 'bench_' .. name, ids = { type = 'any', id_column = 'osm_id', type_column = 'osm_type' },
        cluster = load_only and 'no' or 'auto', indexes = load_only and {} or nil,
        columns = { { column = 'tags', type = 'jsonb' },
                    { column = 'geom', type = geometry, projection = 4326, not_null = true } } })
end
tables.pois = table_of('pois', 'point')
tables.roads = table_of('roads', 'geometry')
tables.parks = table_of('parks', 'geometry')
tables.lakes = table_of('lakes', 'geometry')
tables.regions = table_of('regions', 'geometry')

local lake_natural = { water = true, bay = true, wetland = true }
local park_boundary = { national_park = true, protected_area = true }
local region_boundary = { administrative = true, postal_code = true }

local function area_tables(tags)
    local found = {}
    if lake_natural[tags.natural] or tags.waterway == 'riverbank' or tags.landuse == 'reservoir' then
        found[#found + 1] = tables.lakes
    end
    if tags.leisure or park_boundary[tags.boundary] then found[#found + 1] = tables.parks end
    if region_boundary[tags.boundary] then found[#found + 1] = tables.regions end
    return found
end

function osm2pgsql.process_node(object)
    local tags = object.tags
    if tags.name and (tags.tourism or tags.amenity or tags.leisure) then
        tables.pois:insert({ tags = tags, geom = object:as_point() })
    end
    if tags.leisure then tables.parks:insert({ tags = tags, geom = object:as_point() }) end
end

function osm2pgsql.process_way(object)
    local tags = object.tags
    if tags.highway then
        local closed = object.is_closed and #object.nodes >= 4
        tables.roads:insert({ tags = tags, geom = closed and object:as_polygon() or object:as_linestring() })
    end
    if tags.waterway and tags.waterway ~= 'riverbank' then
        tables.lakes:insert({ tags = tags, geom = object:as_linestring() })
    end
    if object.is_closed and #object.nodes >= 4 then
        for _, target in ipairs(area_tables(tags)) do
            target:insert({ tags = tags, geom = object:as_polygon() })
        end
    end
end

function osm2pgsql.process_relation(object)
    local kind = object.tags.type
    if kind == 'multipolygon' or kind == 'boundary' then
        for _, target in ipairs(area_tables(object.tags)) do
            target:insert({ tags = object.tags, geom = object:as_multipolygon() })
        end
    end
end
