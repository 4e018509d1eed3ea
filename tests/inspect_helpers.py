"""The Inspect tests' shared parts (tests/test_inspect_tasks.py, tests/test_inspect_logs.py; their fixtures
`gold` and `inspect_offline` are in conftest.py): the demo's first five R1 questions as the selection, the mock
model scripted per question with its usage given (so that it counts no tokens: Inspect 0.3.285 counts with
tiktoken's o200k_base, which tiktoken downloads on first use), a task run in-process, its scores read back, and
`reproduce score` on its log."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import inspect_ai
from inspect_ai.model import ModelOutput, ModelUsage, get_model

from testkit.cli import reproduce

R1 = "raster_only/elevation+poi"
QUESTIONS = [f"{R1}/{n}" for n in range(5)]
WRONG = "SELECT 1.5 AS elevation"


def task_args(demo: tuple[str, Path]) -> dict:
    return {"config": "raster_only", "template": "R1", "id": QUESTIONS, "data": str(demo[1]), "dsn": demo[0]}


def usage(n: int) -> ModelUsage:
    return ModelUsage(input_tokens=100 + n, output_tokens=10 + n, total_tokens=110 + 2 * n, total_cost=0.125 * (n + 1))


def question_of(messages: list) -> str:
    return re.search(r"Question (\S+):", next(m.text for m in messages if m.role == "user")).group(1)


def scripted(answer: Callable[[str, list], ModelOutput]) -> Callable:
    """The mock model's outputs: `answer(question id, messages so far)`, with usage set (no token count)."""
    def output(messages: list, tools: list, tool_choice: object, config: object) -> ModelOutput:
        question = question_of(messages)
        said = answer(question, messages)
        said.usage = usage(int(question.rsplit("/", 1)[1]))
        return said
    return output


def run(task: object, demo: tuple[str, Path], outputs: Callable, log_dir: Path, **options) -> inspect_ai.log.EvalLog:
    args = {**task_args(demo), **options.pop("task_args", {})}
    [log] = inspect_ai.eval(task, model=get_model("mockllm/model", custom_outputs=outputs), task_args=args,
                            log_dir=str(log_dir), display="none", **options)
    assert log.status == "success", log.error
    return log


def verdicts(log: inspect_ai.log.EvalLog, scorer: str, epoch: int = 1) -> dict[str, tuple]:
    return {sample.id: (sample.scores[scorer].value, sample.scores[scorer].metadata["strict"],
                        sample.scores[scorer].metadata["outcome"]) for sample in log.samples if sample.epoch == epoch}


def metrics(log: inspect_ai.log.EvalLog) -> dict[str, float]:
    [scored] = log.results.scores
    return {name: found.value for name, found in scored.metrics.items()}


def score_logs(demo: tuple[str, Path], folder: Path, *pred: object) -> tuple[int, str, dict]:
    """`reproduce score PRED... --json-out` on the five questions: its exit code, stdout and JSON report."""
    args = [arg for question in QUESTIONS for arg in ("--id", question)]
    done = reproduce("score", *pred, "--config", "raster_only", *args, "--data", demo[1], "--dsn", demo[0],
                     "--json-out", folder / "scores.json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, done.stdout, json.loads((folder / "scores.json").read_text())


def verdicts_by_run(document: dict) -> dict[str, dict[str, tuple]]:
    """Each run's paper and strict verdicts and outcome per question, as Inspect's scores word them."""
    found: dict[str, dict[str, tuple]] = {}
    for result in document["results"]:
        found.setdefault(result["run"], {})[result["id"]] = (
            "C" if result["paper"] == "pass" else "I", "C" if result["strict"] == "pass" else "I", result["outcome"])
    return found
