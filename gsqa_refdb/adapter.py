"""The one door from the Inspect tasks into `reproduce`: the selection, the records, the prompts' parts, the
`reproduce serve` process of a question, and the judge. Everything the tasks need of reproduce goes through
here, in types of this module (Verdict) or opaque ones (the request, the records), so that a change in
reproduce's own types changes this module only.

Every call reads the database as `reproduce` does: the DSN resolved once (--dsn, else DATABASE_URL, else
libpq's PG* variables, else `make db`'s) and a model's SQL run as gsqa_model (its login as every command
finds it, or the explicit reader_dsn) by the runner, one statement past the gate, bounded in time and rows.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import shutil
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import MODEL
from reproduce import configs, dataset, describe, results, session
from reproduce.dataset import Record
from reproduce.judging.judge import Judgement, judge
from reproduce.predictions.inspect_log import NO_ANSWER, submission
from reproduce.predictions.layouts import Prediction, address_only, answer_rows, sql_statements
from reproduce.results import Result
from reproduce.runner import MAX_ROWS, SandboxConnection
from reproduce.serve.prompts import expected_answer
from reproduce.serve.tools import ServeRequest, open_tools
from reproduce.stats import wilson

__all__ = ["KEPT_BY", "NO_ANSWER", "SERVE_SESSIONS", "Judge", "Record", "Verdict", "agent_prompts", "expected_answer",
           "gold_sql", "questions", "schema_prompt", "selection", "serve_process", "submission", "wilson"]

RUN = "inspect"  # the run's name in the judge's results


def selection(config: str, template: list[str], id: list[str], data: str | None, dsn: str | None,
              reader_dsn: str | None, timeout: float, connections: int, max_calls: int = 20,
              max_seconds: float = 600.0, max_rows: int = 100, sessions_each: int = 1, tools: str = "sql",
              export: str | None = None) -> ServeRequest:
    """What `reproduce` selects under these options (--config, --template, --id, --data, --dsn, --reader-dsn,
    --timeout), the budgets and tools of `reproduce serve` (--max-calls, --max-seconds, --max-rows, --tools,
    --export), and `connections`:
    how many SQL judgements or agents the task runs at once, each holding up to `sessions_each` of gsqa_model's
    sessions (the role's connection limit bounds them all)."""
    most = MODEL.connection_limit // sessions_each
    if not 1 <= connections <= most:
        each = f" (each may hold {sessions_each} sessions)" if sessions_each > 1 else ""
        raise GsqaError(f"connections={connections}: from 1 to {most}{each}; gsqa_model's connection limit is "
                        f"{MODEL.connection_limit}, shared by every run on the database")
    return ServeRequest(config=config, data=Path(data) if data else None, dsn=dsn, reader_dsn=reader_dsn,
                        timeout=timeout, templates=list(template), ids=list(id), max_rows=max_rows,
                        max_calls=max_calls, max_seconds=max_seconds, connections=connections, tools=tools,
                        export=Path(export) if export else None)


def questions(request: ServeRequest) -> list[Record]:
    """The selected questions, in dataset order (template order, then by number)."""
    data = session.load_selected(request)
    if not data.records:
        raise GsqaError(f"no question selected in {data.source} (config {request.config})")
    rank = {record_id: n for n, record_id in enumerate(session.dataset_order(data))}
    return sorted(data.records, key=lambda record: rank[record.id])


def schema_prompt(request: ServeRequest) -> str:
    """The database as `reproduce schema` describes it (text), read from the live database."""
    return describe.as_text(describe.describe(request.dsn, request.reader_dsn))


def agent_prompts(request: ServeRequest) -> dict[str, str]:
    """Each selected question's agent instructions, as `reproduce serve`'s prompt gsqa_agent gives them (the
    tools, the budget, the question and the answer it expects); the database preflighted for gsqa_model."""
    with open_tools(request) as tools:
        return {question: tools.instructions(question) for question in tools.question_ids()}


def gold_sql(question_id: str, data: str | None) -> str:
    """A question's gold SQL, from --data (else the Hugging Face dataset), its template's records read once."""
    return _gold_of_template(configs.question_id(question_id).template.id, data)[str(question_id)]


@functools.lru_cache(maxsize=64)
def _gold_of_template(template_id: str, data: str | None) -> dict[str, str]:
    found = dataset.load(Path(data) if data else None, [configs.template(template_id)])
    return {record.id: record.sql for record in found.records}


# What a `reproduce serve` of one question may hold of gsqa_model's sessions: the one its calls share and, while
# it starts, its preflight's.
SERVE_SESSIONS = 2
# Who keeps a task's calls: no --trajectory is needed, so serve names the log instead of warning that nothing
# keeps them.
KEPT_BY = "the Inspect log"


def serve_process(request: ServeRequest, question_id: str) -> tuple[str, list[str], dict[str, str]]:
    """The command, arguments and environment of a `reproduce serve` over stdio for one question with the
    request's budgets: the agent's tools. The environment carries this process's (DATABASE_URL, PG*, the
    roles' passwords), an explicit dsn as DATABASE_URL, so that no password goes on a command line. The calls
    are the log's to keep (KEPT_BY), not a trajectory's."""
    args = ["serve", "--config", request.config, "--id", question_id, "--timeout", f"{request.timeout:g}",
            "--max-calls", str(request.max_calls), "--max-seconds", f"{request.max_seconds:g}",
            "--max-rows", str(request.max_rows), "--connections", "1", "--method", "inspect react",
            "--tools", request.tools, "--kept-by", KEPT_BY]
    if request.export:
        args += ["--export", str(request.export)]
    if request.data:
        args += ["--data", str(request.data)]
    if request.reader_dsn:
        args += ["--reader-dsn", request.reader_dsn]
    env = dict(os.environ) | ({"DATABASE_URL": request.dsn} if request.dsn else {})
    beside = Path(sys.executable).with_name("reproduce")  # the console script of this interpreter's install
    command = str(beside) if beside.exists() else shutil.which("reproduce")
    if command is None:
        raise GsqaError("no `reproduce` command beside this Python or on PATH: install gsqa-refdb[inspect]")
    return command, args, env


@dataclass(frozen=True)
class Verdict:
    """Both verdicts on one prediction, as `reproduce score` gives them (results.Result)."""

    paper: bool  # the paper's verdict: the headline
    strict: bool
    outcome: str  # results.OUTCOMES: ran, empty, sql_error, timeout, no_prediction, unreadable, unscorable
    paper_reason: str
    strict_reason: str
    checks: list[dict[str, Any]] = field(default_factory=list)  # the strict verdict per component
    detail: dict[str, Any] = field(default_factory=dict)  # what the reports keep: SQL, rows, answer, error


class Judge:
    """Our judge over the selected questions. A model's SQL runs as gsqa_model on sessions of the runner."""

    def __init__(self, request: ServeRequest, records: list[Record]) -> None:
        self.records = {record.id: record for record in records}
        self._request, self._preparing = request, threading.Lock()
        self._sessions: tuple[str, float, str] | None = None  # once the first SQL comes: login, timeout, admin

    def _prepared(self) -> tuple[str, float, str]:
        """The database preflighted for gsqa_model (once, when the first SQL is judged): the sessions' key."""
        with self._preparing:
            if self._sessions is None:
                prepared = session.prepare(self._request, list(self.records.values()), [MODEL],
                                           "inspect eval gsqa_refdb/text2sql")
                self._sessions = (prepared.logins[MODEL], self._request.timeout, prepared.target.admin)
            return self._sessions

    def sql(self, question_id: str, text: str) -> Verdict:
        """The verdicts on a model's text: its ```sql blocks (else the whole text) run in turn as gsqa_model, the
        first that runs judged; read as `reproduce score` reads {"id", "sql": text}."""
        record = self.records[question_id]
        statements = sql_statements(text)
        if not statements:
            return _verdict(results.unjudged(RUN, record, "sql_error", "no SQL in the prediction"))
        job = results.SqlJob(RUN, record, Prediction(record.id, "inspect", statements))
        with _session(*self._prepared()) as sandbox:
            outcome = sandbox.run_first(job.statements)
        return _verdict(*results.evaluated(job, outcome))

    def answer(self, question_id: str, answer: Any, why_none: str = "") -> Verdict:
        """The verdicts on an answer (rows, a value or a list of values, or JSON text of them), as `reproduce
        score` judges a submitted answer; None: no answer (`why_none` says why)."""
        record = self.records[question_id]
        if answer is None:
            return _verdict(results.unjudged(RUN, record, "no_prediction", why_none or "the run has no prediction"))
        try:
            rows = answer_rows(record.template_id, answer)
        except ValueError as error:
            return _verdict(results.unjudged(RUN, record, "unreadable", str(error)))
        if why := address_only(record.template_id, rows):
            return _verdict(results.unjudged(RUN, record, "unscorable", why))
        judgement = judge(record, rows)
        return _verdict(results.judged(RUN, record, Prediction(record.id, "inspect", answer=rows), rows, judgement),
                        judgement)


# Sessions of the runner, idle, by (login, timeout, admin): made as needed and reused (each is reset after each
# question) by every judge of the process, so that they are never more than the calls that ran at once (the
# tasks bound those: -T connections). Making and dropping one per question would leave the role's ended
# backends counted against its connection limit for a moment.
_idle: dict[tuple[str, float, str], queue.LifoQueue[SandboxConnection]] = {}


@contextlib.contextmanager
def _session(login: str, timeout: float, admin: str) -> Iterator[SandboxConnection]:
    idle = _idle.setdefault((login, timeout, admin), queue.LifoQueue())  # setdefault: one, whichever thread
    try:
        found = idle.get_nowait()
    except queue.Empty:  # rows capped as `reproduce score` caps them, not as serve's agents are
        found = SandboxConnection(login, timeout, admin, MAX_ROWS)
    try:
        yield found
    finally:
        idle.put(found)


@atexit.register
def _close_sessions() -> None:
    for idle in _idle.values():
        while not idle.empty():
            idle.get_nowait().close()


def _verdict(result: Result, judgement: Judgement | None = None) -> Verdict:
    """The Verdict of a result, with the strict verdict's check of each component where rows were judged."""
    checks = [session.clipped(check.as_dict()) for check in judgement.strict.checks] if judgement else []
    return Verdict(result.paper == "pass", result.strict == "pass", result.outcome, result.paper_reason,
                   result.strict_reason, checks, result.detail)
