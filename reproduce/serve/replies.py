"""What serve's tools send back: one compact, strict JSON text per reply (reply_text), and a query's reply
fitted into gate.MAX_REPLY_BYTES (its first rows, with a note saying how to get less)."""

from __future__ import annotations

import json
from typing import Any


def reply_text(reply: Any) -> str:
    """A tool's reply as an agent receives it: compact, strict JSON (a string as it is)."""
    return reply if isinstance(reply, str) else json.dumps(reply, separators=(",", ":"), default=str,
                                                           allow_nan=False)


def fitted(reply: dict[str, Any], limit: int) -> dict[str, Any]:
    """The query's reply with as many of its first rows as fit in `limit` bytes of reply_text, and a note
    saying how to get less when it had to leave rows out."""
    rows = reply["rows"]
    if len(reply_text(reply).encode()) <= limit:
        return reply
    low, high = 0, len(rows)  # the largest prefix that fits: rows[:low] fits, rows[:high + 1] does not
    while low < high:
        middle = (low + high + 1) // 2
        if len(reply_text({**reply, "rows": rows[:middle]}).encode()) <= limit:
            low = middle
        else:
            high = middle - 1
    note = (f"only the first {low:,} of the {reply['row_count']:,} rows fit in a reply of {limit:,} bytes; select "
            "fewer or shorter columns (ST_AsText of a simplified geometry, substr of a long text), fewer rows, "
            "or aggregate")
    return {**reply, "rows": rows[:low], "truncated": True, "note": note}
