"""What every report renders: a command's results with their runs (`Report`), what the command headlines
(`View`), and the figures every format shares (lines of the table, counts and rates, the one vocabulary of
columns).

`reproduce verify` is the run named "gold" of the pipeline `reproduce score` runs, so a verify report is a
score report of that one run under verify's View: the strict verdict as the headline, its own columns.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from reproduce import results as judged
from reproduce.dataset import Record, Skip
from reproduce.predictions.layouts import PredictionRun
from reproduce.results import OF_PREDICTIONS, OUTCOMES, VERDICTS, Result, summarize
from reproduce.stats import wilson

if TYPE_CHECKING:
    from reproduce.score import Scores
    from reproduce.verify import Run

# a question's words (Result.word): the verdict when its rows were judged, else its outcome
WORDS = (*VERDICTS, *(outcome for outcome in OUTCOMES if outcome != "ran"))
LISTED = 20  # failing questions, skip groups, problems: how many the console lists (the files have them all)


@dataclass(frozen=True)
class View:
    """What a command's reports headline, and the columns of its table (names of COLUMNS)."""

    command: str
    verdict: str  # the headline verdict: "strict" (verify) or "paper" (score)
    columns: tuple[str, ...]
    per_run: bool  # a column group per run in the table, the runs listed above it


VERIFY = View("reproduce verify", "strict",
              ("pass %", "exact %", "paper %", *(w for w in WORDS if w not in OF_PREDICTIONS), "seconds"), False)
SCORE = View("reproduce score", "paper", ("predicted %", "executed %", "paper %", "95% CI", "strict %", "timeout",
                                          "sql_error", "unscorable"), True)


@dataclass
class Report:
    """Every result of one command's run, and what its reports say beside them."""

    view: View
    provenance: dict[str, Any]
    results: list[Result]  # run by run, each in dataset order
    records: dict[str, Record]  # id -> the question, its gold SQL and stored answer
    runs: list[PredictionRun]
    run_facts: list[dict[str, Any]]  # per run: name, source, model, method, counts (and whatever else is known)
    skipped: list[Skip] = field(default_factory=list)  # selected questions not in the data, counted apart
    baseline: dict[str, str] | None = None  # id -> word of an earlier report (verify --baseline)

    @property
    def verdict(self) -> str:
        return self.view.verdict

    def word(self, result: Result) -> str:
        return result.word(self.verdict)

    def skipped_results(self) -> list[Result]:
        """Every selected question not in the data, as a result (in the results, or counted apart)."""
        return [*(r for r in self.results if r.outcome == "skipped"),
                *(judged.skipped("", skip.id, skip.template_id, skip.reason) for skip in self.skipped)]


def by_run(results: Iterable[Result]) -> dict[str, list[Result]]:
    runs: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        runs[result.run].append(result)
    return runs


def lines(results: list[Result]) -> list[tuple[str, str, list[Result]]]:
    """The table's lines: (config, template, results) per template in dataset order, then `all` per config,
    then the total (config "total", template "")."""
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    configs: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        groups[(result.group, result.template_id)].append(result)
        configs[result.group].append(result)
    found = [(config, template, group) for (config, template), group in groups.items()]
    found += [(config, "all", group) for config, group in configs.items()]
    return [*found, ("total", "", list(results))]


def line_name(config: str, template: str) -> str:
    return f"{config}/{template or 'all'}"


@dataclass(frozen=True)
class Figures:
    """One line's counts (results.summarize) and its rates, of the questions that were not skipped."""

    counts: dict[str, int]
    results: list[Result]

    @classmethod
    def of(cls, results: list[Result]) -> Figures:
        return cls(summarize(results), results)

    @property
    def judged(self) -> int:
        return self.counts["questions"] - self.counts["skipped"]

    def share(self, count: int) -> float | None:
        return 100 * count / self.judged if self.judged else None

    def interval(self) -> tuple[float, float]:
        low, high = wilson(self.counts["paper_passed"], self.judged)
        return 100 * low, 100 * high


RATES = {"predicted_pct": "predicted", "executed_pct": "answered", "paper_pct": "paper_passed",
         "strict_pct": "strict_passed", "exact_pct": "exact"}  # metric -> the count it is the share of


def metrics(results: list[Result]) -> dict[str, Any]:
    """A line's figures for the files (JSON summary, CSV): the counts, the rates and the paper's interval."""
    figures = Figures.of(results)
    low, high = figures.interval()
    rates = {metric: "" if (share := figures.share(figures.counts[count])) is None else round(share, 2)
             for metric, count in RATES.items()}
    return {**figures.counts, **rates, "paper_ci95_low": round(low, 2), "paper_ci95_high": round(high, 2)}


def _rate(count: str) -> Callable[[Figures, str], str]:
    def cell(figures: Figures, verdict: str) -> str:
        share = figures.share(figures.counts[count])
        return "-" if share is None else f"{share:.1f}"
    return cell


def _interval(figures: Figures, verdict: str) -> str:
    low, high = figures.interval()
    return f"{low:.1f}-{high:.1f}" if figures.judged else "-"


def _count_of(word: str) -> Callable[[Figures, str], str]:
    return lambda figures, verdict: str(sum(result.word(verdict) == word for result in figures.results))


# Every column a table may show, once: a View names the ones it shows.
COLUMNS: dict[str, Callable[[Figures, str], str]] = {
    "predicted %": _rate("predicted"), "executed %": _rate("answered"), "paper %": _rate("paper_passed"),
    "95% CI": _interval, "strict %": _rate("strict_passed"), "pass %": _rate("strict_passed"),
    "exact %": _rate("exact"), **{word: _count_of(word) for word in WORDS},
    "seconds": lambda figures, verdict: f"{sum(result.seconds for result in figures.results):.1f}",
}


def cells(view: View, results: list[Result]) -> list[str]:
    figures = Figures.of(results)
    return [COLUMNS[column](figures, view.verdict) for column in view.columns]


def evidence(result: Result, verdict: str) -> str:
    """Why a question did not pass the verdict, in one line: for the strict one its first failing component
    with both values (or the error), for the paper's its reason."""
    detail = result.detail
    if result.outcome == "skipped":
        return detail.get("reason", "")
    if verdict == "paper":
        return result.paper_reason
    if "error" in detail:
        return detail["error"]
    failure = detail.get("failure")
    if failure:
        value = failure.get("value")
        off = f", {failure['metric']} {value:.4g} vs {failure['threshold']}" if value is not None else ""
        return f"{failure['component']} expected {failure['expected']!r}, got {failure['actual']!r}{off}"
    return "no rows (stored answer has some)" if result.outcome == "empty" else result.word(verdict)


def not_passed(report: Report) -> list[Result]:
    """The questions to look at: judged or run, and not passing the headline verdict."""
    return [r for r in report.results if report.word(r) not in ("pass", "skipped", "no_prediction")]


def skip_groups(results: Iterable[Result]) -> list[tuple[str, list[str]]]:
    """Skipped questions per template and kind of reason: (template, reasons)."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for result in results:
        reason = result.detail.get("reason", "")
        kind = re.sub(r"\b\d{3}\b", "<n>", reason)  # one vector question file per question: one kind
        groups[(result.template_id, kind)].append(reason)
    return [(template, reasons) for (template, _), reasons in groups.items()]


def disagreeing(results: list[Result]) -> set[str]:
    """The questions whose paper verdict differs between runs."""
    verdicts: dict[str, set[str]] = defaultdict(set)
    for result in results:
        verdicts[result.id].add(result.paper)
    return {question for question, found in verdicts.items() if len(found) > 1}


def of_scores(scores: Scores) -> Report:
    """`reproduce score`'s report (a score.Scores)."""
    return Report(SCORE, scores.provenance, scores.results, scores.records, scores.runs,
                  scores.provenance["runs"], scores.skipped)


def of_verify(run: Run, baseline: dict[str, str] | None = None) -> Report:
    """`reproduce verify`'s report (a verify.Run): the gold run's, under verify's View."""
    from reproduce.score import gold_run, run_facts  # score's modules load only when a report is made

    gold = gold_run(list(run.records.values()))
    return Report(VERIFY, run.provenance, run.results, run.records, [gold], [run_facts(gold)], baseline=baseline)
