"""`reproduce verify` and `reproduce show` as library calls: the gold run of the pipeline `reproduce score` runs
(results.py), the dataset's SQL run as gsqa_reader through the question-run kernel (session.py), each result
judged against the stored answer.

Nothing is run before the data has loaded and the database has passed its preflight, so a broken setup is
one error, not thousands of failed questions. Every question then gets exactly one result; the caller
decides the exit code from all of them at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsqa_core.sandbox import READER
from reproduce import dataset, results, schedule, session
from reproduce.dataset import Record
from reproduce.judging.instability import instability
from reproduce.judging.judge import Judgement
from reproduce.results import GOLD_RUN, Result
from reproduce.runner import Outcome


@dataclass
class Request(session.Request):
    """The kernel's request, and verify's own option."""

    durations: Path | None = None  # an earlier report whose times order the questions (longest first)


@dataclass
class Run:
    provenance: dict[str, Any]
    results: list[Result]
    records: dict[str, Record] = field(default_factory=dict)  # id -> record, for the question and SQL in reports


def verify(request: Request) -> Run:
    """Every selected question's result, in dataset order (skipped ones included)."""
    started = time.perf_counter()
    data = session.load_selected(request)
    records = data.records
    prepared = session.prepare(request, records, [READER])
    provenance = session.provenance(request, data, "reproduce verify", prepared)
    resume = session.open_resume(request, {"dataset": data.checksum, "database": prepared.facts["row_counts"],
                                           "timeout": request.timeout}, entry=Result.from_dict)
    done = dict(resume.done) if resume else {}
    found = [_skipped(skip) for skip in data.skipped]
    known = schedule.earlier_durations(request.durations) if request.durations else {}
    known.update({record_id: result.seconds for record_id, result in done.items()})
    todo = schedule.longest_first([record for record in records if record.id not in done], known,
                                  prepared.readiness.row_estimates)
    found += [done[record.id] for record in records if record.id in done]
    try:
        found += prepared.run([results.gold_job(record) for record in todo], READER, results.evaluate, resume,
                              provenance["lost"], "verify")
    finally:
        if resume:
            resume.close()
    provenance["seconds"] = round(time.perf_counter() - started, 3)
    order = {record_id: n for n, record_id in enumerate(session.dataset_order(data))}
    return Run(provenance, sorted(found, key=lambda result: order[result.id]), {r.id: r for r in records})


def _skipped(skip: dataset.Skip) -> Result:
    return results.skipped(GOLD_RUN, skip.id, skip.template_id, skip.reason)


@dataclass
class Shown:
    record: Record
    outcome: Outcome
    result: Result
    judgement: Judgement | None  # None when the SQL gave no rows to judge (a timeout, an error)
    flags: list[str]


def show(record_id: str, data: Path | None, dsn: str | None, reader: str | None, timeout: float) -> Shown:
    """Re-run one question: its record, what the SQL gave, and the verdict per component."""
    record = dataset.find(record_id, data)
    request = Request(data=data, dsn=dsn, reader_dsn=reader, timeout=timeout, progress=False)
    job = results.gold_job(record)
    [(outcome, (result, judgement))] = session.prepare(request, [record], [READER]).run(
        [job], READER, lambda job, outcome: (outcome, results.evaluated(job, outcome)), None, {}, "show")
    return Shown(record, outcome, result, judgement, instability(record.template_id, record.sql))
