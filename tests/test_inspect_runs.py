"""What a real run of the Inspect tasks needs, offline on the demo database: Inspect's limits per sample are serve's
budget passed on (and Inspect enforces them), a run that failed part way and is retried with `inspect eval-retry`
runs only the samples it had not finished, the per-sample `reproduce serve` names the log as what keeps its calls
instead of warning that nothing does, and a task that cannot be made says why in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import inspect_ai
import pytest
from inspect_ai.model import ModelOutput
from inspect_helpers import QUESTIONS, R1, run, scripted, task_args, verdicts

from gsqa_refdb import adapter
from gsqa_refdb.tasks import sql_agent

pytestmark = pytest.mark.usefixtures("inspect_offline")

INSPECT = Path(sys.executable).with_name("inspect")
CLOSED = "http://127.0.0.1:9"  # every download made to fail


def offline_env(tmp_path: Path, dsn: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": dsn, "XDG_DATA_HOME": str(tmp_path / "data"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken"),
            **{name: CLOSED for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}}


def test_an_agent_task_carries_serve_s_budget_as_inspect_s_limits(demo) -> None:
    """sql_agent's (code_agent's are made by the same _agent_task, from the same budget)."""
    task = sql_agent(**{**task_args(demo), "id": QUESTIONS[:1]}, max_calls=7, max_seconds=90.5)
    assert (task.message_limit, task.working_limit, task.time_limit, task.token_limit) == (1 + 4 * 7, 91, None, None)


def test_inspect_ends_an_agent_past_its_call_budget_at_the_message_limit(demo, tmp_path: Path) -> None:
    """A model that never submits: serve refuses its calls past the budget of 2, Inspect ends the sample at
    1 + 4 x 2 messages; nothing was submitted, so nothing is judged correct."""
    def forever(question: str, messages: list) -> ModelOutput:
        return ModelOutput.for_tool_call("mockllm/model", "query", {"question_id": question, "sql": "SELECT 1"})
    log = run("gsqa_refdb/sql_agent", demo, scripted(forever), tmp_path / "logs",
              task_args={"id": QUESTIONS[:1], "max_calls": 2})
    [sample] = log.samples
    assert (sample.limit.type, sample.limit.limit) == ("message", 9)
    assert len(sample.messages) == 9
    spent = (f"Error executing tool query: refused: {QUESTIONS[0]}: the episode's budget is spent (all 2 calls used); "
             "it is over")
    assert [message.error.message.split(" [budget left")[0] if message.error else "ran"
            for message in sample.messages if message.role == "tool"] == ["ran", "ran", spent, spent]
    assert verdicts(log, "answer_judge") == {QUESTIONS[0]: ("I", "I", "no_prediction")}


def test_a_failed_run_retried_runs_only_the_samples_it_had_not_finished(demo, tmp_path: Path) -> None:
    """`inspect eval` with the gold model, one sample at a time, whose gold data lacks the last question: the
    19 before it finish, the last fails and ends the run. Its data mended, `inspect eval-retry LOG` runs that one
    sample again and copies the 19 into its log (the same samples, by their uuid): the run is complete, 20 correct."""
    model_data = tmp_path / "model-data"
    shutil.copytree(demo[1], model_data)
    questions = model_data / "qa2" / "raster_only" / "elevation+poi.jsonl"
    lines = questions.read_text().splitlines(keepends=True)
    questions.write_text("".join(lines[:-1]))
    env, logs = offline_env(tmp_path, demo[0]), tmp_path / "logs"
    first = subprocess.run([str(INSPECT), "eval", "gsqa_refdb/text2sql", "--model", "gsqa/gold", "-M",
                            f"data={model_data}", "-T", "config=raster_only", "-T", "template=R1", "-T",
                            f"data={demo[1]}", "--max-samples", "1", "--log-dir", str(logs), "--display", "none"],
                           env=env, capture_output=True, text=True, timeout=600)
    [log_file] = logs.glob("*.eval")
    failed = inspect_ai.log.read_eval_log(str(log_file))
    everything = [f"{R1}/{n}" for n in range(20)]
    finished = {sample.id: sample.uuid for sample in failed.samples if sample.error is None}
    assert (failed.status, sorted(finished, key=everything.index)) == ("error", everything[:19]), first.stderr

    questions.write_text("".join(lines))
    retried = subprocess.run([str(INSPECT), "eval-retry", str(log_file), "--log-dir", str(logs), "--display", "none"],
                             env=env, capture_output=True, text=True, timeout=600)
    assert retried.returncode == 0, retried.stderr
    [retry_file] = set(logs.glob("*.eval")) - {log_file}  # a log of its own, the finished samples copied in
    done = inspect_ai.log.read_eval_log(str(retry_file))
    assert done.status == "success"
    assert verdicts(done, "sql_judge") == {question: ("C", "C", "ran") for question in everything}
    ran_again = [sample.id for sample in done.samples if finished.get(sample.id) != sample.uuid]
    assert ran_again == [everything[19]]


def test_a_task_s_serve_names_the_log_as_what_keeps_its_calls_instead_of_warning(demo) -> None:
    """The warning that nothing keeps the calls stays for a user's `reproduce serve` without --trajectory
    (tests/test_serve_protocol.py); a task's server, whose calls Inspect's log keeps, says so instead."""
    request = adapter.selection("raster_only", ["R1"], [], str(demo[1]), demo[0], None, 120.0, 4,
                                sessions_each=adapter.SERVE_SESSIONS)
    command, args, env = adapter.serve_process(request, QUESTIONS[0])
    served = subprocess.run([command, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=120)  # stdin at its end: the stdio server ends
    assert served.returncode == 0, served.stderr
    assert served.stderr == "reproduce serve: 1 of 1 questions open, on stdio, calls kept by the Inspect log\n"


def test_an_agent_run_s_log_holds_no_warning_of_its_servers(demo, gold, tmp_path: Path) -> None:
    """Inspect keeps what a server prints on stderr in the sample's transcript (a logger event, the sample named
    on its first line): the start line, no warning."""
    from test_inspect_tasks import agent_reply

    log = run("gsqa_refdb/sql_agent", demo, scripted(agent_reply(gold, wrong=False)), tmp_path / "logs",
              task_args={"id": QUESTIONS[:2]})
    for sample in log.samples:
        said = [event.message.message for event in sample.events if event.event == "logger"]
        assert [line for line in said if "reproduce serve" in line or "trajectory" in line] == [
            f"sample={sample.id}\nreproduce serve: 1 of 1 questions open, on stdio, calls kept by the Inspect log"]


UNREACHABLE = "postgresql://127.0.0.1:9/gsqa"


@pytest.mark.parametrize(("args", "line"), [
    (["-T", "config=everything"],
     "error: unknown config 'everything': choose one of raster_only, raster_vector, extended, vector, all"),
    (["-T", "config=raster_only", "-T", "template=R99"],
     "error: unknown template 'R99': use an id (V1-V28, R1-R11, VR1-VR14) or a stem such as 'elevation+poi' or "
     "'elevation_max+region'"),
    (["-T", "config=raster_only", "-T", "connections=9"],
     "error: connections=9: from 1 to 4 (each may hold 2 sessions); gsqa_model's connection limit is 8, shared by "
     "every run on the database"),
    (["-T", "config=raster_only", "-T", f"dsn={UNREACHABLE}"],
     "error: cannot connect to PostgreSQL (host=127.0.0.1 port=9 database=gsqa): connection failed: connection to "
     "server at \"127.0.0.1\", port 9 failed: Connection refused Is the server running on that host and accepting "
     "TCP/IP connections? Nothing listens there: start the database (`make db`, or your server, e.g. "
     "`pg_ctlcluster 15 main start`) or point --dsn / DATABASE_URL at a running server."),
])
def test_a_task_that_cannot_be_made_says_why_in_one_line(demo, tmp_path: Path, args: list[str], line: str) -> None:
    done = subprocess.run([str(INSPECT), "eval", "gsqa_refdb/sql_agent", "--model", "gsqa/gold", "-T",
                           f"data={demo[1]}", *args, "--log-dir", str(tmp_path / "logs"), "--display", "none"],
                          env=offline_env(tmp_path, demo[0]), capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", line + "\n")
    assert not (tmp_path / "logs").exists()
