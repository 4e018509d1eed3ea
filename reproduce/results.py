"""One judged result per question for every command (verify, show, score, rebase): the vocabulary, the type, how
it is made from what the question's SQL or answer gave, and the summary counts every report shares.

`reproduce verify` is the run named "gold" of the same pipeline `reproduce score` runs: the dataset's SQL, run
and judged here exactly as a model's, so that the same SQL gives the same record through either command.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from reproduce.dataset import Record
from reproduce.judging.instability import instability
from reproduce.judging.judge import Judgement, described, judge
from reproduce.judging.strict import Check
from reproduce.predictions.layouts import Prediction
from reproduce.runner import Outcome
from reproduce.session import clipped

# How running a question (or reading its prediction) came out; the two verdicts then say whether it is right.
OUTCOMES = {
    "ran": "the SQL ran or the answer was read, and its rows were judged",
    "empty": "no rows where the stored answer has some",
    "timeout": "the server-side timeout ended the SQL",
    "sql_error": "the SQL failed, was refused, or the model's text held no SQL",
    "skipped": "the question is not in the data",
    "no_prediction": "the run has no prediction for the question",
    "unreadable": "the run's line for the question could not be read",
    "unscorable": "an answer that cannot be judged offline (a location given only as an address)",
}
OF_PREDICTIONS = ("no_prediction", "unreadable", "unscorable")  # outcomes only a run of predictions has
VERDICTS = ("pass", "fail")
RUNNER_OUTCOMES = {"rows": "ran", "timeout": "timeout", "error": "sql_error"}  # runner.Outcome.kind -> outcome
ROWS_KEPT = 10  # returned rows kept per result for the reports (values clipped as everywhere)
GOLD_RUN = "gold"  # the dataset's own SQL: verify's run, and score --gold's


def outcomes_markdown() -> str:
    """OUTCOMES as docs/BENCHMARK-FORMAT.md prints them (a test holds the two equal)."""
    return "\n".join(["| outcome | meaning |", "|---|---|", *(f"| `{name}` | {meaning} |"
                                                              for name, meaning in OUTCOMES.items())])


@dataclass(frozen=True)
class Result:
    """One question of one run, judged."""

    run: str  # GOLD_RUN for the dataset's SQL, else the name of the run of predictions
    id: str
    template_id: str
    outcome: str  # one of OUTCOMES
    paper: str  # the paper's verdict (reproduce/judging/paper.py), one of VERDICTS: the headline of score
    paper_reason: str
    strict: str  # the strict verdict (reproduce/judging/strict.py), one of VERDICTS: the headline of verify
    strict_reason: str
    exact: bool | None  # the strict row-level comparison found no difference (None: not made, an older score line)
    seconds: float = 0.0
    server: str = ""  # which server ran the SQL ("" when none did)
    detail: dict[str, Any] = field(default_factory=dict)  # evidence: rows, failure, diff, error, unstable, ...

    @property
    def group(self) -> str:
        """The config the question belongs to: the first part of its id."""
        return self.id.split("/", 1)[0]

    @property
    def key(self) -> tuple[str, str]:
        return self.run, self.id

    def word(self, verdict: str) -> str:
        """The question in one word under one verdict ("paper" or "strict"), as tables and CI show it: the
        verdict when its rows were judged, else its outcome."""
        return getattr(self, verdict) if self.outcome == "ran" else self.outcome

    def as_dict(self) -> dict[str, Any]:
        return {item.name: getattr(self, item.name) for item in fields(self)}  # detail is JSON already

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Result:
        """A result as a report or --resume file holds it, older ones included (read_older)."""
        if "outcome" not in data:
            data = read_older(data)
        return cls(data.get("run", GOLD_RUN), data["id"], data.get("template_id", ""), data["outcome"], data["paper"],
                   data.get("paper_reason", ""), data["strict"], data.get("strict_reason", ""),
                   None if data.get("exact") is None else bool(data["exact"]), float(data.get("seconds") or 0.0),
                   data.get("server", ""),
                   data.get("detail") or {})


# Before one result type, verify wrote `status` (its strict verdict, or how the SQL came out), `paper_status` and
# `exact`, and score `status` (its paper verdict, or how the prediction came out), `paper` and `strict`, but no
# `exact` (score made no row diff then); older files still said `error` and `mismatch`.
OLDER_STATUS = {"pass": "ran", "mismatch": "ran", "error": "sql_error"}


def read_older(data: dict[str, Any]) -> dict[str, Any]:
    """An older report's or resume file's result line in today's fields: verify's strict reason as the judge
    words it today, score's `exact` False where its strict verdict failed (rows that differ past the tolerances
    are not the same rows) and None, not known, where it passed."""
    status = data["status"]
    outcome = OLDER_STATUS.get(status, status)
    if "strict" in data:  # score's: both verdicts under their names already
        return {**data, "outcome": outcome, "exact": False if data["strict"] != "pass" else None}
    strict = "pass" if status == "pass" else "fail"
    why = _older_strict_reason(outcome, strict, data.get("detail") or {})
    paper = "pass" if data.get("paper_status") == "pass" else "fail"  # "" (not judged) and "mismatch" failed
    return {**data, "outcome": outcome, "strict": strict, "strict_reason": why, "paper": paper,
            "paper_reason": data.get("paper_reason") or why}


def _older_strict_reason(outcome: str, strict: str, detail: dict[str, Any]) -> str:
    """What Judgement.strict_reason (or, for SQL that gave no rows, evaluated()) says of an older verify line."""
    if outcome == "skipped":
        return detail.get("reason", "")
    if outcome in ("timeout", "sql_error"):
        return f"{outcome}: {detail.get('error', '')}"
    if outcome == "empty":
        return "no rows (the stored answer has some)"
    if strict == "pass":
        return "every component passes"
    failure = detail.get("failure")
    if not isinstance(failure, dict) or "component" not in failure:
        return "a component fails (the older report kept no failing value)"
    value = failure.get("value")
    return described(Check(failure["component"], failure.get("metric", ""), failure.get("threshold", ""),
                           failure.get("expected"), failure.get("actual"), math.inf if value is None else value,
                           False))


def summarize(results: Iterable[Result]) -> dict[str, int]:
    """Counts of one group of results: questions, predicted, answered, both verdicts' passes, exact, per outcome."""
    results = list(results)
    counts = Counter(result.outcome for result in results)
    return {"questions": len(results),
            "predicted": len(results) - counts["no_prediction"] - counts["unreadable"] - counts["skipped"],
            "answered": counts["ran"] + counts["empty"],
            "paper_passed": sum(result.paper == "pass" for result in results),
            "strict_passed": sum(result.strict == "pass" for result in results),
            "exact": sum(bool(result.exact) for result in results),
            **{outcome: counts[outcome] for outcome in OUTCOMES}}


# --- making results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlJob:
    """One run's SQL for one question, as the Runner takes it."""

    run: str
    record: Record
    prediction: Prediction

    @property
    def statements(self) -> tuple[str, ...]:
        return self.prediction.statements


def gold_job(record: Record) -> SqlJob:
    """The question's own SQL as the gold run's job (verify, score --gold, rebase)."""
    return SqlJob(GOLD_RUN, record, Prediction(record.id, record.id, (record.sql,)))


def evaluate(job: SqlJob, outcome: Outcome) -> Result:
    """The result of one run's SQL for one question."""
    return evaluated(job, outcome)[0]


def evaluated(job: SqlJob, outcome: Outcome) -> tuple[Result, Judgement | None]:
    """The result of one run's SQL for one question, and the judgement it came from (None when the SQL gave no
    rows to judge: a timeout or an error)."""
    extra: dict[str, Any] = {}
    if len(job.statements) > 1:
        extra["candidate"] = f"{outcome.candidate + 1} of {len(job.statements)}"
    if outcome.retried:
        extra["retried"] = outcome.retried
    seconds = round(outcome.seconds, 4)
    if outcome.kind != "rows":
        found = RUNNER_OUTCOMES[outcome.kind]
        result = unjudged(job.run, job.record, found, clipped(f"{found}: {outcome.error}"), job.prediction)
        return replace(result, seconds=seconds, server=outcome.server,
                       detail={**result.detail, **extra, "error": clipped(outcome.error)}), None
    judgement = judge(job.record, outcome.rows)
    result = judged(job.run, job.record, job.prediction, outcome.rows, judgement, extra)
    return replace(result, seconds=seconds, server=outcome.server), judgement


def judged(run: str, record: Record, prediction: Prediction, rows: list[dict[str, Any]],
           judgement: Judgement | None = None, extra: dict[str, Any] | None = None) -> Result:
    """The result of the rows a prediction gave (its SQL's result, or its answer)."""
    judgement = judgement or judge(record, rows)
    detail = {**_detail(record, prediction), **(extra or {}), "rows_total": len(rows)}
    if prediction.kind == "sql":  # an answer's rows are in the detail already
        detail["rows"] = clipped(rows[:ROWS_KEPT])
    if failure := judgement.strict.first_failure:
        detail["failure"] = clipped(failure.as_dict())
    if not judgement.diff.exact:
        detail["diff"] = clipped(judgement.diff.as_dict())
    strict = "pass" if judgement.strict.status == "pass" else "fail"
    return Result(run, record.id, record.template_id, "empty" if not rows and record.answers else "ran",
                  judgement.paper.status, clipped(judgement.paper.reason), strict, clipped(judgement.strict_reason),
                  judgement.diff.exact, detail=detail)


def unjudged(run: str, record: Record, outcome: str, why: str, prediction: Prediction | None = None) -> Result:
    """A question without rows to judge: both verdicts fail, for the same reason."""
    return Result(run, record.id, record.template_id, outcome, "fail", why, "fail", why, False,
                  detail=_detail(record, prediction))


def skipped(run: str, record_id: str, template_id: str, reason: str) -> Result:
    """A selected question that is not in the data."""
    return Result(run, record_id, template_id, "skipped", "fail", reason, "fail", reason, False,
                  detail={"reason": reason})


@functools.lru_cache(maxsize=4096)
def _unstable(template_id: str, sql: str) -> tuple[str, ...]:
    """The question's instability flags, once per question however many runs predict it."""
    return tuple(instability(template_id, sql))


def _detail(record: Record, prediction: Prediction | None) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    if flags := _unstable(record.template_id, record.sql):
        detail["unstable"] = list(flags)
    if prediction is None:
        return detail
    detail["where"] = prediction.where
    if prediction.kind == "sql":
        detail["sql"] = clipped(list(prediction.statements))
    else:
        detail["answer"] = clipped(prediction.answer[:ROWS_KEPT] if prediction.answer else [])
    if prediction.meta:
        detail["meta"] = clipped(prediction.meta)
    return detail
