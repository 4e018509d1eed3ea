"""--html: one self-contained page (no link, no source outside it), alike for every command: when and against
what, the runs and their facts, the headline's rate per run and template (inline SVG), the sortable table of
the View's columns, then each section there is data for (what the runs used: an agent's calls, the model's
tokens and cost; pairs of runs, repeated runs, lines not read, the
instability every question of a template shares), and the questions to look at (cards.py) grouped by
template, with filters by run, template, outcome and where runs disagree."""

from __future__ import annotations

import html
from collections import defaultdict

from reproduce.reports import usage
from reproduce.reports.analysis import p_value, pairs, repeated
from reproduce.reports.cards import card
from reproduce.reports.console import skips
from reproduce.reports.model import Figures, Report, by_run, cells, disagreeing, lines, not_passed
from reproduce.results import OUTCOMES, Result

STYLE = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#1f2328}
h1{font-size:1.6em;margin-bottom:.2em}h2{margin-top:1.6em;border-bottom:1px solid #d0d7de}h3{margin:1.2em 0 .4em}
.meta{color:#59636e;margin-top:0}table{border-collapse:collapse;margin:.4em 0}
td,th{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
.facts th{width:11em}.num{text-align:right;font-variant-numeric:tabular-nums}
details.q>summary{cursor:pointer}details.q[open]>summary{margin-bottom:.4em}
.status{display:inline-block;min-width:5.5em;font-weight:600}.pass{color:#1a7f37}.fail{color:#cf222e}
.skipped{color:#9a6700}code,pre{font:13px ui-monospace,monospace;background:#f6f8fa}
pre{padding:.5em;white-space:pre-wrap;margin:.3em 0}.cmd{user-select:all}
.card{border:1px solid #d0d7de;border-radius:6px;margin:.4em 0;padding:.4em .8em}
.card[data-paper=pass]{border-left:5px solid #1a7f37}
.card[data-outcome=ran][data-paper=fail],.card[data-outcome=empty]{border-left:5px solid #9a6700}
.card[data-outcome=sql_error],.card[data-outcome=timeout],.card[data-outcome=unreadable],
.card[data-outcome=unscorable],.card[data-outcome=no_prediction]{border-left:5px solid #cf222e}
th[onclick]{cursor:pointer}.sides{display:grid;grid-template-columns:1fr 1fr;gap:1em}.filters select{margin-right:1em}
"""
SCRIPT = """function filterCards(){const f={};for(const s of document.querySelectorAll('.filters select'))
f[s.name]=s.value;const split=document.getElementById('disagree').checked;let shown=0;
for(const c of document.querySelectorAll('.card')){const ok=Object.keys(f).every(k=>!f[k]||c.dataset[k]===f[k])
&&(!split||c.dataset.disagree==='1');c.style.display=ok?'':'none';shown+=ok}
document.getElementById('shown').textContent=shown}
function sortBy(th){const table=th.closest('table'),body=table.tBodies[0],i=th.cellIndex,up=th.dataset.up!=='1';
for(const h of table.tHead.rows[0].cells)delete h.dataset.up;th.dataset.up=up?'1':'0';
const key=r=>{const t=r.cells[i].textContent,n=parseFloat(t);return isNaN(n)?t:n};
const rows=[...body.rows].sort((a,b)=>{const x=key(a),y=key(b);
return (typeof x===typeof y?(x<y?-1:x>y?1:0):(typeof x==='number'?-1:1))*(up?1:-1)});
for(const r of rows)body.appendChild(r)}"""


def render(report: Report) -> str:
    title = _title(report)
    body = [f"<h1>{html.escape(title)}</h1>", _facts(report), _runs(report), "<h2>Pass rate per template</h2>",
            _chart(report), _summary_table(report), _usage_table(report), _pairs_table(report),
            _repeated_table(report), _unread(report)]
    common = _common_instability(report.results)
    body += [_instability(common), _questions(report, common)]
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body>\n{''.join(body)}\n</body></html>")


def _title(report: Report) -> str:
    runs = by_run(report.results)
    if len(runs) != 1:
        return f"{report.view.command}: {len(runs)} runs"
    counts = Figures.of(report.results).counts
    return f"{report.view.command}: {counts[f'{report.verdict}_passed']} of {counts['questions']} questions pass"


def _facts(report: Report) -> str:
    provenance = report.provenance
    database, dataset = provenance.get("database", {}), provenance.get("dataset", {})
    counts = Figures.of(report.results).counts
    outcomes = ", ".join(f"{counts[outcome]} {outcome}" for outcome in OUTCOMES if counts[outcome])
    facts = [("dataset", f"{dataset.get('source', '')} (sha256 {str(dataset.get('checksum', ''))[:16]}…)"),
             ("database", database.get("target", "none (answers only)")), ("server", database.get("version", "")),
             ("PostGIS", database.get("postgis_full_version", "")),
             ("timeout, workers", f"{provenance.get('timeout')} s, {provenance.get('workers', '-')}"),
             ("results", f"{counts['questions']}: {outcomes}")]
    when = f"{provenance.get('started_at', '')}, {provenance.get('seconds', '?')} s, {provenance.get('tool', '')} " \
           f"{provenance.get('tool_version', '')}"
    return (f"<p class='meta'>{html.escape(when)}</p><table class='facts'>"
            + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts)
            + "</table>")


USAGE_FACTS = ("tokens", "cost")  # a run's facts said in one column, in words (usage.run_usage)


def _runs(report: Report) -> str:
    """A line per run with every fact its provenance holds (a new fact is a new column), its tokens and cost in
    words where any run has them."""
    keys = list(dict.fromkeys(key for facts in report.run_facts for key in facts if key not in USAGE_FACTS))
    facts_shown = [{**facts, "tokens and cost": usage.run_usage(facts)} for facts in report.run_facts]
    if any(facts["tokens and cost"] for facts in facts_shown):
        keys.append("tokens and cost")
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(facts.get(key, '')))}</td>" for key in keys) + "</tr>"
                   for facts in facts_shown)
    head = "".join(f"<th>{html.escape(key)}</th>" for key in keys)
    return f"<h2>Runs</h2><table class='runs'><tr>{head}</tr>{rows}</table>"


def _chart(report: Report) -> str:
    """The headline verdict's pass rate per run and template, of the questions that were not skipped."""
    several = len(report.run_facts) > 1
    groups = [(f"{name} " if several else "") + f"{config} {template}"
              for name, found in by_run(report.results).items() for config, template, _ in lines(found)[:-1]
              if template != "all"]
    figures = [Figures.of(group) for name, found in by_run(report.results).items()
               for _, template, group in lines(found)[:-1] if template != "all"]
    bar_height, bar_width = 18, 500
    label_width = 7 * max((len(label) for label in groups), default=10) + 10
    bars = []
    for n, (label, figure) in enumerate(zip(groups, figures, strict=True)):
        rate = (figure.share(figure.counts[f"{report.verdict}_passed"]) or 0.0) / 100
        y = n * bar_height
        text = f"{100 * rate:.0f}% of {figure.judged}" if figure.judged else f"skipped ({figure.counts['skipped']})"
        bars.append(
            f"<text x='0' y='{y + 13}'>{html.escape(label)}</text>"
            f"<rect x='{label_width}' y='{y + 2}' width='{bar_width}' height='{bar_height - 4}' fill='#eee'/>"
            f"<rect x='{label_width}' y='{y + 2}' width='{bar_width * rate:.1f}' height='{bar_height - 4}' "
            f"fill='#2da44e'/><text x='{label_width + bar_width + 6}' y='{y + 13}'>{text}</text>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{label_width + bar_width + 120}' "
            f"height='{bar_height * len(groups)}' font-size='12'>{''.join(bars)}</svg>")


def sortable_table(headers: list[str], rows: list[list[object]]) -> str:
    """An HTML table whose columns sort on a click of their header (sortBy); numbers right-aligned."""
    head = "".join(f"<th onclick='sortBy(this)' title='sort'>{html.escape(header)}</th>" for header in headers)
    body = "".join("<tr>" + "".join(
        f"<td class='num'>{cell}</td>" if isinstance(cell, int | float) else f"<td>{html.escape(str(cell))}</td>"
        for cell in row) + "</tr>" for row in rows)
    return f"<table class='sortable'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary_table(report: Report) -> str:
    view = report.view
    per_run = {name: lines(found) for name, found in by_run(report.results).items()}
    headers = ["config", "template", "questions"] + [f"{name}: {column}" if len(per_run) > 1 else column
                                                     for name in per_run for column in view.columns]
    rows: list[list[object]] = []
    for index, (config, template, found) in enumerate(next(iter(per_run.values()), [])):
        rows.append([config, template or "all", len(found),
                     *(cell for name in per_run for cell in cells(view, per_run[name][index][2]))])
    return f"<h2>Per template</h2>{sortable_table(headers, rows)}"


def _usage_table(report: Report) -> str:
    """What each run used per line of the table (usage.COLUMNS, those some line has): numbers, "-" unknown."""
    found = usage.summary(report)
    if not found:
        return ""
    columns = usage.shown(found)
    rows: list[list[object]] = [[name, config, template or "all", *(
        "-" if values[column.name] is None else values[column.name] for column in columns)]
        for name, lines_of_run in found.items() for config, template, values in lines_of_run]
    return ("<h2>Usage</h2><p>The agent's tool calls (from its trajectory) and the model's tokens and cost, where "
            "the predictions give them; -: not known.</p>"
            + sortable_table(["run", "config", "template", *(column.label for column in columns)], rows))


def _pairs_table(report: Report) -> str:
    found = pairs(report)
    if not found:
        return ""
    headers = ["first", "second", "config", "template", "questions", "both pass", "only first", "only second", "p",
               "difference (points)", "noise (points)"]
    rows = [[p["first"], p["second"], p["config"], p["template"] or "all", p["questions"], p["both"],
             p["only_first"], p["only_second"], p_value(p["p"]), p["difference"],
             "" if p["noise"] is None else f"{p['noise']}{' (within)' if p['within_noise'] else ''}"] for p in found]
    return ("<h2>Pairs of runs</h2><p>Exact McNemar test on the paper verdict, paired by question; noise: the "
            "spread of a model's repeated runs.</p>" + sortable_table(headers, rows))


def _repeated_table(report: Report) -> str:
    groups = repeated(report)
    if not groups:
        return ""
    headers = ["model", "method", "runs", "config", "template", "questions", "pass^k %", "flip %", "spread",
               "pass % per run"]
    rows = [[group["model"], group["method"], len(group["runs"]), line["config"], line["template"] or "all",
             line["questions"], line["pass_k"], line["flip"], line["spread"], " ".join(map(str, line["rates"]))]
            for group in groups for line in group["lines"]]
    return "<h2>Repeated runs</h2>" + sortable_table(headers, rows)


def _unread(report: Report) -> str:
    items = [f"<li>{label} ({html.escape(run.name)}): {html.escape(str(problem))}</li>" for run in report.runs
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


def _questions(report: Report, common: dict[str, list[str]]) -> str:
    """The questions to look at, grouped by template: those that did not pass the headline verdict, and those
    that passed where there is more to see (an agent's calls, runs that disagree); then the skipped ones."""
    disagree = disagreeing(report.results)
    shown = set(map(id, not_passed(report)))
    chosen = [r for r in report.results if id(r) in shown or (r.outcome != "skipped" and (
        r.detail.get("calls") or r.id in disagree))]
    skipped = skips(report.skipped_results())
    if not chosen and not skipped:
        return "<h2>Questions</h2><p class='pass'>Every selected question passed.</p>"
    parts = [f"<h2>Questions</h2><p class='filters'>{_filters(report)} <span id='shown'>{len(chosen)}</span> "
             "shown</p>"]
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for result in chosen:
        groups[(result.group, result.template_id)].append(result)
    source = str(report.provenance.get("dataset", {}).get("source", ""))
    data_option = "" if not source or source.startswith("hf:") else f" --data {source}"
    several = len(report.run_facts) > 1
    for (config, template), group in groups.items():
        failing = sum(id(r) in shown for r in group)
        total = sum(1 for r in report.results if r.template_id == template)
        parts.append(f"<h3>{html.escape(template)} ({html.escape(config)}): {failing} of {total} did not pass</h3>")
        first = next((r for r in group if id(r) in shown), None)  # the first that did not pass is open
        parts += [card(result, report.records.get(result.id), report.word(result), several_runs=several,
                       common=common.get(template, []), disagree=result.id in disagree, opened=result is first,
                       data_option=data_option) for result in group]
    if skipped:
        parts.append(f"<h3>Skipped</h3><pre>{html.escape(skipped)}</pre>")
    return "\n".join(parts)


def _filters(report: Report) -> str:
    results = report.results
    options = {"run": list(dict.fromkeys(r.run for r in results)),
               "template": list(dict.fromkeys(r.template_id for r in results)),
               "outcome": [s for s in OUTCOMES if any(r.outcome == s for r in results)]}
    filters = "".join(f'<label>{key} <select name="{key}" onchange="filterCards()"><option value="">all</option>'
                      + "".join(f"<option>{html.escape(v)}</option>" for v in values) + "</select></label>"
                      for key, values in options.items())
    hidden = "" if len(options["run"]) > 1 else " hidden"  # one run cannot disagree with itself
    return filters + (f"<label{hidden}><input type='checkbox' id='disagree' onchange='filterCards()'> only where "
                      "runs disagree</label>")


