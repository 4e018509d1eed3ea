"""`reproduce score` as a library call: a model's predictions judged against the stored answers.

Each run (one model and method: a file or a folder of predictions, or one epoch of an Inspect log,
reproduce/predictions/) is paired with the benchmark questions by id. SQL predictions run exactly as `verify`
runs gold SQL (the same Runner: one statement, server-side timeout, capped rows), but as the model role
gsqa_model, which cannot see the query text of gold runs (--gold's run goes as gsqa_reader); all models' SQL
on one queue; answer predictions are judged directly, so a run of answers needs no database. Every question
of every run gets one result (results.Result), with the paper's verdict (the headline) and the strict one
beside it; a question a run did not predict counts as wrong, as in the paper.
Each question is judged by the pipeline `verify` runs (results.py): the same SQL gives the same record.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import MODEL, READER, Role
from reproduce import results, schedule, session
from reproduce.dataset import Record, Skip
from reproduce.predictions.layouts import Prediction, PredictionRun, Problem, read_runs
from reproduce.results import GOLD_RUN, Result, SqlJob
from reproduce.resume import ResumeFile

NOT_PREDICTED = frozenset({"no_prediction", "unreadable"})  # not kept for a rerun: a fixed line scores it
RESUME_FORMAT = "gsqa-reproduce-score/1"

@dataclass(kw_only=True)
class ScoreRequest(session.RunRequest):
    """The kernel's run request (its --reader-dsn is gsqa_model's login), and the runs to score."""

    predictions: list[Path] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    gold: bool = False  # score the dataset's own SQL as a run named "gold"

    @property
    def command(self) -> str:
        """The command line that scores these runs (the preflight names it for the templates it can run)."""
        names = [f"--name {name}" for name in self.names]
        return " ".join(["reproduce score", *map(str, self.predictions), *names, *(["--gold"] if self.gold else [])])


@dataclass
class Scores:
    """Every question of every run, judged, and what the reports say of the runs."""

    provenance: dict[str, Any]
    runs: list[PredictionRun]
    results: list[Result]  # run by run, each in dataset order
    records: dict[str, Record]
    skipped: list[Skip]

    @property
    def problems(self) -> list[Problem]:
        return [problem for run in self.runs for problem in run.problems]


def score(request: ScoreRequest) -> Scores:
    """Every selected question of every run, judged; GsqaError before anything runs if nothing can be."""
    started = time.perf_counter()
    data = session.load_selected(request)
    records = data.records
    by_id = {record.id: record for record in records}
    answered: dict[tuple[str, str], Result] = {}
    runs = [gold_run(records)] if request.gold else []
    for path, name in zip(request.predictions, run_names(request), strict=True):
        runs += read_runs(path, name, set(by_id), lambda run: _judging_answers(run, by_id, answered))
    if twice := [name for name, count in Counter(run.name for run in runs).items() if count > 1]:
        raise GsqaError(f"two runs named {twice[0]!r}: give each PRED a --name of its own")
    # a run whose agent answered nothing but spent calls (unanswered_meta) is scored: 0, with what it spent
    if not any(run.predictions or run.unanswered_meta or any(p.id for p in run.problems) for run in runs):
        first = "; ".join(str(problem) for run in runs for problem in run.problems[:3])
        raise GsqaError(f"nothing to score: no readable prediction of the {len(records)} selected questions"
                        + (f" ({first})" if first else ""))
    jobs = [SqlJob(run.name, record, run.predictions[record.id]) for run in runs for record in records
            if record.id in run.predictions and run.predictions[record.id].kind == "sql"
            and run.predictions[record.id].statements]
    prepared = session.prepare(request, list({job.record.id: job.record for job in jobs}.values()),
                               _roles(jobs), request.command) if jobs else None
    provenance = {**session.provenance(request, data, "reproduce score", prepared),
                  "runs": [run_facts(run) for run in runs]}
    resume = session.open_resume(request, _resume_header(provenance, runs), entry=Result.from_dict,
                                 format=RESUME_FORMAT, command="reproduce score", key=lambda result: result.key)
    # an older line whose rows were never diffed (exact not known) is judged again
    done = {key: result for key, result in resume.done.items() if result.exact is not None} if resume else {}
    try:
        by_key = _judge_directly(runs, records, done, answered, resume)
        by_key.update(_run_sql(prepared, [job for job in jobs if (job.run, job.record.id) not in done], resume,
                               provenance))
    finally:
        if resume:
            resume.close()
    by_key.update(done)
    provenance["seconds"] = round(time.perf_counter() - started, 3)
    ordered = [by_key[(run.name, record.id)] for run in runs for record in records]
    return Scores(provenance, runs, ordered, {record.id: record for record in records}, data.skipped)


def _usage(run: PredictionRun) -> dict[str, Any]:
    """The model's tokens (input, output, total) and cost in dollars over the run's selected questions, where
    its predictions give them (null where they do not): an Inspect log's from the provider, per sample."""
    return {"tokens": run.tokens or None, "cost": round(run.cost, 9) if run.cost is not None else None}


def run_names(request: ScoreRequest) -> list[str]:
    """--name for each PRED in order, else the file or folder name; made unique with #2, #3."""
    if len(request.names) > len(request.predictions):
        raise GsqaError(f"{len(request.names)} --name for {len(request.predictions)} PRED: give at most one per PRED")
    names = [*request.names, *(path.stem if path.is_file() else path.name
                               for path in request.predictions[len(request.names):])]
    taken = {GOLD_RUN} if request.gold else set()
    unique = []
    for name in names:
        candidate, n = name, 1
        while candidate in taken:
            n += 1
            candidate = f"{name}#{n}"
        taken.add(candidate)
        unique.append(candidate)
    return unique


def run_facts(run: PredictionRun) -> dict[str, Any]:
    """What the reports say of a run (provenance["runs"]): where it came from, how many predictions, how many
    lines could not be read, the model's tokens and cost."""
    return {"name": run.name, "source": run.source, "model": run.model, "method": run.method,
            "predictions": len(run.predictions), "problems": len(run.problems), "outside": run.outside,
            **_usage(run)}


def gold_run(records: list[Record]) -> PredictionRun:
    """The dataset's own SQL as a prediction run (`--gold`): it must score as `verify` does."""
    run = PredictionRun(GOLD_RUN, "the dataset's gold SQL", model="gold", method="gold SQL")
    for record in records:
        run.predictions[record.id] = results.gold_job(record).prediction
    return run


def _judging_answers(run: str, records: dict[str, Record], answered: dict[tuple[str, str], Result]
                     ) -> Callable[[Prediction], Prediction]:
    """What read_runs keeps of a prediction: an answer is judged as it is read and only its verdict is kept
    (in `answered`), so that a run's memory does not grow with its answers (docs/PERFORMANCE.md, `reproduce
    score`); SQL is kept to be run."""
    def keep(prediction: Prediction) -> Prediction:
        if prediction.kind == "sql":
            return prediction
        answered[(run, prediction.id)] = _without_database(run, records[prediction.id], prediction, None)
        return replace(prediction, answer=[] if prediction.answer is not None else None)
    return keep


def _judge_directly(runs: list[PredictionRun], records: list[Record], done: dict,
                    answered: dict[tuple[str, str], Result], resume: ResumeFile | None
                    ) -> dict[tuple[str, str], Result]:
    """Every result that needs no database: answers (judged as they were read), missing and unreadable
    predictions, SQL-less text."""
    found = {}
    for run in runs:
        unreadable = {problem.id: problem for problem in run.problems if problem.id}
        for record in records:
            if (run.name, record.id) in done:
                continue
            prediction = run.predictions.get(record.id)
            if prediction is not None and prediction.kind == "sql" and prediction.statements:
                continue  # run on the database
            result = answered.get((run.name, record.id)) if prediction is not None and prediction.kind == "answer" \
                else _without_database(run.name, record, prediction, unreadable.get(record.id),
                                       run.unanswered.get(record.id, ""))
            if prediction is None and (meta := run.unanswered_meta.get(record.id)):  # what it spent, unanswered
                result = replace(result, detail={**result.detail, "meta": session.clipped(meta)})
            if calls := run.calls.get(record.id):  # an agent's: beside the verdict in the reports
                result = replace(result, detail={**result.detail, "calls": session.clipped(calls)})
            found[result.key] = result
            if resume and result.outcome not in NOT_PREDICTED:  # a rerun with the line fixed scores it
                resume.add(result)
    return found


def _without_database(run: str, record: Record, prediction: Prediction | None, problem: Problem | None,
                      unanswered: str = "") -> Result:
    if prediction is None:
        outcome, why = ("unreadable", str(problem)) if problem else (
            "no_prediction", unanswered or "the run has no prediction")
        return results.unjudged(run, record, outcome, why)
    if prediction.unscorable:
        return results.unjudged(run, record, "unscorable", prediction.unscorable, prediction)
    if prediction.answer is None:
        return results.unjudged(run, record, "sql_error",
                                "no SQL in the prediction (no ```sql block in the model's text)", prediction)
    return results.judged(run, record, prediction, prediction.answer)


def _run_sql(prepared: session.Prepared | None, jobs: list[SqlJob], resume: ResumeFile | None,
             provenance: dict[str, Any]) -> dict[tuple[str, str], Result]:
    """Each job's result: the models' SQL as gsqa_model, the gold run's as gsqa_reader, longest first."""
    if not jobs:
        return {}
    estimate = schedule.estimator({}, provenance["database"].get("row_counts") or {})
    jobs = sorted(jobs, key=lambda job: estimate(job.record), reverse=True)
    return {result.key: result for role in _roles(jobs)
            for result in prepared.run([job for job in jobs if _role_of(job) == role], role, results.evaluate, resume,
                                       provenance["lost"], "score")}


def _role_of(job: SqlJob) -> Role:
    return READER if job.run == GOLD_RUN else MODEL


def _roles(jobs: list[SqlJob]) -> list[Role]:
    """The roles the jobs run as, gsqa_model first (the request's --reader-dsn is its login)."""
    return [role for role in (MODEL, READER) if any(_role_of(job) == role for job in jobs)]


def _resume_header(provenance: dict[str, Any], runs: list[PredictionRun]) -> dict[str, Any]:
    predictions = {run.name: hashlib.sha256("".join(f"{path}\0{digest}\n" for path, digest in
                                                    sorted(run.digests.items())).encode()).hexdigest()
                   for run in runs}
    return {"dataset": provenance["dataset"]["checksum"], "predictions": predictions,
            "database": provenance["database"].get("row_counts"), "timeout": provenance["timeout"]}
