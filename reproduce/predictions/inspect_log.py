"""An Inspect log of a gsqa_refdb task (`inspect eval gsqa_refdb/...`, docs/INSPECT.md), the one owner of what
is read of it: per sample and epoch the question id, the model's text (text2sql: read as `reproduce score`
reads {"id", "sql": TEXT}) or the answer it submitted (sql_agent), the model's token usage and cost, the seconds
it worked, and why there is no prediction (the sample failed, or no answer was recorded). layouts.py makes
runs of them: each epoch of a log is one run.

Inspect is the optional `inspect` extra: inspect_ai is imported here only when a log is read, never when this
module is (tests/test_inspect_boundary.py), and a log given without it is one line saying what to install.

What of inspect_ai.log this relies on (0.3.285): read_eval_log(path, header_only=True) (.eval.task: the
registry name; .eval.model; .eval.config.epochs) and read_eval_log_samples(path, all_samples_required=False), a
stream of EvalSample: .id, .epoch, .output.completion, .messages, .model_usage (model name -> ModelUsage:
input_tokens, output_tokens, total_tokens, total_cost), .working_time, .error (EvalError: .message).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError

# The task -> what its samples predict.
TASKS = {"gsqa_refdb/text2sql": "sql", "gsqa_refdb/sql_agent": "answer", "gsqa_refdb/code_agent": "answer"}
SUBMIT = "submit_answer"  # the tool of `reproduce serve` whose recorded answer is the agent's prediction
NO_ANSWER = f"no answer recorded by {SUBMIT}"
TOKENS = ("input", "output", "total")
# How an Inspect log in JSON begins (inspect_ai writes its EvalLog's fields in order); a .eval log is a zip.
_JSON_LOG_HEAD = re.compile(rb'\A\s*\{\s*"version"\s*:\s*\d+\s*,\s*"status"\s*:')
_HEAD_BYTES = 256


@dataclass(frozen=True)
class Header:
    task: str
    model: str
    epochs: int
    kind: str  # what its samples predict: sql or answer


@dataclass(frozen=True)
class LoggedSample:
    """One sample of one epoch."""

    id: str
    epoch: int
    prediction: Any  # the model's text (sql), or the submitted answer; None: none (`unanswered` says why)
    meta: dict[str, Any] = field(default_factory=dict)  # seconds, tokens {input, output, total}, cost (dollars)
    unanswered: str = ""


def is_log(file: Path) -> bool:
    """Whether a file is an Inspect log, by its name (.eval) or, for .json, how it begins (no inspect_ai needed)."""
    if file.suffix == ".eval":
        return True
    if file.suffix != ".json":
        return False
    with file.open("rb") as opened:
        return bool(_JSON_LOG_HEAD.match(opened.read(_HEAD_BYTES)))


class Unreadable(ValueError):
    """The file is no readable log of ours (its message says why, in one line), or its samples stop being
    readable part way."""


def read(file: Path) -> tuple[Header, Iterator[LoggedSample]]:
    """The log's header and its samples, streamed. GsqaError when inspect_ai is not installed; Unreadable when
    the file is no readable log, or the log of a task that is not ours, and from the stream where it breaks."""
    try:
        from inspect_ai.log import read_eval_log, read_eval_log_samples
    except ImportError:
        raise GsqaError(f"{file} is an Inspect log: pip install 'gsqa-refdb[inspect]'") from None
    try:
        spec = read_eval_log(str(file), header_only=True).eval
    except Exception as error:  # noqa: BLE001 - whatever a damaged file makes the parser raise: it is not read
        raise Unreadable(f"not a readable Inspect log ({_error_text(error)})") from None
    kind = TASKS.get(spec.task)
    if kind is None:
        raise Unreadable(f"a log of the task {spec.task!r}, not of {' or '.join(TASKS)}: not scored")
    header = Header(spec.task, spec.model, spec.config.epochs or 1, kind)
    return header, _samples(read_eval_log_samples(str(file), all_samples_required=False), kind)


def _samples(samples: Iterator[Any], kind: str) -> Iterator[LoggedSample]:
    """The stream of samples; where the file breaks part way, Unreadable (the samples before it stay read)."""
    count = 0
    while True:
        try:
            sample = next(samples)
        except StopIteration:
            return
        except Exception as error:  # noqa: BLE001 - as in read(): the parser's, whatever the damage
            raise Unreadable(f"not readable after {count} samples ({_error_text(error)})") from None
        count += 1
        yield _sample(sample, kind)


def _error_text(error: BaseException) -> str:
    text = _one_line(str(error))
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


def _sample(sample: Any, kind: str) -> LoggedSample:
    usage = list((sample.model_usage or {}).values())
    meta: dict[str, Any] = {"tokens": {name: sum(getattr(used, f"{name}_tokens") for used in usage)
                                       for name in TOKENS}}
    if costs := [used.total_cost for used in usage if used.total_cost is not None]:
        meta["cost"] = sum(costs)
    if sample.working_time is not None:
        meta["seconds"] = round(sample.working_time, 3)
    if sample.error is not None:
        return LoggedSample(str(sample.id), sample.epoch, None, meta,
                            f"the sample failed: {_one_line(sample.error.message)}")
    if kind == "sql":
        return LoggedSample(str(sample.id), sample.epoch, sample.output.completion, meta)
    call = submission(sample.messages)
    if call is None:
        return LoggedSample(str(sample.id), sample.epoch, None, meta, NO_ANSWER)
    return LoggedSample(str(sample.id), sample.epoch, call.arguments.get("answer"), meta)


def submission(messages: list[Any]) -> Any:
    """The last `submit_answer` call (an Inspect ToolCall) whose result the tool recorded (no error), None if
    there is none: the agent's answer, in a live sample's messages as in a logged one's."""
    recorded = {message.tool_call_id for message in messages
                if message.role == "tool" and message.function == SUBMIT and message.error is None}
    calls = [call for message in messages if message.role == "assistant"
             for call in message.tool_calls or [] if call.function == SUBMIT and call.id in recorded]
    return calls[-1] if calls else None
