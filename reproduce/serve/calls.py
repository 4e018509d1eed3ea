"""A call of serve's tools and the episode it is charged to: the budgets it spends (calls, wall-clock seconds,
tool seconds), who made it (Caller: the MCP client and the model's usage it attached), and its trajectory line,
written once when it ends with the reply as the agent got it (`result`).

Charged: every call on an open episode, refused or not. Not charged (the line says `"charged": false`): a call
the server could not serve for a failure or a limit of its own (the database or the sandbox cannot be reached,
the cap or the agent's share of the sandbox containers reached), and a call on an episode that is over (its
refusal says so). Calls not charged are bounded too: past as many of them as the episode may charge
(--max-calls), one is not kept (`Call.kept`: it has no line, so that an agent calling on after its episode
ended, or while the containers are taken, cannot grow the trajectory without end).

A refused call's line says why as a code (`refused`: reproduce/refusals.py, which words each refusal)."""

from __future__ import annotations

import contextvars
import datetime
import json
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gsqa_core.errors import GsqaError
from reproduce import gate
from reproduce.predictions import trajectory
from reproduce.refusals import code_of
from reproduce.runner import MIN_TIMEOUT_S
from reproduce.serve import python_sandbox
from reproduce.serve.replies import Reply, reply_text, sent

if TYPE_CHECKING:
    from reproduce.serve.tools import Tools


class ToolRefused(GsqaError):
    """A call the tools cannot serve: one line saying why (the MCP error's text)."""


@dataclass(frozen=True)
class Caller:
    """Who made a call: the MCP client it came from (trajectory `client`), the model's usage it attached
    (`usage`), or why that usage was not kept (`usage_ignored`). Plain Python callers have none of them."""

    client: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    usage_ignored: str = ""


NOBODY = Caller()  # a plain Python caller's (frozen: shared safely)
# The caller of the call running in this thread (protocol.py sets it around each tool call).
CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("gsqa_serve_caller", default=NOBODY)


@dataclass
class Episode:
    """A question's episode in this server: its calls (made, and of them not charged), its clocks (seconds from
    before a restart carried), why it stopped."""

    made: int = 0  # every call, numbered in order
    free: int = 0  # of them, the calls not charged
    carried: float = 0.0
    tool_seconds: float = 0.0  # the seconds its charged calls took in the server
    started: float | None = None  # time.monotonic() of the first call in this process
    stop: str = ""  # "" while open, else submitted or budget
    why: str = ""
    server: int = 0  # which of the servers its queries run on (tools.Tools._servers)

    @property
    def charged(self) -> int:
        return self.made - self.free

    def elapsed(self) -> float:
        return self.carried + (time.monotonic() - self.started if self.started is not None else 0.0)


class Call:
    """One tool call in progress: what it charged, and the line it writes when it ends."""

    def __init__(self, tools: Tools, question: str | None, tool: str, arguments: dict[str, Any]) -> None:
        self.tools, self.question, self.tool = tools, question, tool
        self.arguments, self.oversized = bounded(arguments)
        self.caller = CALLER.get()
        self.episode: Episode | None = None
        self.number = 0  # the call's own number in its episode
        self.charged = True
        self.began = time.perf_counter()
        self.outcome = self.error = ""
        self.reason = ""  # a refusal's code (reproduce/refusals.py), "" unless refused
        self.members: dict[str, Any] = {}  # rows, truncated; run_python's exit, output, peak memory
        self.kept = True  # False: a call not charged past the bound on them (the module's doc) has no line
        self.written = False  # True once its line is written

    def timeout(self) -> float:
        """A statement's or program's limit now: --timeout, or the episode's time left (either clock) if less."""
        return max(MIN_TIMEOUT_S, min(self.tools.budget["timeout"], self.seconds_left(), self.tool_seconds_left()))

    def seconds_left(self) -> float:
        return max(0.0, self.tools.budget["seconds"] - self.episode.elapsed()) if self.episode else math.inf

    def tool_seconds_left(self) -> float:
        limit = self.tools.budget.get("tool_seconds")
        return math.inf if limit is None or self.episode is None else max(0.0, limit - self.episode.tool_seconds)

    @property
    def budget_left(self) -> dict[str, Any]:
        if self.episode is None:
            return {}
        left = {"calls": max(0, self.tools.budget["calls"] - self.episode.charged),
                "seconds": round(self.seconds_left(), 1)}
        return left | ({"tool_seconds": round(self.tool_seconds_left(), 1)} if "tool_seconds" in self.tools.budget
                       else {})

    def uncharge(self) -> None:
        """The call is not charged to its episode (the server's own failure)."""
        if self.episode is not None and self.charged:
            self.kept = self.tools.uncharge(self.episode)
            self.charged = False

    def refused(self, why: str) -> ToolRefused:
        """The refusal to raise for `why` (a refusals.Refusal, with its code, or an error's line); the call's
        line says `refused` with the code (or `error`, or `timeout` once set)."""
        self.reason = code_of(why)
        self.outcome = self.outcome or ("refused" if self.reason else "error")
        self.error = why  # the trajectory keeps the budget apart
        left = self.budget_left
        tool = f", {left['tool_seconds']:g} tool s" if "tool_seconds" in left else ""
        tail = f" [budget left: {left['calls']} calls, {left['seconds']:g} s{tool}]" if left else ""
        return ToolRefused(why + tail)

    def finish(self, reply: Any, outcome: str = "ok", **members: Any) -> Reply | str:
        """The reply (a dict as a Reply: with its text made once, for the line and the agent), the call's line
        written with it as the result the agent gets."""
        self.outcome = outcome
        self.members |= members
        if not isinstance(reply, str):
            reply = reply if isinstance(reply, Reply) else sent(reply)
        self.write(reply)
        return reply

    def ran(self, run: python_sandbox.PythonRun) -> dict[str, Any]:
        """What run_python returns, its line written with the output as the agent got it."""
        memory = (f" (the sandbox's memory is {python_sandbox.Limits().memory_mb:,} MB: the likely cause)"
                  if run.signal == "SIGKILL" else "")
        why = {"timeout": f"stopped at the timeout of {run.timeout:.3g} s",
               "killed": f"killed by {run.signal}{memory}",
               "lost": "the sandbox did not answer and was replaced: files written in /tmp/work are gone"}
        output = {"exit": run.exit, "stdout": run.stdout, "stderr": run.stderr}
        self.error = why.get(run.outcome, "")
        reply = {"outcome": run.outcome, **output, "seconds": run.seconds, "peak_mb": round(run.peak_kb / 1024, 1),
                 "budget_left": self.budget_left}
        if run.outcome in why:
            reply["note"] = why[run.outcome]
        return self.finish(reply, run.outcome, peak_kb=run.peak_kb, **output)

    def write(self, result: Reply | str) -> None:
        """Write the call's line (once), `result` the reply or the refusal's text as sent (a reply's text goes
        into the line as it was made, not encoded again): a member that does not apply is left out."""
        if self.written or not self.kept:
            return
        self.written = True
        seconds = time.perf_counter() - self.began
        if self.episode is not None and self.charged:
            self.episode.tool_seconds += seconds
        caller = self.caller
        optional = {"client": caller.client, "refused": self.reason or None,
                    "charged": None if self.charged else False,
                    "server": self.members.get("server"), "rows": self.members.get("rows"),
                    "truncated": self.members.get("truncated") or None,
                    "result": result, "result_sha256": trajectory.digest(reply_text(result)),
                    "error": self.error or None,
                    **{name: self.members.get(name) for name in ("exit", "stdout", "stderr", "peak_kb")},
                    "usage": caller.usage, "usage_ignored": caller.usage_ignored or None}
        if self.episode is not None:
            optional |= {"call": self.number, "elapsed": round(self.episode.elapsed(), 3),
                         "budget_left": self.budget_left}
        encoded = {"result": result.text} if isinstance(result, Reply) else None
        self.tools.write("call", encoded, question_id=self.question, tool=self.tool, arguments=self.arguments,
                         outcome=self.outcome or "error", seconds=round(seconds, 4),
                         at=datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
                         **{name: value for name, value in optional.items() if value is not None})


UNWRITABLE = "an answer nested too deep or with an integer too long to write as JSON"


def bounded(arguments: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The arguments as the trajectory keeps them, and the size of one past its limit (0 if none is; -1 for an
    answer that cannot be written as JSON): SQL past gate.MAX_SQL_CHARACTERS, code past
    python_sandbox.MAX_CODE_CHARACTERS, an answer past gate.MAX_ANSWER_CHARACTERS of JSON are not kept, whatever
    the call."""
    sql, answer, code = arguments.get("sql"), arguments.get("answer"), arguments.get("code")
    if isinstance(sql, str) and len(sql) > gate.MAX_SQL_CHARACTERS:
        return {"sql": f"(not kept: {len(sql):,} characters)"}, len(sql)
    if isinstance(code, str) and len(code) > python_sandbox.MAX_CODE_CHARACTERS:
        return {"code": f"(not kept: {len(code):,} characters)"}, len(code)
    if "answer" in arguments:
        try:
            size = len(json.dumps(answer, default=str))
        except (ValueError, RecursionError):  # nested past what JSON writes, or an integer past Python's digits
            return {"answer": f"(not kept: {UNWRITABLE})"}, -1
        if size > gate.MAX_ANSWER_CHARACTERS:
            return {"answer": f"(not kept: {size:,} characters)"}, size
    return arguments, 0
