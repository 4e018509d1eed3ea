"""Reports of `reproduce score`: the console table per run and template, the paired tests between runs, the
problems, and the files (--csv-out long format, --json-out per question, --junit, --html).

Every report derives from the same results and the same counts (results.summarize); rates are of all the
questions of a template (a question a run did not predict counts as wrong, as in the paper).
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from reproduce import session
from reproduce.judging import values
from reproduce.judging.tolerances import LOCATION, components_of, haversine_m
from reproduce.judging.values import as_geometry
from reproduce.report_frame import SORTABLE_SCRIPT, Case, html_document, junit_document, sortable_table
from reproduce.results import OUTCOMES, ROWS_KEPT, Result, summarize
from reproduce.score import Scores
from reproduce.stats import mcnemar_exact, wilson

RUN_COLUMNS = ("predicted %", "executed %", "paper %", "95% CI", "strict %", "timeout", "sql_error", "unscorable")
PROBLEMS_LISTED = 20  # per run, on the console; --json-out has them all


def _by_run(results: Iterable[Result]) -> dict[str, list[Result]]:
    runs: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        runs[result.run].append(result)
    return runs


def rows_of_table(results: list[Result]) -> list[tuple[str, str, list[Result]]]:
    """(config, template, results) per template in dataset order, then `all` per config, then the total."""
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    configs: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        groups[(result.group, result.template_id)].append(result)
        configs[result.group].append(result)
    rows = [(config, template, found) for (config, template), found in groups.items()]
    rows += [(config, "all", found) for config, found in configs.items()]
    return [*rows, ("total", "", list(results))]


def _rate(count: int, total: int) -> str:
    return f"{100 * count / total:.1f}" if total else "-"


def run_cells(results: list[Result]) -> list[str]:
    counts = summarize(results)
    total = counts["questions"]
    low, high = wilson(counts["paper_passed"], total)
    return [_rate(counts["predicted"], total), _rate(counts["answered"], total), _rate(counts["paper_passed"], total),
            f"{100 * low:.1f}-{100 * high:.1f}" if total else "-", _rate(counts["strict_passed"], total),
            str(counts["timeout"]), str(counts["sql_error"]), str(counts["unscorable"])]


def table(scoring: Scores) -> str:
    """One line per template, config and overall; one column group per run (its name above it)."""
    runs = _by_run(scoring.results)
    names = list(runs)
    header = ["config", "template", "questions", *(column for _ in names for column in RUN_COLUMNS)]
    lines = []
    per_template = {name: rows_of_table(found) for name, found in runs.items()}
    for index, (config, template, found) in enumerate(per_template[names[0]]):
        cells = [config, template, str(len(found))]
        for name in names:
            cells += run_cells(per_template[name][index][2])
        lines.append(cells)
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    group_line = " " * (sum(widths[:3]) + 6)
    for number, name in enumerate(names):
        span = sum(widths[3 + number * len(RUN_COLUMNS):3 + (number + 1) * len(RUN_COLUMNS)]) + 2 * len(RUN_COLUMNS)
        group_line += f"  {name}"[:span].ljust(span)

    def line(cells: list[str]) -> str:
        return "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return "\n".join([group_line.rstrip(), line(header), *(line(cells) for cells in lines)])


def runs_text(scoring: Scores) -> str:
    """What each run is: where it came from, how many predictions, how many lines could not be read."""
    lines = []
    for run in scoring.provenance["runs"]:
        who = ", ".join(part for part in (run["model"], run["method"]) if part)
        lines.append(f"run {run['name']}: {run['predictions']} predictions from {run['source']}"
                     + (f" ({who})" if who else "") + (f"; {run['problems']} not read" if run["problems"] else "")
                     + (f"; {run['outside']} outside the selection" if run["outside"] else ""))
    return "\n".join(lines)


def repeated(scoring: Scores) -> list[dict[str, Any]]:
    """Runs of one model with one method (two or more of them): per line of the table, pass^k (the questions
    every run passed), the questions whose verdict flips between the runs, and the spread of the runs' pass
    rates: the runs' own noise. Each question's count of passing runs is under `passed`."""
    runs = _by_run(scoring.results)
    models: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in scoring.provenance["runs"]:
        if run["model"] and run["name"] in runs:
            models[(run["model"], run["method"])].append(run["name"])
    found = []
    for (model, method), names in models.items():
        if len(names) < 2:
            continue
        lines = []
        for rows in zip(*(rows_of_table(runs[name]) for name in names), strict=True):
            passes: dict[str, int] = defaultdict(int)
            for _, _, results in rows:
                for result in results:
                    passes[result.id] += result.paper == "pass"
            rates = [100 * sum(r.paper == "pass" for r in results) / len(results) for _, _, results in rows]
            questions, k = len(passes), len(names)
            lines.append({"config": rows[0][0], "template": rows[0][1], "questions": questions,
                          "pass_k": round(100 * sum(n == k for n in passes.values()) / questions, 2),
                          "flip": round(100 * sum(0 < n < k for n in passes.values()) / questions, 2),
                          "rates": [round(rate, 2) for rate in rates], "spread": round(max(rates) - min(rates), 2)})
        # `passes` is left from the last line, the total: every question
        found.append({"model": model, "method": method, "runs": names, "lines": lines, "passed": dict(passes)})
    return found


def repeated_text(scoring: Scores) -> str:
    """Per model with repeated runs: pass^k, the questions that flip, each run's pass rate and their spread."""
    blocks = []
    for group in repeated(scoring):
        k = len(group["runs"])
        lines = [f"{group['model']} ({group['method']}), {k} runs ({', '.join(group['runs'])}): the paper verdict "
                 f"in every run (pass^{k}), the questions that flip between runs, the spread of the pass rates",
                 f"{'config':12} {'template':9} {'questions':>9} {'pass^' + str(k) + ' %':>9} {'flip %':>7} "
                 f"{'spread':>7}  pass % per run"]
        lines += [f"{line['config']:12} {line['template']:9} {line['questions']:>9} {line['pass_k']:>9.1f} "
                  f"{line['flip']:>7.1f} {line['spread']:>7.1f}  {' '.join(f'{rate:.1f}' for rate in line['rates'])}"
                  for line in group["lines"]]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def pairs(scoring: Scores) -> list[dict[str, Any]]:
    """For each pair of runs and each line of the table: the exact McNemar test on the paper verdict, the
    difference of the pass rates and, where a run's model has repeated runs, the larger of the spreads known
    (the runs' own noise: a difference within it says nothing)."""
    runs = _by_run(scoring.results)
    model_of = {run: group for group in repeated(scoring) for run in group["runs"]}
    found = []
    for first, second in itertools.combinations(runs, 2):
        same_model = first in model_of and model_of.get(first) is model_of.get(second)
        for index, ((config, template, left), (_, _, right)) in enumerate(
                zip(rows_of_table(runs[first]), rows_of_table(runs[second]), strict=True)):
            passed = {r.id: r.paper == "pass" for r in right}
            both = sum(r.paper == "pass" and passed[r.id] for r in left)
            only_first = sum(r.paper == "pass" and not passed[r.id] for r in left)
            only_second = sum(r.paper != "pass" and passed[r.id] for r in left)
            spreads = [model_of[run]["lines"][index]["spread"] for run in (first, second) if run in model_of]
            noise = max(spreads) if spreads and not same_model else None
            difference = round(100 * (only_first - only_second) / len(left), 2) if left else 0.0
            found.append({"first": first, "second": second, "config": config, "template": template,
                          "questions": len(left), "both": both, "only_first": only_first,
                          "only_second": only_second, "p": mcnemar_exact(only_first, only_second),
                          "difference": difference, "noise": noise, "same_model": same_model,
                          "within_noise": None if noise is None else abs(difference) <= noise})
    return found


def pairs_text(scoring: Scores) -> str:
    """Per pair of runs: per template, the questions only one of them passed, the test's p-value, and where the
    runs' own noise is known whether the difference is within it."""
    blocks = []
    for (first, second), found in itertools.groupby(pairs(scoring), key=lambda p: (p["first"], p["second"])):
        found = list(found)
        noisy = any(p["noise"] is not None for p in found)
        lines = [f"{first} vs {second}: exact McNemar test on the paper verdict (paired by question)"
                 + ("; two runs of one model: their difference is the runs' own noise" if found[0]["same_model"]
                    else ""),
                 f"{'config':12} {'template':9} {'questions':>9} {'both pass':>9} {'only ' + first:>14} "
                 f"{'only ' + second:>14} {'p':>8}" + (f" {'diff':>6} {'noise':>6}" if noisy else "")]
        lines += [f"{p['config']:12} {p['template']:9} {p['questions']:>9} {p['both']:>9} {p['only_first']:>14} "
                  f"{p['only_second']:>14} {_p_value(p['p']):>8}"
                  + (f" {p['difference']:>6.1f} {p['noise']:>6.1f}" + ("  within the runs' noise"
                                                                     if p["within_noise"] else "")
                     if noisy else "") for p in found]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _p_value(p: float) -> str:
    return "1" if p >= 1 else f"{p:.3g}"


def problems_text(scoring: Scores) -> str:
    """Per run, the prediction lines that could not be read, the lines read past with a warning, the files of a
    run folder skipped, with file and line (the first PROBLEMS_LISTED of each)."""
    lines = []
    for run in scoring.runs:
        for label, found in (("not read", run.problems), ("warning", run.warnings), ("skipped", run.skipped)):
            lines += [f"{label}: {problem}" for problem in found[:PROBLEMS_LISTED]]
            if len(found) > PROBLEMS_LISTED:
                lines.append(f"... and {len(found) - PROBLEMS_LISTED} more in run {run.name} (see --json-out)")
    return "\n".join(lines)


# --- files ----------------------------------------------------------------------------------------------


def csv_long(scoring: Scores) -> str:
    """run, model, method, config, template, metric, value: one line per figure, for plotting."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["run", "model", "method", "config", "template", "metric", "value"])
    about = {run["name"]: run for run in scoring.provenance["runs"]}
    for name, found in _by_run(scoring.results).items():
        run = about[name]
        for config, template, results in rows_of_table(found):
            for metric, value in _metrics(results).items():
                writer.writerow([name, run["model"], run["method"], config, template or "all", metric, value])
    for group in repeated(scoring):
        for line in group["lines"]:
            for metric in ("pass_k", "flip", "spread"):
                writer.writerow([" + ".join(group["runs"]), group["model"], group["method"], line["config"],
                                 line["template"] or "all", f"{metric}_pct", line[metric]])
    for pair in pairs(scoring):
        for metric in ("both", "only_first", "only_second", "p", "difference", "noise"):
            if pair[metric] is not None:
                writer.writerow([f"{pair['first']} vs {pair['second']}", "", "", pair["config"],
                                 pair["template"] or "all", f"pair_{metric}", pair[metric]])
    return out.getvalue()


def _metrics(results: list[Result]) -> dict[str, Any]:
    counts = summarize(results)
    total = counts["questions"]
    low, high = wilson(counts["paper_passed"], total)
    def share(count: int) -> float | str:
        return round(100 * count / total, 2) if total else ""
    return {"questions": total, "predicted_pct": share(counts["predicted"]),
            "executed_pct": share(counts["answered"]), "paper_pct": share(counts["paper_passed"]),
            "paper_ci95_low": round(100 * low, 2), "paper_ci95_high": round(100 * high, 2),
            "strict_pct": share(counts["strict_passed"]), **{outcome: counts[outcome] for outcome in OUTCOMES
                                                             if outcome != "skipped"}}


def as_json(scoring: Scores) -> str:
    """{provenance, runs, summary, pairs, skipped, questions, results}: every question once with its gold SQL and
    answer, every question of every run with its result."""
    summary = {name: {f"{config}/{template or 'all'}": _metrics(results)
                      for config, template, results in rows_of_table(found)}
               for name, found in _by_run(scoring.results).items()}
    runs = [{**about, **{kind: [{"where": p.where, "why": p.why, "id": p.id} for p in getattr(run, kind)]
                         for kind in ("problems", "warnings", "skipped")}}
            for about, run in zip(scoring.provenance["runs"], scoring.runs, strict=True)]
    document = {"provenance": scoring.provenance, "runs": runs, "summary": summary, "pairs": pairs(scoring),
                "repeated": repeated(scoring),
                "skipped": [{"id": skip.id, "template_id": skip.template_id, "reason": skip.reason}
                            for skip in scoring.skipped],
                "questions": {record_id: _gold(record) for record_id, record in scoring.records.items()},
                "results": [result.as_dict() for result in scoring.results]}
    return json.dumps(document, default=str)  # no indent: the C encoder, 5x as fast on 13,200 results


def _gold(record: Any) -> dict[str, Any]:
    return {"template_id": record.template_id, "question": record.question, "sql": record.sql,
            "answer_rows": len(record.answers),
            "answers": session.clipped(record.answers[:ROWS_KEPT])}


def junit(scoring: Scores) -> str:
    """One testsuite per run, one testcase per question; a question that does not pass the paper verdict fails."""
    return junit_document("reproduce score", {name: [
        Case(f"{name}.{result.template_id}", result.id, result.seconds,
             {key: str(getattr(result, key)) for key in ("outcome", "strict", "strict_reason")},
             *(("failure", result.word("paper"), f"{result.word('paper')}: {result.paper_reason}"[:500])
               if result.paper != "pass" else ()))
        for result in found] for name, found in _by_run(scoring.results).items()})


# --- HTML -----------------------------------------------------------------------------------------------

_SCRIPT = """function filterCards(){const f={};for(const s of document.querySelectorAll('.filters select'))
f[s.name]=s.value;const split=document.getElementById('disagree').checked;let shown=0;
for(const c of document.querySelectorAll('.card')){const ok=Object.keys(f).every(k=>!f[k]||c.dataset[k]===f[k])
&&(!split||c.dataset.disagree==='1');c.style.display=ok?'':'none';shown+=ok}
document.getElementById('shown').textContent=shown}"""
SHOWN_CHARACTERS = 1_500  # of a predicted, returned or stored answer on a card; the rest folded, never cut


def html_page(scoring: Scores) -> str:
    """One self-contained page: sortable tables of the runs, their pairs and repeated runs, the lines that
    could not be read, the known instability per template, then every question (filters by run, template,
    outcome, and where runs disagree) with both verdicts, the predicted and the gold side by side, the agent's
    calls, and for a location a small map with its legend and scale."""
    provenance = scoring.provenance
    options = {"run": list(dict.fromkeys(r.run for r in scoring.results)),
               "template": list(dict.fromkeys(r.template_id for r in scoring.results)),
               "outcome": [s for s in OUTCOMES if any(r.outcome == s for r in scoring.results)]}
    filters = "".join(f'<label>{key} <select name="{key}" onchange="filterCards()"><option value="">all</option>'
                      + "".join(f"<option>{html.escape(v)}</option>" for v in values) + "</select></label>"
                      for key, values in options.items())
    hidden = "" if len(options["run"]) > 1 else " hidden"  # one run cannot disagree with itself
    filters += (f"<label{hidden}><input type='checkbox' id='disagree' onchange='filterCards()'> only where runs "
                "disagree</label>")
    common = _common_instability(scoring.results)
    disagree = _disagreeing(scoring.results)
    cards = "\n".join(_card(scoring, result, common, result.id in disagree) for result in scoring.results)
    database = provenance["database"].get("target", "none (answers only)")
    return html_document("reproduce score", (
        f"<h1>reproduce score</h1><p class='meta'>{html.escape(provenance['started_at'])}; dataset "
        f"{html.escape(str(provenance['dataset']['source']))}; database {html.escape(str(database))}</p>"
        f"<pre>{html.escape(runs_text(scoring))}</pre>{_summary_table(scoring)}{_pairs_table(scoring)}"
        f"{_repeated_table(scoring)}{_unread(scoring)}{_instability(common)}"
        f"<h2>Questions</h2><p class='filters'>{filters} <span id='shown'>{len(scoring.results)}</span> "
        f"shown</p>{cards}"), _SCRIPT + SORTABLE_SCRIPT)


def _summary_table(scoring: Scores) -> str:
    runs = _by_run(scoring.results)
    per_run = {name: rows_of_table(found) for name, found in runs.items()}
    shown = ("paper %", "95% CI", "strict %", "predicted %")  # of RUN_COLUMNS
    headers = ["config", "template", "questions"] + [f"{name}: {column}" for name in runs for column in shown]
    lines = []
    for index, (config, template, found) in enumerate(next(iter(per_run.values()))):
        cells = [config, template or "all", len(found)]
        for name in runs:
            of_run = dict(zip(RUN_COLUMNS, run_cells(per_run[name][index][2]), strict=True))
            cells += [of_run[column] for column in shown]
        lines.append(cells)
    return "<h2>Runs</h2>" + sortable_table(headers, lines)


def _pairs_table(scoring: Scores) -> str:
    found = pairs(scoring)
    if not found:
        return ""
    headers = ["first", "second", "config", "template", "questions", "both pass", "only first", "only second", "p",
               "difference (points)", "noise (points)"]
    lines = [[p["first"], p["second"], p["config"], p["template"] or "all", p["questions"], p["both"],
              p["only_first"], p["only_second"], _p_value(p["p"]), p["difference"],
              "" if p["noise"] is None else f"{p['noise']}{' (within)' if p['within_noise'] else ''}"]
             for p in found]
    return ("<h2>Pairs of runs</h2><p>Exact McNemar test on the paper verdict, paired by question; noise: the "
            "spread of a model's repeated runs.</p>" + sortable_table(headers, lines))


def _repeated_table(scoring: Scores) -> str:
    groups = repeated(scoring)
    if not groups:
        return ""
    headers = ["model", "method", "runs", "config", "template", "questions", "pass^k %", "flip %", "spread",
               "pass % per run"]
    lines = [[group["model"], group["method"], len(group["runs"]), line["config"], line["template"] or "all",
              line["questions"], line["pass_k"], line["flip"], line["spread"], " ".join(map(str, line["rates"]))]
             for group in groups for line in group["lines"]]
    return "<h2>Repeated runs</h2>" + sortable_table(headers, lines)


def _unread(scoring: Scores) -> str:
    items = [f"<li>{label} ({html.escape(run.name)}): {html.escape(str(problem))}</li>" for run in scoring.runs
             for label, found in (("not read", run.problems), ("warning", run.warnings), ("skipped", run.skipped))
             for problem in found]
    if not items:
        return ""
    return (f"<h2>Lines not read</h2><details><summary>{len(items)} lines and files</summary><ul>{''.join(items)}"
            "</ul></details>")


def _common_instability(results: list[Result]) -> dict[str, list[str]]:
    """Per template, the instability flags every one of its questions carries: said once, not on each card."""
    flags: dict[str, list[set[str]]] = defaultdict(list)
    for result in results:
        flags[result.template_id].append(set(result.detail.get("unstable", [])))
    return {template: sorted(set.intersection(*found)) for template, found in flags.items()
            if set.intersection(*found)}


def _instability(common: dict[str, list[str]]) -> str:
    if not common:
        return ""
    items = "".join(f"<li>{html.escape(template)}: {html.escape('; '.join(flags))}</li>"
                    for template, flags in common.items())
    return f"<h2>Where a stored answer may legitimately vary</h2><ul>{items}</ul>"


def _disagreeing(results: list[Result]) -> set[str]:
    """The questions whose paper verdict differs between runs."""
    verdicts: dict[str, set[str]] = defaultdict(set)
    for result in results:
        verdicts[result.id].add(result.paper)
    return {question for question, found in verdicts.items() if len(found) > 1}


def _card(scoring: Scores, result: Result, common: dict[str, list[str]], disagree: bool) -> str:
    record = scoring.records[result.id]
    detail = result.detail
    head = (f"<b>{html.escape(result.id)}</b> [{result.template_id}] run <b>{html.escape(result.run)}</b>: "
            f"{result.outcome}; paper {result.paper}: {html.escape(result.paper_reason)}; strict {result.strict}: "
            f"{html.escape(result.strict_reason)}")
    if own := [flag for flag in detail.get("unstable", []) if flag not in common.get(result.template_id, [])]:
        head += f"<br><i>the stored answer may legitimately vary: {html.escape('; '.join(own))}</i>"
    attributes = f'class="card" data-run="{html.escape(result.run)}" data-template="{result.template_id}" ' \
                 f'data-outcome="{result.outcome}" data-paper="{result.paper}" data-disagree="{int(disagree)}"'
    calls = _calls(detail.get("calls", []), detail.get("meta", {}).get("stop"))
    if result.word("paper") in ("pass", "no_prediction"):  # nothing to compare: one line keeps the page small
        return f"<div {attributes}>{head}{calls}</div>"
    predicted = "\n\n".join(detail.get("sql", [])) or json.dumps(detail.get("answer", "(no prediction)"), indent=1,
                                                                default=str)
    got = json.dumps(detail["rows"], default=str) if "rows" in detail else str(detail.get("error", ""))
    used = f" ({detail['candidate']} used)" if "candidate" in detail else ""
    returned = f"returned{_folded(got)}" if "rows" in detail or "error" in detail else ""
    sides = (f"<div class='sides'><div>predicted{used}{_folded(predicted)}{returned}</div>"
             f"<div>gold<pre>{html.escape(record.sql)}</pre>stored answer"
             f"{_folded(json.dumps(record.answers[:ROWS_KEPT], default=str))}</div></div>")
    return (f"<div {attributes}>{head}<p>{html.escape(record.question)}</p>{sides}"
            f"{location_map(result, record)}{calls}</div>")


def _folded(text: str) -> str:
    """A value's text, its first SHOWN_CHARACTERS and the whole of it on demand: never cut mid-JSON unsaid."""
    if len(text) <= SHOWN_CHARACTERS:
        return f"<pre>{html.escape(text)}</pre>"
    return (f"<pre>{html.escape(text[:SHOWN_CHARACTERS])}…</pre><details><summary>all {len(text):,} characters"
            f"</summary><pre>{html.escape(text)}</pre></details>")


def _calls(calls: list[dict[str, Any]], stop: str | None) -> str:
    """An agent's tool calls on the question, in order (reproduce serve's trajectory), folded."""
    if not calls:
        return ""
    items = []
    for call in calls:
        arguments = call.get("arguments") or {}
        shown = arguments.get("sql") if "sql" in arguments else (
            json.dumps(arguments["answer"], default=str) if "answer" in arguments else "")
        outcome = call.get("outcome", "")
        if "rows" in call:
            outcome += f", {call['rows']} rows" + (" (truncated)" if call.get("truncated") else "")
        if error := call.get("error"):  # a refusal's line already begins with "refused: "
            outcome = error if error.startswith(f"{outcome}: ") else f"{outcome}: {error}"
        items.append(f"<li><b>{html.escape(str(call.get('tool', '')))}</b> {html.escape(outcome)} "
                     f"({call.get('seconds', 0):.3g} s)" + (f"<pre>{html.escape(str(shown))}</pre>" if shown else "")
                     + "</li>")
    ended = f"; stop: {html.escape(stop)}" if stop else ""
    return f"<details><summary>{len(calls)} tool calls{ended}</summary><ol>{''.join(items)}</ol></details>"


def location_map(result: Result, record: Any, width: int = 320, height: int = 200) -> str:
    """An inline SVG of the predicted (red) and stored (green) points of a location answer, with the distance
    between the nearest pair; no tiles, no network. Empty for other templates."""
    component = components_of(result.template_id)[0]
    if component.metric is not LOCATION:
        return ""
    rows = result.detail.get("rows") or result.detail.get("answer") or []
    predicted = _points(rows, component.keys)
    stored = _points(record.answers, component.keys)
    if not predicted or not stored:
        return ""
    distance = min(haversine_m(p.wkt, s.wkt) for p in predicted for s in stored)
    cy = (max(p.y for p in predicted + stored) + min(p.y for p in predicted + stored)) / 2
    shrink = max(math.cos(math.radians(cy)), 1e-6)  # a degree of longitude is this much of one of latitude
    xs = [p.x * shrink for p in predicted + stored]
    ys = [p.y for p in predicted + stored]
    span = max(max(xs) - min(xs), max(ys) - min(ys), 1e-6) * 1.2
    cx = (max(xs) + min(xs)) / 2
    def at(point: Any) -> tuple[float, float]:  # the same metres per pixel both ways
        return (width / 2 + (point.x * shrink - cx) / span * (height - 20),
                height / 2 - (point.y - cy) / span * (height - 20))
    marks = [f"<circle cx='{x:.1f}' cy='{y:.1f}' r='5' fill='#2a2'/>" for x, y in map(at, stored)]
    marks += [f"<path d='M{x - 5:.1f},{y - 5:.1f}L{x + 5:.1f},{y + 5:.1f}M{x - 5:.1f},{y + 5:.1f}L{x + 5:.1f},"
              f"{y - 5:.1f}' stroke='#c22' stroke-width='2'/>" for x, y in map(at, predicted)]
    label = f"nearest predicted to stored: {distance:,.1f} m (tolerance {LOCATION.threshold:g} m)"
    metres, pixels = _scale_bar(span / (height - 20))
    legend = (f"<circle cx='12' cy='12' r='5' fill='#2a2'/><text x='22' y='16' font-size='11'>stored</text>"
              f"<path d='M67,7L77,17M67,17L77,7' stroke='#c22' stroke-width='2'/>"
              f"<text x='82' y='16' font-size='11'>predicted</text>"
              f"<path d='M{width - 10 - pixels:.1f},{height - 10}h{pixels:.1f}' stroke='#333' stroke-width='2'/>"
              f"<text x='{width - 10 - pixels:.1f}' y='{height - 14}' font-size='11'>{_metres(metres)}</text>")
    return (f"<svg class='map' width='{width}' height='{height + 20}' viewBox='0 0 {width} {height + 20}' "
            f"role='img' aria-label='{label}'><rect width='{width}' height='{height}' fill='#f4f8fb' "
            f"stroke='#ccc'/>{''.join(marks)}{legend}<text x='4' y='{height + 15}' font-size='12'>{label}</text></svg>")


def _scale_bar(degrees_per_pixel: float) -> tuple[float, float]:
    """A round length in metres for a scale bar of about 60 pixels, and its length in pixels (degrees of
    latitude per pixel: the map shows longitude at its latitude's scale)."""
    metres_per_pixel = degrees_per_pixel * math.pi / 180 * values.EARTH_RADIUS_M
    wanted = 60 * metres_per_pixel
    step = 10 ** math.floor(math.log10(wanted))
    metres = max(factor * step for factor in (1, 2, 5) if factor * step <= wanted)
    return metres, metres / metres_per_pixel


def _metres(metres: float) -> str:
    return f"{metres / 1000:g} km" if metres >= 1000 else f"{metres:g} m"


def _points(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[Any]:
    points = []
    for row in rows[:ROWS_KEPT] if isinstance(rows, list) else []:
        geometry = as_geometry(values.lookup(row, keys, True)) if isinstance(row, dict) else None
        if geometry is not None and not geometry.is_empty:
            point = geometry if geometry.geom_type == "Point" else geometry.centroid
            if math.isfinite(point.x) and math.isfinite(point.y):
                points.append(point)
    return points
