"""`reproduce score` as a library call: a model's predictions judged against the stored answers.

Each run (one model and method: a file or a folder of predictions, reproduce/predictions/) is paired with
the benchmark questions by id. SQL predictions run exactly as `verify` runs gold SQL (the same Runner: one
statement, server-side timeout, capped rows), but as the model role gsqa_model, which cannot see the query
text of gold runs (--gold's run goes as gsqa_reader); all models' SQL on one queue; answer
predictions are judged directly, so a run of answers needs no database. Every question of every run gets
one result, with the paper's verdict (the headline) and the strict one beside it; a question a run did not
predict counts as wrong, as in the paper.

On a benchmark of the full size (3,300 questions) and 4 runs of answers (65 MB of predictions, answers of up
to 330 rows; `bench/reproduce_bench.py --predictions`), judging takes about 4 s of CPU, reading the predictions
about 1 s, and every report together (31 MB of JSON, 28 MB of HTML) about 1.5 s.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import MODEL, READER, Role
from reproduce import compare, schedule, session
from reproduce.dataset import Record, Skip
from reproduce.paper import paper_verdict
from reproduce.predictions.layouts import Prediction, PredictionRun, Problem, read_run
from reproduce.resume import ResumeFile
from reproduce.runner import Outcome

STATUSES = ("pass", "mismatch", "empty", "sql_error", "timeout", "no_prediction", "unreadable", "unscorable")
ANSWERED = frozenset({"pass", "mismatch", "empty"})  # a result was judged: the SQL ran, or an answer was given
NOT_PREDICTED = frozenset({"no_prediction", "unreadable"})
RESUME_FORMAT = "gsqa-reproduce-score/1"
ROWS_KEPT = 10  # returned rows kept per result for the reports (values clipped as everywhere)
GOLD_RUN = "gold"


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


@dataclass(frozen=True)
class Scored:
    """One question of one run."""

    run: str
    id: str
    template_id: str
    status: str  # one of STATUSES
    paper: str  # the paper's verdict, the headline: pass or fail
    paper_reason: str
    strict: str  # the strict verdict (compare.judge): pass or fail
    strict_reason: str
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def group(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def key(self) -> tuple[str, str]:
        return self.run, self.id

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}  # detail is JSON already

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Scored:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


@dataclass
class Scoring:
    provenance: dict[str, Any]
    runs: list[PredictionRun]
    results: list[Scored]  # run by run, each in dataset order
    records: dict[str, Record]
    skipped: list[Skip]

    @property
    def problems(self) -> list[Problem]:
        return [problem for run in self.runs for problem in run.problems]


@dataclass(frozen=True)
class SqlJob:
    """One run's SQL for one question, as the Runner takes it."""

    run: str
    record: Record
    prediction: Prediction

    @property
    def statements(self) -> tuple[str, ...]:
        return self.prediction.statements


def score(request: ScoreRequest) -> Scoring:
    """Every selected question of every run, judged; GsqaError before anything runs if nothing can be."""
    started = time.perf_counter()
    data = session.load_selected(request)
    records = data.records
    by_id = {record.id: record for record in records}
    answered: dict[tuple[str, str], Scored] = {}
    runs = [gold_run(records)] if request.gold else []
    runs += [read_run(path, name, set(by_id), _judging_answers(name, by_id, answered))
             for path, name in zip(request.predictions, run_names(request), strict=True)]
    if not any(run.predictions or any(p.id for p in run.problems) for run in runs):
        first = "; ".join(str(problem) for run in runs for problem in run.problems[:3])
        raise GsqaError(f"nothing to score: no readable prediction of the {len(records)} selected questions"
                        + (f" ({first})" if first else ""))
    jobs = [SqlJob(run.name, record, run.predictions[record.id]) for run in runs for record in records
            if record.id in run.predictions and run.predictions[record.id].kind == "sql"
            and run.predictions[record.id].statements]
    prepared = session.prepare(request, list({job.record.id: job.record for job in jobs}.values()),
                               _roles(jobs), request.command) if jobs else None
    provenance = {**session.provenance(request, data, "reproduce score", prepared),
                  "runs": [{"name": run.name, "source": run.source, "model": run.model, "method": run.method,
                            "predictions": len(run.predictions), "problems": len(run.problems),
                            "outside": run.outside} for run in runs]}
    resume = session.open_resume(request, _resume_header(provenance, runs), entry=Scored.from_dict,
                                 format=RESUME_FORMAT, command="reproduce score", key=lambda result: result.key)
    done = dict(resume.done) if resume else {}
    try:
        results = _judge_directly(runs, records, done, answered, resume)
        results.update(_run_sql(prepared, [job for job in jobs if (job.run, job.record.id) not in done], resume,
                                provenance))
    finally:
        if resume:
            resume.close()
    results.update(done)
    provenance["seconds"] = round(time.perf_counter() - started, 3)
    ordered = [results[(run.name, record.id)] for run in runs for record in records]
    return Scoring(provenance, runs, ordered, {record.id: record for record in records}, data.skipped)


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


def gold_run(records: list[Record]) -> PredictionRun:
    """The dataset's own SQL as a prediction run (`--gold`): it must score as `verify` does."""
    run = PredictionRun(GOLD_RUN, "the dataset's gold SQL", model="gold", method="gold SQL")
    for record in records:
        run.predictions[record.id] = Prediction(record.id, record.id, (record.sql,))
    return run


def _judging_answers(run: str, records: dict[str, Record], answered: dict[tuple[str, str], Scored]
                     ) -> Callable[[Prediction], Prediction]:
    """What read_run keeps of a prediction: an answer is judged as it is read and only its verdict is kept
    (in `answered`), so that a run's memory does not grow with its answers (holding the 4 runs' answers of
    `bench/reproduce_bench.py --predictions` would take more than 800 MB); SQL is kept to be run."""
    def keep(prediction: Prediction) -> Prediction:
        if prediction.kind == "sql":
            return prediction
        answered[(run, prediction.id)] = _without_database(run, records[prediction.id], prediction, None)
        return replace(prediction, answer=[] if prediction.answer is not None else None)
    return keep


def _judge_directly(runs: list[PredictionRun], records: list[Record], done: dict,
                    answered: dict[tuple[str, str], Scored], resume: ResumeFile | None
                    ) -> dict[tuple[str, str], Scored]:
    """Every result that needs no database: answers (judged as they were read), missing and unreadable
    predictions, SQL-less text."""
    results = {}
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
            if calls := run.calls.get(record.id):  # an agent's: beside the verdict in the reports
                result = replace(result, detail={**result.detail, "calls": session.clipped(calls)})
            results[result.key] = result
            if resume and result.status not in NOT_PREDICTED:  # a rerun with the line fixed scores it
                resume.add(result)
    return results


def _without_database(run: str, record: Record, prediction: Prediction | None, problem: Problem | None,
                      unanswered: str = "") -> Scored:
    if prediction is None:
        status, why = ("unreadable", str(problem)) if problem else (
            "no_prediction", unanswered or "the run has no prediction")
        return _unjudged(run, record, status, why)
    if prediction.unscorable:
        return _unjudged(run, record, "unscorable", prediction.unscorable, prediction)
    if prediction.answer is None:
        return _unjudged(run, record, "sql_error", "no SQL in the prediction (no ```sql block in the model's text)",
                         prediction)
    return judged(run, record, prediction, prediction.answer, 0.0, {})


def _unjudged(run: str, record: Record, status: str, why: str, prediction: Prediction | None = None) -> Scored:
    return Scored(run, record.id, record.template_id, status, "fail", why, "fail", why, 0.0,
                  _detail(record, prediction))


def judged(run: str, record: Record, prediction: Prediction, rows: list[dict[str, Any]], seconds: float,
           extra: dict[str, Any]) -> Scored:
    """Both verdicts on the rows a prediction gave (its SQL's result, or its answer)."""
    gold, rows = record.distinct_answers, compare.one_row_per_feature(rows)  # reduced once for both verdicts
    paper = paper_verdict(record.template_id, gold, rows)
    strict = compare.judge(record.template_id, gold, rows)
    if not rows and record.answers:
        status = "empty"
    else:
        status = "pass" if paper.status == "pass" else "mismatch"
    failure = strict.first_failure
    strict_reason = "every component passes" if failure is None else _described(failure)
    if strict.status == "empty":
        strict_reason = "no rows (the stored answer has some)"
    detail = {**_detail(record, prediction), **extra, "rows_total": len(rows)}
    if prediction.kind == "sql":  # an answer's rows are in the detail already
        detail["rows"] = session.clipped(rows[:ROWS_KEPT])
    return Scored(run, record.id, record.template_id, status, paper.status,
                  session.clipped(paper.reason), "pass" if strict.status == "pass" else "fail",
                  session.clipped(strict_reason), round(seconds, 4), detail)


def _described(check: compare.Check) -> str:
    value = "" if check.value == float("inf") else f", {check.metric} {check.value:.4g} vs {check.threshold}"
    return f"{check.component}: stored {check.expected!r}, got {check.actual!r}{value}"


@functools.lru_cache(maxsize=4096)
def _unstable(template_id: str, sql: str) -> tuple[str, ...]:
    """compare.instability, once per question however many runs predict it."""
    return tuple(compare.instability(template_id, sql))


def _detail(record: Record, prediction: Prediction | None) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    if flags := _unstable(record.template_id, record.sql):
        detail["unstable"] = list(flags)
    if prediction is None:
        return detail
    detail["where"] = prediction.where
    if prediction.kind == "sql":
        detail["sql"] = session.clipped(list(prediction.statements))
    else:
        detail["answer"] = session.clipped(prediction.answer[:ROWS_KEPT] if prediction.answer else [])
    if prediction.meta:
        detail["meta"] = session.clipped(prediction.meta)
    return detail


def _run_sql(prepared: session.Prepared | None, jobs: list[SqlJob], resume: ResumeFile | None,
             provenance: dict[str, Any]) -> dict[tuple[str, str], Scored]:
    """Each job's result: the models' SQL as gsqa_model, the gold run's as gsqa_reader, longest first."""
    if not jobs:
        return {}
    estimate = schedule.estimator({}, provenance["database"].get("row_counts") or {})
    jobs = sorted(jobs, key=lambda job: estimate(job.record), reverse=True)
    return {result.key: result for role in _roles(jobs)
            for result in prepared.run([job for job in jobs if _role_of(job) == role], role, evaluate, resume,
                                       provenance["lost"], "score")}


def _role_of(job: SqlJob) -> Role:
    return READER if job.run == GOLD_RUN else MODEL


def _roles(jobs: list[SqlJob]) -> list[Role]:
    """The roles the jobs run as, gsqa_model first (the request's --reader-dsn is its login)."""
    return [role for role in (MODEL, READER) if any(_role_of(job) == role for job in jobs)]


def evaluate(job: SqlJob, outcome: Outcome) -> Scored:
    """The result of one run's SQL for one question."""
    extra: dict[str, Any] = {"server": outcome.server} if outcome.server else {}
    if len(job.statements) > 1:
        extra["candidate"] = f"{outcome.candidate + 1} of {len(job.statements)}"
    if outcome.retried:
        extra["retried"] = outcome.retried
    if outcome.kind != "rows":
        status = "timeout" if outcome.kind == "timeout" else "sql_error"
        result = _unjudged(job.run, job.record, status, session.clipped(f"{status}: {outcome.error}"), job.prediction)
        return replace(result, seconds=round(outcome.seconds, 4),
                       detail={**result.detail, **extra, "error": session.clipped(outcome.error)})
    return judged(job.run, job.record, job.prediction, outcome.rows, outcome.seconds, extra)


def _resume_header(provenance: dict[str, Any], runs: list[PredictionRun]) -> dict[str, Any]:
    predictions = {run.name: hashlib.sha256("".join(f"{path}\0{digest}\n" for path, digest in
                                                    sorted(run.digests.items())).encode()).hexdigest()
                   for run in runs}
    return {"dataset": provenance["dataset"]["checksum"], "predictions": predictions,
            "database": provenance["database"].get("row_counts"), "timeout": provenance["timeout"]}


# --- summaries ------------------------------------------------------------------------------------------


def summarize(results: Iterable[Scored]) -> dict[str, int]:
    """Counts of one group of results: questions, predicted, answered, both verdicts' passes, per status."""
    results = list(results)
    counts = {status: 0 for status in STATUSES}
    for result in results:
        counts[result.status] += 1
    return {"questions": len(results), "predicted": len(results) - counts["no_prediction"] - counts["unreadable"],
            "answered": sum(counts[status] for status in ANSWERED),
            "paper_passed": sum(result.paper == "pass" for result in results),
            "strict_passed": sum(result.strict == "pass" for result in results), **counts}
