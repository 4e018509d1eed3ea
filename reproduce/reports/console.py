"""The stdout report of every command that reports: the runs (a View per run), the table per config and
template, then each section there is data for: what the runs used (an agent's calls, the model's tokens and
cost: usage.py), servers, repeated runs, pairs of runs, the first questions
that did not pass, skipped questions, lines not read, the questions not in the data, the changes since a
baseline. Sections are separated by a blank line."""

from __future__ import annotations

import itertools
from collections import Counter

from reproduce.reports import usage
from reproduce.reports.analysis import p_value, pairs, repeated
from reproduce.reports.model import LISTED, Report, by_run, cells, evidence, lines, not_passed, skip_groups
from reproduce.results import Result

KNOWN_FACTS = ("name", "source", "model", "method", "predictions", "problems", "outside", "tokens", "cost")


def text(report: Report) -> str:
    apart = f"{len(report.skipped)} questions not in the data, not scored (see --json-out)" if report.skipped else ""
    sections = [runs_text(report) if report.view.per_run else "", table(report), usage_text(report),
                servers_text(report),
                repeated_text(report), pairs_text(report), failures(report), skips(report.skipped_results()),
                problems_text(report), apart, baseline_text(report)]
    return "\n\n".join(section for section in sections if section)


def runs_text(report: Report) -> str:
    """What each run is: where it came from, how many predictions, how many lines could not be read, and any
    other fact its provenance holds."""
    found = []
    for run in report.run_facts:
        who = ", ".join(part for part in (run["model"], run["method"]) if part)
        others = "".join(f"; {key} {value}" for key, value in run.items() if key not in KNOWN_FACTS)
        used = usage.run_usage(run)
        found.append(f"run {run['name']}: {run['predictions']} predictions from {run['source']}"
                     + (f" ({who})" if who else "") + (f"; {run['problems']} not read" if run["problems"] else "")
                     + (f"; {run['outside']} outside the selection" if run["outside"] else "")
                     + (f"; {used}" if used else "") + others)
    return "\n".join(found)


def table(report: Report) -> str:
    """One line per template, config and overall; the View's columns, a group of them per run (its name above
    it) when the View is per run."""
    view = report.view
    runs = by_run(report.results)
    per_run = {name: lines(found) for name, found in runs.items()}
    header = ["config", "template", "questions", *(column for _ in runs for column in view.columns)]
    rows = []
    for index, (config, template, found) in enumerate(next(iter(per_run.values()), lines([]))):
        rows.append([config, template, str(len(found)),
                     *(cell for name in runs for cell in cells(view, per_run[name][index][2]))])
    widths, table_lines = aligned([header, *rows], 2)
    if not view.per_run:
        return "\n".join(table_lines)
    names = " " * (sum(widths[:3]) + 6)
    columns = len(view.columns)
    for number, name in enumerate(runs):
        span = sum(widths[3 + number * columns:3 + (number + 1) * columns]) + 2 * columns
        names += f"  {name}"[:span].ljust(span)
    return "\n".join([names.rstrip(), *table_lines])


def aligned(rows: list[list[str]], left: int) -> tuple[list[int], list[str]]:
    """Rows as lines of columns two spaces apart, the first `left` columns to the left, the others to the right;
    and the columns' widths."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return widths, ["  ".join(cell.ljust(w) if i < left else cell.rjust(w)
                              for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]


def usage_text(report: Report) -> str:
    """Per run that has them, per line of the table: its agent's calls and the model's tokens and cost
    (usage.COLUMNS, those some line has)."""
    found = usage.summary(report)
    if not found:
        return ""
    columns = usage.shown(found)
    rows = [["run", "config", "template", *(column.label for column in columns)]]
    rows += [[name, config, template, *(usage.cell(column, values[column.name]) for column in columns)]
             for name, lines_of_run in found.items() for config, template, values in lines_of_run]
    return "\n".join(["usage: the agent's tool calls and the model's tokens and cost (-: not known)",
                      *aligned(rows, 3)[1]])


def servers_text(report: Report) -> str:
    """One line per server of a run on several: its role, how many questions it answered, whether it was lost."""
    servers = report.provenance.get("servers", [])
    if len(servers) < 2:
        return ""
    answered = Counter(result.server for result in report.results if result.server)
    found = ["servers:"]
    for server in servers:
        line = f"  {server['name']} ({server['role']}): {answered[server['name']]:,} questions"
        if "forced" in server:
            line += f"; run with --force although {server['forced']}"
        if lost := report.provenance.get("lost", {}).get(server["name"]):
            line += f"; {lost}"
        found.append(line)
    return "\n".join(found)


def repeated_text(report: Report) -> str:
    """Per model with repeated runs: pass^k, the questions that flip, each run's pass rate and their spread."""
    blocks = []
    for group in repeated(report):
        k = len(group["runs"])
        found = [f"{group['model']} ({group['method']}), {k} runs ({', '.join(group['runs'])}): the paper verdict "
                 f"in every run (pass^{k}), the questions that flip between runs, the spread of the pass rates",
                 f"{'config':12} {'template':9} {'questions':>9} {'pass^' + str(k) + ' %':>9} {'flip %':>7} "
                 f"{'spread':>7}  pass % per run"]
        found += [f"{line['config']:12} {line['template']:9} {line['questions']:>9} {line['pass_k']:>9.1f} "
                  f"{line['flip']:>7.1f} {line['spread']:>7.1f}  {' '.join(f'{rate:.1f}' for rate in line['rates'])}"
                  for line in group["lines"]]
        blocks.append("\n".join(found))
    return "\n\n".join(blocks)


def pairs_text(report: Report) -> str:
    """Per pair of runs: per template, the questions only one of them passed, the test's p-value, and where the
    runs' own noise is known whether the difference is within it."""
    blocks = []
    for (first, second), found in itertools.groupby(pairs(report), key=lambda p: (p["first"], p["second"])):
        found = list(found)
        noisy = any(p["noise"] is not None for p in found)
        block = [f"{first} vs {second}: exact McNemar test on the paper verdict (paired by question)"
                 + ("; two runs of one model: their difference is the runs' own noise" if found[0]["same_model"]
                    else ""),
                 f"{'config':12} {'template':9} {'questions':>9} {'both pass':>9} {'only ' + first:>14} "
                 f"{'only ' + second:>14} {'p':>8}" + (f" {'diff':>6} {'noise':>6}" if noisy else "")]
        block += [f"{p['config']:12} {p['template']:9} {p['questions']:>9} {p['both']:>9} {p['only_first']:>14} "
                  f"{p['only_second']:>14} {p_value(p['p']):>8}"
                  + (f" {p['difference']:>6.1f} {p['noise']:>6.1f}" + ("  within the runs' noise"
                                                                     if p["within_noise"] else "")
                     if noisy else "") for p in found]
        blocks.append("\n".join(block))
    return "\n\n".join(blocks)


def failures(report: Report, limit: int = LISTED) -> str:
    """The first questions that did not pass the headline verdict, with their evidence, one line each."""
    failing = not_passed(report)
    several = len(report.run_facts) > 1
    found = [f"{f'{r.run}: ' if several else ''}{r.id} [{r.template_id}] {report.word(r)}: "
             f"{evidence(r, report.verdict)}" for r in failing[:limit]]
    if len(failing) > limit:
        found.append(f"... and {len(failing) - limit} more (see --json-out / --html)")
    return "\n".join(found)


def skips(skipped: list[Result], limit: int = LISTED) -> str:
    """Skipped questions grouped by template and reason, e.g. "20 skipped [R5]: file ... is not in DATA"."""
    found = [f"{len(reasons)} skipped [{template}]: {reasons[0]}"
             + (f" (and {len(reasons) - 1} more like it)" if len(set(reasons)) > 1 else "")
             for template, reasons in skip_groups(skipped)]
    if len(found) > limit:
        found = [*found[:limit], f"... and {len(found) - limit} more groups (see --json-out)"]
    return "\n".join(found)


def problems_text(report: Report) -> str:
    """Per run, the prediction lines that could not be read, the lines read past with a warning, the files of a
    run folder skipped, with file and line (the first LISTED of each)."""
    found = []
    for run in report.runs:
        for label, problems in (("not read", run.problems), ("warning", run.warnings), ("skipped", run.skipped)):
            found += [f"{label}: {problem}" for problem in problems[:LISTED]]
            if len(problems) > LISTED:
                found.append(f"... and {len(problems) - LISTED} more in run {run.name} (see --json-out)")
    return "\n".join(found)


def baseline_changes(report: Report) -> list[tuple[str, str, str]]:
    """(id, before, now) for every question whose word changed since the baseline: regressions first."""
    previous = report.baseline or {}
    changes = [(r.id, previous.get(r.id, "absent"), report.word(r)) for r in report.results
               if previous.get(r.id) != report.word(r)]
    return sorted(changes, key=lambda change: (not (change[1] == "pass"), change[0]))


def baseline_text(report: Report) -> str:
    if report.baseline is None:
        return ""
    changes = baseline_changes(report)
    if not changes:
        return "no status changed since the baseline"
    regressions = sum(before == "pass" for _, before, _ in changes)
    found = [f"{len(changes)} status changes since the baseline ({regressions} regressions):"]
    found += [f"  {'REGRESSION ' if before == 'pass' else ''}{rid}: {before} -> {now}" for rid, before, now in changes]
    return "\n".join(found)
