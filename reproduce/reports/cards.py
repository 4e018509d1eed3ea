"""A question's card on the HTML page, alike for every command: its word and question, both verdicts with their
reasons, the strict verdict's failing values and row diff, what the run gave (its SQL or answer, the rows
returned) beside the stored answer and the gold SQL, a location's map, an agent's calls, and for the gold run
the `reproduce show` command that re-runs it, the model's tokens and cost where known. A question that
passed shows its verdicts, usage and calls only."""

from __future__ import annotations

import html
import json
from typing import Any

from reproduce.dataset import Record
from reproduce.predictions.trajectory import USAGE_COST, USAGE_TOKENS
from reproduce.reports.maps import location_map
from reproduce.reports.usage import run_usage
from reproduce.results import GOLD_RUN, ROWS_KEPT, Result

SHOWN_CHARACTERS = 1_500  # of a predicted, returned or stored answer on a card; the rest folded, never cut
INLINE_CHARACTERS = 200  # a value this short stays on its label's line
# A call's usage as its line in the card says it: member -> what comes before its value.
CALL_USAGE = {**{member: f"{kind} tokens " for member, kind in USAGE_TOKENS.items()}, USAGE_COST: "cost $"}


def card(result: Result, record: Record | None, word: str, *, several_runs: bool, common: list[str],
         disagree: bool, opened: bool, data_option: str) -> str:
    detail = result.detail
    run = f"run <b>{html.escape(result.run)}</b>: " if several_runs else ""
    question = html.escape(record.question if record else "")
    head = (f"<summary><span class='status {'pass' if word == 'pass' else 'fail'}'>{html.escape(word)}</span> "
            f"<code>{html.escape(result.id)}</code> {run}{question}</summary>")
    body = [f"<p>{result.outcome}; paper {result.paper}: {html.escape(result.paper_reason)}; strict "
            f"{result.strict}: {html.escape(result.strict_reason)}</p>"]
    if used := run_usage(detail.get("meta") or {}):
        body.append(f"<p>The model's usage: {html.escape(used)}</p>")
    if own := [flag for flag in detail.get("unstable", []) if flag not in common]:
        body.append(f"<p><i>the stored answer may legitimately vary: {html.escape('; '.join(own))}</i></p>")
    if word not in ("pass", "no_prediction"):  # nothing to compare otherwise: one line keeps the page small
        body += [_values_table(detail), _diff(detail), _sides(result, record)]
        body.append(location_map(result, record) if record else "")
    body.append(_calls(detail.get("calls", []), detail.get("meta", {}).get("stop")))
    if result.run == GOLD_RUN:
        body.append(f"<p>Re-run it: <code class='cmd'>reproduce show {html.escape(result.id)}"
                    f"{html.escape(data_option)}</code></p>")
    attributes = (f'class="card" data-run="{html.escape(result.run)}" data-template="{result.template_id}" '
                  f'data-outcome="{result.outcome}" data-paper="{result.paper}" data-disagree="{int(disagree)}"')
    return f"<div {attributes}><details class='q'{' open' if opened else ''}>{head}{''.join(body)}</details></div>"


def _sides(result: Result, record: Record | None) -> str:
    """What the run gave (its SQL or answer unless it is the gold SQL, the rows returned or the error) beside
    what is stored (the answer, the gold SQL)."""
    detail = result.detail
    gave = []
    if result.run != GOLD_RUN:
        used = f" ({detail['candidate']} used)" if "candidate" in detail else ""
        predicted = "\n\n".join(detail.get("sql", [])) or json.dumps(detail.get("answer", "(no prediction)"),
                                                                    default=str)
        gave.append(_value(f"Predicted{used}", predicted))
    if "rows" in detail:
        gave.append(_value("Returned", json.dumps(detail["rows"], default=str)))
    elif "error" in detail:
        gave.append(_value("Error", str(detail["error"])))
    stored = [] if record is None else [
        _value("Stored answer", json.dumps(record.answers[:ROWS_KEPT], default=str)),
        f"<details><summary>SQL</summary><pre>{html.escape(record.sql)}</pre></details>"]
    return f"<div class='sides'><div>{''.join(gave)}</div><div>{''.join(stored)}</div></div>"


def _value(label: str, text: str) -> str:
    """A value under its label: on the label's line when short, else its first SHOWN_CHARACTERS and the whole
    of it on demand (never cut mid-JSON unsaid)."""
    if len(text) <= INLINE_CHARACTERS and "\n" not in text:
        return f"<p>{label}: <code>{html.escape(text)}</code></p>"
    if len(text) <= SHOWN_CHARACTERS:
        return f"<p>{label}:</p><pre>{html.escape(text)}</pre>"
    return (f"<p>{label}:</p><pre>{html.escape(text[:SHOWN_CHARACTERS])}…</pre><details><summary>all "
            f"{len(text):,} characters</summary><pre>{html.escape(text)}</pre></details>")


def _values_table(detail: dict[str, Any]) -> str:
    """The strict verdict's first failing component: both values, how far apart, the tolerance."""
    failure = detail.get("failure")
    if not failure:
        return ""
    value = failure.get("value")
    cells = [failure.get("component"), failure.get("metric"), _short(failure.get("expected")),
             _short(failure.get("actual")), "" if value is None else f"{value:.4g}", failure.get("threshold")]
    return ("<table><tr><th>component</th><th>metric</th><th>expected</th><th>actual</th><th>measured</th>"
            "<th>tolerance</th></tr><tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells)
            + "</tr></table>")


def _diff(detail: dict[str, Any]) -> str:
    diff = detail.get("diff")
    if not diff:
        return ""
    counts = ", ".join(f"{kind} {entry['count']}" for kind, entry in diff.items())
    return f"<p>Row by row (exact): {html.escape(counts)}</p>"


def _short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def _calls(calls: list[dict[str, Any]], stop: str | None) -> str:
    """An agent's tool calls on the question, in order (reproduce serve's trajectory), folded."""
    if not calls:
        return ""
    items = []
    for call in calls:
        arguments = call.get("arguments") or {}
        shown = next((arguments[name] for name in ("sql", "code") if name in arguments), None) or (
            json.dumps(arguments["answer"], default=str) if "answer" in arguments else "")
        outcome = call.get("outcome", "")
        if "rows" in call:
            outcome += f", {call['rows']} rows" + (" (truncated)" if call.get("truncated") else "")
        if error := call.get("error"):  # a refusal's line already begins with "refused: "
            outcome = error if error.startswith(f"{outcome}: ") else f"{outcome}: {error}"
        outcome += " (not charged)" if call.get("charged") is False else ""
        given = call.get("usage") if isinstance(call.get("usage"), dict) else {}
        used = "".join(f", {label}{given[member]}" for member, label in CALL_USAGE.items() if member in given)
        items.append(f"<li><b>{html.escape(str(call.get('tool', '')))}</b> {html.escape(outcome)} "
                     f"({call.get('seconds', 0):.3g} s{html.escape(used)})"
                     + (f"<pre>{html.escape(str(shown))}</pre>" if shown else "") + "</li>")
    ended = f"; stop: {html.escape(stop)}" if stop else ""
    free = sum(call.get("charged") is False for call in calls)
    counted = f"{len(calls)} tool calls" + (f", {len(calls) - free} charged" if free else "")
    return f"<details><summary>{counted}{ended}</summary><ol>{''.join(items)}</ol></details>"
