"""The agent tools of `reproduce serve` as plain Python callables: `question`, `schema`, `query` and
`submit_answer` over one selection of questions, each question an episode with a budget, every call kept in
the trajectory. reproduce/serve/protocol.py serves these same methods over MCP; a framework with its own
tool calling takes them as they are:

    from reproduce.serve.tools import ServeRequest, open_tools
    with open_tools(ServeRequest(config="raster_only", trajectory=Path("run.jsonl"), model="m")) as tools:
        question = tools.question("raster_only/elevation+poi/0")
        rows = tools.query("raster_only/elevation+poi/0", "SELECT ...")["rows"]
        tools.submit_answer("raster_only/elevation+poi/0", [{"elevation": 1234.5}])

The SQL runs as the model role gsqa_model on a bounded pool of the runner's sandbox connections (reproduce/runner.py):
one statement past the gate, its own read-only transaction with the statement timeout set on the server (the
smaller of --timeout and the episode's time left), rows capped at --max-rows (the first rows, marked
truncated), values over REPORTED_CHARACTERS cut, geometries as WKT, rolled back and the session reset. A tool
that cannot serve a call raises ToolRefused, one line saying why; the protocol turns it into an MCP error.
Nothing a call returns comes from the stored answers or the gold SQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import psycopg
import psycopg.adapt
import shapely

from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import MODEL
from reproduce import configs, describe, gate, session
from reproduce.dataset import Record
from reproduce.predictions import trajectory
from reproduce.predictions.layouts import address_only, answer_rows
from reproduce.runner import MIN_TIMEOUT_S, Outcome, SandboxConnection, ServerLost
from reproduce.serve import python_sandbox
from reproduce.serve.prompts import agent_instructions, entities, expected_answer

APPLICATION_NAME = "gsqa-serve"  # what pg_stat_activity shows for the tools' connections
TOOL_KINDS = {"sql": "query", "python": "run_python"}  # --tools: each kind's tool beside question, schema, submit


class ToolRefused(GsqaError):
    """A call the tools cannot serve: one line saying why (the MCP error's text)."""


def reply_text(reply: Any) -> str:
    """A tool's reply as an agent receives it: compact, strict JSON (a string as it is)."""
    return reply if isinstance(reply, str) else json.dumps(reply, separators=(",", ":"), default=str,
                                                           allow_nan=False)


def _fitted(reply: dict[str, Any], limit: int) -> dict[str, Any]:
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


@dataclass(kw_only=True)
class ServeRequest(session.Request):
    """The kernel's request (its --reader-dsn is gsqa_model's login, timeout each statement's limit), the rows a
    query returns and the episodes' budgets. The defaults are `reproduce serve`'s (written as its manual shows
    them)."""

    max_rows: int = 100  # the first rows of a query's result, marked truncated past them
    max_calls: int = 20  # per question, every call counted
    max_seconds: float = 600  # per question, from its first call
    connections: int = 8  # the pool of sandbox connections the calls share
    trajectory: Path | None = None
    model: str = ""
    method: str = "agent"
    tools: str = "sql"  # the kinds of tool served, comma-separated (TOOL_KINDS)
    export: Path | None = None  # the `ingest export` folder run_python reads at /data

    @property
    def served(self) -> frozenset[str]:
        return frozenset(kind.strip() for kind in self.tools.split(",") if kind.strip())

    @property
    def budget(self) -> dict[str, Any]:
        budget = {"calls": self.max_calls, "seconds": self.max_seconds, "rows": self.max_rows,
                  "timeout": self.timeout}
        # Kept only when not the default, so that a trajectory written before code agents continues.
        return budget if self.served == {"sql"} else {**budget, "tools": sorted(self.served)}


@dataclass
class _Episode:
    """A question's episode in this server: its calls, its clock (seconds from before a restart carried),
    why it stopped."""

    calls: int = 0
    carried: float = 0.0
    started: float | None = None  # time.monotonic() of the first call in this process
    stop: str = ""  # "" while open, else submitted or budget
    why: str = ""

    def elapsed(self) -> float:
        return self.carried + (time.monotonic() - self.started if self.started is not None else 0.0)


class _WktLoader(psycopg.adapt.Loader):
    """geometry and geography values as WKT (text format: hex EWKB) instead of the stored answers' hex."""

    def load(self, data: Any) -> str:
        hex_ewkb = bytes(data).decode()
        try:
            return shapely.from_wkb(hex_ewkb).wkt
        except (shapely.errors.ShapelyError, NotImplementedError):  # curves, triangles: GEOS cannot write them
            return hex_ewkb


class _AgentConnection(SandboxConnection):
    application_name = APPLICATION_NAME
    keep_nulls = True  # an agent sees every column it asked for

    def _connect(self) -> psycopg.Connection:
        conn = super()._connect()
        for name in ("geometry", "geography"):
            if info := psycopg.types.TypeInfo.fetch(conn, name):
                conn.adapters.register_loader(info.oid, _WktLoader)
        conn.rollback()
        return conn


class _Pool:
    """At most `size` sandbox connections, made by `connect` when first needed and reused; a caller waits for a
    free one."""

    def __init__(self, connect: Callable[[], SandboxConnection], size: int) -> None:
        self._connect = connect
        self._idle: queue.LifoQueue[SandboxConnection] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)

    @contextlib.contextmanager
    def connection(self, wait: float) -> Iterator[SandboxConnection | None]:
        """A free connection, waiting at most `wait` seconds for one (None if none came free)."""
        if not self._slots.acquire(timeout=None if math.isinf(wait) else wait):
            yield None
            return
        try:
            try:
                found = self._idle.get_nowait()
            except queue.Empty:
                found = self._connect()
            try:
                yield found
            finally:
                self._idle.put(found)
        finally:
            self._slots.release()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


class Tools:
    """The four tools over the selected questions; open with open_tools, close when done (or `with`)."""

    def __init__(self, request: ServeRequest, records: list[Record], prepared: session.Prepared,
                 done: trajectory.Trajectory | None) -> None:
        self.request, self.budget = request, request.budget
        self.records = {record.id: record for record in records}
        self._episodes = {record.id: _Episode() for record in records}
        for question, found in (done.episodes.items() if done else ()):
            if question in self._episodes:
                self._episodes[question] = _Episode(len(found.calls), found.elapsed,
                                                    stop="" if found.stop == "none" else found.stop, why=found.why)
        self._lock = threading.Lock()
        self._pool = _Pool(functools.partial(prepared.connect, MODEL, _AgentConnection, truncate=True),
                           request.connections)
        self._writer = trajectory.Writer(request.trajectory) if request.trajectory else None
        self._describe = functools.partial(describe.describe, prepared.target.admin, prepared.logins[MODEL])
        self._describing, self._schema = threading.Lock(), None
        self._containers = (python_sandbox.Containers(request.export, lifetime=request.max_seconds)
                            if "python" in request.served else None)

    def __enter__(self) -> Tools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.close()
        if self._containers:
            self._containers.close()
        if self._writer:
            self._writer.close()

    # --- the tools --------------------------------------------------------------------------------------

    def question(self, question_id: str) -> dict[str, Any]:
        """The question's text and the answer it expects: components, units, format (never the answer)."""
        with self._call(question_id, "question", {}) as call:
            record = self.records[call.question]
            call.done("ok", result=record.question)
            reply = {"question_id": record.id, "question": record.question,
                     "expects": expected_answer(record.template_id), "budget_left": call.budget_left}
            if self._containers is not None and (places := entities(record)):
                reply["entities"] = places
            return reply

    def schema(self) -> str:
        """The reference database as `reproduce schema` describes it (tables, columns, units, limits)."""
        with self._call(None, "schema", {}) as call:
            text = self._schema_text()
            call.done("ok", result=text)
            return text

    def query(self, question_id: str, sql: str) -> dict[str, Any]:
        """Run one SQL query in the sandbox as gsqa_model: rows (NULLs as null, geometries as WKT)."""
        with self._call(question_id, "query", {"sql": sql}) as call:
            self._admit(call, "sql", sql, "SQL", "one query as text", gate.MAX_SQL_CHARACTERS)
            try:
                with self._pool.connection(wait=call.seconds_left()) as sandbox:
                    if sandbox is None or call.seconds_left() < MIN_TIMEOUT_S:
                        raise call.refused(f"refused: no time left in the episode's budget of "
                                           f"{self.budget['seconds']:g} s (the calls before waited for a connection)")
                    sandbox.timeout = call.timeout()
                    outcome = sandbox.run(sql)
            except ServerLost as lost:  # no connection can be had now
                raise call.refused(f"the database cannot be reached now: {lost}") from None
            return call.answered(outcome)

    def run_python(self, question_id: str, code: str) -> dict[str, Any]:
        """Run Python in the question's sandbox container over the exported files at /data (GeoParquet layers,
        COGs and their VRT; a scratch folder as the working directory, kept for the question): stdout and
        stderr (head and tail when long), the exit status, seconds and peak memory."""
        with self._call(question_id, "run_python", {"code": code}) as call:
            self._admit(call, "python", code, "code", "a Python program as text", python_sandbox.MAX_CODE_CHARACTERS)
            if call.seconds_left() < MIN_TIMEOUT_S:
                raise call.refused(f"refused: no time left in the episode's budget of {self.budget['seconds']:g} s")
            try:
                run = self._containers.run(call.question, code, call.timeout)
            except python_sandbox.SandboxUnavailable as unavailable:
                raise call.refused(str(unavailable)) from None
            return call.ran(run)

    def _admit(self, call: _Call, kind: str, text: Any, noun: str, expected: str, limit: int) -> None:
        """What query and run_python refuse alike: a tool not served, no text, text past its limit."""
        if kind not in self.request.served:
            raise call.refused(f"refused: {TOOL_KINDS[kind]} is not served here (reproduce serve --tools {kind})")
        if not isinstance(text, str) or not text.strip():
            raise call.refused(f"refused: no {noun} (expected {expected})")
        if call.oversized:
            raise call.refused(f"refused: the {noun} is {call.oversized:,} characters; at most {limit:,}")

    def submit_answer(self, question_id: str, answer: Any) -> dict[str, Any]:
        """Record the answer (rows like the stored answers, a value, or a list of values; the same as JSON
        text) and end the episode."""
        with self._call(question_id, "submit_answer", {"answer": answer}) as call:
            if call.oversized:
                raise call.refused(f"refused: the answer is {call.oversized:,} characters as JSON; at most "
                                   f"{gate.MAX_ANSWER_CHARACTERS:,}")
            template_id = self.records[call.question].template_id
            try:
                rows = answer_rows(template_id, answer)
            except ValueError as error:
                raise call.refused(f"refused: {error}") from None
            with self._lock:  # one answer per episode, however many arrive at once
                if not self._claim(call.episode, "submitted", f"submit_answer with {len(rows)} rows"):
                    raise call.refused(self._ended(call.question, call.episode))
            call.done("ok", rows=len(rows), result=rows)
            self._write_stop(call.question, call.episode)  # after the call line it ends
            reply = {"recorded": True, "question_id": call.question, "rows": len(rows)}
            if why := address_only(template_id, rows):
                reply["note"] = why
            return reply

    def _schema_text(self) -> str:
        return describe.as_text(self._description())

    def table_text(self, name: str) -> str:
        """One reference table as `schema` describes it (an agent's per-table resource; not a call)."""
        found = [table for table in self._description().tables if table.name.split(".")[-1] == name]
        if not found:
            raise ToolRefused(f"unknown table {name!r}: the tables are "
                              f"{', '.join(table.name.split('.')[-1] for table in self._description().tables)}")
        return describe.as_text(dataclasses.replace(self._description(), tables=found))

    def _description(self) -> describe.Description:
        """The description, read once per server on first use (it reads every geometry once): not at
        start-up, where a client would wait for the server's first answer."""
        with self._describing:
            if self._schema is None:
                try:
                    self._schema = self._describe()
                except (GsqaError, psycopg.Error) as error:
                    raise ToolRefused(f"the database cannot be described now: {' '.join(str(error).split())}"
                                      ) from None
            return self._schema

    def instructions(self, question_id: str | None = None) -> str:
        """What an agent of the benchmark is told (the MCP prompt): the tools, the budget, the answer's form;
        with a question id, the question and the answer it expects (as question() gives them, not a call)."""
        budget, served = self.budget, self.request.served
        each = " or ".join(kind for kind, tool in (("statement", "sql"), ("program", "python")) if tool in served)
        text = (f"{agent_instructions(served)}\nBudget per question: {budget['calls']} calls and "
                f"{budget['seconds']:g} s from its first call; each {each} at most {budget['timeout']:g} s"
                + (f"; a query returns at most {budget['rows']:,} rows." if "sql" in served else "."))
        if question_id is None:
            return text
        record = self.records[self._known(question_id)]
        return (f"{text}\n\nQuestion {record.id}: {record.question}\nThe answer it expects: "
                f"{json.dumps(expected_answer(record.template_id))}")

    # --- episodes -------------------------------------------------------------------------------------

    def question_ids(self) -> list[str]:
        """The selected questions whose episodes are still open, in dataset order."""
        with self._lock:
            return [question for question, episode in self._episodes.items() if not episode.stop]

    def stopped(self, question_id: str) -> str:
        """Why the question's episode stopped (submitted, budget), or "" while it is open."""
        return self._episodes[self._known(question_id)].stop

    def _known(self, question_id: Any) -> str:
        try:
            question = str(configs.question_id(question_id))
        except GsqaError as error:
            raise ToolRefused(str(error)) from None
        if question not in self._episodes:
            raise ToolRefused(f"unknown question id {question_id!r}: this server serves {len(self._episodes):,} "
                              f"questions (config {self.request.config})")
        return question

    @contextlib.contextmanager
    def _call(self, question_id: Any, tool: str, arguments: dict[str, Any]) -> Iterator[_Call]:
        """One call: the question known (else refused, nothing written), its budget charged, and its line
        written when it ends, however it ends."""
        question = None if question_id is None and tool == "schema" else self._known(question_id)
        call = _Call(self, question, tool, arguments)
        blocked = ""
        with self._lock:
            episode = self._episodes.get(question)
            if episode is not None:
                call.episode = episode
                blocked = self._blocked(question, episode)
                episode.calls += 1
                call.number = episode.calls
                if episode.started is None:
                    episode.started = time.monotonic()
        try:
            if episode is not None and blocked:
                raise call.refused(blocked)
            yield call
        except ToolRefused as refused:
            if not call.written:
                call.done(call.outcome or "error", error=call.error or str(refused))
            raise
        except Exception as failed:  # noqa: BLE001 - whatever it was, the agent gets one line and the call is kept
            why = f"the call failed: {type(failed).__name__}: {' '.join(str(failed).split())[:300]}"
            if not call.written:
                call.done("error", error=why)
            raise call.refused(why) from None
        finally:
            if episode is not None and not episode.stop and episode.calls >= self.budget["calls"]:
                self._stop(question, "budget", f"all {self.budget['calls']} calls used")

    def _blocked(self, question: str, episode: _Episode) -> str:
        """Why the episode takes no more calls ("" if it does); stops it when its time has run out."""
        if not episode.stop and episode.calls >= self.budget["calls"]:
            self._stop(question, "budget", f"all {self.budget['calls']} calls used", locked=True)
        elif not episode.stop and episode.elapsed() >= self.budget["seconds"]:
            self._stop(question, "budget", f"{self.budget['seconds']:g} s used", locked=True)
        return self._ended(question, episode) if episode.stop else ""

    @staticmethod
    def _ended(question: str, episode: _Episode) -> str:
        if episode.stop == "submitted":
            return f"refused: {question}: the answer was submitted; the episode is over"
        return f"refused: {question}: the episode's budget is spent ({episode.why}); it is over"

    def _stop(self, question: str, reason: str, why: str, locked: bool = False) -> None:
        """End the episode (once) and write its stop line."""
        episode = self._episodes[question]
        with contextlib.nullcontext() if locked else self._lock:
            claimed = self._claim(episode, reason, why)
        if claimed:
            self._write_stop(question, episode)

    @staticmethod
    def _claim(episode: _Episode, reason: str, why: str) -> bool:
        """Stop an open episode (the caller holds the lock); False if it had stopped already."""
        if episode.stop:
            return False
        episode.stop, episode.why = reason, why
        return True

    def _write_stop(self, question: str, episode: _Episode) -> None:
        """The episode's stop line; its container (if any) goes with it."""
        self._write("stop", question_id=question, reason=episode.stop, why=episode.why, calls=episode.calls,
                    elapsed=round(episode.elapsed(), 3))
        if self._containers:
            self._containers.end(question)

    def _write(self, kind: str, **members: Any) -> None:
        """A line of the trajectory (trajectory.LINES declares its members)."""
        if self._writer:
            self._writer.write(trajectory.line_of(kind, **members))


class _Call:
    """One tool call in progress: what it charged, and the line it writes when it ends."""

    def __init__(self, tools: Tools, question: str | None, tool: str, arguments: dict[str, Any]) -> None:
        self.tools, self.question, self.tool = tools, question, tool
        self.arguments, self.oversized = _bounded(arguments)
        self.episode: _Episode | None = None
        self.number = 0  # the call's own number in its episode
        self.began = time.perf_counter()
        self.outcome = self.error = ""
        self.written = False

    def timeout(self) -> float:
        """A statement's or program's limit now: --timeout, or the episode's time left if less."""
        return max(MIN_TIMEOUT_S, min(self.tools.budget["timeout"], self.seconds_left()))

    def seconds_left(self) -> float:
        return max(0.0, self.tools.budget["seconds"] - self.episode.elapsed()) if self.episode else math.inf

    @property
    def budget_left(self) -> dict[str, Any]:
        if self.episode is None:
            return {}
        return {"calls": max(0, self.tools.budget["calls"] - self.episode.calls),
                "seconds": round(self.seconds_left(), 1)}

    def refused(self, why: str) -> ToolRefused:
        """The refusal to raise; the call's line says `refused` (or `error`/`timeout` once set)."""
        self.outcome = self.outcome or ("refused" if why.startswith("refused: ") else "error")
        self.error = why  # the trajectory keeps the budget apart
        left = self.budget_left
        tail = f" [budget left: {left['calls']} calls, {left['seconds']:g} s]" if left else ""
        return ToolRefused(why + tail)

    def answered(self, outcome: Outcome) -> dict[str, Any]:
        """What query returns for the runner's outcome, its line written; an error or timeout is refused."""
        if outcome.kind != "rows":
            self.outcome = "timeout" if outcome.kind == "timeout" else (
                "refused" if outcome.error.startswith("refused: ") else "error")
            raise self.refused(outcome.error)
        self.done("rows", rows=len(outcome.rows), result=outcome.rows, truncated=outcome.truncated)
        reply = {"rows": session.clipped(outcome.rows), "row_count": len(outcome.rows),
                 "truncated": outcome.truncated, "seconds": round(outcome.seconds, 3),
                 "budget_left": self.budget_left}
        if outcome.truncated:
            reply["note"] = (f"only the first {len(outcome.rows):,} rows (the cap per query); aggregate, or add "
                             "ORDER BY and LIMIT")
        return _fitted(reply, gate.MAX_REPLY_BYTES)

    def ran(self, run: python_sandbox.PythonRun) -> dict[str, Any]:
        """What run_python returns, its line written with the output as the agent got it."""
        memory = (f" (the sandbox's memory is {python_sandbox.Limits().memory_mb:,} MB: the likely cause)"
                  if run.signal == "SIGKILL" else "")
        why = {"timeout": f"stopped at the timeout of {run.timeout:.3g} s",
               "killed": f"killed by {run.signal}{memory}",
               "lost": "the sandbox did not answer and was replaced: files written in /tmp/work are gone"}
        output = {"exit": run.exit, "stdout": run.stdout, "stderr": run.stderr}
        self.done(run.outcome, error=why.get(run.outcome, ""), peak_kb=run.peak_kb, **output)
        reply = {"outcome": run.outcome, **output, "seconds": run.seconds, "peak_mb": round(run.peak_kb / 1024, 1),
                 "budget_left": self.budget_left}
        if run.outcome in why:
            reply["note"] = why[run.outcome]
        return reply

    def done(self, outcome: str, rows: int | None = None, result: Any = None, error: str = "",
             truncated: bool = False, **python: Any) -> None:
        """Write the call's line (once): a member that does not apply is left out."""
        self.written, self.outcome = True, outcome
        optional = {"rows": rows, "truncated": truncated or None, "error": error or None,
                    "result_sha256": None if result is None else trajectory.digest(result), **python}
        if self.episode is not None:
            optional |= {"call": self.number, "elapsed": round(self.episode.elapsed(), 3),
                         "budget_left": self.budget_left}
        self.tools._write("call", question_id=self.question, tool=self.tool, arguments=self.arguments,
                          outcome=outcome, seconds=round(time.perf_counter() - self.began, 4),
                          at=datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
                          **{name: value for name, value in optional.items() if value is not None})


def _bounded(arguments: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The arguments as the trajectory keeps them, and the size of one past its limit (0 if none is): SQL past
    gate.MAX_SQL_CHARACTERS, code past python_sandbox.MAX_CODE_CHARACTERS, an answer past
    gate.MAX_ANSWER_CHARACTERS of JSON are not kept, whatever the call."""
    sql, answer, code = arguments.get("sql"), arguments.get("answer"), arguments.get("code")
    if isinstance(sql, str) and len(sql) > gate.MAX_SQL_CHARACTERS:
        return {"sql": f"(not kept: {len(sql):,} characters)"}, len(sql)
    if isinstance(code, str) and len(code) > python_sandbox.MAX_CODE_CHARACTERS:
        return {"code": f"(not kept: {len(code):,} characters)"}, len(code)
    if "answer" in arguments:
        try:
            size = len(json.dumps(answer, default=str))
        except (ValueError, RecursionError):  # nested past what JSON can write: no answer anyway
            size = gate.MAX_ANSWER_CHARACTERS + 1
        if size > gate.MAX_ANSWER_CHARACTERS:
            return {"answer": f"(not kept: {size:,} characters)"}, size
    return arguments, 0


def open_tools(request: ServeRequest) -> Tools:
    """The tools over the request's selection, the database preflighted for gsqa_model; a trajectory file
    given that already holds episodes continues them (and must be of the same model, method, budgets and
    dataset). GsqaError, one line, if nothing can be served."""
    if request.max_calls < 1 or not (request.max_seconds > 0) or request.connections < 1:
        raise GsqaError("the budgets must be positive: --max-calls, --max-seconds and --connections")
    _check_python(request)
    data = session.load_selected(request)
    if not data.records:
        raise GsqaError(f"no question selected in {data.source} (config {request.config})")
    done = _continued(request, data.checksum)
    prepared = session.prepare(request, data.records, [MODEL], "reproduce serve")
    tools = Tools(request, data.records, prepared, done)
    tools._write("run", **_depends_on(request, data.checksum), config=request.config, templates=request.templates,
                 ids=request.ids, questions=len(data.records), database=prepared.target.described,
                 tool_version=package_version("gsqa-refdb"), pid=os.getpid(),
                 started_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
    return tools


def _check_python(request: ServeRequest) -> None:
    """The --tools asked for, and for python an export and a sandbox that can run (GsqaError, one line)."""
    if not request.served or request.served - set(TOOL_KINDS):
        raise GsqaError(f"--tools {request.tools}: expected {', '.join(TOOL_KINDS)} or both, comma-separated")
    if "python" not in request.served:
        if request.export is not None:
            raise GsqaError("--export is for --tools python (run_python reads it)")
        return
    if request.export is None:
        raise GsqaError("--tools python needs --export DIR, an `ingest export` folder of this database")
    if why := python_sandbox.unreadable_export(request.export):
        raise GsqaError(f"--export {why}")
    if why := python_sandbox.unavailable():
        raise GsqaError(f"--tools python: {why}")


def _depends_on(request: ServeRequest, checksum: str) -> dict[str, Any]:
    return {"model": request.model, "method": request.method, "budget": request.budget, "dataset": checksum}


def _continued(request: ServeRequest, checksum: str) -> trajectory.Trajectory | None:
    """The episodes a --trajectory file holds already; refused if it was written for another run."""
    path = request.trajectory
    if path is not None and path.is_dir():
        raise GsqaError(f"--trajectory {path}: a folder (expected a file)")
    if path is None or not path.exists() or not path.stat().st_size:
        return None
    found = trajectory.read(path)
    if found.problems:  # a lost line would give back calls the agent already spent
        where, why = found.problems[0]
        raise GsqaError(f"--trajectory {where}: {why}; mend the file or give a new one")
    if not found.header:
        raise GsqaError(f"--trajectory {path}: not a trajectory (its first line is not a {trajectory.FORMAT} "
                        "run line); give a new file")
    now = _depends_on(request, checksum)
    if differ := [key for key in trajectory.DEPENDS_ON if found.header.get(key) != now[key]]:
        said = "; ".join(f"{key}: {found.header.get(key)!r} now {now[key]!r}" for key in differ)
        raise GsqaError(f"--trajectory {path} holds a run with another {', '.join(differ)} ({said}); give a new file")
    return found
