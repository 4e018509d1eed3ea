"""`reproduce verify` and `reproduce show` as library calls: load, preflight, run, judge.

Nothing is run before the data has loaded and the database has passed its preflight, so a broken setup is
one error, not thousands of failed questions. Every question then gets exactly one result; the caller
decides the exit code from all of them at the end.
"""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gsqa_core.db import describe_target, resolve_dsn
from gsqa_core.errors import GsqaError
from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import READER
from reproduce import compare, configs, dataset, readiness, schedule, servers
from reproduce.dataset import Record, tables_needed
from reproduce.paper import PaperVerdict, paper_verdict
from reproduce.results import Result
from reproduce.resume import ResumeFile
from reproduce.runner import MAX_ROWS, Outcome, Runner, Server


@dataclass
class Request:
    config: str = "all"
    data: Path | None = None
    dsn: str | None = None
    reader_dsn: str | None = None
    timeout: float = 120.0
    workers: int = 1
    templates: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    resume: Path | None = None
    force: bool = False
    progress: bool = True
    max_rows: int = MAX_ROWS
    replicas: list[str] = field(default_factory=list)  # DSNs of more servers (hot standbys) to run on
    durations: Path | None = None  # an earlier report whose times order the questions (longest first)


@dataclass
class Run:
    provenance: dict[str, Any]
    results: list[Result]
    records: dict[str, Record] = field(default_factory=dict)  # id -> record, for the question and SQL in reports


def verify(request: Request) -> Run:
    """Every selected question's result, in dataset order (skipped ones included)."""
    started = time.perf_counter()
    data = load_selected(request)
    records = data.records
    ready = preflight_records(request, records)
    replicas = servers.replicas(request.dsn, request.replicas, tables_needed(records), request.force)
    provenance = _provenance(request, data, replicas)
    resume = ResumeFile(request.resume, _resume_header(provenance), request.force) if request.resume else None
    done = dict(resume.done) if resume else {}
    results = [_skipped(skip) for skip in data.skipped]
    known = schedule.earlier_durations(request.durations) if request.durations else {}
    known.update({record_id: result.seconds for record_id, result in done.items()})
    todo = schedule.longest_first([record for record in records if record.id not in done], known,
                                  ready.row_estimates)
    results += [done[record.id] for record in records if record.id in done]
    try:
        results += _run(request, todo, resume, [checked.server for checked in replicas], provenance)
    finally:
        if resume:
            resume.close()
    provenance["seconds"] = round(time.perf_counter() - started, 3)
    order = {record_id: n for n, record_id in enumerate(_dataset_order(data))}
    return Run(provenance, sorted(results, key=lambda result: order[result.id]), {r.id: r for r in records})


def load_selected(request: Request) -> dataset.Dataset:
    names = list(request.templates) or [dataset.template_of(record_id).id for record_id in request.ids]
    data = dataset.load(request.data, configs.select(request.config, names))
    if request.ids:
        wanted = set(request.ids)
        known = {record.id for record in data.records} | {skip.id for skip in data.skipped}
        if unknown := sorted(wanted - known):
            raise GsqaError(f"no question {', '.join(unknown)} in {data.source} (--id)")
        data.records = [record for record in data.records if record.id in wanted]
        data.skipped = [skip for skip in data.skipped if skip.id in wanted]
    return data


def _dataset_order(data: dataset.Dataset) -> list[str]:
    """Questions in template order, then by number, the skipped ones in their place."""
    rank = {t.id: n for n, t in enumerate(configs.TEMPLATES)}
    ids = [(record.template_id, record.id) for record in data.records]
    ids += [(skip.template_id, skip.id) for skip in data.skipped]
    return [record_id for _, record_id in sorted(ids, key=lambda pair: (rank[pair[0]], _number(pair[1])))]


def _number(record_id: str) -> int:
    tail = record_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def preflight_records(request: Request, records: list[Record],
                      logins: readiness.Logins | None = None) -> readiness.Readiness:
    """readiness.preflight (as gsqa_reader, unless `logins` says otherwise), and when tables are missing or
    empty: which templates read them, and the command line that runs the others."""
    logins = logins or {READER: request.reader_dsn}
    try:
        return readiness.preflight(request.dsn, logins, tables_needed(records))
    except GsqaError as error:
        unusable = {name for name, rows in readiness.check(request.dsn, logins,
                                                           tables_needed(records)).row_estimates.items() if not rows}
        blocked = {record.template_id for record in records if set(tables_needed([record])) & unusable}
        runnable = [template for template in dict.fromkeys(record.template_id for record in records)
                    if template not in blocked]
        if not blocked:
            raise
        message = f"{error}; the templates that read them: {', '.join(sorted(blocked, key=_template_order))}"
        if runnable:
            data = f" --data {request.data}" if request.data else ""
            options = " ".join(f"--template {template}" for template in runnable)
            message += f"; to run the others: reproduce verify --config {request.config}{data} {options}"
        raise GsqaError(message) from None


def _template_order(template_id: str) -> tuple[str, int]:
    prefix = template_id.rstrip("0123456789")
    return prefix, int(template_id[len(prefix):] or 0)


def _provenance(request: Request, data: dataset.Dataset, replicas: list[servers.Checked]) -> dict[str, Any]:
    facts = readiness.database_facts(request.dsn)
    servers_used = [{"name": servers.name_of(request.dsn), "role": "primary"}]
    servers_used += [{"name": checked.server.name, "role": checked.role, **({"forced": checked.problem}
                                                                            if checked.problem else {})}
                     for checked in replicas]
    return {
        "tool": "gsqa-refdb", "tool_version": package_version("gsqa-refdb"),
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "config": request.config, "templates": request.templates, "ids": request.ids,
        "database": {"target": describe_target(resolve_dsn(request.dsn)), **facts},
        "dataset": {"source": data.source, "checksum": data.checksum, "records": len(data.records),
                    "skipped": len(data.skipped)},
        "timeout": request.timeout, "workers": request.workers, "servers": servers_used, "lost": {},
    }


def _resume_header(provenance: dict[str, Any]) -> dict[str, Any]:
    return {"dataset": provenance["dataset"]["checksum"], "database": provenance["database"]["row_counts"],
            "timeout": provenance["timeout"]}


def _run(request: Request, todo: list[Record], resume: ResumeFile | None, replicas: list[Server],
         provenance: dict[str, Any]) -> list[Result]:
    """The results of `todo`, in the order they finish; provenance["lost"]: the servers lost meanwhile."""
    reader = login_dsn(request.dsn, READER, request.reader_dsn)
    runner = Runner(reader, request.timeout, request.workers, resolve_dsn(request.dsn), request.max_rows,
                    replicas, provenance["servers"][0]["name"])
    provenance["lost"] = runner.lost  # filled as servers are lost
    results = []
    with tqdm(total=len(todo), desc="verify", unit="q", file=sys.stderr, disable=not request.progress) as bar:
        for record, outcome in runner.run(todo):
            result = evaluate(record, outcome)
            results.append(result)
            if resume:
                resume.add(result)
            bar.update()
    return results


def evaluate(record: Record, outcome: Outcome) -> Result:
    """The result of one question from what its SQL gave."""
    flags = compare.instability(record.template_id, record.sql)
    detail: dict[str, Any] = {"unstable": flags} if flags else {}
    if outcome.retried:
        detail["retried"] = outcome.retried
    if outcome.kind != "rows":
        return Result(record.id, record.template_id, outcome.kind, False,
                      {**detail, "error": clipped(outcome.error)}, round(outcome.seconds, 4), "mismatch",
                      f"{outcome.kind}: no answer to score", outcome.server)
    verdict = compare.judge(record.template_id, record.answers, outcome.rows)
    diff = compare.exact_diff(record.template_id, record.answers, outcome.rows)
    paper = paper_verdict(record.template_id, record.answers, outcome.rows)
    detail["rows"] = len(outcome.rows)
    if failure := verdict.first_failure:
        detail["failure"] = clipped(failure.as_dict())
    if not diff.exact:
        detail["diff"] = clipped(diff.as_dict())
    return Result(record.id, record.template_id, verdict.status, diff.exact, detail, round(outcome.seconds, 4),
                  paper.status, clipped(paper.reason), outcome.server)


REPORTED_CHARACTERS = 2_000  # a value in a report (JSON, JUnit, HTML, --resume) longer than this is cut


def clipped(value: Any) -> Any:
    """`value` with every string past REPORTED_CHARACTERS cut, its size noted: one 400 MB value must not
    become an 800 MB report."""
    if isinstance(value, str) and len(value) > REPORTED_CHARACTERS:
        return f"{value[:REPORTED_CHARACTERS]}… (cut: {len(value):,} characters in all)"
    if isinstance(value, dict):
        return {key: clipped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [clipped(item) for item in value]
    return value


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


def show(record_id: str, data: Path | None, dsn: str | None, reader: str | None, timeout: float) -> Shown:
    """Re-run one question: its record, what the SQL gave, and the verdict per component."""
    record = dataset.find(record_id, data)
    readiness.preflight(dsn, {READER: reader}, tables_needed([record]))
    [(_, outcome)] = Runner(login_dsn(dsn, READER, reader), timeout, 1, resolve_dsn(dsn)).run([record])
    flags = compare.instability(record.template_id, record.sql)
    if outcome.kind != "rows":
        return Shown(record, outcome, None, None, flags)
    verdict = compare.judge(record.template_id, record.answers, outcome.rows)
    return Shown(record, outcome, verdict, compare.exact_diff(record.template_id, record.answers, outcome.rows), flags,
                 paper_verdict(record.template_id, record.answers, outcome.rows))
