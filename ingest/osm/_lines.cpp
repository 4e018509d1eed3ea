// The native encoder of GeoJSON lines files (ingest/osm/geojson.py, the lines layout; ingest/osm/native.py):
// a piece of a file, one feature per line, into loader 1's binary COPY rows, with simdjson, in C++. It gives
// what the Python path gives, byte for byte (tests/test_osm_native.py compares them), by doing only what that
// path does without a doubt and handing every other line back to it:
// - the lines, their stripping, the end of the features array and the pois prefilter (rules.may_yield_rows) as
//   geojson._Lines takes them;
// - a feature that parses, whose members are where loader 1's rules look (features.encoder, rules.rows_of), whose
//   stored tags are strings that fit (no NUL, at most 255 characters, no key twice), whose id is an integer
//   where the table keeps it, and whose geometry the fast WKB path builds (geojson_wkb.hpp): its rows
//   (copy_rows.hpp), or none (a pois feature in no category pass; outside --bbox);
// - any other line (not JSON, a feature loader 1 could not store, a geometry for shapely, ...) is declined: the
//   Python path takes that line, so its reason and outcome are the Python path's own.
// The rules come from Python as data (native.layer_spec). Built by hatch_build.py when the project is installed.

#include "copy_rows.hpp"
#include "geojson_wkb.hpp"

#include <simdjson.h>

#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace py = pybind11;
using namespace copy_rows;

namespace {

using Envelope = geojson_wkb::Envelope;
enum class Outcome { rows, none, declined };

bool stripped(char c) { return c == ' ' || c == '\t' || c == '\r' || c == ','; }  // geojson._STRIP

class LineEncoder {
public:
    LineEncoder(const py::dict& rules, const py::dict& limits, std::optional<Envelope> bbox)
        : m_rules(rules_from(rules)), m_limits(limits_from(limits)), m_bbox(bbox),
          m_values(m_rules.attributes), m_seen(m_rules.attributes) {
        for (const auto& [key, column] : m_rules.tag_columns) m_columns[key] = column;
        for (const auto& [key, values] : m_rules.passes) m_quoted_keys.push_back("\"" + key + "\"");
    }

    // From `position` of `piece` (the file's bytes from `base`) on, the lines until the batch holding `held`
    // bytes is full, the features array ends, a line is declined, or the piece ends: (next position, rows'
    // data, rows, features, start of the last line seen or -1, closed, the declined line's start or -1 and its
    // stripped text's bounds).
    py::tuple encode(const py::bytes& piece, std::size_t position, int64_t base, std::size_t held) {
        char* data;
        Py_ssize_t length;
        PyBytes_AsStringAndSize(piece.ptr(), &data, &length);
        const std::size_t size = static_cast<std::size_t>(length);
        std::string out;
        long rows = 0, features = 0;
        int64_t last = -1;
        bool closed = false;
        while (position < size) {
            const char* newline = static_cast<const char*>(std::memchr(data + position, '\n', size - position));
            std::size_t line = position, end = newline ? static_cast<std::size_t>(newline - data) : size;
            position = newline ? end + 1 : size;
            std::size_t start = line;
            while (start < end && stripped(data[start])) ++start;
            while (end > start && stripped(data[end - 1])) --end;
            if (start == end) continue;
            std::string_view text{data + start, end - start};
            if (text[0] == ']') {  // the end of the features array; the rest is the collection's tail
                last = base + static_cast<int64_t>(line);
                closed = true;
                break;
            }
            if (!m_quoted_keys.empty() && !may_yield_rows(text)) {
                last = base + static_cast<int64_t>(line);
                ++features;
                closed = text.size() >= 2 && text.substr(text.size() - 2) == "]}";
                if (closed) break;
                continue;
            }
            bool padded = end + simdjson::SIMDJSON_PADDING <= size;
            Outcome outcome = feature(text, padded, base + static_cast<int64_t>(line), out, rows);
            if (outcome == Outcome::declined) {
                return py::make_tuple(position, py::bytes(out), rows, features, last, closed,
                                      static_cast<int64_t>(line), start, end);
            }
            last = base + static_cast<int64_t>(line);
            ++features;
            if (held + out.size() >= m_limits.batch_bytes) break;
        }
        return py::make_tuple(position, py::bytes(out), rows, features, last, closed, -1, 0, 0);
    }

private:
    Rules m_rules;
    Limits m_limits;
    std::optional<Envelope> m_bbox;
    std::unordered_map<std::string_view, int> m_columns;  // m_rules.tag_columns, looked up without a copy
    std::vector<std::string> m_quoted_keys;  // pois: `"tourism"`, ... (rules._POI_KEYS); none elsewhere
    simdjson::dom::parser m_parser;
    std::string m_padded, m_wkb;
    std::vector<double> m_flat;
    Values m_values;
    std::vector<char> m_seen;

    // rules.may_yield_rows: false when the raw text of a pois feature cannot pass loader 1's filter
    bool may_yield_rows(std::string_view raw) const {
        if (raw.find('\\') != std::string_view::npos) return true;
        if (raw.find("\"name\"") == std::string_view::npos) return false;
        for (std::size_t pass = 0; pass < m_quoted_keys.size(); ++pass) {
            const std::string& key = m_quoted_keys[pass];
            std::size_t start = raw.find(key);
            if (start == std::string_view::npos) continue;
            std::optional<std::string_view> value = string_after_key(raw, start + key.size());
            const auto& values = m_rules.passes[pass].second;
            if (!value || std::find(values.begin(), values.end(), *value) != values.end()
                || raw.find(key, start + 1) != std::string_view::npos) {
                return true;
            }
        }
        return false;
    }

    // rules._STRING_AFTER_KEY: `[ \t\r\n]*:[ \t\r\n]*"([^"]*)"` at `at`
    static std::optional<std::string_view> string_after_key(std::string_view raw, std::size_t at) {
        auto blanks = [&] { while (at < raw.size() && std::strchr(" \t\r\n", raw[at]) && raw[at]) ++at; };
        blanks();
        if (at >= raw.size() || raw[at] != ':') return std::nullopt;
        ++at;
        blanks();
        if (at >= raw.size() || raw[at] != '"') return std::nullopt;
        std::size_t close = raw.find('"', ++at);
        if (close == std::string_view::npos) return std::nullopt;
        return raw.substr(at, close - at);
    }

    // A value stored as it is: a string of at most the column limit in characters, without NUL
    std::optional<std::string_view> storable(simdjson::dom::element value) const {
        std::string_view text;
        if (value.get_string().get(text)) return std::nullopt;
        if (text.find('\0') != std::string_view::npos || code_points(text) > m_limits.varchar) return std::nullopt;
        return text;
    }

    Outcome feature(std::string_view text, bool padded, int64_t here, std::string& out, long& rows) {
        const char* json = text.data();
        if (!padded) {  // simdjson reads up to SIMDJSON_PADDING bytes past the end
            m_padded.assign(text.data(), text.size());
            m_padded.resize(text.size() + simdjson::SIMDJSON_PADDING);
            json = m_padded.data();
        }
        simdjson::dom::element document;
        simdjson::dom::object feature, properties, tags;
        if (m_parser.parse(json, text.size(), false).get(document) || document.get_object().get(feature)
            || feature["properties"].get_object().get(properties) || properties["tagsMap"].get_object().get(tags)) {
            return Outcome::declined;
        }
        std::vector<int> passes;
        if (!tag_values(tags, passes)) return Outcome::declined;
        if (passes.empty()) return Outcome::none;
        simdjson::dom::element id;
        int64_t osm_id = 0;
        if (properties["id"].get(id) || (m_rules.osm_id_column >= 0 && id.get_int64().get(osm_id))) {
            return Outcome::declined;
        }
        std::optional<Envelope> envelope = geometry(feature);
        if (!envelope) return Outcome::declined;
        if (m_bbox && !overlaps(*envelope)) return Outcome::none;
        pack_rows(out, m_rules, m_values, osm_id, m_wkb, passes, here);
        rows += m_rules.staged_as.empty() ? 1 : static_cast<long>(passes.size());
        return Outcome::rows;
    }

    // The stored tags into m_values and the pois passes (rules.attribute_values, rules.poi_passes); false when
    // the Python path decides: a key loader 1's rules read that comes twice (its dict kept the last), or a
    // stored value that is no string or does not fit.
    bool tag_values(simdjson::dom::object tags, std::vector<int>& passes) {
        std::fill(m_values.begin(), m_values.end(), std::nullopt);
        std::fill(m_seen.begin(), m_seen.end(), 0);
        std::vector<std::optional<std::string_view>> categories(m_rules.passes.size());
        std::vector<char> categories_seen(m_rules.passes.size());
        std::optional<simdjson::dom::element> name;
        for (simdjson::dom::key_value_pair tag : tags) {
            if (tag.key == "name") {
                if (name) return false;
                name = tag.value;
            }
            auto column = m_columns.find(tag.key);
            if (column != m_columns.end()) {
                if (m_seen[column->second]++ || !(m_values[column->second] = storable(tag.value))) return false;
            }
            for (std::size_t pass = 0; pass < m_rules.passes.size(); ++pass) {
                if (tag.key != m_rules.passes[pass].first) continue;
                if (categories_seen[pass]++) return false;
                std::string_view value;
                if (!tag.value.get_string().get(value)) categories[pass] = value;
            }
        }
        passes = passes_of(m_rules, name.has_value(), [&](const std::string& key) {
            for (std::size_t pass = 0; pass < m_rules.passes.size(); ++pass) {
                if (m_rules.passes[pass].first == key) return categories[pass];
            }
            return std::optional<std::string_view>();
        });
        if (passes.empty() || !name) return true;
        m_values[m_rules.name_column] = storable(*name);
        return m_values[m_rules.name_column].has_value();
    }

    // The feature's WKB into m_wkb (features.geometry_wkb's fast path) and what shapely.bounds gives for it;
    // nullopt when the Python path decides.
    std::optional<Envelope> geometry(simdjson::dom::object feature) {
        simdjson::dom::object geometry;
        simdjson::dom::array coordinates;
        std::string_view kind;
        if (feature["geometry"].get_object().get(geometry) || geometry["type"].get_string().get(kind)
            || geometry["coordinates"].get_array().get(coordinates)) {
            return std::nullopt;
        }
        static const std::string_view kinds[] = {"Point", "LineString", "Polygon", "MultiPoint", "MultiLineString",
                                                 "MultiPolygon"};
        if (std::find(std::begin(kinds), std::end(kinds), kind) == std::end(kinds)) return std::nullopt;
        m_wkb.clear();
        m_flat.clear();
        try {
            geojson_wkb::flatten(coordinates, m_flat);
            geojson_wkb::Builder builder{m_flat, m_wkb};
            builder.build(kind, coordinates);
            return builder.envelope();
        } catch (const geojson_wkb::Slow&) {
            return std::nullopt;
        }
    }

    // features.envelope_overlaps: touching counts
    bool overlaps(const Envelope& envelope) const {
        const auto& box = *m_bbox;
        return envelope[0] <= box[2] && envelope[2] >= box[0] && envelope[1] <= box[3] && envelope[3] >= box[1];
    }
};

}  // namespace

PYBIND11_MODULE(_lines, module) {
    module.doc() = "The native encoder of GeoJSON lines files (ingest/osm/native.py): loader 1's rows as binary "
                   "COPY data, with simdjson";
    py::class_<LineEncoder>(module, "LineEncoder")
        .def(py::init<const py::dict&, const py::dict&, std::optional<Envelope>>())
        .def("encode", &LineEncoder::encode);
}
