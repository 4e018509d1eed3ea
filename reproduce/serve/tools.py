"""The agent tools of `reproduce serve` as plain Python callables: `question`, `schema`, `query` and
`submit_answer` over one selection of questions, each question an episode with a budget, every call kept in
the trajectory. reproduce/serve/protocol.py serves these same methods over MCP; a framework with its own
tool calling takes them as they are:

    from reproduce.serve.tools import ServeRequest, open_tools
    with open_tools(ServeRequest(config="raster_only", trajectory=Path("run.jsonl"), model="m")) as tools:
        question = tools.question("raster_only/elevation+poi/0")
        rows = tools.query("raster_only/elevation+poi/0", "SELECT ...")["rows"]
        tools.submit_answer("raster_only/elevation+poi/0", [{"elevation": 1234.5}])

The SQL runs as the model role gsqa_model on a bounded, fair pool of the runner's sandbox connections (pool.py):
one statement past the gate, its own read-only transaction with the statement timeout set on the server (the
smaller of --timeout and the episode's time left on either clock), rows capped at --max-rows (the first rows,
marked truncated), values over REPORTED_CHARACTERS cut, geometries as WKT, rolled back and the session reset.
A submitted answer must fit the question's components (answers.py). A tool that cannot serve a call raises
ToolRefused, one line saying why; the protocol turns it into an MCP error. What a call charges and the line
it writes: calls.py. Nothing a call returns comes from the stored answers or the gold SQL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

import psycopg

from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import MODEL
from reproduce import configs, describe, gate, session
from reproduce.dataset import Record
from reproduce.predictions import trajectory
from reproduce.predictions.layouts import answer_rows
from reproduce.refusals import refused
from reproduce.runner import MIN_TIMEOUT_S, Outcome, ServerLost
from reproduce.serve import python_sandbox
from reproduce.serve.answers import misfit
from reproduce.serve.calls import UNWRITABLE, Call, Episode, ToolRefused
from reproduce.serve.pool import AgentConnection, Pool
from reproduce.serve.prompts import agent_instructions, entities, expected_answer
from reproduce.serve.replies import fitted

TOOL_KINDS = {"sql": "query", "python": "run_python"}  # --tools: each kind's tool beside question, schema, submit


@dataclass(kw_only=True)
class ServeRequest(session.Request):
    """The kernel's request (its --reader-dsn is gsqa_model's login, timeout each statement's limit), the rows a
    query returns and the episodes' budgets. The defaults are `reproduce serve`'s (written as its manual shows
    them)."""

    max_rows: int = 100  # the first rows of a query's result, marked truncated past them
    max_calls: int = 20  # per question, every call charged (calls.py says which are not)
    max_seconds: float = 600  # per question, wall-clock from its first call (the agent's own time included)
    max_tool_seconds: float | None = None  # per question, the seconds its calls take in the server (None: no bound)
    connections: int = 8  # the pool of sandbox connections the calls share, on each server
    replicas: list[str] = field(default_factory=list)  # DSNs of hot standbys the episodes are spread over too
    trajectory: Path | None = None
    model: str = ""
    method: str = "agent"
    tools: str = "sql"  # the kinds of tool served, comma-separated (TOOL_KINDS)
    export: Path | None = None  # the `ingest export` folder run_python reads at /data
    agents: int = 1  # named by --tokens (access.py): each takes an equal share of the sandbox containers

    @property
    def served(self) -> frozenset[str]:
        return frozenset(kind.strip() for kind in self.tools.split(",") if kind.strip())

    @property
    def budget(self) -> dict[str, Any]:
        budget = {"calls": self.max_calls, "seconds": self.max_seconds, "rows": self.max_rows,
                  "timeout": self.timeout}
        # Each kept only when not the default, so that a trajectory written before it continues.
        if self.max_tool_seconds is not None:
            budget["tool_seconds"] = self.max_tool_seconds
        return budget if self.served == {"sql"} else {**budget, "tools": sorted(self.served)}


class Tools:
    """The four tools over the selected questions; open with open_tools, close when done (or `with`)."""

    def __init__(self, request: ServeRequest, records: list[Record], prepared: session.Prepared,
                 done: trajectory.Trajectory | None, image: str | None = None) -> None:
        self.request, self.budget = request, request.budget
        self.records = {record.id: record for record in records}
        self._servers = _pools(request, prepared)
        # Each episode on one server, in turn (as verify spreads questions); one that cannot be reached hands it on.
        self._episodes = {record.id: Episode(server=n % len(self._servers)) for n, record in enumerate(records)}
        for question, found in (done.episodes.items() if done else ()):
            if question in self._episodes:
                self._episodes[question] = dataclasses.replace(
                    self._episodes[question], made=len(found.calls), free=found.free, carried=found.elapsed,
                    tool_seconds=found.tool_seconds, stop="" if found.stop == "none" else found.stop, why=found.why)
        self._lock = threading.Lock()
        self._writer = trajectory.Writer(request.trajectory) if request.trajectory else None
        self._describe = functools.partial(describe.describe, prepared.target.admin, prepared.logins[MODEL])
        self._describing, self._schema = threading.Lock(), None
        self._containers = (python_sandbox.Containers(request.export, lifetime=request.max_seconds, image=image,
                                                      share=max(1, python_sandbox.MAX_CONTAINERS // request.agents))
                            if image is not None else None)

    def __enter__(self) -> Tools:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for _, pool in self._servers:
            pool.close()
        if self._containers:
            self._containers.close()
        if self._writer:
            self._writer.close()

    # --- the tools --------------------------------------------------------------------------------------

    def question(self, question_id: str) -> dict[str, Any]:
        """The question's text and the answer it expects: components, units, format (never the answer)."""
        with self._call(question_id, "question", {}) as call:
            record = self.records[call.question]
            reply = {"question_id": record.id, "question": record.question,
                     "expects": expected_answer(record.template_id), "budget_left": call.budget_left}
            if self._containers is not None and (places := entities(record)):
                reply["entities"] = places
            return call.finish(reply)

    def schema(self) -> str:
        """The reference database as `reproduce schema` describes it (tables, columns, units, limits). Free: no
        question's call (the same text of a fixed size for every agent, read from the database once per
        server)."""
        with self._call(None, "schema", {}) as call:
            return call.finish(self._schema_text())

    def query(self, question_id: str, sql: str) -> dict[str, Any]:
        """Run one SQL query in the sandbox as gsqa_model: rows (NULLs as null, geometries as WKT, dates and
        intervals as text; long texts, arrays and JSON cut with a marker saying how to get less)."""
        with self._call(question_id, "query", {"sql": sql}) as call:
            self._admit(call, "sql", sql, "SQL", "one query as text", gate.MAX_SQL_CHARACTERS)
            for _ in self._servers:  # the episode's server, then the next if it cannot be reached
                name, pool = self._servers[call.episode.server]
                try:
                    owner = pool_owner(call, self.request.agents)
                    with pool.connection(wait=call.seconds_left(), owner=owner) as sandbox:
                        if sandbox is None or min(call.seconds_left(), call.tool_seconds_left()) < MIN_TIMEOUT_S:
                            raise call.refused(refused("no_time_left", clocks=f"{self._clocks()}; the calls before "
                                                       "waited for a connection"))
                        sandbox.timeout = call.timeout()
                        outcome = sandbox.run(sql)
                        call.members["server"] = name
                        return self._answered(call, outcome, sandbox.timeout - outcome.seconds + time.perf_counter())
                except ServerLost as error:
                    lost = error
                    call.episode.server = (call.episode.server + 1) % len(self._servers)
            call.uncharge()  # no connection can be had now: the server's failure, not charged
            raise call.refused(f"the database cannot be reached now: {lost}")

    def _answered(self, call: Call, outcome: Outcome, deadline: float) -> dict[str, Any]:
        """What query returns for the runner's outcome, its line written; an error or timeout is refused, and so
        is a reply still being made at the statement's deadline (time.perf_counter()): fetching and encoding
        the rows count against the timeout."""
        if outcome.kind != "rows":
            if outcome.kind == "timeout":
                call.outcome = "timeout"  # else the gate's or the server's refusal, or an error (call.refused)
            raise call.refused(outcome.error)
        reply = {"rows": outcome.rows, "row_count": len(outcome.rows),
                 "truncated": outcome.truncated, "seconds": round(outcome.seconds, 3),
                 "budget_left": call.budget_left}
        if outcome.truncated:
            reply["note"] = (f"only the first {len(outcome.rows):,} rows (the cap per query); aggregate, or add "
                             "ORDER BY and LIMIT")
        reply = fitted(reply, gate.MAX_REPLY_BYTES)
        if time.perf_counter() > deadline:
            call.outcome = "timeout"
            raise call.refused(f"cancelled by the server: the reply was still being made at the timeout "
                               f"({len(outcome.rows):,} rows read); select fewer rows or shorter values")
        return call.finish(reply, "rows", rows=len(outcome.rows), truncated=outcome.truncated)

    def _clocks(self) -> str:
        tool = self.budget.get("tool_seconds")
        return f"{self.budget['seconds']:g} s" + (f", {tool:g} tool s" if tool is not None else "")

    def run_python(self, question_id: str, code: str) -> dict[str, Any]:
        """Run Python in the question's sandbox container over the exported files at /data (GeoParquet layers,
        COGs and their VRT; a scratch folder as the working directory, kept for the question): stdout and
        stderr (head and tail when long), the exit status, seconds and peak memory."""
        with self._call(question_id, "run_python", {"code": code}) as call:
            self._admit(call, "python", code, "code", "a Python program as text", python_sandbox.MAX_CODE_CHARACTERS)
            if min(call.seconds_left(), call.tool_seconds_left()) < MIN_TIMEOUT_S:
                raise call.refused(refused("no_time_left", clocks=self._clocks()))
            try:
                run = self._containers.run(call.question, code, call.timeout, agent_of(call, self.request.agents))
            except python_sandbox.SandboxUnavailable as unavailable:  # the server's failure, not charged
                call.uncharge()
                raise call.refused(unavailable.args[0]) from None
            return call.ran(run)

    def _admit(self, call: Call, kind: str, text: Any, noun: str, expected: str, limit: int) -> None:
        """What query and run_python refuse alike: a tool not served, no text, text past its limit."""
        if kind not in self.request.served:
            raise call.refused(refused("not_served", tool=TOOL_KINDS[kind], kind=kind))
        if not isinstance(text, str) or not text.strip():
            raise call.refused(refused("no_argument", noun=noun, expected=expected))
        if call.oversized:
            raise call.refused(refused("too_long", noun=noun, size=call.oversized, unit="", limit=limit))

    def submit_answer(self, question_id: str, answer: Any) -> dict[str, Any]:
        """Record the answer (rows like the stored answers, a value, or a list of values; the same as JSON
        text) and end the episode. An answer that does not fit the components question() names is refused,
        saying what is expected, and the episode goes on."""
        with self._call(question_id, "submit_answer", {"answer": answer}) as call:
            if call.oversized < 0:
                raise call.refused(refused("answer_unreadable", why=UNWRITABLE))
            if call.oversized:
                raise call.refused(refused("too_long", noun="answer", size=call.oversized, unit=" as JSON",
                                           limit=gate.MAX_ANSWER_CHARACTERS))
            template_id = self.records[call.question].template_id
            try:
                rows = answer_rows(template_id, answer)
            except ValueError as error:
                raise call.refused(refused("answer_unreadable", why=error)) from None
            if why := misfit(template_id, rows):
                raise call.refused(why)
            with self._lock:  # one answer per episode, however many arrive at once
                if not self._claim(call.episode, "submitted", f"submit_answer with {len(rows)} rows"):
                    raise call.refused(self._ended(call.question, call.episode))
            reply = call.finish({"recorded": True, "question_id": call.question, "rows": len(rows)}, rows=len(rows))
            self._write_stop(call.question, call.episode)  # after the call line it ends
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
        tool = f" ({budget['tool_seconds']:g} s of them in the tools)" if "tool_seconds" in budget else ""
        text = (f"{agent_instructions(served)}\nBudget per question: {budget['calls']} calls and "
                f"{budget['seconds']:g} s from its first call{tool}; each {each} at most {budget['timeout']:g} s"
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
    def _call(self, question_id: Any, tool: str, arguments: dict[str, Any]) -> Iterator[Call]:
        """One call: the question known (else refused, nothing written), its budget charged (not on an episode
        that is over), and its line written when it ends, however it ends."""
        question = None if question_id is None and tool == "schema" else self._known(question_id)
        call = Call(self, question, tool, arguments)
        blocked = ""
        with self._lock:
            episode = self._episodes.get(question)
            if episode is not None:
                call.episode = episode
                blocked = self._blocked(question, episode)
                episode.made += 1
                call.number = episode.made
                if blocked:  # a call the episode cannot take is not charged to it
                    call.charged = False
                    call.kept = self._free(episode)
                elif episode.started is None:
                    episode.started = time.monotonic()
        try:
            if blocked:
                raise call.refused(blocked)
            yield call
        except ToolRefused as refused:
            call.write(str(refused))
            raise
        except Exception as failed:  # noqa: BLE001 - whatever it was, the agent gets one line and the call is kept
            refused = call.refused(f"the call failed: {type(failed).__name__}: "
                                   f"{' '.join(str(failed).split())[:300]}")
            call.write(str(refused))
            raise refused from None
        finally:
            if episode is not None and (why := self._spent(episode)):
                self._stop(question, "budget", why)

    def _spent(self, episode: Episode) -> str:
        """Which of the episode's budgets is spent ("" if none is)."""
        if episode.charged >= self.budget["calls"]:
            return f"all {self.budget['calls']} calls used"
        if episode.elapsed() >= self.budget["seconds"]:
            return f"{self.budget['seconds']:g} s used"
        if (tool := self.budget.get("tool_seconds")) is not None and episode.tool_seconds >= tool:
            return f"{tool:g} tool s used"
        return ""

    def _blocked(self, question: str, episode: Episode) -> str:
        """Why the episode takes no more calls ("" if it does); stops it when a budget is spent."""
        if not episode.stop and (why := self._spent(episode)):
            self._stop(question, "budget", why, locked=True)
        return self._ended(question, episode) if episode.stop else ""

    def uncharge(self, episode: Episode) -> bool:
        """A call made is not charged to its episode after all; whether it is kept (below)."""
        with self._lock:
            return self._free(episode)

    def _free(self, episode: Episode) -> bool:
        """One more call of the episode not charged (the caller holds the lock); whether it is within the bound on
        them (calls.py): past it, a call has no line."""
        episode.free += 1
        return episode.free <= self.budget["calls"]

    @staticmethod
    def _ended(question: str, episode: Episode) -> str:
        if episode.stop == "submitted":
            return refused("over_submitted", question=question)
        return refused("over_budget", question=question, why=episode.why)

    def _stop(self, question: str, reason: str, why: str, locked: bool = False) -> None:
        """End the episode (once) and write its stop line."""
        episode = self._episodes[question]
        with contextlib.nullcontext() if locked else self._lock:
            claimed = self._claim(episode, reason, why)
        if claimed:
            self._write_stop(question, episode)

    @staticmethod
    def _claim(episode: Episode, reason: str, why: str) -> bool:
        """Stop an open episode (the caller holds the lock); False if it had stopped already."""
        if episode.stop:
            return False
        episode.stop, episode.why = reason, why
        return True

    def _write_stop(self, question: str, episode: Episode) -> None:
        """The episode's stop line (its calls: those charged); its container (if any) goes with it."""
        self.write("stop", question_id=question, reason=episode.stop, why=episode.why, calls=episode.charged,
                   elapsed=round(episode.elapsed(), 3))
        if self._containers:
            self._containers.end(question)

    def write(self, kind: str, encoded: dict[str, str] | None = None, **members: Any) -> None:
        """A line of the trajectory (trajectory.LINES declares its members; `encoded`: members given as their
        JSON text, trajectory.Writer.write)."""
        if self._writer:
            self._writer.write(trajectory.line_of(kind, **members), encoded)


def _pools(request: ServeRequest, prepared: session.Prepared) -> list[tuple[str, Pool]]:
    """(name, pool of gsqa_model's connections) of the primary and each --replica."""
    return [(server.name, Pool(functools.partial(AgentConnection, server.login, request.timeout, server.admin,
                                                 request.max_rows, truncate=True), request.connections))
            for server in prepared.servers(MODEL)]


def agent_of(call: Call, agents: int) -> str | None:
    """The agent of --tokens that made the call, where the server has several (one agent's share is all)."""
    return (call.caller.client or {}).get("agent") if agents > 1 else None


def pool_owner(call: Call, agents: int) -> Any:
    """Whose share of the pool a call takes: its agent's of several (whichever its session), else its client's,
    else its question's."""
    client = call.caller.client
    return agent_of(call, agents) or (json.dumps(client, sort_keys=True) if client else call.question)


def open_tools(request: ServeRequest) -> Tools:
    """The tools over the request's selection, the database preflighted for gsqa_model; a trajectory file
    given that already holds episodes continues them (and must be of the same model, method, budgets and
    dataset). GsqaError, one line, if nothing can be served."""
    if request.max_calls < 1 or not (request.max_seconds > 0) or request.connections < 1:
        raise GsqaError("the budgets must be positive: --max-calls, --max-seconds and --connections")
    image = _check_python(request)
    data = session.load_selected(request)
    if not data.records:
        raise GsqaError(f"no question selected in {data.source} (config {request.config})")
    done = _continued(request, data.checksum)
    prepared = session.prepare(request, data.records, [MODEL], "reproduce serve")
    tools = Tools(request, data.records, prepared, done, image)
    tools.write("run", **_depends_on(request, data.checksum), config=request.config, templates=request.templates,
                 ids=request.ids, questions=len(data.records), database=prepared.target.described,
                 tool_version=package_version("gsqa-refdb"), pid=os.getpid(),
                 started_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"))
    return tools


def _check_python(request: ServeRequest) -> str | None:
    """The --tools asked for, and for python an export and a sandbox that can run (GsqaError, one line): the
    sandbox image's id (None without python)."""
    if not request.served or request.served - set(TOOL_KINDS):
        raise GsqaError(f"--tools {request.tools}: expected {', '.join(TOOL_KINDS)} or both, comma-separated")
    if "python" not in request.served:
        if request.export is not None:
            raise GsqaError("--export is for --tools python (run_python reads it)")
        return None
    if request.export is None:
        raise GsqaError("--tools python needs --export DIR, an `ingest export` folder of this database")
    if why := python_sandbox.unreadable_export(request.export):
        raise GsqaError(f"--export {why}")
    try:
        return python_sandbox.checked_image()
    except python_sandbox.SandboxUnavailable as why:
        raise GsqaError(f"--tools python: {why}") from None


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
