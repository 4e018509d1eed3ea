"""How the runs of a report compare: repeated runs of one model (pass^k, the questions that flip, the spread of
their rates: the runs' own noise) and pairs of runs (the exact McNemar test per line of the table). Empty for a
report of one run."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from reproduce.reports.model import Report, by_run, lines
from reproduce.stats import mcnemar_exact


def repeated(report: Report) -> list[dict[str, Any]]:
    """Runs of one model with one method (two or more of them): per line of the table, pass^k (the questions
    every run passed), the questions whose verdict flips between the runs, and the spread of the runs' pass
    rates: the runs' own noise. Each question's count of passing runs is under `passed`."""
    runs = by_run(report.results)
    models: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in report.run_facts:
        if run["model"] and run["name"] in runs:
            models[(run["model"], run["method"])].append(run["name"])
    found = []
    for (model, method), names in models.items():
        if len(names) < 2:
            continue
        found_lines = []
        for rows in zip(*(lines(runs[name]) for name in names), strict=True):
            passes: dict[str, int] = defaultdict(int)
            for _, _, results in rows:
                for result in results:
                    passes[result.id] += result.paper == "pass"
            rates = [100 * sum(r.paper == "pass" for r in results) / len(results) for _, _, results in rows]
            questions, k = len(passes), len(names)
            found_lines.append({"config": rows[0][0], "template": rows[0][1], "questions": questions,
                                "pass_k": round(100 * sum(n == k for n in passes.values()) / questions, 2),
                                "flip": round(100 * sum(0 < n < k for n in passes.values()) / questions, 2),
                                "rates": [round(rate, 2) for rate in rates],
                                "spread": round(max(rates) - min(rates), 2)})
        # `passes` is left from the last line, the total: every question
        found.append({"model": model, "method": method, "runs": names, "lines": found_lines, "passed": dict(passes)})
    return found


def pairs(report: Report) -> list[dict[str, Any]]:
    """For each pair of runs and each line of the table: the exact McNemar test on the paper verdict, the
    difference of the pass rates and, where a run's model has repeated runs, the larger of the spreads known
    (the runs' own noise: a difference within it says nothing)."""
    runs = by_run(report.results)
    model_of = {run: group for group in repeated(report) for run in group["runs"]}
    found = []
    for first, second in itertools.combinations(runs, 2):
        same_model = first in model_of and model_of.get(first) is model_of.get(second)
        for index, ((config, template, left), (_, _, right)) in enumerate(
                zip(lines(runs[first]), lines(runs[second]), strict=True)):
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


def p_value(p: float) -> str:
    return "1" if p >= 1 else f"{p:.3g}"
