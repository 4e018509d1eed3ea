"""Inspect logs are runs: `reproduce score LOG.eval` (or a folder of .eval and .json logs) on the demo database
scores each epoch of a gsqa_refdb task as a run of its own, with the verdicts Inspect's scorer gave per question
and epoch, the epochs as repeated runs of one model and method (pass^k, flips, spread, McNemar), and the
model's tokens and cost per question and per run as the log has them; a damaged log, a log of another task and
a log given without inspect_ai installed each say so in one line."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import inspect_ai
import pytest
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, get_model
from inspect_ai.scorer import match
from inspect_helpers import (
    QUESTIONS,
    R1,
    WRONG,
    run,
    score_logs,
    scripted,
    task_args,
    usage,
    verdicts,
    verdicts_by_run,
)

from testkit.cli import reproduce

pytestmark = pytest.mark.usefixtures("inspect_offline")

Q0, Q1, Q2, Q3, Q4 = QUESTIONS
# One epoch's usage over the five questions (inspect_helpers.usage: question n costs 100 + n tokens in, ...).
RUN_TOKENS = {"input": 510, "output": 60, "total": 570}
RUN_COST = 0.125 * (1 + 2 + 3 + 4 + 5)


def by_call(gold: dict) -> Callable[[str, list], ModelOutput]:
    """Each question's reply by how often it was asked: 0 and 4 the gold SQL every time, 1 the gold SQL the first
    time and a wrong query after (its verdict flips between the epochs), 2 no SQL, 3 a wrong query."""
    asked: dict[str, int] = defaultdict(int)

    def reply(question: str, messages: list) -> ModelOutput:
        asked[question] += 1
        right = question in (Q0, Q4) or (question == Q1 and asked[question] == 1)
        text = f"```sql\n{gold[question].sql}\n```" if right else "I cannot tell." if question == Q2 else \
            f"```sql\n{WRONG}\n```"
        return ModelOutput.from_content("mockllm/model", text)
    return reply


def two_epochs(demo, gold, folder: Path, **options) -> inspect_ai.log.EvalLog:
    return run("gsqa_refdb/text2sql", demo, scripted(by_call(gold)), folder, epochs=2, **options)


def test_the_epochs_of_a_log_are_repeated_runs_with_the_log_s_verdicts_tokens_and_cost(demo, gold,
                                                                                       tmp_path: Path) -> None:
    log = two_epochs(demo, gold, tmp_path / "logs")
    code, _, scored = score_logs(demo, tmp_path, log.location)
    assert code == 0
    stem = Path(log.location).stem
    first, second = f"{stem} epoch 1", f"{stem} epoch 2"
    assert verdicts_by_run(scored) == {first: verdicts(log, "sql_judge", 1),
                                       second: verdicts(log, "sql_judge", 2)}
    # which epoch asked question 1 first is Inspect's to say: the log tells, and the runs follow it
    passed_first = verdicts(log, "sql_judge", 1)[Q1][0] == "C"
    for epoch, right in ((1, passed_first), (2, not passed_first)):
        assert verdicts(log, "sql_judge", epoch) == {
            Q0: ("C", "C", "ran"), Q1: ("C", "C", "ran") if right else ("I", "I", "ran"),
            Q2: ("I", "I", "sql_error"), Q3: ("I", "I", "ran"), Q4: ("C", "C", "ran")}

    assert scored["runs"] == [
        {"name": name, "source": log.location, "model": "mockllm/model", "method": "gsqa_refdb/text2sql",
         "predictions": 5, "problems": [], "outside": 0, "tokens": RUN_TOKENS, "cost": RUN_COST,
         "warnings": [], "skipped": []} for name in (first, second)]
    for result in scored["results"]:
        n = int(result["id"].rsplit("/", 1)[1])
        meta = result["detail"]["meta"]
        assert (meta["tokens"], meta["cost"]) == ({"input": 100 + n, "output": 10 + n, "total": 110 + 2 * n},
                                                  0.125 * (n + 1))
        assert result["detail"]["where"] == f"{log.location} epoch {1 if result['run'] == first else 2}"

    [repeated] = scored["repeated"]
    assert (repeated["model"], repeated["method"], repeated["runs"]) == ("mockllm/model", "gsqa_refdb/text2sql",
                                                                         [first, second])
    assert repeated["passed"] == {Q0: 2, Q1: 1, Q2: 0, Q3: 0, Q4: 2}
    rates = [60.0, 40.0] if passed_first else [40.0, 60.0]
    assert repeated["lines"] == [{"config": config, "template": template, "questions": 5, "pass_k": 40.0,
                                  "flip": 20.0, "rates": rates, "spread": 20.0}
                                 for config, template in (("raster_only", "R1"), ("raster_only", "all"),
                                                          ("total", ""))]
    assert {(pair["first"], pair["second"], pair["only_first"], pair["only_second"], pair["p"], pair["same_model"])
            for pair in scored["pairs"]} == {(first, second, int(passed_first), int(not passed_first), 1.0, True)}


def test_a_folder_of_eval_and_json_logs_is_a_run_per_log_and_epoch_and_names_what_it_could_not_read(
        demo, gold, tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    eval_log = two_epochs(demo, gold, folder)
    json_log = run("gsqa_refdb/text2sql", demo, scripted(by_call(gold)), folder, log_format="json")
    (folder / "damaged.eval").write_bytes(b"PK\x03\x04 cut short")
    (folder / "notes.txt").write_text("run on the demo")
    code, stdout, scored = score_logs(demo, tmp_path, folder)
    assert code == 1
    eval_run, json_run = (f"logs/{Path(log.location).stem}" for log in (eval_log, json_log))
    assert verdicts_by_run(scored) == {f"{eval_run} epoch 1": verdicts(eval_log, "sql_judge", 1),
                                       f"{eval_run} epoch 2": verdicts(eval_log, "sql_judge", 2),
                                       json_run: verdicts(json_log, "sql_judge")}
    assert verdicts(json_log, "sql_judge")[Q1][0] == "C"  # a new script: its first call
    runs = {entry["name"]: entry for entry in scored["runs"]}
    assert [(entry["tokens"], entry["cost"], entry["predictions"]) for entry in runs.values()] == [
        (RUN_TOKENS, RUN_COST, 5)] * 3
    damaged = f"{folder / 'damaged.eval'}: not a readable Inspect log (ValueError: EOCD not found)"
    assert [f"{p['where']}: {p['why']}" for entry in runs.values() for p in entry["problems"]] == [damaged]
    assert [p["where"] for entry in runs.values() for p in entry["skipped"]] == [str(folder / "notes.txt")]
    assert f"not read: {damaged}" in stdout.splitlines()
    [repeated] = scored["repeated"]
    of_file = {Path(eval_log.location).name: [f"{eval_run} epoch 1", f"{eval_run} epoch 2"],
               Path(json_log.location).name: [json_run]}
    assert repeated["runs"] == [name for file in sorted(of_file) for name in of_file[file]]  # the files in order
    assert repeated["passed"] == {Q0: 3, Q1: 2, Q2: 0, Q3: 0, Q4: 3}


def damaged_entry(log: Path, entry: str) -> Path:
    """A copy of a .eval log (a zip) with the compressed bytes of one entry overwritten: the zip still opens,
    that entry does not decompress."""
    with zipfile.ZipFile(log) as opened:
        info = opened.getinfo(entry)
    content = bytearray(log.read_bytes())
    name_length, extra_length = struct.unpack("<HH", content[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length
    content[start:start + info.compress_size] = b"\xff" * info.compress_size
    damaged = log.with_name("damaged.eval")
    damaged.write_bytes(content)
    return damaged


def test_a_log_damaged_in_its_samples_keeps_the_samples_before_the_damage(demo, gold, tmp_path: Path) -> None:
    log = run("gsqa_refdb/text2sql", demo, scripted(by_call(gold)), tmp_path / "logs")
    damaged = damaged_entry(Path(log.location), f"samples/{Q3}_epoch_1.json")  # samples are read in id order
    code, stdout, scored = score_logs(demo, tmp_path, damaged)
    assert code == 1
    [entry] = scored["runs"]
    assert (entry["name"], entry["predictions"], entry["tokens"]) == (
        "damaged", 3, {"input": 303, "output": 33, "total": 336})
    [problem] = entry["problems"]
    assert (problem["where"], problem["why"].split(" (")[0]) == (str(damaged), "not readable after 3 samples")
    assert verdicts_by_run(scored) == {"damaged": {**verdicts(log, "sql_judge"), Q3: ("I", "I", "no_prediction"),
                                                   Q4: ("I", "I", "no_prediction")}}


def test_a_damaged_log_alone_or_a_log_of_another_task_is_one_line(demo, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.eval"
    damaged.write_bytes(b"not a zip")
    other = inspect_ai.Task(dataset=[Sample(input="Say x", target="x")], scorer=match(), name="other_task")
    said = ModelOutput.from_content("mockllm/model", "x")
    said.usage = usage(0)
    [log] = inspect_ai.eval(other, model=get_model("mockllm/model", custom_outputs=[said]),
                            log_dir=str(tmp_path / "logs"), display="none")
    for path, why in ((damaged, "not a readable Inspect log (ValueError: EOCD not found)"),
                      (log.location, "a log of the task 'other_task', not of gsqa_refdb/text2sql or "
                                     "gsqa_refdb/sql_agent or gsqa_refdb/code_agent: not scored")):
        done = reproduce("score", path, "--config", "raster_only", "--id", Q0, "--data", demo[1], "--dsn", demo[0])
        assert (done.returncode, done.stdout, done.stderr) == (2, "", f"error: nothing to score: no readable "
                                                                      f"prediction of the 1 selected questions "
                                                                      f"({path}: {why})\n")


def test_a_log_without_inspect_installed_says_what_to_install(demo, monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    for module in ("inspect_ai", "inspect_ai.log"):  # what `import inspect_ai.log` finds: nothing
        monkeypatch.setitem(sys.modules, module, None)
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copyfile(Path(__file__), folder / "not_a_log.py")
    (folder / "run.eval").write_bytes(b"PK")
    for path in (folder / "run.eval", folder):
        done = reproduce("score", path, "--config", "raster_only", "--id", Q0, "--data", demo[1])
        assert (done.returncode, done.stdout, done.stderr) == (
            2, "", f"error: {folder / 'run.eval'} is an Inspect log: pip install 'gsqa-refdb[inspect]'\n")


def test_inspect_s_command_line_runs_offline_with_the_gold_model_and_its_log_scores_as_it_did(
        demo, tmp_path: Path) -> None:
    """`inspect eval gsqa_refdb/text2sql --model gsqa/gold` in a process of its own, with every download made to
    fail (a proxy on a closed port, tiktoken's cache empty): the gold model reports its own usage, so nothing
    counts tokens; all 20 R1 questions pass, and `reproduce score` on its log says the same."""
    closed = "http://127.0.0.1:9"
    env = {**os.environ, "DATABASE_URL": demo[0], "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken"),
           **{name: closed for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}}
    inspect = Path(sys.executable).with_name("inspect")
    done = subprocess.run([str(inspect), "eval", "gsqa_refdb/text2sql", "--model", "gsqa/gold",
                           "-M", f"data={demo[1]}", "-T", "config=raster_only", "-T", "template=R1",
                           "-T", f"data={demo[1]}", "--log-dir", str(tmp_path / "logs"), "--display", "none"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    [log_file] = (tmp_path / "logs").glob("*.eval")
    log = inspect_ai.log.read_eval_log(str(log_file))
    assert (log.status, log.eval.model, log.eval.task) == ("success", "gsqa/gold", "gsqa_refdb/text2sql")
    everything = [f"{R1}/{n}" for n in range(20)]
    assert verdicts(log, "sql_judge") == {question: ("C", "C", "ran") for question in everything}
    assert {name: found.value for name, found in log.results.scores[0].metrics.items()}["accuracy"] == 1.0

    scored = reproduce("score", log_file, "--config", "raster_only", "--template", "R1", "--data", demo[1],
                       "--dsn", demo[0], "--json-out", tmp_path / "scores.json")
    assert scored.returncode == 0, scored.stderr
    document = json.loads((tmp_path / "scores.json").read_text())
    assert verdicts_by_run(document) == {log_file.stem: verdicts(log, "sql_judge")}
    assert [(entry["model"], entry["tokens"], entry["cost"]) for entry in document["runs"]] == [
        ("gsqa/gold", {"input": 0, "output": 0, "total": 0}, None)]


def test_the_gold_model_as_an_agent_submits_the_gold_rows(demo, tmp_path: Path) -> None:
    [log] = inspect_ai.eval("gsqa_refdb/sql_agent", model=get_model("gsqa/gold", data=str(demo[1])),
                            task_args=task_args(demo), log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    assert verdicts(log, "answer_judge") == {question: ("C", "C", "ran") for question in QUESTIONS}
    assert [[call.function for message in sample.messages if message.role == "assistant"
             for call in message.tool_calls or []] for sample in log.samples] == [["query", "submit_answer"]] * 5
