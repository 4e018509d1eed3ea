// A GeoJSON geometry's WKB, as ingest/osm/features._fast_wkb builds it from simdjson's flat coordinate buffer:
// the same checks in the same order, the same bytes. Whatever _fast_wkb declines (or where its Python would
// raise) throws Slow here, and the feature goes to the Python path, where shapely decides as loader 1's did.

#pragma once

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "WKB is written little-endian from the doubles as they are");

namespace geojson_wkb {

struct Slow {};  // the fast path declines

using Envelope = std::array<double, 4>;  // west, south, east, north

// pysimdjson's Array.as_buffer(of_type="d"): the numbers of nested arrays in order, integers as doubles;
// anything else (a string, null, an object) makes it raise, and _fast_wkb decline.
inline void flatten(simdjson::dom::array array, std::vector<double>& out) {
    for (simdjson::dom::element element : array) {
        simdjson::dom::array nested;
        if (!element.get_array().get(nested)) {
            flatten(nested, out);
            continue;
        }
        double number;
        if (element.get_double().get(number)) throw Slow{};
        out.push_back(number);
    }
}

// len() of an array; the tape counts up to 0xFFFFFF elements, beyond which the Python path decides.
inline std::size_t size_of(simdjson::dom::array array) {
    std::size_t size = array.size();
    if (size >= 0xFFFFFF) throw Slow{};
    return size;
}

// len() of a structural member: an array's size; _fast_wkb's len() of a number raises, so it declines.
inline std::size_t length_of(simdjson::dom::element element) {
    simdjson::dom::array array;
    if (element.get_array().get(array)) throw Slow{};
    return size_of(array);
}

class Builder {
public:
    Builder(const std::vector<double>& flat, std::string& out) : m_flat(flat), m_out(out) {}

    // The WKB of a geometry of `kind` (one of the six _WKB_TYPES) with these coordinates, or Slow.
    void build(std::string_view kind, simdjson::dom::array coordinates) {
        std::size_t offset = 0;  // in doubles
        if (kind == "Point") {
            if (m_flat.size() != 2) throw Slow{};
            head(1);
            points(0, 1, true);
            return;
        }
        if (kind == "LineString") {
            head(2);
            offset = ring(0, size_of(coordinates), 2, false, true);
        } else if (kind == "Polygon") {
            head(3);
            offset = polygon(coordinates, 0);
        } else {
            offset = members(kind, coordinates);
        }
        if (offset != m_flat.size()) throw Slow{};  // positions with a third value, or structure the counts missed
    }

    Envelope envelope() const { return m_envelope; }

private:
    const std::vector<double>& m_flat;
    std::string& m_out;
    Envelope m_envelope{1e300, 1e300, -1e300, -1e300};  // of what shapely.bounds counts: no polygon's holes

    void count(uint32_t value) { m_out.append(reinterpret_cast<const char*>(&value), 4); }
    void head(uint32_t type) {
        m_out += '\x01';
        count(type);
    }

    void points(std::size_t offset, std::size_t number, bool bounded) {
        const double* first = m_flat.data() + offset;
        m_out.append(reinterpret_cast<const char*>(first), number * 16);
        if (!bounded) return;
        for (std::size_t k = 0; k < number; ++k) {
            double x = first[2 * k], y = first[2 * k + 1];
            m_envelope = {std::min(m_envelope[0], x), std::min(m_envelope[1], y), std::max(m_envelope[2], x),
                          std::max(m_envelope[3], y)};
        }
    }

    // _ring_parts: `number` points from `offset`, at least `minimum`, the first equal to the last when closed
    std::size_t ring(std::size_t offset, std::size_t number, std::size_t minimum, bool closed, bool bounded) {
        std::size_t end = offset + number * 2;
        if (number < minimum || end > m_flat.size()) throw Slow{};
        if (closed && std::memcmp(m_flat.data() + offset, m_flat.data() + end - 2, 16) != 0) throw Slow{};
        count(static_cast<uint32_t>(number));
        points(offset, number, bounded);
        return end;
    }

    // _polygon_parts without its header: the rings' count, then each ring; the first ring bounds it
    std::size_t polygon(simdjson::dom::array rings, std::size_t offset) {
        std::size_t number = size_of(rings);
        if (!number) throw Slow{};
        count(static_cast<uint32_t>(number));
        bool shell = true;
        for (simdjson::dom::element ring_of : rings) {
            offset = ring(offset, length_of(ring_of), 4, true, shell);
            shell = false;
        }
        return offset;
    }

    // _member_parts: a MultiPoint's, MultiLineString's or MultiPolygon's members, each a whole WKB geometry
    std::size_t members(std::string_view kind, simdjson::dom::array of) {
        std::size_t number = size_of(of);
        if (!number) throw Slow{};
        head(kind == "MultiPoint" ? 4 : kind == "MultiLineString" ? 5 : 6);
        count(static_cast<uint32_t>(number));
        std::size_t offset = 0;
        for (simdjson::dom::element member : of) {
            if (kind == "MultiPolygon") {
                simdjson::dom::array rings;
                if (member.get_array().get(rings)) throw Slow{};
                head(3);
                offset = polygon(rings, offset);
            } else if (kind == "MultiLineString") {
                head(2);
                offset = ring(offset, length_of(member), 2, false, true);
            } else {  // a MultiPoint member is two numbers of the buffer, whatever its own shape
                if (offset + 2 > m_flat.size()) throw Slow{};
                head(1);
                points(offset, 1, true);
                offset += 2;
            }
        }
        return offset;
    }
};

}  // namespace geojson_wkb
