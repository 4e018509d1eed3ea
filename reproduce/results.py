"""One result per question, and the summary counts every report shares."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# One vocabulary for every command. A question's status says how its SQL or answer came out (score adds its own
# for predictions: no_prediction, unreadable, unscorable); a verdict (the paper's, the strict one) says
# whether it counts as right.
STATUSES = ("pass", "mismatch", "empty", "timeout", "sql_error", "skipped")
VERDICTS = ("pass", "fail")
SUMMARY_KEYS = {"pass": "passed", "mismatch": "mismatched", "empty": "empty", "timeout": "timed_out",
                "sql_error": "errored", "skipped": "skipped"}
# Older reports and resume files spoke otherwise: read with today's words.
RENAMED = {"status": {"error": "sql_error"}, "paper_status": {"mismatch": "fail"}}


def current_name(field: str, value: str) -> str:
    """A status or verdict as older files spelled it, in today's vocabulary."""
    return RENAMED[field].get(value, value)


@dataclass(frozen=True)
class Result:
    id: str
    template_id: str
    status: str  # one of STATUSES
    exact: bool  # the strict row-level comparison found no difference
    detail: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    paper_status: str = ""  # the authors' scoring (reproduce/paper.py), one of VERDICTS; "" when not run
    paper_reason: str = ""
    server: str = ""  # which server answered (a run with --replica); "" for a skipped question

    @property
    def group(self) -> str:
        """The config the question belongs to: the first part of its id."""
        return self.id.split("/", 1)[0]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        return cls(data["id"], data["template_id"], current_name("status", data["status"]), bool(data.get("exact")),
                   data.get("detail") or {}, float(data.get("seconds") or 0.0),
                   current_name("paper_status", data.get("paper_status", "")),
                   data.get("paper_reason", ""), data.get("server", ""))


def summarize(results: Iterable[Result]) -> dict[str, int]:
    """{total, passed, exact, paper_passed, mismatched, empty, timed_out, errored, skipped}."""
    results = list(results)
    counts = Counter(result.status for result in results)
    summary = {"total": len(results), "passed": counts["pass"], "exact": sum(r.exact for r in results),
               "paper_passed": sum(r.paper_status == "pass" for r in results)}
    summary.update({SUMMARY_KEYS[status]: counts[status] for status in STATUSES if status != "pass"})
    return summary
