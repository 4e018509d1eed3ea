"""--csv-out: the figures in long format (run, model, method, config, template, metric, value), one line per
figure, for plotting: every line of the table per run, what each run used (usage.py: its known values), then
the repeated runs and the pairs of runs."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

from reproduce.reports import usage
from reproduce.reports.analysis import pairs, repeated
from reproduce.reports.model import Report, by_run, lines, metrics

HEADER = ("run", "model", "method", "config", "template", "metric", "value")
Row = list[object]


def render(report: Report) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(HEADER)
    for rows in (_table(report), _usage(report), _repeated(report), _pairs(report)):
        writer.writerows(rows)
    return out.getvalue()


def _of_run(about: dict[str, object], config: str, template: str, metric: str, value: object) -> Row:
    """A figure of one run (`about`: its facts) on one line of the table."""
    return [about["name"], about["model"], about["method"], config, template or "all", metric, value]


def _table(report: Report) -> Iterator[Row]:
    about = {run["name"]: run for run in report.run_facts}
    for name, found in by_run(report.results).items():
        for config, template, results in lines(found):
            for metric, value in metrics(results).items():
                yield _of_run(about[name], config, template, metric, value)


def _usage(report: Report) -> Iterator[Row]:
    about = {run["name"]: run for run in report.run_facts}
    for name, found in usage.summary(report).items():
        for config, template, values in found:
            yield from (_of_run(about[name], config, template, metric, value) for metric, value in values.items()
                        if value is not None)


def _repeated(report: Report) -> Iterator[Row]:
    for group in repeated(report):
        for line in group["lines"]:
            for metric in ("pass_k", "flip", "spread"):
                yield [" + ".join(group["runs"]), group["model"], group["method"], line["config"],
                       line["template"] or "all", f"{metric}_pct", line[metric]]


def _pairs(report: Report) -> Iterator[Row]:
    for pair in pairs(report):
        for metric in ("both", "only_first", "only_second", "p", "difference", "noise"):
            if pair[metric] is not None:
                yield [f"{pair['first']} vs {pair['second']}", "", "", pair["config"], pair["template"] or "all",
                       f"pair_{metric}", pair[metric]]
