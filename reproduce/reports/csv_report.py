"""--csv-out: the figures in long format (run, model, method, config, template, metric, value), one line per
figure, for plotting: every line of the table per run, what each run used (usage.py: its known values), then
the repeated runs and the pairs of runs."""

from __future__ import annotations

import csv
import io

from reproduce.reports import usage
from reproduce.reports.analysis import pairs, repeated
from reproduce.reports.model import Report, by_run, lines, metrics

HEADER = ("run", "model", "method", "config", "template", "metric", "value")


def render(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    about = {run["name"]: run for run in report.run_facts}
    for name, found in by_run(report.results).items():
        for config, template, results in lines(found):
            for metric, value in metrics(results).items():
                writer.writerow([name, about[name]["model"], about[name]["method"], config, template or "all", metric,
                                 value])
    for name, found in usage.summary(report).items():
        for config, template, values in found:
            writer.writerows([name, about[name]["model"], about[name]["method"], config, template or "all", metric,
                              value] for metric, value in values.items() if value is not None)
    for group in repeated(report):
        for line in group["lines"]:
            for metric in ("pass_k", "flip", "spread"):
                writer.writerow([" + ".join(group["runs"]), group["model"], group["method"], line["config"],
                                 line["template"] or "all", f"{metric}_pct", line[metric]])
    for pair in pairs(report):
        for metric in ("both", "only_first", "only_second", "p", "difference", "noise"):
            if pair[metric] is not None:
                writer.writerow([f"{pair['first']} vs {pair['second']}", "", "", pair["config"],
                                 pair["template"] or "all", f"pair_{metric}", pair[metric]])
    return out.getvalue()
