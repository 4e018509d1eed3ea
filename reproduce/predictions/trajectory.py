"""An agent run's trajectory (`reproduce serve --trajectory FILE`), the one owner of its format: the kinds of
line and their members (LINES), the lines made (`line_of`), written (Writer) and read back (`read`). JSON Lines,
one line per tool call, written and flushed as each call ends, so that a server killed mid-episode leaves every
finished call on disk.

Lines, each with a `type`:
- `run`: written when a server starts on the file: the format, model, method, budgets, dataset checksum and
  start time. A rerun on the same file appends another one (and must agree on what the run depends on).
- `call`: question_id (null for schema), the client it came from (client: id, transport, the agent whose
  token it sent over HTTP, and the name and version the client gave: reproduce/serve/callers.py; left out for
  a plain Python caller), tool, arguments,
  outcome (ok, rows, error, timeout, refused; for run_python also killed and lost), a refused call's reason as
  a code (refused: reproduce/refusals.py's REFUSALS; lines written before it have none), `"charged": false` for a
  call not charged to its episode (the server's own failure, or the episode was over), the server a query ran
  on (server: host:port/database), rows, the result as the agent got it (result: the reply, bounded as sent,
  or a refusal's one line) and the sha256 of its text as sent (lines written before 2026-12-06 hashed it as
  JSON with sorted keys), the model's usage the client attached in the call's MCP `_meta`
  (usage: input_tokens, output_tokens, cost; usage_ignored says why one was not kept), seconds, the call's
  number in its episode, the episode's elapsed seconds and its budget left after the call; for submit_answer
  the answer as submitted; for run_python the code, its exit status, its output as the agent got it (stdout,
  stderr: head and tail) and its peak memory (peak_kb).
- `stop`: a question's episode ended: reason `submitted` or `budget`, and why. An episode with calls and no
  stop line stopped for reason `none` (the server ended first).

`read` gives the episodes back: the server resumes them (calls used, seconds elapsed, done or not), and
`reproduce score FILE` judges each submitted answer like an answer prediction (reproduce/predictions/layouts.py),
with the model's usage over the episode's calls (`Episode.usage`: a call without `usage` adds nothing, and an
episode none of whose calls has it has none, not zero).
`views` replays, from the file alone, what each episode's agent sent and got back, as its MCP client got it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from reproduce.resume import drop_cut_line
from reproduce.runner import json_value

FORMAT = "gsqa-trajectory/1"
STOP_REASONS = ("submitted", "budget", "none")
DEPENDS_ON = ("model", "method", "budget", "dataset")  # what a rerun on the same file must keep
# Each kind of line and its members, in the order they are written; a member is left out where it does not
# apply (a call's rows when it returned none, its budget left for schema, which is no question's call).
LINES: dict[str, tuple[str, ...]] = {
    "run": ("format", "type", *DEPENDS_ON, "config", "templates", "ids", "questions", "database", "tool_version",
            "pid", "started_at"),
    "call": ("type", "question_id", "client", "tool", "arguments", "outcome", "refused", "charged", "server", "rows",
             "truncated", "result", "result_sha256", "error", "exit", "stdout", "stderr", "peak_kb", "usage",
             "usage_ignored", "seconds", "call", "elapsed", "budget_left", "at"),
    "stop": ("type", "question_id", "reason", "why", "calls", "elapsed"),
}
# A call's usage: the members read (numbers, not negative) and the kind of token each one counts.
USAGE_TOKENS = {"input_tokens": "input", "output_tokens": "output"}
USAGE_COST = "cost"  # dollars
# What `reproduce score` shows of each call beside the verdict: the call line but what only the file needs.
REPORTED = tuple(name for name in LINES["call"]
                 if name not in ("type", "question_id", "result", "result_sha256", "elapsed", "at"))


@dataclass
class Episode:
    """One question's episode as far as the file tells it."""

    question_id: str
    calls: list[dict[str, Any]] = field(default_factory=list)
    free: int = 0  # of the calls, those not charged to the episode
    elapsed: float = 0.0  # seconds from the episode's first call to the end of its last one
    tool_seconds: float = 0.0  # the seconds its charged calls took in the server
    stop: str = "none"  # one of STOP_REASONS
    why: str = ""
    answer: Any = None  # the submitted answer
    where: str = ""  # file:line of the submission

    @property
    def usage(self) -> dict[str, Any]:
        """The model's usage over the episode's calls as a prediction carries it (layouts.py): tokens by kind
        ({"input": N, "output": N}) and cost, each only where some call gave it."""
        tokens: dict[str, float] = {}
        cost: float | None = None
        for call in self.calls:
            given = call.get("usage")
            if not isinstance(given, dict):
                continue
            for member, kind in USAGE_TOKENS.items():
                if is_amount(given.get(member)):
                    tokens[kind] = tokens.get(kind, 0) + given[member]
            if is_amount(given.get(USAGE_COST)):
                cost = (cost or 0) + given[USAGE_COST]
        return ({"tokens": tokens} if tokens else {}) | ({"cost": round(cost, 9)} if cost is not None else {})

    @property
    def charged(self) -> int:
        """The calls charged to the episode's budget."""
        return len(self.calls) - self.free


MAX_AMOUNT = 10**15  # past any real run's tokens or dollars, so that a sum of them stays a finite number


def is_amount(value: Any) -> bool:
    """A count of tokens or a cost as a client or a predictions file may give it: a number (not a bool), not
    negative, at most MAX_AMOUNT (NaN and the infinities are none)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= MAX_AMOUNT


@dataclass
class Trajectory:
    path: Path
    header: dict[str, Any] = field(default_factory=dict)  # the first run line
    episodes: dict[str, Episode] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (file:line, why)


def line_of(kind: str, **members: Any) -> dict[str, Any]:
    """A line of `kind` with its members in the declared order (ValueError for a member LINES does not declare)."""
    declared = LINES[kind]
    if unknown := sorted(set(members) - set(declared)):
        raise ValueError(f"a {kind} line has no member {', '.join(unknown)}")
    members = {**members, "type": kind} | ({"format": FORMAT} if kind == "run" else {})
    return {name: members[name] for name in declared if name in members}


def digest(sent: str) -> str:
    """A call's `result_sha256`: of the text the agent got (the reply's compact JSON as sent, or a text as it is:
    `views`' `sent` without the error prefix)."""
    return hashlib.sha256(sent.encode("utf-8", "surrogatepass")).hexdigest()


def reported(call: dict[str, Any]) -> dict[str, Any]:
    """What `reproduce score` shows of a call line (REPORTED)."""
    return {name: call[name] for name in REPORTED if name in call}


# The SDK's words before a tool's error result (mcp.server.mcpserver: "Error executing tool NAME: LINE").
ERROR_PREFIX = "Error executing tool {tool}: "


def views(found: Trajectory) -> dict[str, list[dict[str, Any]]]:
    """Each episode as its agent saw it, from the trajectory alone: per call, in order, the tool, the arguments
    as kept and the text the MCP client got (`sent`: the reply as compact JSON, schema's text as it is, or a
    refused call's one line after the SDK's error prefix; `is_error`). A result is a refusal when it is text
    from any tool but schema (every other reply is a JSON object)."""
    return {question: [_seen(call) for call in episode.calls] for question, episode in found.episodes.items()}


def _seen(call: dict[str, Any]) -> dict[str, Any]:
    result = call.get("result")
    refused = isinstance(result, str) and call["tool"] != "schema"
    sent = (ERROR_PREFIX.format(tool=call["tool"]) + result if refused else
            result if isinstance(result, str) else json.dumps(result, separators=(",", ":"), allow_nan=False))
    return {"tool": call["tool"], "arguments": call["arguments"], "sent": sent, "is_error": refused}


def is_trajectory(content: bytes) -> bool:
    """Whether a file's content (its first line is enough) is a trajectory: its first line a run line."""
    try:
        line = json.loads(content.lstrip().split(b"\n", 1)[0])
    except ValueError:
        return False
    return isinstance(line, dict) and line.get("format") == FORMAT


def read(path: Path, content: bytes | None = None) -> Trajectory:
    """The episodes of a trajectory file; a line that cannot be read is a problem (where, why), and a last
    line cut short by a kill is left out without one (its call never returned)."""
    content = path.read_bytes() if content is None else content
    found = Trajectory(path)
    lines = content.split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip() or (number == len(lines) and not content.endswith(b"\n")):
            continue
        where = f"{path}:{number}"
        try:
            line = json.loads(raw)
            _take(found, line, where)
        except (ValueError, KeyError, TypeError, AttributeError):
            found.problems.append((where, f"not a trajectory line (expected a JSON object with a type of {_KINDS})"))
    if not found.header:
        found.problems.append((str(path), f"no run line (expected the first line of a {FORMAT} file)"))
    return found


_KINDS = f"{', '.join(list(LINES)[:-1])} or {list(LINES)[-1]}"


def _take(found: Trajectory, line: dict[str, Any], where: str) -> None:
    kind = line["type"]
    if kind == "run":
        found.header = found.header or line
        return
    if kind not in LINES:
        raise ValueError(kind)
    question = line["question_id"]
    if question is None:
        return  # schema(): no episode
    episode = found.episodes.setdefault(question, Episode(question))
    if kind == "call":
        episode.calls.append(line)
        episode.elapsed = max(episode.elapsed, float(line.get("elapsed", 0.0)))
        if line.get("charged", True) is False:
            episode.free += 1
        else:
            episode.tool_seconds += float(line.get("seconds", 0.0))
        if line["tool"] == "submit_answer" and line.get("outcome") == "ok":
            episode.answer, episode.where = line["arguments"]["answer"], where
            # Submitted, even if a kill came before the stop line that follows it.
            episode.stop, episode.why = "submitted", episode.why or "submit_answer"
    else:
        episode.stop, episode.why = line["reason"], line.get("why", "")


class Writer:
    """Appends lines to the file, one write each, flushed to the kernel before the call returns (a kill -9
    loses nothing written; a power cut may lose the last lines: no fsync, which would cost each call a
    disk round trip). Safe for several threads; one server per file (an exclusive lock: two servers on one
    file would each spend the budgets again)."""

    def __init__(self, path: Path) -> None:
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise GsqaError(f"--trajectory {path}: cannot be written ({error.strerror})") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            raise GsqaError(f"--trajectory {path}: another server writes it now; give each server its own file"
                            ) from None
        drop_cut_line(path)  # only now: the file is ours
        self.path = path
        self._lock = threading.Lock()

    def write(self, line: dict[str, Any], encoded: dict[str, str] | None = None) -> None:
        """Append the line; `encoded` gives members as their JSON text already (strict, ASCII: a call's result
        as it was sent), put into the line as they are instead of being encoded again."""
        data = _line_text(line, encoded or {}).encode()
        with self._lock:
            if self._fd < 0:
                return  # a call that ended after the server closed: nothing left to keep it in
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)
            self._fd = -1


def _line_text(line: dict[str, Any], encoded: dict[str, str]) -> str:
    """The line as JSON text: ASCII (any text, lone surrogates too), strict (NaN, infinities and any other value
    as the runner gives query rows: their text), members in the line's order, `encoded` ones as given and the
    members between them encoded together (one json.dumps for each run of them)."""
    parts: list[str] = []
    plain: dict[str, Any] = {}
    for name, value in line.items():
        if name in encoded:
            parts += [json.dumps(json_value(plain), allow_nan=False)[1:-1]] if plain else []
            parts.append(f"{json.dumps(name)}: {encoded[name]}")
            plain = {}
        else:
            plain[name] = value
    parts += [json.dumps(json_value(plain), allow_nan=False)[1:-1]] if plain else []
    return "{" + ", ".join(parts) + "}\n"
