"""One osmx GeoJSON feature -> the binary COPY rows loader 1 would have inserted for it.

Geometry goes to the server as WKB, which the geography column's binary input reads exactly as it reads
loader 1's WKT text (same coordinates, same SRID, same wrapping of out-of-range longitudes; tested). The
fast path builds the WKB straight from simdjson's flat coordinate buffer: no Python float per coordinate,
coordinates at full double precision (the nearest double to the JSON literal). Anything that is not a
plain 2D Point, LineString, Polygon or Multi* with closed rings goes through shapely's `shape()`, the call
loader 1 made, so shapely decides what loader 1's shapely decided (it closes open rings, rejects rings of
fewer than 4 points, builds empty geometries and collections). Invalid polygons (a bow-tie) are kept as
they are: geography does not validate, and loader 1 did not repair.

Runs in the parser worker processes: no database here. A stored feature's Python (its tags, loader 1's rules,
the WKB from the coordinate buffer, the binary COPY row) is most of their work, where the native lines encoder
(_lines.cpp, geojson_wkb.hpp: the same rows and WKB in C++) is not built; where it is, this module encodes only
the lines it hands back and the stream layout's features.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import simdjson

from ingest.osm.rules import MISSING, BadFeature, Layer, Values, rows_of

if TYPE_CHECKING:
    import shapely

COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
COPY_TRAILER = struct.pack(">h", -1)
_NULL = struct.pack(">i", -1)
_INT16, _INT32, _INT64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_STAGE_FIELDS = struct.Struct(">iiiq")  # pass (int4) and position (int8), each after its length

_WKB_TYPES = {"Point": 1, "LineString": 2, "Polygon": 3, "MultiPoint": 4, "MultiLineString": 5, "MultiPolygon": 6}
_WKB_HEAD = struct.Struct("<BI")
_COUNT = struct.Struct("<I")
_POINT = 16  # two little-endian doubles


class _Slow(Exception):
    """The fast path declines; shapely decides."""


def _ring_parts(flat: memoryview, offset: int, count: int, minimum: int, closed: bool) -> list[bytes | memoryview]:
    end = offset + count * _POINT
    if count < minimum or end > len(flat):
        raise _Slow
    if closed and flat[offset:offset + _POINT] != flat[end - _POINT:end]:
        raise _Slow
    return [_COUNT.pack(count), flat[offset:end]]


def _polygon_parts(rings: Any, flat: memoryview, offset: int) -> tuple[list, int]:
    parts: list = [_WKB_HEAD.pack(1, 3), _COUNT.pack(len(rings))]
    if not len(rings):
        raise _Slow
    for ring in rings:
        count = len(ring)
        parts += _ring_parts(flat, offset, count, 4, closed=True)
        offset += count * _POINT
    return parts, offset


def _member_parts(kind: str, members: Any, flat: memoryview) -> tuple[list, int]:
    """The parts of a MultiPoint, MultiLineString or MultiPolygon: each member is a whole WKB geometry."""
    if not len(members):
        raise _Slow
    parts: list = [_COUNT.pack(len(members))]
    offset = 0
    for member in members:
        if kind == "MultiPolygon":
            polygon, offset = _polygon_parts(member, flat, offset)
            parts += polygon
        elif kind == "MultiLineString":
            parts.append(_WKB_HEAD.pack(1, 2))
            parts += _ring_parts(flat, offset, len(member), 2, closed=False)
            offset += len(member) * _POINT
        else:
            parts += [_WKB_HEAD.pack(1, 1), flat[offset:offset + _POINT]]
            offset += _POINT
    return parts, offset


def _fast_wkb(kind: str, coordinates: Any) -> bytes:
    """WKB from the flat buffer of a simdjson coordinates array; _Slow for anything unusual."""
    try:
        flat = memoryview(coordinates.as_buffer(of_type="d")).cast("B")
    except (TypeError, ValueError, AttributeError):
        raise _Slow from None
    if kind == "Point":
        if len(flat) != _POINT:
            raise _Slow
        return _WKB_HEAD.pack(1, 1) + flat
    if kind == "LineString":
        parts, offset = _ring_parts(flat, 0, len(coordinates), 2, closed=False), len(coordinates) * _POINT
    elif kind == "Polygon":
        parts, offset = _polygon_parts(coordinates, flat, 0)
        parts = parts[1:]  # _polygon_parts starts with its own header
    else:
        parts, offset = _member_parts(kind, coordinates, flat)
    if offset != len(flat):  # positions with a third value, or structure the counts did not describe
        raise _Slow
    return b"".join([_WKB_HEAD.pack(1, _WKB_TYPES[kind]), *parts])


def _plain(value: Any) -> Any:
    """A simdjson proxy as plain Python (dicts and lists), as json.loads would have given it."""
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    if isinstance(value, simdjson.Array):
        return value.as_list()
    return value


def shapely_wkb(geometry: Any) -> bytes:
    """The geometry as loader 1's `shape(geometry)` built it, as 2D WKB."""
    import shapely  # here, not at the top: its import (with numpy's) is a sixth of `ingest osm FILE.pbf`'s start
    from shapely.geometry import shape

    try:
        built = shape(geometry)
    except Exception as error:  # shapely raises many types for malformed GeoJSON: each is "not a geometry"
        raise BadFeature(f"geometry cannot be built: {_describe(error)}") from None
    if built.has_z:
        raise BadFeature("geometry has 3D coordinates; the geography(GEOMETRY,4326) column is 2D")
    return shapely.to_wkb(built, byte_order=1, output_dimension=2)


def _describe(error: Exception) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def geometry_wkb(feature: Any) -> bytes:
    if "geometry" not in feature:
        raise BadFeature("feature has no geometry member")
    geometry = feature["geometry"]
    if geometry is None:
        raise BadFeature("geometry is null")
    if isinstance(geometry, simdjson.Object):
        kind, coordinates = geometry.get("type"), geometry.get("coordinates")
        if kind in _WKB_TYPES and isinstance(coordinates, simdjson.Array):
            try:
                return _fast_wkb(kind, coordinates)
            except (_Slow, TypeError):  # TypeError: len() of a number where a ring or a member should be
                pass
    return shapely_wkb(_plain(geometry))


def _field(value: str | int, column: str) -> bytes:
    if type(value) is int:
        return _INT32.pack(8) + _INT64.pack(value)
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError:
        raise BadFeature(f"the value of {column} is not valid UTF-8 (a lone surrogate escape)") from None
    return _INT32.pack(len(data)) + data


def envelope_overlaps(geometry: shapely.Geometry, bbox: tuple[float, float, float, float]) -> bool:
    """Does the geometry's envelope overlap the box (W, S, E, N)? Touching counts; an empty geometry does not."""
    import shapely

    west, south, east, north = shapely.bounds(geometry)
    return west <= bbox[2] and east >= bbox[0] and south <= bbox[3] and north >= bbox[1]


def overlaps(wkb: bytes, bbox: tuple[float, float, float, float]) -> bool:
    import shapely

    return envelope_overlaps(shapely.from_wkb(wkb), bbox)


def row_packer(layer: Layer, source_name: str) -> Callable[[list[tuple[int, Values]], bytes, int], list[bytes]]:
    """(rows_of's rows, geometry WKB, position in the source) -> the binary COPY rows. Direct tables get
    (geometry, attributes...); pois gets the staging row (source_name, pass, position, geometry,
    attributes...), numbered later in loader 1's category pass order (see load.py). Both readers (GeoJSON and PBF)
    pack their rows here; it runs once per feature, so it is written for speed: most of a row's 12 to 46
    attribute columns are NULL, and each run of NULLs between two values is one ready-made piece."""
    columns = layer.attribute_columns
    staged = layer.in_passes
    field_count = _INT16.pack(len(columns) + (4 if staged else 1))
    staged_prefix = field_count + _field(source_name, "source_name")
    null_runs = [_NULL * length for length in range(len(columns) + 1)]
    length_of = _INT32.pack

    def pack(rows: list[tuple[int, Values]], geometry: bytes, position: int) -> list[bytes]:
        values = rows[0][1]
        parts = [length_of(len(geometry)), geometry]
        after = 0  # the column after the last value packed
        for index in sorted(values):
            value = values[index]
            parts.append(null_runs[index - after])
            if type(value) is str and value.isascii():  # the common case without a call
                parts += (length_of(len(value)), value.encode("ascii"))
            else:
                parts.append(_field(value, columns[index]))
            after = index + 1
        parts.append(null_runs[len(columns) - after])
        body = b"".join(parts)
        if not staged:
            return [field_count + body]
        return [staged_prefix + _STAGE_FIELDS.pack(4, number, 8, position) + body for number, _ in rows]

    return pack


def encoder(layer: Layer, source_name: str,
            bbox: tuple[float, float, float, float] | None = None) -> Callable[[Any, int], list[bytes]]:
    """feature, byte offset -> its binary COPY rows (BadFeature when loader 1 could not have stored it);
    no rows for a feature outside `bbox` (a regional build)."""
    pack = row_packer(layer, source_name)
    proxy, plain = simdjson.Object, dict

    def encode(feature: Any, offset: int) -> list[bytes]:
        if not isinstance(feature, proxy) and not isinstance(feature, plain):
            raise BadFeature("feature is not a JSON object")
        properties = feature.get("properties")
        if not isinstance(properties, proxy) and not isinstance(properties, plain):
            raise BadFeature("properties is missing or not an object")
        tags = properties.get("tagsMap")
        rows = rows_of(layer, _plain(properties.get("id", MISSING)),
                       tags.as_dict() if isinstance(tags, proxy) else tags)
        if not rows:
            return []
        geometry = geometry_wkb(feature)
        if bbox is not None and not overlaps(geometry, bbox):
            return []
        return pack(rows, geometry, offset)

    return encode
