"""The tasks' scorer: our judge (gsqa_refdb/adapter.py) on the model's SQL or on its submitted answer, and the
metrics of the paper's verdict: its accuracy, Wilson's 95 % interval around it (reproduce/stats.py) and the
accuracy per template.

A score's value is the paper's verdict (CORRECT or INCORRECT, the headline as in `reproduce score`); its
metadata holds the strict verdict, both reasons, the outcome as `reproduce score` words it (ran, empty, sql_error,
timeout, no_prediction, ...), the strict verdict's check of each component and what the reports keep of the
prediction (its SQL and first rows, or its answer).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import anyio
from inspect_ai.scorer import (
    CORRECT,
    INCORRECT,
    Metric,
    SampleScore,
    Score,
    Scorer,
    Target,
    accuracy,
    grouped,
    metric,
    scorer,
    value_to_float,
)
from inspect_ai.solver import TaskState
from inspect_ai.util import concurrency

from gsqa_refdb import adapter

# The name under which every task of a process bounds the gsqa_model sessions it holds (Inspect's concurrency).
MODEL_SESSIONS = "gsqa_model sessions"
_as_float = value_to_float()


def _interval(scores: list[SampleScore]) -> tuple[float, float]:
    passed = sum(_as_float(sample.score.value) for sample in scores)
    return adapter.wilson(round(passed), len(scores))


@metric
def wilson_low() -> Metric:
    """The lower end of Wilson's 95 % interval around the accuracy (reproduce/stats.py)."""
    def low(scores: list[SampleScore]) -> float:  # the annotation tells Inspect to pass SampleScores
        return _interval(scores)[0]
    return low


@metric
def wilson_high() -> Metric:
    """The upper end of Wilson's 95 % interval around the accuracy."""
    def high(scores: list[SampleScore]) -> float:
        return _interval(scores)[1]
    return high


METRICS = [accuracy(), wilson_low(), wilson_high(), grouped(accuracy(), "template", all=False)]


@scorer(metrics=METRICS)
def sql_judge(judge: adapter.Judge, connections: int) -> Scorer:
    """The model's text read as SQL (its ```sql blocks, else the text) and run as gsqa_model, judged; at most
    `connections` at once, shared with every task of the process (MODEL_SESSIONS)."""
    return _scorer(lambda state: state.output.completion, judge.sql, connections)


@scorer(metrics=METRICS)
def answer_judge(judge: adapter.Judge) -> Scorer:
    """The answer the agent submitted with `submit_answer` (the last one the tool recorded), judged."""
    def judged(question_id: str, answer: Any) -> adapter.Verdict:
        return judge.answer(question_id, answer, "" if answer is not None else adapter.NO_ANSWER)
    return _scorer(lambda state: submitted_answer(state.messages), judged, None)


def _scorer(prediction: Callable[[TaskState], Any], verdict: Callable[[str, Any], adapter.Verdict],
            connections: int | None) -> Scorer:
    """`connections`: the database sessions the verdicts may hold at once (None: they need none)."""
    async def score(state: TaskState, target: Target) -> Score:
        predicted = prediction(state)
        async with concurrency(MODEL_SESSIONS, connections) if connections else contextlib.nullcontext():
            judged = await anyio.to_thread.run_sync(verdict, str(state.sample_id), predicted)
        return Score(value=CORRECT if judged.paper else INCORRECT,
                     answer=predicted if isinstance(predicted, str) or predicted is None else json.dumps(predicted),
                     explanation=judged.paper_reason,
                     metadata={"strict": CORRECT if judged.strict else INCORRECT, "outcome": judged.outcome,
                               "paper_reason": judged.paper_reason, "strict_reason": judged.strict_reason,
                               "checks": judged.checks, "detail": judged.detail})
    return score


def has_submitted(messages: list[Any]) -> bool:
    return adapter.submission(messages) is not None


def submitted_answer(messages: list[Any]) -> Any:
    """The answer of the last recorded `submit_answer` call (as `reproduce score` reads it from the log);
    None if none was recorded."""
    call = adapter.submission(messages)
    return call.arguments.get("answer") if call else None
