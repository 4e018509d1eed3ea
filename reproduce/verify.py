"""`reproduce verify` and `reproduce show` as library calls: the gold run of the pipeline `reproduce score` runs
(results.py), the dataset's SQL run as gsqa_reader through the question-run kernel (session.py), each result
judged against the stored answer.

Nothing is run before the data has loaded and the database has passed its preflight, so a broken setup is
one error, not thousands of failed questions. Every question then gets exactly one result; the caller
decides the exit code from all of them at the end.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import READER
from reproduce import dataset, results, schedule, session
from reproduce.dataset import Record
from reproduce.judging.instability import instability
from reproduce.judging.judge import Judgement
from reproduce.results import GOLD_RUN, Result
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
    if not records:  # as score's "nothing to score": questions not in the data are no failure, but none is none
        first = data.skipped[0].reason if data.skipped else "none selected"
        raise GsqaError(f"nothing to verify: no selected question is in the data ({len(data.skipped)} selected; "
                        f"{first})")
    prepared = session.prepare(request, records, [READER], COMMAND)
    provenance = session.provenance(request, data, COMMAND, prepared)
    resume = session.open_resume(request, {"dataset": data.checksum, "database": prepared.facts["row_counts"],
                                           "timeout": request.timeout}, entry=Result.from_dict)
    done = dict(resume.done) if resume else {}
    found = [_skipped(skip) for skip in data.skipped]
    known = schedule.earlier_durations(durations) if durations else {}
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


def show(record_id: str, request: RunRequest) -> Shown:
    """Re-run one question of the request's data (no progress bar): its record, what the SQL gave, and the
    verdict per component."""
    record = dataset.find(record_id, request.data)
    job = results.gold_job(record)
    prepared = session.prepare(replace(request, progress=False), [record], [READER], "reproduce show")
    [(outcome, (result, judgement))] = prepared.run(
        [job], READER, lambda job, outcome: (outcome, results.evaluated(job, outcome)), None, {}, "show")
    return Shown(record, outcome, result, judgement, instability(record.template_id, record.sql))
