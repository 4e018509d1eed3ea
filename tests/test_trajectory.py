"""reproduce/predictions/trajectory.py: the episodes a trajectory file gives back, its unreadable lines, and the
line a kill cut short."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reproduce.predictions import trajectory

RUN = {"format": trajectory.FORMAT, "type": "run", "model": "m", "method": "agent"}


def call(question: str | None, tool: str, n: int, **more) -> dict:
    return {"type": "call", "question_id": question, "tool": tool, "arguments": more.pop("arguments", {}),
            "outcome": "ok", "call": n, "elapsed": n / 10, **more}


def write(path: Path, *lines: dict | str, tail: str = "") -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines) + tail)
    return path


def test_episodes_calls_answers_and_stops_come_back_in_order(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", RUN, call("q/a/0", "question", 1), call(None, "schema", 0),
                 call("q/a/0", "submit_answer", 2, arguments={"answer": [{"x": 1}]}),
                 {"type": "stop", "question_id": "q/a/0", "reason": "submitted", "why": "w"},
                 call("q/a/1", "query", 1, arguments={"sql": "SELECT 1"}), {**RUN, "pid": 2})
    found = trajectory.read(path)
    assert found.header == RUN and found.problems == []
    first, second = found.episodes["q/a/0"], found.episodes["q/a/1"]
    assert [line["tool"] for line in first.calls] == ["question", "submit_answer"]
    assert (first.stop, first.why, first.answer, first.where, first.elapsed) == (
        "submitted", "w", [{"x": 1}], f"{path}:4", 0.2)
    assert (second.stop, second.answer, second.where) == ("none", None, "")


def test_an_unreadable_line_is_a_problem_and_a_cut_last_line_is_left_out(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", RUN, "not json", {"type": "other"}, call("q/a/0", "question", 1),
                 tail='{"type": "call", "question_id": "q/a/0", "to')
    found = trajectory.read(path)
    expected = "not a trajectory line (expected a JSON object with a type of run, call or stop)"
    assert found.problems == [(f"{path}:2", expected), (f"{path}:3", expected)]
    assert len(found.episodes["q/a/0"].calls) == 1
    assert trajectory.read(write(tmp_path / "none.jsonl", call("q/a/0", "question", 1))).problems == [
        (str(tmp_path / "none.jsonl"), f"no run line (expected the first line of a {trajectory.FORMAT} file)")]


def test_the_writer_drops_a_cut_line_before_appending(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", RUN, tail='{"type": "ca')
    writer = trajectory.Writer(path)
    writer.write(call("q/a/0", "question", 1))
    writer.close()
    assert [json.loads(line)["type"] for line in path.read_text().splitlines()] == ["run", "call"]
    assert trajectory.is_trajectory(path.read_bytes())
    assert not trajectory.is_trajectory(b'{"id": "x", "sql": "SELECT 1"}')


def test_the_writer_writes_strict_json_whatever_an_agent_sent(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", RUN)
    writer = trajectory.Writer(path)
    writer.write(call("q/a/0", "submit_answer", 1, arguments={"answer": [{"x": float("nan"), "y": [float("-inf")]}]}))
    writer.close()

    def no_bare_constants(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    last = json.loads(path.read_text().splitlines()[-1], parse_constant=no_bare_constants)
    assert last["arguments"]["answer"] == [{"x": "nan", "y": ["-inf"]}]


def test_lines_are_made_with_their_members_in_the_order_the_files_have_them() -> None:
    written = ('{"type": "call", "question_id": "q/a/0", "tool": "query", "arguments": {"sql": "SELECT 1"}, '
               '"outcome": "rows", "rows": 1, "result_sha256": "ab", "seconds": 0.01, "call": 2, "elapsed": 0.5, '
               '"budget_left": {"calls": 18, "seconds": 599.5}, "at": "2026-01-01T00:00:00.000+00:00"}')
    members = {name: value for name, value in json.loads(written).items() if name != "type"}
    assert json.dumps(trajectory.line_of("call", **dict(reversed(members.items())))) == written
    assert trajectory.line_of("run", model="m", method="agent") == RUN
    assert trajectory.reported(json.loads(written)) == {
        "tool": "query", "arguments": {"sql": "SELECT 1"}, "outcome": "rows", "rows": 1, "seconds": 0.01, "call": 2,
        "budget_left": {"calls": 18, "seconds": 599.5}}
    with pytest.raises(ValueError, match="^a stop line has no member answer$"):
        trajectory.line_of("stop", question_id="q/a/0", answer=[])


def test_an_episode_s_view_and_its_charged_calls_come_from_the_file_alone(tmp_path: Path) -> None:
    refused = "refused: several statements in one [budget left: 18 calls, 599 s]"
    path = write(tmp_path / "t.jsonl", RUN,
                 call("q/a/0", "question", 1, result={"question": "Q?", "budget_left": {"calls": 19}}, seconds=0.5),
                 call("q/a/0", "query", 2, arguments={"sql": "SELECT 1; SELECT 2"}, outcome="refused",
                      result=refused, seconds=0.25),
                 call("q/a/0", "query", 3, arguments={"sql": "SELECT 1"}, outcome="error", charged=False,
                      result="the database cannot be reached now: gone", seconds=4.0))
    found = trajectory.read(path)
    episode = found.episodes["q/a/0"]
    assert (episode.charged, episode.free, episode.tool_seconds) == (2, 1, 0.75)
    assert trajectory.views(found) == {"q/a/0": [
        {"tool": "question", "arguments": {}, "sent": '{"question":"Q?","budget_left":{"calls":19}}',
         "is_error": False},
        {"tool": "query", "arguments": {"sql": "SELECT 1; SELECT 2"},
         "sent": f"Error executing tool query: {refused}", "is_error": True},
        {"tool": "query", "arguments": {"sql": "SELECT 1"},
         "sent": "Error executing tool query: the database cannot be reached now: gone", "is_error": True}]}
