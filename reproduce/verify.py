"""`reproduce verify` and `reproduce show` as library calls: gold SQL run as gsqa_reader through the question-run
kernel (session.py), each result judged against the stored answer.

Nothing is run before the data has loaded and the database has passed its preflight, so a broken setup is
one error, not thousands of failed questions. Every question then gets exactly one result; the caller
decides the exit code from all of them at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gsqa_core.sandbox import READER
from reproduce import compare, dataset, schedule, session
from reproduce.dataset import Record
from reproduce.paper import PaperVerdict, paper_verdict
from reproduce.results import Result
from reproduce.runner import Outcome
from reproduce.session import RunRequest

COMMAND = "reproduce verify"


@dataclass
class Run:
    provenance: dict[str, Any]
    results: list[Result]
    records: dict[str, Record] = field(default_factory=dict)  # id -> record, for the question and SQL in reports


def verify(request: RunRequest, durations: Path | None = None) -> Run:
    """Every selected question's result, in dataset order (skipped ones included); `durations`, an earlier
    report, orders the questions by its times (longest first)."""
    started = time.perf_counter()
    data = session.load_selected(request)
    records = data.records
    prepared = session.prepare(request, records, [READER], COMMAND)
    provenance = session.provenance(request, data, COMMAND, prepared)
    resume = session.open_resume(request, {"dataset": data.checksum, "database": prepared.facts["row_counts"],
                                           "timeout": request.timeout})
    done = dict(resume.done) if resume else {}
    results = [_skipped(skip) for skip in data.skipped]
    known = schedule.earlier_durations(durations) if durations else {}
    known.update({record_id: result.seconds for record_id, result in done.items()})
    todo = schedule.longest_first([record for record in records if record.id not in done], known,
                                  prepared.readiness.row_estimates)
    results += [done[record.id] for record in records if record.id in done]
    try:
        results += prepared.run(todo, READER, evaluate, resume, provenance["lost"], "verify")
    finally:
        if resume:
            resume.close()
    provenance["seconds"] = round(time.perf_counter() - started, 3)
    order = {record_id: n for n, record_id in enumerate(session.dataset_order(data))}
    return Run(provenance, sorted(results, key=lambda result: order[result.id]), {r.id: r for r in records})


def evaluate(record: Record, outcome: Outcome) -> Result:
    """The result of one question from what its SQL gave."""
    flags = compare.instability(record.template_id, record.sql)
    detail: dict[str, Any] = {"unstable": flags} if flags else {}
    if outcome.retried:
        detail["retried"] = outcome.retried
    if outcome.kind != "rows":
        return Result(record.id, record.template_id, "timeout" if outcome.kind == "timeout" else "sql_error", False,
                      {**detail, "error": session.clipped(outcome.error)}, round(outcome.seconds, 4), "fail",
                      f"{outcome.kind}: no answer to score", outcome.server)
    verdict = compare.judge(record.template_id, record.answers, outcome.rows)
    diff = compare.exact_diff(record.template_id, record.answers, outcome.rows)
    paper = paper_verdict(record.template_id, record.answers, outcome.rows)
    detail["rows"] = len(outcome.rows)
    if failure := verdict.first_failure:
        detail["failure"] = session.clipped(failure.as_dict())
    if not diff.exact:
        detail["diff"] = session.clipped(diff.as_dict())
    return Result(record.id, record.template_id, verdict.status, diff.exact, detail, round(outcome.seconds, 4),
                  paper.status, session.clipped(paper.reason), outcome.server)


def _skipped(skip: dataset.Skip) -> Result:
    return Result(skip.id, skip.template_id, "skipped", False, {"reason": skip.reason})


@dataclass
class Shown:
    record: Record
    outcome: Outcome
    verdict: compare.Verdict | None
    diff: compare.RowDiff | None
    flags: list[str]
    paper: PaperVerdict | None = None


def show(record_id: str, request: RunRequest) -> Shown:
    """Re-run one question of the request's data (no progress bar): its record, what the SQL gave, and the
    verdict per component."""
    record = dataset.find(record_id, request.data)
    prepared = session.prepare(replace(request, progress=False), [record], [READER], "reproduce show")
    [outcome] = prepared.run([record], READER, lambda _, outcome: outcome, None, {}, "show")
    flags = compare.instability(record.template_id, record.sql)
    if outcome.kind != "rows":
        return Shown(record, outcome, None, None, flags)
    verdict = compare.judge(record.template_id, record.answers, outcome.rows)
    return Shown(record, outcome, verdict, compare.exact_diff(record.template_id, record.answers, outcome.rows), flags,
                 paper_verdict(record.template_id, record.answers, outcome.rows))
