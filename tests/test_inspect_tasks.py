"""The Inspect tasks (gsqa_refdb/) end to end on the demo database, offline: Inspect's mock model scripted to give
the gold SQL (or the gold tool calls) for some questions and wrong ones for others, each task found by its
registered name, and the scores and metrics exactly what the script meant; `reproduce score` on the log gives
the same verdicts (the log as runs: tests/test_inspect_logs.py).

Offline: every scripted output carries its token usage, so the mock model never counts tokens itself (Inspect
0.3.285 counts with tiktoken's o200k_base, which tiktoken downloads on first use); tiktoken's loader is made to
fail (conftest's inspect_offline) to hold that no count, and so no download, is tried."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from inspect_ai.model import ChatMessageTool, ModelOutput
from inspect_helpers import (
    QUESTIONS,
    R1,
    WRONG,
    metrics,
    run,
    score_logs,
    scripted,
    verdicts,
    verdicts_by_run,
)
from test_python_sandbox import image  # noqa: F401 - the fixture: the sandbox image, built where missing

from gsqa_core.errors import GsqaError
from gsqa_refdb import adapter
from reproduce import stats
from testkit import code_agent

pytestmark = pytest.mark.usefixtures("inspect_offline")


def test_the_selection_is_the_questions_in_dataset_order_and_its_connections_are_bounded(demo) -> None:
    request = adapter.selection("raster_only", ["R1"], [], str(demo[1]), demo[0], None, 120.0, 4)
    assert [record.id for record in adapter.questions(request)] == [f"{R1}/{n}" for n in range(20)]
    with pytest.raises(GsqaError, match=r"^connections=9: from 1 to 8; gsqa_model's connection limit is 8"):
        adapter.selection("raster_only", ["R1"], [], str(demo[1]), demo[0], None, 120.0, 9)
    with pytest.raises(GsqaError, match=r"^connections=5: from 1 to 4 \(each may hold 2 sessions\)"):
        adapter.selection("raster_only", ["R1"], [], str(demo[1]), demo[0], None, 120.0, 5, sessions_each=2)


EXPECTED_METRICS = {"accuracy": 0.4, "wilson_low": stats.wilson(2, 5)[0], "wilson_high": stats.wilson(2, 5)[1],
                    "R1": 0.4}


def test_text2sql_scores_the_gold_sql_correct_and_the_rest_incorrect(demo, gold, tmp_path: Path) -> None:
    replies = {QUESTIONS[0]: f"```sql\n{gold[QUESTIONS[0]].sql}\n```", QUESTIONS[1]: f"```sql\n{WRONG}\n```",
               QUESTIONS[2]: f"Here it is:\n```sql\n{gold[QUESTIONS[2]].sql}\n```", QUESTIONS[3]: "I cannot tell.",
               QUESTIONS[4]: "```sql\nDROP TABLE pois\n```"}
    log = run("gsqa_refdb/text2sql", demo,
              scripted(lambda question, messages: ModelOutput.from_content("mockllm/model", replies[question])),
              tmp_path / "logs", epochs=2)
    assert log.eval.task == "gsqa_refdb/text2sql"
    assert log.eval.dataset.sample_ids == QUESTIONS
    assert [(sample.id, sample.epoch) for sample in log.samples] == [(q, e) for e in (1, 2) for q in QUESTIONS]
    prompt = log.samples[0].input
    assert "Table public.dem_us" in prompt[0].text and gold[QUESTIONS[0]].question in prompt[1].text
    expected = {QUESTIONS[0]: ("C", "C", "ran"), QUESTIONS[1]: ("I", "I", "ran"),
                QUESTIONS[2]: ("C", "C", "ran"), QUESTIONS[3]: ("I", "I", "sql_error"),
                QUESTIONS[4]: ("I", "I", "sql_error")}
    assert verdicts(log, "sql_judge", 1) == verdicts(log, "sql_judge", 2) == expected
    assert metrics(log) == pytest.approx(EXPECTED_METRICS)
    scores = {sample.id: sample.scores["sql_judge"] for sample in log.samples}
    wrong = scores[QUESTIONS[1]].metadata
    assert [check["component"] for check in wrong["checks"]] == ["elevation"]
    assert wrong["checks"][0]["actual"] == 1.5 and wrong["checks"][0]["passed"] is False
    assert wrong["detail"]["sql"] == [WRONG]
    assert scores[QUESTIONS[4]].explanation.startswith("sql_error: refused: `DROP` changes the database")

    _, _, scored = score_logs(demo, tmp_path, log.location)
    stem = Path(log.location).stem
    assert verdicts_by_run(scored) == {f"{stem} epoch 1": expected, f"{stem} epoch 2": expected}


def agent_reply(gold: dict, wrong: bool = True) -> Callable[[str, list], ModelOutput]:
    """The scripted agent: the gold SQL then its rows submitted; unless not `wrong`, for question 1 a wrong answer
    submitted, for 3 an answer with no tool call, for 4 a null answer, which the tool refuses, then no tool call."""
    def answer(question: str, messages: list) -> ModelOutput:
        results = [message for message in messages if isinstance(message, ChatMessageTool)]
        if wrong and (question == QUESTIONS[3] or (question == QUESTIONS[4] and results)):
            return ModelOutput.from_content("mockllm/model", "The elevation is about 10 m.")
        if wrong and question == QUESTIONS[4]:
            return ModelOutput.for_tool_call("mockllm/model", "submit_answer",
                                             {"question_id": question, "answer": None})
        if wrong and question == QUESTIONS[1]:
            return ModelOutput.for_tool_call("mockllm/model", "submit_answer",
                                             {"question_id": question, "answer": [{"elevation": -999}]})
        if not results:
            return ModelOutput.for_tool_call("mockllm/model", "query", {"question_id": question,
                                                                         "sql": gold[question].sql})
        assert results[-1].error is None, results[-1].error
        rows = json.loads(results[-1].text)["rows"]
        return ModelOutput.for_tool_call("mockllm/model", "submit_answer", {"question_id": question, "answer": rows})
    return answer


def test_sql_agent_scores_the_submitted_gold_answers_correct_and_the_rest_incorrect(demo, gold,
                                                                                     tmp_path: Path) -> None:
    log = run("gsqa_refdb/sql_agent", demo, scripted(agent_reply(gold)), tmp_path / "logs")
    assert [sample.id for sample in log.samples] == QUESTIONS
    assert verdicts(log, "answer_judge") == {
        QUESTIONS[0]: ("C", "C", "ran"), QUESTIONS[1]: ("I", "I", "ran"), QUESTIONS[2]: ("C", "C", "ran"),
        QUESTIONS[3]: ("I", "I", "no_prediction"), QUESTIONS[4]: ("I", "I", "no_prediction")}
    assert metrics(log) == pytest.approx(EXPECTED_METRICS)
    tools = [[call.function for message in sample.messages if message.role == "assistant"
              for call in message.tool_calls or []] for sample in log.samples]
    assert tools == [["query", "submit_answer"], ["submit_answer"], ["query", "submit_answer"], [], ["submit_answer"]]
    refused = [message for message in log.samples[4].messages if isinstance(message, ChatMessageTool)]
    assert [message.error.message for message in refused] == [
        "Error executing tool submit_answer: refused: the answer is null (expected rows, a value or a list of values) "
        "[budget left: 19 calls, 600 s]"]

    _, _, scored = score_logs(demo, tmp_path, log.location)
    assert verdicts_by_run(scored) == {Path(log.location).stem: verdicts(log, "answer_judge")}
    results = {result["id"]: result for result in scored["results"]}
    assert results[QUESTIONS[0]]["detail"]["answer"] == gold[QUESTIONS[0]].answers
    assert results[QUESTIONS[1]]["detail"]["answer"] == [{"elevation": -999}]
    assert [results[question]["paper_reason"] for question in QUESTIONS[3:]] == [
        "no answer recorded by submit_answer"] * 2


def test_twenty_agents_at_once_share_the_model_role_s_eight_connections(demo, gold, tmp_path: Path) -> None:
    """Every sample starts at once; each agent's server holds a session of gsqa_model, whose connection limit
    is 8: the task holds at most `connections` of them, so no agent's query is refused for want of one."""
    everything = [f"{R1}/{n}" for n in range(20)]
    log = run("gsqa_refdb/sql_agent", demo, scripted(agent_reply(gold, wrong=False)), tmp_path / "logs",
              max_samples=20, task_args={"id": everything})
    assert verdicts(log, "answer_judge") == {question: ("C", "C", "ran") for question in everything}
    assert metrics(log)["accuracy"] == 1.0


def code_agent_reply(records: dict) -> Callable[[str, list], ModelOutput]:
    """The scripted code agent (testkit/code_agent.py): its program through run_python, then the rows it printed
    submitted; for question 1 a program that fails, then no tool call."""
    def answer(question: str, messages: list) -> ModelOutput:
        results = [message for message in messages if isinstance(message, ChatMessageTool)]
        if not results:
            program = "1 / 0" if question == QUESTIONS[1] else code_agent.program(records[question].question)
            return ModelOutput.for_tool_call("mockllm/model", "run_python", {"question_id": question,
                                                                              "code": program})
        ran = json.loads(results[-1].text)
        if ran["outcome"] != "ok":
            return ModelOutput.from_content("mockllm/model", "My program failed.")
        return ModelOutput.for_tool_call("mockllm/model", "submit_answer",
                                         {"question_id": question, "answer": json.loads(ran["stdout"])})
    return answer


@pytest.mark.docker
def test_code_agent_runs_its_programs_in_the_sandbox_and_its_answers_are_judged(
        demo, gold, demo_export: Path, image: str, tmp_path: Path) -> None:  # noqa: F811
    log = run("gsqa_refdb/code_agent", demo, scripted(code_agent_reply(gold)), tmp_path / "logs",
              task_args={"export": str(demo_export)})
    assert verdicts(log, "answer_judge") == {
        question: ("I", "I", "no_prediction") if question == QUESTIONS[1] else ("C", "C", "ran")
        for question in QUESTIONS}
    tools = [[call.function for message in sample.messages if message.role == "assistant"
              for call in message.tool_calls or []] for sample in log.samples]
    assert tools == [["run_python"] if question == QUESTIONS[1] else ["run_python", "submit_answer"]
                     for question in QUESTIONS]
    _, _, scored = score_logs(demo, tmp_path, log.location)
    assert verdicts_by_run(scored) == {Path(log.location).stem: verdicts(log, "answer_judge")}
