"""What each run used, per line of the table (a template's questions, a config's, all of them): an agent's tool
calls as its trajectory kept them (calls, clients, refusals by reason, budget stops, tool seconds, its
run_python calls, their failures and seconds) and the model's tokens and cost where its predictions give them
(a trajectory's calls, an Inspect log's samples, JSON Lines' own `tokens` and `cost`).

The columns are declared once (COLUMNS), and every report renders them: the console and HTML show the
columns some line has (a sparse one only where it is not zero), --json-out and --csv-out every known value.
A value nothing gives is unknown (None), never 0: a run of predictions without calls has no call columns, a
run whose calls carry no usage no tokens. A run with none of it has no summary, and a report without such a
run none at all. Calls outside a question (schema) belong to no line and are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reproduce.predictions.trajectory import is_amount
from reproduce.refusals import REFUSALS, UNKNOWN
from reproduce.reports.model import Report, by_run, lines
from reproduce.results import Result

# Why a call was refused: its line's code (reproduce/refusals.py); a refused call whose line has no code (a
# trajectory written before lines kept it) or one not known here (of another version) counts as UNKNOWN: its
# words are not guessed at, and every refused call is in one reason's column.
REASONS: dict[str, str] = {code: reason.means for code, reason in REFUSALS.items()} | {
    UNKNOWN: "a refused call whose line has no code (a trajectory written before lines kept it) or a code of "
             "another version"}
PYTHON = "run_python"
# A run_python call that ran and failed, by its outcome (an error is a non-zero exit).
PYTHON_FAILURES = {"error": ("python_nonzero_exit", "a non-zero exit"),
                   "killed": ("python_killed", "killed by a signal (the memory limit, mostly)"),
                   "timeout": ("python_timeout", "stopped at its timeout"),
                   "lost": ("python_lost", "the sandbox did not answer and was replaced")}


@dataclass(frozen=True)
class Used:
    """What one line's results give: their calls, their episodes' stop reasons, their predictions' meta; `agent`
    when the run has calls at all (then a line without any has 0 calls, not unknown)."""

    calls: list[dict[str, Any]]
    stops: list[str]
    metas: list[dict[str, Any]]
    agent: bool

    @classmethod
    def of(cls, results: list[Result], agent: bool) -> Used:
        metas = [result.detail["meta"] for result in results if isinstance(result.detail.get("meta"), dict)]
        return cls([call for result in results for call in result.detail.get("calls") or []],
                   [str(meta["stop"]) for meta in metas if "stop" in meta], metas, agent)

    def python(self) -> list[dict[str, Any]]:
        return [call for call in self.calls if call.get("tool") == PYTHON]

    def amount(self, kind: str) -> float | None:
        """The model's tokens of one kind (input, output), or with "cost" its cost: summed where the predictions
        give it, None where none does."""
        found = [meta.get("cost") if kind == "cost" else
                 meta["tokens"].get(kind) if isinstance(meta.get("tokens"), dict) else None for meta in self.metas]
        found = [value for value in found if is_amount(value)]
        return sum(found) if found else None


def _calls(count: Callable[[Used], float]) -> Callable[[Used], float | None]:
    """A figure of the calls, unknown where the run has none."""
    return lambda used: count(used) if used.agent else None


def _seconds(calls: list[dict[str, Any]]) -> float:
    return round(sum(float(call.get("seconds") or 0) for call in calls), 3)


def _agent(client: Any) -> str | None:
    return client.get("agent") if isinstance(client, dict) else None


def _clients(used: Used) -> int | None:
    """How many clients the calls came from (an agent of --tokens is one, whatever its sessions and connections);
    unknown where calls name none (a trajectory from before `client`)."""
    clients = {_agent(client) or str(client) for call in used.calls if (client := call.get("client")) is not None}
    return None if not used.agent or (used.calls and not clients) else len(clients)


@dataclass(frozen=True)
class Column:
    name: str  # its key in --json-out, its metric in --csv-out
    label: str  # its header in the console and HTML
    what: str  # what it counts (docs/BENCHMARK-FORMAT.md's table: columns_markdown)
    of: Callable[[Used], float | None]
    text: Callable[[float], str] = lambda value: f"{value:,}"
    sparse: bool = False  # the console and HTML show it only where some line has it not zero


def dollars(value: float) -> str:
    return f"{value:.4f}" if value == 0 or value >= 0.0001 else "<0.0001"


def _tenths(value: float) -> str:
    return f"{value:.1f}"


def _refused(reason: str) -> Callable[[Used], float | None]:
    return _calls(lambda used: sum(call.get("outcome") == "refused" and _reason(call) == reason for call in used.calls))


def _reason(call: dict[str, Any]) -> str:
    code = call.get("refused")
    return code if isinstance(code, str) and code in REASONS else UNKNOWN


def _python_failed(outcome: str) -> Callable[[Used], float | None]:
    # an error with no exit status is the server's (the sandbox could not be had), not the program's
    return _calls(lambda used: sum(call.get("outcome") == outcome and (outcome != "error" or bool(call.get("exit")))
                                   for call in used.python()))


COLUMNS: tuple[Column, ...] = (
    Column("calls", "calls", "the agent's tool calls on the line's questions", _calls(lambda used: len(used.calls))),
    Column("not_charged", "not charged", "calls not charged to the episode's budget (the server's own failures "
           "and limits, calls after the episode ended)", _calls(lambda used: sum(call.get("charged") is False
                                                                      for call in used.calls)), sparse=True),
    Column("clients", "clients", "the distinct clients they came from, an agent of `--tokens` as one (not known where "
           "the calls name none)",
           _clients),
    Column("refused", "refused", "calls refused", _calls(
        lambda used: sum(call.get("outcome") == "refused" for call in used.calls))),
    *(Column(f"refused_{reason}", f"refused {reason.replace('_', ' ')}", f"calls refused: {what}", _refused(reason),
             sparse=True) for reason, what in REASONS.items()),
    Column("query_errors", "query errors", "query calls the server answered with an error or a timeout",
           _calls(lambda used: sum(call.get("tool") == "query" and call.get("outcome") in ("error", "timeout")
                                   for call in used.calls)), sparse=True),
    Column("budget_stops", "budget stops", "episodes the budget ended",
           _calls(lambda used: used.stops.count("budget"))),
    Column("tool_seconds", "tool s", "the seconds of the calls, summed", _calls(lambda used: _seconds(used.calls)),
           _tenths),
    Column("python_calls", "python", "run_python calls", _calls(lambda used: len(used.python())), sparse=True),
    *(Column(name, name.replace("_", " "), f"run_python calls that failed: {what}", _python_failed(outcome),
             sparse=True) for outcome, (name, what) in PYTHON_FAILURES.items()),
    Column("python_seconds", "python s", "the seconds of the run_python calls", _calls(
        lambda used: _seconds(used.python())), _tenths, sparse=True),
    Column("input_tokens", "input tokens", "the model's input tokens (a trajectory's call usage, an Inspect log's, "
           "JSON Lines' `tokens`)", lambda used: used.amount("input")),
    Column("output_tokens", "output tokens", "the model's output tokens", lambda used: used.amount("output")),
    Column("cost", "cost $", "the model's cost in dollars (as the tokens: `cost`)",
           lambda used: None if (cost := used.amount("cost")) is None else round(cost, 9), dollars),
)


def columns_markdown() -> str:
    """COLUMNS as docs/BENCHMARK-FORMAT.md prints them (a test holds the two equal)."""
    return "\n".join(["| column | console, HTML | what |", "|---|---|---|",
                      *(f"| `{column.name}` | {column.label} | {column.what} |" for column in COLUMNS)])


def summary(report: Report) -> dict[str, list[tuple[str, str, dict[str, float | None]]]]:
    """Per run that has any of it, per line of the table (lines()): (config, template, column name -> value)."""
    found = {}
    for name, results in by_run(report.results).items():
        agent = any(result.detail.get("calls") for result in results)
        rows = [(config, template, _values(Used.of(group, agent))) for config, template, group in lines(results)]
        if any(value is not None for value in rows[-1][2].values()):
            found[name] = rows
    return found


def _values(used: Used) -> dict[str, float | None]:
    return {column.name: column.of(used) for column in COLUMNS}


def shown(found: dict[str, list[tuple[str, str, dict[str, float | None]]]]) -> list[Column]:
    """The columns the console and HTML show: known on some line, and a sparse one not zero on some line."""
    values = [row[2] for rows in found.values() for row in rows]
    return [column for column in COLUMNS
            if any(row[column.name] is not None and (row[column.name] or not column.sparse) for row in values)]


def cell(column: Column, value: float | None) -> str:
    return "-" if value is None else column.text(value)


def run_usage(facts: dict[str, Any]) -> str:
    """Tokens and cost (a run's facts in provenance["runs"], a prediction's meta) in words, "" where neither is
    known (what is no number is not said)."""
    tokens = facts.get("tokens")
    by_kind = tokens if isinstance(tokens, dict) else {"": tokens}  # a bare number: the total
    said = [f"{kind} {count:,}".strip() for kind, count in by_kind.items() if is_amount(count)]
    cost = facts.get("cost")
    return "; ".join(([f"tokens {', '.join(said)}"] if said else [])
                     + ([f"cost ${dollars(cost)}"] if is_amount(cost) else []))

