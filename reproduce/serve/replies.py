"""What serve's tools send back: one compact, strict JSON text per reply (reply_text), made once (a Reply carries
it to the call's trajectory line and to the MCP result), each value of a query's rows in a documented JSON form
and cut where long (agent_value), and the reply fitted into gate.MAX_REPLY_BYTES (its first rows, with a note
saying how to get less; each row encoded once, and none past the limit).

The forms (the judge's rows are the runner's json_value, untouched: this is what an agent reads):
- numeric: a JSON number when the number reads back exactly as one and is within ±2**53 (what every JSON reader
  holds exactly), else its exact text ("1.000000000000000000001"), cut past REPORTED_CHARACTERS;
  NaN and infinities (numeric and float) as the text PostgreSQL writes ("NaN", "Infinity", "-Infinity");
- date, time, timestamp, interval, ranges and multiranges: the text PostgreSQL writes (DateStyle ISO on a default
  server: "2024-01-02 03:04:05+00", "1 year 2 mons 3 days 04:05:06", "[1,10)", "infinity");
- geometry and geography: WKT without SRID (hex EWKB for curves GEOS cannot write): pool.WktLoader;
- arrays and JSON: lists and objects (JSON nested past what Python's parser goes: its text), bytea as hex; any
  other type as its text.
Cut, each with a marker saying what was cut and how to get less: a text (a geometry's WKT too) past
REPORTED_CHARACTERS characters, an array or JSON array past MAX_ITEMS items (the marker is its last item), a JSON
object past MAX_ITEMS members (the marker under the key "…"), nesting past REPORTED_DEPTH levels."""

from __future__ import annotations

import decimal
import itertools
import json
import math
from typing import Any

from reproduce.refusals import code_of
from reproduce.runner import capped, json_value
from reproduce.session import REPORTED_CHARACTERS, REPORTED_DEPTH

MAX_ITEMS = 100  # of an array, a JSON array or a JSON object in a reply
MAX_EXACT_INTEGER = 2**53
CUT_KEY = "…"  # a cut JSON object's marker member
# What to do instead of each cut, as its marker says it.
LESS = {"text": "substr() gives a part",
        "geometry": "ST_AsText(ST_Simplify(geom, tolerance)), ST_Centroid or ST_NPoints give less",
        "array": "slice it (arr[101:200], jsonb_path_query_array) or unnest and aggregate",
        "object": "select the members you need (value->'key')",
        "nested": "select the inner value you need (value #> '{a,b}')"}
_WKT_STARTS = ("POINT", "LINESTRING", "POLYGON", "MULTI", "GEOMETRYCOLLECTION")


def agent_value(value: Any, depth: int = 0) -> Any:
    """A database value as a query's reply carries it (the module's forms), cut where long."""
    if isinstance(value, decimal.Decimal):
        return _numeric(value)
    if isinstance(value, float) and not math.isfinite(value):
        return _not_finite(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list | tuple | dict) and depth >= REPORTED_DEPTH:
        return f"(cut: nested past {REPORTED_DEPTH} levels; {LESS['nested']})"
    if isinstance(value, list | tuple):
        kept = [agent_value(item, depth + 1) for item in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            kept.append(f"… (cut: {len(value):,} items in all, the first {MAX_ITEMS} kept; {LESS['array']})")
        return kept
    if isinstance(value, dict):
        kept = {str(key): agent_value(item, depth + 1) for key, item in list(value.items())[:MAX_ITEMS]}
        if len(value) > MAX_ITEMS:
            kept[CUT_KEY] = f"(cut: {len(value):,} members in all, the first {MAX_ITEMS} kept; {LESS['object']})"
        return kept
    return json_value(value)


def _not_finite(value: float | decimal.Decimal) -> str:
    """NaN and the infinities as PostgreSQL writes them."""
    return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")


def _numeric(value: decimal.Decimal) -> Any:
    if not value.is_finite():
        return _not_finite(value)
    if abs(value) > MAX_EXACT_INTEGER:  # past what every JSON reader (JavaScript's doubles) holds exactly
        return _text(str(value))
    number = int(value) if value == value.to_integral_value() else float(value)
    return number if decimal.Decimal(repr(number)) == value else _text(str(value))


def json_or_text(data: str | bytes) -> Any:
    """A json or jsonb value parsed, or its text where it nests past what Python's parser goes (a RecursionError
    would fail the call); agent_value then cuts either as it cuts any value."""
    try:
        return json.loads(data)
    except RecursionError:
        return data.decode() if isinstance(data, bytes) else data


def _text(value: str) -> str:
    if len(value) <= REPORTED_CHARACTERS:
        return value
    less = LESS["geometry"] if value.lstrip().upper().startswith(_WKT_STARTS) else LESS["text"]
    return f"{value[:REPORTED_CHARACTERS]}… (cut: {len(value):,} characters in all; {less})"


# Where the agent's SQL starts in runner.capped's query around it (the text before it is fixed).
_CAPPED_BEFORE = capped("\0", 1, 1).index("\0")


def server_error(error: Any, message: str, statement: str, sent: str) -> str:
    """The server's error of the agent's `statement` (sent as `sent`) in one line: `message` (the runner's line:
    a refusal as the gate words it, else the server's message), then its SQLSTATE, the character of the
    statement where it was found and the server's hint, where the server gave them."""
    diag = error.diag if error.diag and error.sqlstate else None
    if code_of(message) or diag is None:
        return message
    details = [f"SQLSTATE {error.sqlstate}"]
    if (at := _position(diag.statement_position, statement, sent)) is not None:
        details.append(f"at character {at}: {statement[at - 1:at + 29]!r}")
    if diag.message_hint:
        details.append(f"hint: {' '.join(diag.message_hint.split())}")
    return f"{message} ({'; '.join(details)})"


def _position(position: str | None, statement: str, sent: str) -> int | None:
    """The server's error position (1-based, in `sent`) as a position in the agent's statement; None when there
    is none or it falls outside the statement."""
    if not position:
        return None
    at = int(position) - 1
    if sent != statement:  # inside capped's query: the statement's body starts after its fixed head
        body = sent[_CAPPED_BEFORE:sent.rindex("\n) AS gsqa_q")]
        at -= _CAPPED_BEFORE
        if not 0 <= at < len(body):
            return None
        at += statement.find(body)
    return at + 1 if 0 <= at < len(statement) else None


class Reply(dict):
    """A tool's reply (a dict, as plain Python callers use it) and `text`, the reply as the agent receives it
    (reply_text), made once where the reply is made: the call's trajectory line and the MCP result reuse it."""

    text: str


def sent(reply: dict[str, Any], text: str | None = None) -> Reply:
    """The reply with its text (`text` when it was made already)."""
    made = Reply(reply)
    made.text = reply_text(reply) if text is None else text
    return made


def reply_text(reply: Any) -> str:
    """A tool's reply as an agent receives it: compact, strict, ASCII JSON (a string as it is; a Reply's text as
    it was made). ASCII: its characters are its bytes."""
    if isinstance(reply, str):
        return reply
    if isinstance(reply, Reply):
        return reply.text
    return json.dumps(reply, separators=(",", ":"), default=str, allow_nan=False)


def fitted(reply: dict[str, Any], limit: int) -> Reply:
    """The query's reply (its first member "rows") with as many of its first rows as fit in `limit` bytes of
    reply_text, and a note saying how to get less when it had to leave rows out. Each row is encoded once, and
    none past the limit: the reply's text is the kept rows' texts joined."""
    texts = _row_texts(reply["rows"], limit)
    if len(texts) == len(reply["rows"]) and len(text := _with_rows(reply, texts)) <= limit:
        return sent(reply, text)
    ends = list(itertools.accumulate(len(text) + 1 for text in texts))  # rows[:k]: ends[k - 1] - 1 characters
    low, high = 0, len(texts)  # the largest prefix that fits: rows[:low] fits, rows[:high + 1] does not
    while low < high:
        middle = (low + high + 1) // 2
        head, tail = _around(_cut(reply, middle, limit))
        if len(head) + ends[middle - 1] - 1 + len(tail) <= limit:
            low = middle
        else:
            high = middle - 1
    cut = _cut(reply, low, limit)
    return sent(cut, _with_rows(cut, texts[:low]))


def _row_texts(rows: list[dict[str, Any]], limit: int) -> list[str]:
    """The rows' texts, the first of them up to `limit` characters (the rows after them cannot fit)."""
    texts, size = [], 0
    for row in rows:
        if size >= limit:
            break
        texts.append(reply_text(row))
        size += len(texts[-1]) + 1
    return texts


def _cut(reply: dict[str, Any], kept: int, limit: int) -> dict[str, Any]:
    note = (f"only the first {kept:,} of the {reply['row_count']:,} rows fit in a reply of {limit:,} bytes; select "
            "fewer or shorter columns (ST_AsText of a simplified geometry, substr of a long text), fewer rows, "
            "or aggregate")
    return {**reply, "rows": reply["rows"][:kept], "truncated": True, "note": note}


def _around(reply: dict[str, Any]) -> tuple[str, str]:
    """reply_text of the reply before and after its rows (the reply's first member)."""
    rest = reply_text({key: value for key, value in reply.items() if key != "rows"})
    return '{"rows":[', "]" + ("}" if rest == "{}" else "," + rest[1:])


def _with_rows(reply: dict[str, Any], texts: list[str]) -> str:
    """reply_text of the reply, its rows given as their texts."""
    head, tail = _around(reply)
    return "".join((head, ",".join(texts), tail))
