// The native PBF reader of a direct load (ingest/osm/pbf/native.py; --export-geojson reads with pyosmium):
// libosmium reads one extract for one reader process and hands over binary COPY rows, in a fraction of the
// pyosmium reader's CPU (docs/PERFORMANCE.md has the figures). It gives the same batches, counts, skip lists and
// report as the pyosmium reader (ingest/osm/pbf/pyosmium.py), byte for byte (tests/test_osm_pbf.py compares them):
// - the rules come from Python as data, declared once in ingest/osm/rules.py: the osmx classification (which
//   node, way or area gives a feature of which layer, with which shape: Classification) and loader 1's rules
//   per layer (tag -> column, the name column, osm_id, the pois category passes and staging rows, the
//   255-character limit in characters: Rules);
// - the first read of the file: nodes (pois, parks points), ways of the wanted layers (after a key check,
//   before their location lookups: most ways of an extract are buildings), relations with area keys into
//   osmium's MultipolygonManager (its first pass) and the wanted/member bookkeeping; the second read (areas
//   wanted only): the member ways with their locations, areas assembled (the manager's second pass); an area
//   made of a closed member way is dropped (the way is a feature of its own);
// - a source's rows go out in ~1 MB batches through emit(kind, layer, data, rows, features, skipped,
//   skipped_count, done); the nodes' and ways' sources end with the first read (the nodes' at the first
//   way), so that a writer waiting for a source's end never waits for the second read;
// - duplicates across the extracts of one reader (Seen): an object is claimed by the layers read (every layer
//   of its kind when there are several extracts), its features made for the layers sent (Sink::sent) only;
// - broken objects with their reasons and the features outside --bbox, of the layers sent: in the report
//   read_extract returns.
// Built by hatch_build.py when the project is installed.

#include "copy_rows.hpp"

#include <osmium/area/assembler.hpp>
#include <osmium/area/multipolygon_manager.hpp>
#include <osmium/geom/wkb.hpp>
#include <osmium/handler.hpp>
#include <osmium/handler/node_locations_for_ways.hpp>
#include <osmium/index/id_set.hpp>
#include <osmium/index/map/all.hpp>
#include <osmium/io/pbf_input.hpp>
#include <osmium/visitor.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_set>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;
using namespace copy_rows;

namespace {

using Envelope = std::array<double, 4>;  // west, south, east, north

Envelope envelope_of(const osmium::Location& location) {
    return {location.lon(), location.lat(), location.lon(), location.lat()};
}

Envelope envelope_of(const osmium::NodeRefList& nodes) {
    Envelope envelope{1e9, 1e9, -1e9, -1e9};
    for (const auto& node : nodes) {
        envelope[0] = std::min(envelope[0], node.location().lon());
        envelope[1] = std::min(envelope[1], node.location().lat());
        envelope[2] = std::max(envelope[2], node.location().lon());
        envelope[3] = std::max(envelope[3], node.location().lat());
    }
    return envelope;
}

Envelope envelope_of(const osmium::Area& area) {  // of its outer rings
    Envelope envelope{1e9, 1e9, -1e9, -1e9};
    for (const auto& ring : area.outer_rings()) {
        const Envelope of_ring = envelope_of(ring);
        envelope = {std::min(envelope[0], of_ring[0]), std::min(envelope[1], of_ring[1]),
                    std::max(envelope[2], of_ring[2]), std::max(envelope[3], of_ring[3])};
    }
    return envelope;
}

// One osmx rule (rules.OsmxRule): an object with the tag `key` gives a feature of `layer` when the value is one
// of `values` (any when there are none), not one of `except_values`, and the object has `with_tag` (if named).
struct OsmxRule {
    std::string layer, key, with_tag;
    std::vector<std::string> values, except_values;
    bool ring_when_closed = false;  // a way's feature: the Polygon of its ring when the way is closed

    bool matches(const osmium::TagList& tags) const {
        const char* value = tags[key.c_str()];
        if (!value) return false;
        if (!values.empty() && std::find(values.begin(), values.end(), value) == values.end()) return false;
        if (std::find(except_values.begin(), except_values.end(), value) != except_values.end()) return false;
        return with_tag.empty() || tags.has_key(with_tag.c_str());
    }
};

// The osmx classification (rules.OSMX_RULES), from Python (native.native_classification).
struct Classification {
    std::vector<OsmxRule> nodes, ways, areas;  // in the order of the declaration
    std::vector<std::string> area_relation_types;  // rules.AREA_RELATION_TYPES
};

std::vector<OsmxRule> osmx_rules_from(const py::list& specs) {
    std::vector<OsmxRule> rules;
    for (const auto& item : specs) {
        auto spec = item.cast<py::dict>();
        rules.push_back({spec["layer"].cast<std::string>(), spec["key"].cast<std::string>(),
                         spec["with_tag"].cast<std::string>(), spec["values"].cast<std::vector<std::string>>(),
                         spec["except_values"].cast<std::vector<std::string>>(), spec["ring_when_closed"].cast<bool>()});
    }
    return rules;
}

Classification classification_from(const py::dict& spec) {
    return {osmx_rules_from(spec["nodes"]), osmx_rules_from(spec["ways"]), osmx_rules_from(spec["areas"]),
            spec["area_relation_types"].cast<std::vector<std::string>>()};
}

// The first matching rule of each layer, in the order of the declaration (rules.matching).
std::vector<const OsmxRule*> matching(const std::vector<OsmxRule>& rules, const osmium::TagList& tags) {
    std::vector<const OsmxRule*> found;
    for (const auto& rule : rules) {
        bool taken = std::any_of(found.begin(), found.end(), [&](const OsmxRule* other) { return other->layer == rule.layer; });
        if (!taken && rule.matches(tags)) found.push_back(&rule);
    }
    return found;
}

using Locations = osmium::index::map::Map<osmium::unsigned_object_id_type, osmium::Location>;

// The node locations of a reader in memory (plans.py's "flex_mem"): what libosmium's FlexMem keeps below 16 M
// nodes, a vector of (id, location) in id order, plus a directory of where each range of ids starts in it, so
// that a way's node finds its location within a cache line or two instead of by a binary search of the whole
// vector (that search was half of the ways reader's CPU on bench/osm_pbf.py's dense city). The directory takes
// 1 byte per node more (FlexMem: 16); it is built at the first lookup after the nodes are in.
class LocationIndex final : public Locations {
    using Id = osmium::unsigned_object_id_type;
    struct Entry {
        Id id;
        osmium::Location location;
        bool operator<(const Entry& other) const noexcept { return id < other.id; }
    };
    static constexpr std::size_t per_bucket = 4;  // entries per range of ids, on average: 64 bytes
    std::vector<Entry> m_entries;
    mutable std::vector<uint32_t> m_directory;  // range of ids -> its first entry; one more at the end
    mutable unsigned m_shift = 0;  // an id's range: (id - first id) >> m_shift
    mutable bool m_indexed = false;

    void build_directory() const {
        m_directory.clear();
        m_indexed = true;
        if (m_entries.empty() || m_entries.size() >= UINT32_MAX) return;  // (then a search of the whole vector)
        const Id first = m_entries.front().id, span = m_entries.back().id - first;
        m_shift = 0;
        while (m_shift < 63 && (span >> m_shift) > m_entries.size() / per_bucket) ++m_shift;
        const std::size_t ranges = (span >> m_shift) + 1;
        m_directory.resize(ranges + 1);
        std::size_t entry = 0;
        for (std::size_t range = 0; range <= ranges; ++range) {
            while (entry < m_entries.size() && ((m_entries[entry].id - first) >> m_shift) < range) ++entry;
            m_directory[range] = static_cast<uint32_t>(entry);
        }
    }

public:
    void set(const Id id, const osmium::Location value) final {
        m_entries.push_back({id, value});
        m_indexed = false;
    }

    osmium::Location get_noexcept(const Id id) const noexcept final {
        if (!m_indexed) build_directory();
        if (m_entries.empty() || id < m_entries.front().id || id > m_entries.back().id) return osmium::Location{};
        auto begin = m_entries.begin(), end = m_entries.end();
        if (!m_directory.empty()) {
            const std::size_t range = (id - m_entries.front().id) >> m_shift;
            end = m_entries.begin() + m_directory[range + 1];
            begin += m_directory[range];
        }
        const auto found = std::lower_bound(begin, end, Entry{id, osmium::Location{}});
        return found != end && found->id == id ? found->location : osmium::Location{};
    }

    osmium::Location get(const Id id) const final {
        const auto location = get_noexcept(id);
        if (!location) throw osmium::not_found{id};
        return location;
    }

    std::size_t size() const noexcept final { return m_entries.size(); }

    std::size_t used_memory() const noexcept final {
        return sizeof(LocationIndex) + m_entries.capacity() * sizeof(Entry) + m_directory.capacity() * sizeof(uint32_t);
    }

    void clear() final {
        std::vector<Entry>().swap(m_entries);
        std::vector<uint32_t>().swap(m_directory);
        m_indexed = false;
    }

    void sort() final {  // (NodeLocationsForWays sorts only when the nodes came out of id order)
        std::stable_sort(m_entries.begin(), m_entries.end());
        m_indexed = false;
    }
};

// A source's batches, as ingest/osm/batches.Batcher collects them.
struct Batch {
    std::string data;
    long rows = 0, features = 0, taken = 0, skipped_count = 0;
    std::vector<std::tuple<long, int64_t, std::string>> skipped;  // (feature, osm id, reason), the first ones
};

struct Sink {
    Rules rules;
    Batch batch;
    bool ended = false;
    bool sent = true;  // false: the layer is read for the objects an extract claims (Seen), its rows not wanted
};

// OSM objects already taken from an earlier extract of the same reader (pyosmium._Seen): neighbouring
// Geofabrik extracts share the objects that cross their border.
struct Seen {
    osmium::index::IdSetDense<osmium::unsigned_object_id_type> nodes, ways, relations;
};

class ExtractReader : public osmium::handler::Handler {
public:
    ExtractReader(const Classification& rules, std::map<std::string, Sink>& node_sinks, std::map<std::string, Sink>& sinks,
                  std::optional<Envelope> bbox, const Limits& limits, py::object emit)
        : m_rules(rules), m_node_sinks(node_sinks), m_sinks(sinks), m_bbox(bbox), m_limits(limits), m_emit(std::move(emit)) {
        auto add_key = [](std::vector<std::string>& keys, const std::string& key) {
            if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
        };
        for (const auto* kind : {&m_rules.ways, &m_rules.areas}) {
            for (const auto& rule : *kind) {
                if (m_sinks.count(rule.layer)) add_key(m_way_keys, rule.key);
            }
        }
        for (const auto& rule : m_rules.areas) add_key(m_area_keys, rule.key);
    }

    // The ways of the wanted layers get their node locations; the others (buildings: most ways of an
    // extract) are dropped before the lookups, as the KeyFilter of pyosmium._objects does.
    void way(osmium::Way& way) {
        end_sources(m_node_sinks);
        if (m_sinks.empty() || std::none_of(m_way_keys.begin(), m_way_keys.end(),
                                            [&](const std::string& key) { return way.tags().has_key(key.c_str()); })) {
            return;
        }
        if (m_locations) m_locations->way(way);
        const auto& tags = way.tags();
        std::vector<std::pair<const char*, bool>> wanted;  // layer, ring (as pyosmium.way_features)
        std::optional<bool> closed;
        for (const OsmxRule* rule : matching(m_rules.ways, tags)) {
            if (rule->ring_when_closed && !closed) closed = is_closed(way);
            wanted.emplace_back(rule->layer.c_str(), rule->ring_when_closed && *closed);
        }
        auto areas = matching(m_rules.areas, tags);
        if (!areas.empty() && (closed ? *closed : is_closed(way))) {
            for (const OsmxRule* rule : areas) wanted.emplace_back(rule->layer.c_str(), true);
        }
        wanted.erase(std::remove_if(wanted.begin(), wanted.end(),
                                    [&](const auto& feature) { return !m_sinks.count(feature.first); }),
                     wanted.end());
        if (wanted.empty() || !first_time(m_seen ? &m_seen->ways : nullptr, way.id())) return;
        wanted.erase(std::remove_if(wanted.begin(), wanted.end(),
                                    [&](const auto& feature) { return !m_sinks.at(feature.first).sent; }),
                     wanted.end());
        for (const auto& [layer, ring] : wanted) {
            auto sink = m_sinks.find(layer);
            std::string wkb;
            try {
                wkb = m_factory.create_linestring(way, osmium::geom::use_nodes::all);
            } catch (const osmium::invalid_location&) {
                note_broken(way, "");
                break;
            } catch (const std::exception& error) {
                note_broken(way, error.what());
                break;
            }
            if (ring) wkb = polygon_of_one_ring(wkb);
            if (m_bbox && !overlaps(envelope_of(way.nodes()))) { ++m_outside; continue; }
            ++m_features[layer];
            add(sink->first, sink->second, way, way.id(), wkb, "way");
        }
    }

    void node(const osmium::Node& node) {
        if (m_locations) m_locations->node(node);
        if (node.tags().empty()) return;  // most nodes: a way's shape points, in no layer
        std::vector<const char*> wanted;
        for (const OsmxRule* rule : matching(m_rules.nodes, node.tags())) {
            if (m_node_sinks.count(rule->layer)) wanted.push_back(rule->layer.c_str());
        }
        if (wanted.empty() || !first_time(m_seen ? &m_seen->nodes : nullptr, node.id())) return;
        for (const char* layer : wanted) {
            auto sink = m_node_sinks.find(layer);
            if (!sink->second.sent) continue;
            std::string wkb = m_factory.create_point(node);
            if (m_bbox && !overlaps(envelope_of(node.location()))) { ++m_outside; continue; }
            ++m_features[layer];
            add(sink->first, sink->second, node, node.id(), wkb, "node");
        }
    }

    // The area manager's first pass: relations with area keys (pyosmium._Members and the area manager).
    // (The nodes' sources end with the first read, not at its first relation: as pyosmium.copy_rows ends them,
    // so that both readers fail them when a relations block cannot be read.)
    void relation(const osmium::Relation& relation) {
        if (!m_manager) return;
        const auto& tags = relation.tags();
        if (std::none_of(m_area_keys.begin(), m_area_keys.end(), [&](const std::string& key) { return tags.has_key(key.c_str()); })) return;
        const char* type = tags["type"];
        const auto& types = m_rules.area_relation_types;
        const auto rules = matching(m_rules.areas, tags);
        if (type && std::find(types.begin(), types.end(), type) != types.end() && !rules.empty()) {
            // missed (wanted, not built) only if it is a feature of a layer sent
            if (std::any_of(rules.begin(), rules.end(), [&](const OsmxRule* rule) {
                    auto sink = m_area_sinks.find(rule->layer);
                    return sink != m_area_sinks.end() && sink->second.sent;
                })) {
                m_wanted_relations.insert(relation.id());
            }
            for (const auto& member : relation.members()) {
                if (member.type() == osmium::item_type::way) m_member_ways.insert(member.ref());
            }
        }
        m_manager->relation(relation);
    }

    // The areas osmium assembled, as read_features takes them: relations' only, as (Multi)Polygons.
    void areas(osmium::memory::Buffer&& buffer) {
        for (const auto& area : buffer.select<osmium::Area>()) {
            if (area.from_way()) continue;
            std::vector<const char*> layers;
            for (const OsmxRule* rule : matching(m_rules.areas, area.tags())) {
                if (m_area_sinks.count(rule->layer)) layers.push_back(rule->layer.c_str());
            }
            if (layers.empty()) continue;
            int64_t osm_id = area.orig_id();
            m_built_relations.insert(osm_id);
            if (!first_time(m_seen ? &m_seen->relations : nullptr, osm_id)) continue;
            for (const char* layer : layers) {
                auto sink = m_area_sinks.find(layer);
                if (!sink->second.sent) continue;
                std::string wkb;
                try {
                    wkb = m_factory.create_multipolygon(area);
                } catch (const std::exception& error) {
                    note_broken_relation(osm_id, error.what());
                    break;
                }
                uint32_t polygons;
                std::memcpy(&polygons, wkb.data() + 5, 4);
                if (polygons == 1) wkb = wkb.substr(9);
                if (m_bbox && !overlaps(envelope_of(area))) { ++m_outside; continue; }
                ++m_features[layer];
                add(sink->first, sink->second, area, osm_id, wkb, "area");
            }
        }
    }

    // The sources of a kind end as soon as the file moves on to ways, or the first read is over (as
    // pyosmium.copy_rows ends them): a writer waiting for a source's end must not wait for the rest of the
    // file, while this reader blocks on a full queue of another layer.
    void end_sources(std::map<std::string, Sink>& sinks) {
        for (auto& [layer, sink] : sinks) {
            if (!sink.ended && sink.sent) send(layer, sink, true);
            sink.ended = true;
        }
    }

    void finish() {
        end_sources(m_node_sinks);
        end_sources(m_sinks);
        end_sources(m_area_sinks);
    }

    py::dict report() const {
        py::dict result;
        result["features"] = m_features;
        result["broken"] = py::dict(py::arg("way") = m_broken, py::arg("relation") = m_broken_relations);
        result["broken_listed"] = m_listed;
        result["outside"] = m_outside;
        result["duplicates"] = m_duplicates;
        result["wanted_relations"] = m_wanted_relations;
        result["built_relations"] = m_built_relations;
        return result;
    }

    std::unordered_set<osmium::object_id_type> m_member_ways;
    std::set<osmium::object_id_type> m_wanted_relations, m_built_relations;
    std::map<std::string, Sink> m_area_sinks;
    osmium::area::MultipolygonManager<osmium::area::Assembler>* m_manager = nullptr;
    osmium::handler::NodeLocationsForWays<Locations>*
        m_locations = nullptr;
    std::vector<std::string> m_way_keys;  // rules.WAY_KEYS of the wanted layers
    std::vector<std::string> m_area_keys;  // rules.AREA_KEYS
    Seen* m_seen = nullptr;  // several extracts: skip what an earlier one gave
    long m_duplicates = 0;

    // `ids`: one of m_seen's sets, or null when there is no earlier extract to compare with
    bool first_time(osmium::index::IdSetDense<osmium::unsigned_object_id_type>* ids, osmium::object_id_type id) {
        if (!ids || ids->check_and_set(static_cast<osmium::unsigned_object_id_type>(id))) return true;
        ++m_duplicates;
        return false;
    }

private:
    const Classification& m_rules;
    std::map<std::string, Sink>& m_node_sinks;
    std::map<std::string, Sink>& m_sinks;
    std::optional<Envelope> m_bbox;
    Limits m_limits;
    py::object m_emit;
    osmium::geom::WKBFactory<> m_factory{osmium::geom::wkb_type::wkb, osmium::geom::out_type::binary};
    std::map<std::string, long> m_features;
    long m_broken = 0, m_broken_relations = 0, m_outside = 0;
    std::vector<std::string> m_listed;

    static bool is_closed(const osmium::Way& way) { return way.is_closed() && way.nodes().size() >= 4; }

    static std::string polygon_of_one_ring(const std::string& line) {
        static const char head[] = "\x01\x03\x00\x00\x00\x01\x00\x00\x00";
        return std::string(head, 9) + line.substr(5);
    }

    // Whether a feature's envelope overlaps --bbox, as ingest/osm/features.envelope_overlaps decides.
    bool overlaps(const Envelope& envelope) const {
        const auto& box = *m_bbox;
        return envelope[0] <= box[2] && envelope[2] >= box[0] && envelope[1] <= box[3] && envelope[3] >= box[1];
    }

    void note_broken_relation(int64_t osm_id, const std::string& what) {
        ++m_broken_relations;
        if (m_listed.size() < m_limits.listed_broken) m_listed.push_back("relation " + std::to_string(osm_id) + ": " + what);
    }

    void note_broken(const osmium::Way& way, const std::string& what) {
        ++m_broken;
        if (m_listed.size() >= m_limits.listed_broken) return;
        std::string reason = what;
        for (const auto& node : way.nodes()) {
            if (!node.location().valid()) {
                reason = "node " + std::to_string(node.ref()) + " has no location (not in the extract)";
                break;
            }
        }
        m_listed.push_back("way " + std::to_string(way.id()) + ": " + reason);
    }

    // loader 1's rows for the feature (rules.rows_of, copy_rows.pack_rows), or BadFeature
    std::string rows(const Rules& rules, const osmium::OSMObject& object, int64_t osm_id,
                     const std::string& wkb, const std::vector<int>& passes, long position) const {
        Values values(rules.attributes);
        auto text = [&](const char* key, const char* value) -> std::string_view {
            std::size_t length = code_points(value);
            if (length > m_limits.varchar) {
                std::string shown;
                {
                    py::gil_scoped_acquire acquire;  // (read_extract reads without the GIL)
                    shown = py::repr(py::str(key)).cast<std::string>();
                }
                throw BadFeature{"tag " + shown + " is " + std::to_string(length)
                                 + " characters long; " + rules.table + " columns hold "
                                 + std::to_string(m_limits.varchar)};
            }
            return value;
        };
        for (const auto& tag : object.tags()) {
            auto column = rules.tag_columns.find(tag.key());
            if (column != rules.tag_columns.end()) values[column->second] = text(tag.key(), tag.value());
        }
        if (const char* name = object.tags()["name"]) values[rules.name_column] = text("name", name);
        std::string out;
        pack_rows(out, rules, values, osm_id, wkb, passes, position);
        return out;
    }

    void add(const std::string& layer, Sink& sink, const osmium::OSMObject& object, int64_t osm_id,
             const std::string& wkb, const char* kind) {
        auto& batch = sink.batch;
        const auto& tags = object.tags();
        auto passes = passes_of(sink.rules, tags.has_key("name"), [&](const std::string& key) {
            const char* value = tags[key.c_str()];
            return value ? std::optional<std::string_view>(value) : std::nullopt;
        });
        try {
            if (!passes.empty()) {
                batch.data += rows(sink.rules, object, osm_id, wkb, passes, batch.features);
                batch.rows += static_cast<long>(passes.size());
            }
        } catch (const BadFeature& bad) {
            ++batch.skipped_count;
            if (batch.skipped.size() < m_limits.reported) {
                batch.skipped.emplace_back(batch.features, osm_id,
                                           std::string(kind) + " " + std::to_string(osm_id) + ": " + bad.reason);
            }
        }
        ++batch.features;
        if (batch.data.size() >= m_limits.batch_bytes) send(layer, sink, false);
    }

    void send(const std::string& layer, Sink& sink, bool done) {
        auto& batch = sink.batch;
        auto node_sink = m_node_sinks.find(layer);
        auto area_sink = m_area_sinks.find(layer);
        const char* kind = node_sink != m_node_sinks.end() && &node_sink->second == &sink ? "nodes"
                         : area_sink != m_area_sinks.end() && &area_sink->second == &sink ? "areas" : "ways";
        {
            py::gil_scoped_acquire acquire;  // (read_extract reads without the GIL)
            py::list skipped;
            for (const auto& [feature, osm_id, reason] : batch.skipped) skipped.append(py::make_tuple(feature, osm_id, reason));
            m_emit(kind, layer, py::bytes(batch.data), batch.rows, batch.features - batch.taken, skipped,
                   batch.skipped_count, done);
        }
        batch.data.clear();
        batch.rows = 0;
        batch.taken = batch.features;
        batch.skipped.clear();
        batch.skipped_count = 0;
    }
};

// The second read of the file, for the areas: the member ways (with their locations) for the area manager.
struct MemberWays : public osmium::handler::Handler {
    const std::unordered_set<osmium::object_id_type>& members;
    osmium::handler::NodeLocationsForWays<Locations>& locations;
    osmium::area::MultipolygonManager<osmium::area::Assembler>& manager;
    void way(osmium::Way& way) {
        if (!members.count(way.id())) return;
        locations.way(way);
        manager.handle_way(way);
    }
    void relation(const osmium::Relation& relation) { manager.handle_relation(relation); }
};

py::dict read_extract(const std::string& path, const std::string& index_name, const py::dict& classification,
                      const py::dict& node_specs, const py::dict& specs, const py::dict& area_specs,
                      std::optional<Envelope> bbox, const py::dict& limits, Seen* seen, py::object emit) {
    const Classification rules = classification_from(classification);
    std::map<std::string, Sink> node_sinks, sinks;
    auto sink_from = [](const py::handle& spec) {
        Sink sink;
        sink.rules = rules_from(spec.cast<py::dict>());
        sink.sent = spec.cast<py::dict>()["sent"].cast<bool>();
        return sink;
    };
    for (const auto& [layer, spec] : node_specs) node_sinks[layer.cast<std::string>()] = sink_from(spec);
    for (const auto& [layer, spec] : specs) sinks[layer.cast<std::string>()] = sink_from(spec);
    const auto& factory = osmium::index::MapFactory<osmium::unsigned_object_id_type, osmium::Location>::instance();
    std::unique_ptr<Locations> index = index_name == "flex_mem" ? std::make_unique<LocationIndex>()
                                                                 : factory.create_map(index_name);
    osmium::handler::NodeLocationsForWays<Locations> locations{*index};
    locations.ignore_errors();
    ExtractReader reader{rules, node_sinks, sinks, bbox, limits_from(limits), std::move(emit)};
    osmium::area::Assembler::config_type config;
    osmium::area::MultipolygonManager<osmium::area::Assembler> manager{config};
    for (const auto& [layer, spec] : area_specs) reader.m_area_sinks[layer.cast<std::string>()] = sink_from(spec);
    if (!area_specs.empty()) reader.m_manager = &manager;
    reader.m_seen = seen;
    bool located = !sinks.empty() || !area_specs.empty();  // a reader of nodes alone needs no locations
    if (located) reader.m_locations = &locations;
    auto entities = osmium::osm_entity_bits::node;
    if (!sinks.empty()) entities |= osmium::osm_entity_bits::way;
    // The areas' member ways come in the second read: the first reads ways only for ways' features.
    if (!area_specs.empty()) entities |= osmium::osm_entity_bits::relation;
    {
        // Read without the GIL (send takes it for each batch): the queue's feeder thread in this process then
        // hands each batch to its writer as soon as it is sent, not at the next batch.
        py::gil_scoped_release release;
        // No metadata (versions, timestamps, users): no rule reads it, so it is not decoded.
        osmium::io::Reader input{osmium::io::File{path, "pbf"}, entities, osmium::io::read_meta::no};
        osmium::apply(input, reader);
        input.close();
        reader.end_sources(node_sinks);  // the first read is over: the nodes and ways sources end before the areas come
        reader.end_sources(sinks);
        if (!area_specs.empty()) {
            manager.prepare_for_lookup();
            manager.set_callback([&reader](osmium::memory::Buffer&& buffer) { reader.areas(std::move(buffer)); });
            MemberWays second_read{{}, reader.m_member_ways, locations, manager};
            osmium::io::Reader again{osmium::io::File{path, "pbf"}, osmium::osm_entity_bits::way | osmium::osm_entity_bits::relation,
                                     osmium::io::read_meta::no};
            osmium::apply(again, second_read);
            again.close();
            manager.flush_output();
        }
        reader.finish();
    }
    return reader.report();
}

// The header's bounding box (west, south, east, north), None when it has none; a RuntimeError when the header
// cannot be read: the checks before a load (pbf/checks.py), without importing pyosmium.
std::optional<Envelope> header_box(const std::string& path) {
    // A pool of its own, ended here: libosmium's default pool would start threads in the loader, which the
    // reader processes forked after the checks would believe they have, and wait for forever.
    osmium::thread::Pool pool{1};
    osmium::io::Reader input{osmium::io::File{path, "pbf"}, osmium::osm_entity_bits::nothing, pool};
    const osmium::Box box = input.header().box();
    input.close();
    if (!box.valid()) return std::nullopt;
    return Envelope{box.bottom_left().lon(), box.bottom_left().lat(), box.top_right().lon(), box.top_right().lat()};
}

}  // namespace

PYBIND11_MODULE(_osmread, module) {
    module.doc() = "The native PBF reader of a direct load (ingest/osm/pbf/native.py): loader 1's rows as "
                   "binary COPY batches, straight from libosmium";
    py::class_<Seen>(module, "Seen").def(py::init<>());
    module.def("read_extract", &read_extract);
    module.def("header_box", &header_box);
}
