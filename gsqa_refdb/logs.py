"""An Inspect log of a gsqa_refdb task as prediction records: per sample and epoch the question id, the model's
SQL (text2sql: its whole text, read as `reproduce score` reads {"id", "sql"}) or its submitted answer
(sql_agent), the model's token usage and cost, the seconds it worked, and the sample's error if it failed.
`as_line` gives the canonical JSON Lines prediction (docs/BENCHMARK-FORMAT.md, Predictions) with the epoch
and cost beside it.

What of inspect_ai.log this relies on (0.3.285): read_eval_log(path, header_only=True).eval (.task: the
registry name, gsqa_refdb/text2sql or gsqa_refdb/sql_agent; .model) and read_eval_log_samples(path,
all_samples_required=False), a stream of EvalSample: .id, .epoch, .output.completion, .messages,
.model_usage (model name -> ModelUsage: input_tokens, output_tokens, total_tokens, total_cost),
.working_time, .error (EvalError: .message).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspect_ai.log import EvalSample, read_eval_log, read_eval_log_samples

from gsqa_refdb.scorer import SUBMIT, submission

TASKS = {"gsqa_refdb/text2sql": "sql", "gsqa_refdb/sql_agent": "answer"}  # the task -> what its samples predict


@dataclass(frozen=True)
class LoggedPrediction:
    id: str
    epoch: int
    kind: str  # sql or answer
    prediction: Any  # the model's text (sql), or the submitted answer; None: none (`unanswered` says why)
    model: str
    method: str  # the task
    seconds: float | None = None
    tokens: dict[str, int] = field(default_factory=dict)  # input, output, total
    cost: float | None = None  # in dollars, where the provider's prices are known to Inspect
    unanswered: str = ""

    def as_line(self) -> dict[str, Any] | None:
        """The canonical prediction line; None when the sample predicted nothing."""
        if self.prediction is None:
            return None
        line = {"id": self.id, self.kind: self.prediction, "model": self.model, "method": self.method,
                "epoch": self.epoch, "tokens": self.tokens}
        if self.seconds is not None:
            line["seconds"] = self.seconds
        if self.cost is not None:
            line["cost"] = self.cost
        return line


def read(path: Path) -> Iterator[LoggedPrediction]:
    """Each sample of the log at `path` (a .eval or .json log of a gsqa_refdb task), streamed; ValueError if it
    is the log of another task."""
    spec = read_eval_log(str(path), header_only=True).eval
    kind = TASKS.get(spec.task)
    if kind is None:
        raise ValueError(f"{path}: a log of the task {spec.task!r}, not of {' or '.join(TASKS)}")
    for sample in read_eval_log_samples(str(path), all_samples_required=False):
        yield _prediction(sample, kind, spec.model, spec.task)


def _prediction(sample: EvalSample, kind: str, model: str, task: str) -> LoggedPrediction:
    usage = list((sample.model_usage or {}).values())
    tokens = {name: sum(getattr(used, f"{name}_tokens") for used in usage) for name in ("input", "output", "total")}
    costs = [used.total_cost for used in usage if used.total_cost is not None]
    prediction, unanswered = _predicted(sample, kind)
    return LoggedPrediction(str(sample.id), sample.epoch, kind, prediction, model, task,
                            round(sample.working_time, 3) if sample.working_time is not None else None,
                            tokens, sum(costs) if costs else None, unanswered)


def _predicted(sample: EvalSample, kind: str) -> tuple[Any, str]:
    if sample.error is not None:
        return None, f"the sample failed: {sample.error.message}"
    if kind == "sql":
        return sample.output.completion, ""
    call = submission(sample.messages)
    return (call.arguments.get("answer"), "") if call else (None, f"no answer recorded by {SUBMIT}")
