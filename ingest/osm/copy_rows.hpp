// Loader 1's rules per table and the binary COPY rows they make, shared by both native readers: the PBF reader
// (pbf/_osmread.cpp) and the GeoJSON lines encoder (_lines.cpp). The rules come from Python as data, declared
// once in ingest/osm/rules.py (native.layer_spec); the rows are byte for byte those of features.row_packer.

#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <arpa/inet.h>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace copy_rows {

namespace py = pybind11;

// Loader 1's column limit and the batch and report bounds, from Python (native.limits), so that each is
// declared once and the native and Python readers give the same batches and reports.
struct Limits {
    std::size_t varchar = 0;  // characters a tag value may have (rules.VARCHAR_LIMIT)
    std::size_t batch_bytes = 0;  // a batch is sent once it holds this much (batches.BATCH_BYTES)
    std::size_t reported = 0;  // skipped features listed per batch (batches.MAX_REPORTED_PER_JOB)
    std::size_t listed_broken = 0;  // PBF objects that could not be built, listed (pbf/sources.LISTED_BROKEN)
};

inline Limits limits_from(const py::dict& spec) {
    return {spec["varchar"].cast<std::size_t>(), spec["batch_bytes"].cast<std::size_t>(),
            spec["reported"].cast<std::size_t>(), spec["listed_broken"].cast<std::size_t>()};
}

inline void put16(std::string& out, int16_t value) {
    uint16_t n = htons(static_cast<uint16_t>(value));
    out.append(reinterpret_cast<const char*>(&n), 2);
}
inline void put32(std::string& out, int32_t value) {
    uint32_t n = htonl(static_cast<uint32_t>(value));
    out.append(reinterpret_cast<const char*>(&n), 4);
}
inline void put64(std::string& out, int64_t value) {
    put32(out, static_cast<int32_t>(static_cast<uint64_t>(value) >> 32));
    put32(out, static_cast<int32_t>(static_cast<uint64_t>(value) & 0xffffffffu));
}

inline std::size_t code_points(std::string_view text) {  // Python's len() of the decoded string
    std::size_t count = 0;
    for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return count;
}

// One table's rules, from ingest/osm/rules.Layer (declared there).
struct Rules {
    std::string table;
    int attributes = 0;  // columns after geometry
    std::unordered_map<std::string, int> tag_columns;
    int name_column = 0;
    int osm_id_column = -1;
    std::string staged_as;  // pois: the source name its staging rows carry; empty for a direct table
    std::vector<std::pair<std::string, std::vector<std::string>>> passes;  // pois: loader 1's category passes
};

inline Rules rules_from(const py::dict& spec) {
    Rules rules;
    rules.table = spec["table"].cast<std::string>();
    rules.attributes = spec["attributes"].cast<int>();
    rules.tag_columns = spec["tag_columns"].cast<std::unordered_map<std::string, int>>();
    rules.name_column = spec["name_column"].cast<int>();
    rules.osm_id_column = spec["osm_id_column"].cast<int>();
    if (spec.contains("staged_as")) {
        rules.staged_as = spec["staged_as"].cast<std::string>();
        rules.passes = spec["passes"].cast<std::vector<std::pair<std::string, std::vector<std::string>>>>();
    }
    return rules;
}

struct BadFeature { std::string reason; };

// The category passes a pois feature is inserted in (rules.poi_passes); {0} for the other tables. `value_of`:
// a category key -> its value, or nullopt when the feature has no such tag (or a value that is no string).
template <typename ValueOf>
std::vector<int> passes_of(const Rules& rules, bool named, ValueOf value_of) {
    if (rules.staged_as.empty()) return {0};
    std::vector<int> passes;
    if (!named) return passes;
    for (std::size_t number = 0; number < rules.passes.size(); ++number) {
        std::optional<std::string_view> value = value_of(rules.passes[number].first);
        if (!value) continue;
        for (const auto& listed : rules.passes[number].second) {
            if (listed == *value) { passes.push_back(static_cast<int>(number)); break; }
        }
    }
    return passes;
}

using Values = std::vector<std::optional<std::string_view>>;  // per attribute column; nullopt is NULL

// Loader 1's rows for a feature (features.row_packer), appended to `out`: (geometry, attributes...) for a direct
// table; for pois a staging row per pass (source, pass, position, geometry, attributes...). The osm_id column,
// where the table has one, carries `osm_id`.
inline void pack_rows(std::string& out, const Rules& rules, const Values& values, int64_t osm_id,
                      std::string_view wkb, const std::vector<int>& passes, int64_t position) {
    std::string body;
    put32(body, static_cast<int32_t>(wkb.size()));
    body += wkb;
    for (int column = 0; column < rules.attributes; ++column) {
        if (column == rules.osm_id_column) {
            put32(body, 8);
            put64(body, osm_id);
        } else if (values[column]) {
            put32(body, static_cast<int32_t>(values[column]->size()));
            body += *values[column];
        } else {
            put32(body, -1);
        }
    }
    if (rules.staged_as.empty()) {
        put16(out, static_cast<int16_t>(rules.attributes + 1));
        out += body;
        return;
    }
    for (int number : passes) {
        put16(out, static_cast<int16_t>(rules.attributes + 4));
        put32(out, static_cast<int32_t>(rules.staged_as.size()));
        out += rules.staged_as;
        put32(out, 4);
        put32(out, number);
        put32(out, 8);
        put64(out, position);
        out += body;
    }
}

}  // namespace copy_rows
