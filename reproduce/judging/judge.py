"""The one judge: a question's returned rows against its stored answer, by both verdicts and the strict diff.

Every command that judges (verify, show, score, rebase) asks this function, so that the same rows get the same
verdicts whoever ran them. Both verdicts count a feature's twins once (values.one_row_per_feature), each side
reduced once here; the strict row diff (`exact`) sees the rows as they are, so that a twin that did not come back
is still reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reproduce.dataset import Record
from reproduce.judging.paper import PaperVerdict, paper_verdict
from reproduce.judging.strict import Check, RowDiff, Verdict, exact_diff, strict_verdict
from reproduce.judging.values import one_row_per_feature


@dataclass(frozen=True)
class Judgement:
    paper: PaperVerdict  # the paper's scoring, pass or fail
    strict: Verdict  # every component, every row
    diff: RowDiff  # the strict row-level comparison

    @property
    def strict_reason(self) -> str:
        """Why the strict verdict is what it is, in one line."""
        if self.strict.status == "empty":
            return "no rows (the stored answer has some)"
        failure = self.strict.first_failure
        return "every component passes" if failure is None else described(failure)


def judge(record: Record, rows: list[dict[str, Any]]) -> Judgement:
    """Both verdicts and the strict diff of `rows` (what the question's SQL returned, or an answer's rows)."""
    distinct = one_row_per_feature(rows)
    gold = record.distinct_answers
    return Judgement(paper_verdict(record.template_id, gold, distinct),
                     strict_verdict(record.template_id, gold, distinct),
                     exact_diff(record.template_id, record.answers, rows))


def described(check: Check) -> str:
    """A failing component in one line: the stored value, the value returned, how far apart against the tolerance."""
    value = "" if check.value == float("inf") else f", {check.metric} {check.value:.4g} vs {check.threshold}"
    return f"{check.component}: stored {check.expected!r}, got {check.actual!r}{value}"
