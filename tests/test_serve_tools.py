"""reproduce/serve/tools.py against the demo database: the four tools as plain callables, the episodes' budgets,
the trajectory they write and a rerun on it, and `reproduce score` on that trajectory."""

from __future__ import annotations

import concurrent.futures
import json
import re
import threading
import time
from pathlib import Path

import psycopg
import pytest

from gsqa_core.errors import GsqaError
from reproduce import configs, dataset
from reproduce.predictions import trajectory
from reproduce.serve.pool import APPLICATION_NAME
from reproduce.serve.tools import ServeRequest, ToolRefused, open_tools
from testkit.cli import reproduce

R1 = "raster_only/elevation+poi"


@pytest.fixture(scope="module")
def records(demo: tuple[str, Path]) -> dict:
    loaded = dataset.load(demo[1], [configs.template("R1"), configs.template("V5")]).records
    return {record.id: record for record in loaded}


def request(demo: tuple[str, Path], path: Path | None, **options) -> ServeRequest:
    return ServeRequest(config="all", templates=options.pop("templates", ["R1", "V5"]), data=demo[1], dsn=demo[0],
                        trajectory=path, **options)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_agent_answering_with_the_gold_sql_scores_pass_on_every_question(demo, records, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, model="gold-agent", method="scripted")) as tools:
        assert sorted(tools.question_ids()) == sorted(records)
        for question in tools.question_ids():
            asked = tools.question(question)
            rows = tools.query(question, records[question].sql)["rows"]
            reply = tools.submit_answer(question, rows)
            assert asked["question"] == records[question].question
            assert reply == {"recorded": True, "question_id": question, "rows": len(rows)}
        assert tools.question_ids() == []
    scored = reproduce("score", path, "--config", "all", "--template", "R1", "--template", "V5", "--data", demo[1],
                       "--json-out", tmp_path / "scores.json", "--html", tmp_path / "scores.html")
    assert scored.returncode == 0, scored.stderr
    assert f"{len(records)} predictions from {path} (gold-agent, scripted)" in scored.stdout
    results = json.loads((tmp_path / "scores.json").read_text())["results"]
    assert {(result["id"], result["paper"], result["strict"]) for result in results} == {
        (question, "pass", "pass") for question in records}
    first = next(result for result in results if result["id"] == f"{R1}/0")
    assert [call["tool"] for call in first["detail"]["calls"]] == ["question", "query", "submit_answer"]
    assert first["detail"]["meta"] == {"calls": 3, "seconds": first["detail"]["meta"]["seconds"], "stop": "submitted"}
    assert "<summary>3 tool calls; stop: submitted</summary>" in (tmp_path / "scores.html").read_text()


def test_the_question_says_what_answer_it_expects_and_never_the_answer(demo, records) -> None:
    with open_tools(request(demo, None)) as tools:
        asked = tools.question(f"{R1}/3")
        names = tools.question("knn+name-0")  # the runner scheme names the same question
    assert asked["expects"] == {
        "components": [{"column": "elevation", "also_accepted": ["elevation_m"], "value": "metres",
                        "judged_by": "within 10 m of the answer"}],
        "format": 'a JSON list of rows such as [{"elevation": "<metres>"}]; a single value is taken as the first '
                  "column"}
    assert asked["budget_left"]["calls"] == 19
    assert names["question_id"] == "vector/knn+name/0"
    assert names["expects"]["components"][0]["rows"] == "one row per feature: every one named"
    gold = records[f"{R1}/3"]
    said = json.dumps(asked)
    assert gold.sql.strip()[:40] not in said
    assert all(str(value) not in said for row in gold.answers for value in row.values())


def test_a_query_gives_rows_as_json_with_geometries_as_wkt_and_the_first_max_rows(demo) -> None:
    with open_tools(request(demo, None, max_rows=3)) as tools:
        reply = tools.query(f"{R1}/0", "SELECT id, poi_name, NULL::text AS nothing, geometry FROM pois ORDER BY id")
        small = tools.query(f"{R1}/0", "SELECT 1 AS one")
    assert reply["row_count"] == 3 and reply["truncated"] is True
    assert reply["note"] == "only the first 3 rows (the cap per query); aggregate, or add ORDER BY and LIMIT"
    assert [sorted(row) for row in reply["rows"]] == [["geometry", "id", "nothing", "poi_name"]] * 3
    assert [row["nothing"] for row in reply["rows"]] == [None] * 3  # an agent sees the NULL it asked for
    assert all(row["geometry"].startswith("POINT (") for row in reply["rows"])
    assert small["rows"] == [{"one": 1}] and small["truncated"] is False and "note" not in small


def test_errors_are_one_line_with_the_budget_left_and_count_as_calls(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        with pytest.raises(ToolRefused) as error:
            tools.query(f"{R1}/0", "SELECT no_such_column FROM pois")
        with pytest.raises(ToolRefused) as refused:
            tools.query(f"{R1}/0", "SELECT 1; DELETE FROM pois")
        with pytest.raises(ToolRefused) as empty:
            tools.query(f"{R1}/0", "  ")
    said = 'column "no_such_column" does not exist (SQLSTATE 42703; at character 8: \'no_such_column FROM pois\')'
    assert str(error.value) == f'{said} [budget left: 19 calls, {str(error.value).rsplit(", ", 1)[1]}'
    assert str(refused.value).startswith("refused: several statements in one; only a query runs here")
    assert str(empty.value).startswith("refused: no SQL (expected one query as text) [budget left: 17 calls, ")
    calls = [line for line in lines(path) if line["type"] == "call"]
    assert [(call["outcome"], call.get("refused"), call["call"], call["budget_left"]["calls"]) for call in calls] == [
        ("error", None, 1, 19), ("refused", "several_statements", 2, 18), ("refused", "no_argument", 3, 17)]
    assert calls[0]["error"] == said  # the budget is a field of its own


def test_past_max_calls_the_question_is_over_and_the_others_go_on(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, max_calls=2)) as tools:
        tools.question(f"{R1}/0")
        tools.query(f"{R1}/0", "SELECT 1 AS one")
        for _ in range(5):  # calls on an episode that is over: refused, not charged, kept up to max_calls of them
            with pytest.raises(ToolRefused, match=r"^refused: raster_only/elevation\+poi/0: the episode's budget is "
                                                  r"spent \(all 2 calls used\); it is over \[budget left: 0 calls"):
                tools.submit_answer(f"{R1}/0", 1.0)
        assert tools.query(f"{R1}/1", "SELECT 1 AS one")["rows"] == [{"one": 1}]
        assert tools.stopped(f"{R1}/0") == "budget" and tools.stopped(f"{R1}/1") == ""
    written = lines(path)
    stop = next(line for line in written if line["type"] == "stop")
    assert stop == {"type": "stop", "question_id": f"{R1}/0", "reason": "budget", "why": "all 2 calls used",
                    "calls": 2, "elapsed": stop["elapsed"]}
    assert written.index(stop) == 3  # right after the call that spent the budget: run, question, query, stop
    assert [(line["call"], line.get("charged", True), line.get("refused")) for line in written
            if line["type"] == "call" and line["question_id"] == f"{R1}/0"] == [
        (1, True, None), (2, True, None), (3, False, "over_budget"), (4, False, "over_budget")]  # 5-7: no line
    assert trajectory.read(path).episodes[f"{R1}/0"].charged == 2


def test_max_seconds_bounds_the_statement_and_then_ends_the_episode(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, max_seconds=0.5)) as tools:
        with pytest.raises(ToolRefused, match="^cancelled by statement_timeout: canceling statement"):
            tools.query(f"{R1}/0", "SELECT pg_sleep(5)")
        with pytest.raises(ToolRefused, match=r"budget is spent \(0.5 s used\)"):
            tools.question(f"{R1}/0")
    calls = [line for line in lines(path) if line["type"] == "call"]
    assert calls[0]["outcome"] == "timeout"
    assert [line["reason"] for line in lines(path) if line["type"] == "stop"] == ["budget"]


def test_submit_answer_ends_the_episode_and_bad_answers_are_refused_without_ending_it(demo, records,
                                                                                       tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        with pytest.raises(ToolRefused, match=r"^refused: the answer is null \(expected rows, a value or a list of "
                                              r"values\)"):
            tools.submit_answer(f"{R1}/0", None)
        assert tools.submit_answer(f"{R1}/0", '[{"elevation": 12.5}]')["rows"] == 1  # JSON text is read as rows
        for call in (lambda: tools.question(f"{R1}/0"), lambda: tools.submit_answer(f"{R1}/0", 1)):
            with pytest.raises(ToolRefused, match="the answer was submitted; the episode is over"):
                call()
    submitted = trajectory.read(path).episodes[f"{R1}/0"]
    assert (submitted.stop, submitted.answer) == ("submitted", '[{"elevation": 12.5}]')
    assert [call.get("refused") for call in submitted.calls] == ["answer_unreadable", None, "over_submitted",
                                                                "over_submitted"]


def test_an_unknown_question_is_named_and_nothing_is_written(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        before = path.read_text()
        for unknown in ("raster_only/elevation+poi/999", "nonsense", 17):
            with pytest.raises(ToolRefused, match=f"^unknown question id {re.escape(repr(unknown))}"):
                tools.query(unknown, "SELECT 1")
        assert path.read_text() == before
        assert tools.query(f"{R1}/0", "SELECT 1 AS one")["row_count"] == 1


def test_a_rerun_on_the_trajectory_continues_its_episodes(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, model="m", max_calls=5)) as tools:
        tools.submit_answer(f"{R1}/0", 1.0)
        tools.question(f"{R1}/1")
        tools.query(f"{R1}/1", "SELECT 1 AS one")
    with path.open("a") as handle:
        handle.write('{"type": "call", "question_id": "raster_only/elevation+poi/1", "tool": "que')  # a kill's cut
    with open_tools(request(demo, path, model="m", max_calls=5)) as tools:
        assert f"{R1}/0" not in tools.question_ids() and f"{R1}/1" in tools.question_ids()
        with pytest.raises(ToolRefused, match="the answer was submitted"):
            tools.question(f"{R1}/0")
        assert tools.question(f"{R1}/1")["budget_left"]["calls"] == 2  # 5 - the 2 before - this one
    assert all(isinstance(line, dict) for line in lines(path))  # the cut line was dropped, not glued to
    assert [line["type"] for line in lines(path)].count("run") == 2
    with pytest.raises(GsqaError, match=r"holds a run with another model, budget \(model: 'm' now 'other'; budget: "):
        open_tools(request(demo, path, model="other"))


def test_an_unknown_id_in_the_selection_starts_nothing(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with pytest.raises(GsqaError, match=r"^unknown question id 'raster_only/elevation\+poi/99'"):
        open_tools(request(demo, path, ids=[f"{R1}/99"]))
    assert not path.exists()


def test_score_counts_an_episode_without_an_answer_as_no_prediction_saying_how_it_stopped(demo, tmp_path: Path
                                                                                          ) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, templates=["R1"], max_calls=1)) as tools:
        tools.question(f"{R1}/0")
        tools.question(f"{R1}/1")
        tools.submit_answer(f"{R1}/2", 0.0)
    scored = reproduce("score", path, "--config", "raster_only", "--data", demo[1], "--json-out",
                       tmp_path / "scores.json")
    assert scored.returncode == 0, scored.stderr
    results = {result["id"]: result for result in json.loads((tmp_path / "scores.json").read_text())["results"]}
    assert results[f"{R1}/0"]["outcome"] == "no_prediction"
    assert results[f"{R1}/0"]["paper_reason"] == ("the agent submitted no answer: its episode stopped: budget "
                                                  "(all 1 calls used)")
    assert results[f"{R1}/2"]["outcome"] == "ran"
    assert results[f"{R1}/3"]["paper_reason"] == "the run has no prediction"


def test_a_database_that_cannot_be_reached_is_one_line_and_the_next_call_goes_on(demo, tmp_path: Path) -> None:
    """The model role's connection ended and its login refused for a moment: the call says so in one line
    (written to the trajectory), and once the login works again the next call reconnects."""
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, connections=1)) as tools:
        tools.query(f"{R1}/0", "SELECT 1 AS one")
        with psycopg.connect(demo[0], autocommit=True) as admin:
            admin.execute("ALTER ROLE gsqa_model NOLOGIN")
            try:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                              [APPLICATION_NAME])
                with pytest.raises(ToolRefused, match="^the database cannot be reached now: the sandbox role cannot "
                                                      "connect: .*not permitted to log in"):
                    tools.query(f"{R1}/0", "SELECT 2 AS two")
            finally:
                admin.execute("ALTER ROLE gsqa_model LOGIN")
        assert tools.query(f"{R1}/0", "SELECT 3 AS three")["rows"] == [{"three": 3}]
    # The server's own failure is not charged: the agent keeps the call.
    assert [(line["outcome"], line.get("charged", True), line["budget_left"]["calls"])
            for line in lines(path) if line["type"] == "call"] == [("rows", True, 19), ("error", False, 19),
                                                                     ("rows", True, 18)]


def test_oversized_sql_and_answers_are_refused_and_not_kept(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        with pytest.raises(ToolRefused, match=r"^refused: the SQL is 100,001 characters; at most 100,000"):
            tools.query(f"{R1}/0", "S" * 100_001)
        with pytest.raises(ToolRefused, match=r"^refused: the answer is 10,000,00\d characters as JSON; at most "):
            tools.submit_answer(f"{R1}/0", "x" * 10_000_000)
        assert tools.stopped(f"{R1}/0") == ""  # refused, not submitted
    calls = [line for line in lines(path) if line["type"] == "call"]
    assert [call["arguments"] for call in calls] == [{"sql": "(not kept: 100,001 characters)"},
                                                     {"answer": "(not kept: 10,000,002 characters)"}]
    assert path.stat().st_size < 10_000


def test_answers_sent_at_once_to_one_question_one_is_recorded(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, max_calls=5)) as tools:
        start = threading.Barrier(8)

        def submit(value: float) -> str:
            start.wait()
            try:
                return "recorded" if tools.submit_answer(f"{R1}/0", value)["recorded"] else "?"
            except ToolRefused as refused:
                return str(refused).split(": ", 2)[-1].split(" [")[0]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            replies = list(pool.map(submit, [float(n) for n in range(8)]))
    assert replies.count("recorded") == 1, replies
    written = lines(path)
    assert [line["reason"] for line in written if line["type"] == "stop"] == ["submitted"]
    assert sum(line["type"] == "call" and line["outcome"] == "ok" for line in written) == 1
    # the one recorded and 5 of the 7 refused after it: past --max-calls calls not charged have no line
    assert sorted(line["call"] for line in written if line["type"] == "call") == list(range(1, 7))


def test_a_submission_whose_stop_line_a_kill_lost_stays_submitted(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        tools.submit_answer(f"{R1}/0", 1.0)
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:-1]))  # the stop line lost
    with open_tools(request(demo, path)) as tools:
        with pytest.raises(ToolRefused, match="the answer was submitted"):
            tools.submit_answer(f"{R1}/0", 2.0)


def test_one_server_per_trajectory_file(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)), pytest.raises(GsqaError, match=r"another server writes it now"):
        open_tools(request(demo, path))


def test_anything_a_call_raises_is_one_line_and_kept(demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The safety net under the tools: an unexpected failure is still one line for the agent and a line in the
    trajectory (the call was charged)."""
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        arc = tools.query(f"{R1}/0", "SELECT 'CIRCULARSTRING(0 0, 1 1, 1 0)'::geometry AS arc")["rows"][0]["arc"]
        assert arc.startswith("0108000000")  # a curve GEOS cannot write as WKT: its hex EWKB
        monkeypatch.setattr("reproduce.serve.tools.answer_rows", lambda *args: 1 / 0)
        with pytest.raises(ToolRefused, match=r"^the call failed: ZeroDivisionError: division by zero \[budget left"):
            tools.submit_answer(f"{R1}/0", 1.0)
    failed = lines(path)[-1]
    assert (failed["tool"], failed["outcome"], failed["call"]) == ("submit_answer", "error", 2)


def test_the_html_page_words_a_refused_call_once(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        with pytest.raises(ToolRefused):
            tools.query(f"{R1}/0", "SELECT 1; SELECT 2")
        tools.submit_answer(f"{R1}/0", 1.0)
    scored = reproduce("score", path, "--config", "raster_only", "--template", "R1", "--data", demo[1],
                       "--html", tmp_path / "scores.html")
    assert scored.returncode == 0, scored.stderr  # a wrong answer is a score, not a failure to score
    page = (tmp_path / "scores.html").read_text()
    assert "<b>query</b> refused: several statements in one; only a query runs here" in page
    assert "refused: refused:" not in page


@pytest.mark.parametrize(("answer", "why"), [
    ("I could not find it", 'the answer\'s elevation is "I could not find it", not a finite number'),
    ({"foo": 12.5}, "the answer has no column elevation or elevation_m; its columns: foo"),
    ([{"height_ft": 800}], "the answer has no column elevation or elevation_m; its columns: height_ft"),
    ([{1: 2}], "the answer has no column elevation or elevation_m; its columns: 1"),  # a Python caller's key
    ([{"elevation": 12.5}, {"elevation": True}], "row 2's elevation is true, not a finite number"),
    # what reads as a number but is none the judge can compare: each named, as the value was given
    *((value, f"the answer's elevation is {shown}, not a finite number") for value, shown in (
        ("Infinity", '"Infinity"'), ("-Infinity", '"-Infinity"'), ("NaN", '"NaN"'), ("1e999", '"1e999"'),
        ('[{"elevation": 1e999}]', "Infinity"), ('[{"elevation": NaN}]', "NaN"))),
])
def test_an_answer_that_does_not_fit_the_question_is_refused_charged_and_the_episode_stays_open(
        demo, tmp_path: Path, answer, why: str) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools:
        with pytest.raises(ToolRefused) as refused:
            tools.submit_answer(f"{R1}/0", answer)
        assert tools.stopped(f"{R1}/0") == ""
        assert tools.submit_answer(f"{R1}/0", [{"elevation_m": "12.5"}])["recorded"] is True  # a number as text too
    line, tail = str(refused.value).split(" [budget left: ")
    assert line == (f"refused: the answer does not fit the question: {why}; expected a JSON list of rows such as "
                    '[{"elevation": "<metres>"}]; a single value is taken as the first column')
    assert tail.startswith("19 calls, ")
    calls = [line for line in lines(path) if line["type"] == "call"]
    assert [(call["outcome"], call.get("refused"), call["call"], "charged" in call) for call in calls] == [
        ("refused", "answer_shape", 1, False), ("ok", None, 2, False)]


NOT_A_NAME = "not a name (text with a letter or digit, at most 255 characters)"


@pytest.mark.parametrize(("answer", "shown"), [
    ([{"poi_name": "  "}, {"poi_name": None}], '"  "'),
    ("[" * 5000, f'"{"[" * 79}…'),  # no JSON: a text (the first component's, name), and no name
    ([{"poi_name": "(-)"}], '"(-)"'),
    ([{"poi_name": "A" * 256}], f'"{"A" * 79}…'),  # the value's JSON is cut at 80 characters
])
def test_a_name_has_a_letter_or_digit_and_is_not_longer_than_openstreetmap_s_names(demo, answer, shown) -> None:
    with open_tools(request(demo, None)) as tools, pytest.raises(ToolRefused) as refused:
        tools.submit_answer("vector/knn+name/0", answer)
    where = "row 1's poi_name" if len(answer) == 2 else "the answer's poi_name" if isinstance(answer, list) else (
        "the answer's name")
    assert str(refused.value).split(" [budget left: ")[0] == (
        f"refused: the answer does not fit the question: {where} is {shown}, {NOT_A_NAME}; expected a "
        'JSON list of rows such as [{"name": "<a name (text)>"}]; a single value is taken as the first column')


def test_a_set_of_names_needs_a_name_under_a_name_column_in_one_row_at_least(demo, tmp_path: Path) -> None:
    question = "vector/knn+name/0"
    with open_tools(request(demo, None)) as tools:
        with pytest.raises(ToolRefused, match=r'^refused: the answer does not fit the question: row 1\'s poi_name is '
                                              r'"  ", not a name \(text with a letter or digit, at most 255 '
                                              r'characters\); expected a JSON list of rows such as '):
            tools.submit_answer(question, [{"poi_name": "  "}, {"poi_name": None}])
        assert tools.submit_answer("vector/knn+name/2", [{"poi_name": "A" * 255}])["rows"] == 1  # the longest
        assert tools.submit_answer(question, [{"poi_name": None}, {"poi_name": "A"}])["rows"] == 2  # judged as a bag
        assert tools.submit_answer("vector/knn+name/1", ["Demo Museum 85"])["rows"] == 1  # a bare value: the name


@pytest.mark.parametrize(("usage", "kept", "ignored"), [
    ({"input_tokens": 5, "output_tokens": 0, "cost": 0.5}, {"input_tokens": 5, "output_tokens": 0, "cost": 0.5}, ""),
    ({"cost": 1}, {"cost": 1}, ""),
    ({}, None, ""),
    ([1, 2], None, "_meta.usage is not an object"),
    ({"input_tokens": 1.5}, None, "_meta.usage.input_tokens is 1.5"),
    ({"output_tokens": True}, None, "_meta.usage.output_tokens is True"),
    ({"cost": float("nan")}, None, "_meta.usage.cost is nan"),
    ({"cost": -1}, None, "_meta.usage.cost is -1"),
    ({"tokens": 3, "cost": 1}, None, "_meta.usage has 'tokens'"),
])
def test_a_usage_is_kept_only_as_numbers_and_else_ignored_saying_why(usage, kept, ignored: str) -> None:
    from reproduce.serve.callers import usage_of
    found, why = usage_of(usage)
    assert found == kept
    assert why == (f'{ignored} (expected {{"input_tokens": an integer >= 0, "output_tokens": an integer >= 0, '
                   '"cost": a number >= 0})' if ignored else "")


def test_max_tool_seconds_counts_the_calls_time_in_the_server_and_schema_is_free(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path, max_tool_seconds=0.5)) as tools:
        assert "20 calls and 600 s from its first call (0.5 s of them in the tools); each" in tools.instructions()
        tools.schema()
        asked = tools.question(f"{R1}/0")
        assert asked["budget_left"]["calls"] == 19 and 0 < asked["budget_left"]["tool_seconds"] <= 0.5
        with pytest.raises(ToolRefused, match="^cancelled by statement_timeout: canceling statement"):
            tools.query(f"{R1}/0", "SELECT pg_sleep(5)")  # the statement's timeout: the tool time left
        with pytest.raises(ToolRefused, match=r"budget is spent \(0.5 tool s used\)"):
            tools.question(f"{R1}/0")
    written = lines(path)
    assert written[0]["budget"] == {"calls": 20, "seconds": 600, "rows": 100, "timeout": 120, "tool_seconds": 0.5}
    schema = written[1]
    assert (schema["tool"], schema["question_id"], "call" in schema, "budget_left" in schema) == (
        "schema", None, False, False)
    assert schema["result"].startswith("PostgreSQL ")
    assert [line["reason"] for line in written if line["type"] == "stop"] == ["budget"]


class _Held:
    def close(self) -> None:
        pass


def test_no_client_holds_more_than_its_share_of_the_pool_while_another_waits() -> None:
    """Client a holds both connections and waits for a third; b asks too: the one a gives back goes to b."""
    from reproduce.serve.pool import Pool

    pool = Pool(_Held, size=2)
    got: dict[str, threading.Event] = {name: threading.Event() for name in ("a1", "a2", "a3", "b")}
    release = {name: threading.Event() for name in got}

    def hold(name: str) -> None:
        with pool.connection(wait=60, owner=name[0]) as connection:
            assert connection is not None
            got[name].set()
            release[name].wait(60)

    threads = {name: threading.Thread(target=hold, args=[name]) for name in got}
    for name in ("a1", "a2"):
        threads[name].start()
        assert got[name].wait(60)
    threads["a3"].start()
    threads["b"].start()
    deadline = time.monotonic() + 60
    while set(pool._waiting) != {"a", "b"}:  # both asked (a3 and b wait)
        assert time.monotonic() < deadline
        time.sleep(0.01)
    release["a1"].set()
    assert got["b"].wait(60)  # b's, not a's third: a held its share (one of two) once b asked
    assert not got["a3"].is_set()
    release["b"].set()
    assert got["a3"].wait(60)
    for name in ("a2", "a3"):
        release[name].set()
    for thread in threads.values():
        thread.join(60)
    pool.close()


def test_values_come_back_in_their_documented_forms(demo) -> None:
    sql = ("SELECT 1.5::numeric AS n, 12345678901234567890.123456789::numeric AS big, 'NaN'::numeric AS nan, "
           "'-Infinity'::float8 AS inf, '1 year 2 mons 3 days 04:05:06'::interval AS i, '2024-01-02'::date AS d, "
           "'infinity'::date AS forever, '2024-01-02 03:04:05'::timestamp AS ts, int4range(1, 10) AS r, "
           "ARRAY['2024-01-02'::date] AS dates, '{\"a\": [1, 2.5]}'::jsonb AS j, NULL::int AS nothing, "
           "7::bigint AS b, 'POINT(1 2)'::geometry AS g")
    with open_tools(request(demo, None)) as tools:
        row = tools.query(f"{R1}/0", sql)["rows"][0]
    assert row == {"n": 1.5, "big": "12345678901234567890.123456789", "nan": "NaN", "inf": "-Infinity",
                   "i": "1 year 2 mons 3 days 04:05:06", "d": "2024-01-02", "forever": "infinity",
                   "ts": "2024-01-02 03:04:05", "r": "[1,10)", "dates": ["2024-01-02"], "j": {"a": [1, 2.5]},
                   "nothing": None, "b": 7, "g": "POINT (1 2)"}


def test_numbers_and_json_past_what_json_readers_hold_come_back_as_text(demo) -> None:
    """An integer past 2**53 (JavaScript's exact range), a numeric of 5,000 digits (past Python's int-to-text
    limit) and JSON nested 3,000 deep (past Python's parser) each come back in a reply, not as a failed call."""
    sql = ("SELECT 9007199254740993::numeric AS past, 9007199254740992::bigint AS at, "
           "repeat('9', 5000)::numeric AS huge, (repeat('[', 3000) || repeat(']', 3000))::jsonb AS deep")
    with open_tools(request(demo, None)) as tools:
        row = tools.query(f"{R1}/0", sql)["rows"][0]
    assert row == {"past": "9007199254740993", "at": 9007199254740992,
                   "huge": "9" * 2000 + "… (cut: 5,000 characters in all; substr() gives a part)",
                   "deep": "[" * 2000 + "… (cut: 6,000 characters in all; substr() gives a part)"}


def test_long_arrays_json_texts_and_geometries_are_cut_with_a_marker_saying_how_to_get_less(demo) -> None:
    sql = ("SELECT array_agg(g) AS a, (SELECT jsonb_object_agg('k' || g, g) FROM generate_series(1, 150) g) AS o, "
           "repeat('x', 3000) AS t, ST_Buffer('POINT(0 0)'::geometry, 1, 500) AS p "
           "FROM generate_series(1, 2000000) g")
    with open_tools(request(demo, None, timeout=60)) as tools:
        row = tools.query(f"{R1}/0", sql)["rows"][0]
    assert row["a"] == [*range(1, 101), "… (cut: 2,000,000 items in all, the first 100 kept; slice it "
                                        "(arr[101:200], jsonb_path_query_array) or unnest and aggregate)"]
    assert len(row["o"]) == 101 and row["o"]["…"] == ("(cut: 150 members in all, the first 100 kept; select the "
                                                       "members you need (value->'key'))")
    assert row["t"] == "x" * 2000 + "… (cut: 3,000 characters in all; substr() gives a part)"
    assert row["p"].startswith("POLYGON ((") and row["p"].endswith(
        " characters in all; ST_AsText(ST_Simplify(geom, tolerance)), ST_Centroid or ST_NPoints give less)")


def test_the_server_s_error_comes_with_its_sqlstate_position_and_hint_and_a_nul_is_refused(demo) -> None:
    with open_tools(request(demo, None)) as tools:
        with pytest.raises(ToolRefused) as hinted:
            tools.query(f"{R1}/0", "  -- a comment\n SELECT poi_nam FROM pois")
        with pytest.raises(ToolRefused) as nul:
            tools.query(f"{R1}/0", "SELECT 7 AS x\0; SELECT 8")
    assert str(hinted.value).split(" [budget")[0] == (
        'column "poi_nam" does not exist (SQLSTATE 42703; at character 24: \'poi_nam FROM pois\'; hint: Perhaps '
        'you meant to reference the column "pois.poi_name".)')
    assert str(nul.value).split(" [budget")[0] == (
        "refused: the SQL holds a NUL character, where the server would stop reading it; only a query runs here "
        "(SELECT, WITH, VALUES, TABLE)")


def test_an_agents_sessions_take_one_share_of_the_pool_and_other_clients_one_each() -> None:
    """The pool's owner of a call (tools.pool_owner): its agent of several of --tokens whichever its session,
    else its client (the one agent of a server, its token printed at start, is all its clients)."""
    from types import SimpleNamespace

    from reproduce.serve.calls import Caller
    from reproduce.serve.tools import pool_owner

    def owner(question: str, client: dict | None, agents: int = 2) -> object:
        return pool_owner(SimpleNamespace(caller=Caller(client=client), question=question), agents)

    alice = [{"id": session, "transport": "http", "agent": "alice"} for session in ("s1", "s2")]
    plain = [{"id": session, "transport": "http"} for session in ("s3", "s4")]
    assert owner("q1", alice[0]) == owner("q2", alice[1]) == "alice"
    assert owner("q1", alice[0], agents=1) != owner("q1", alice[1], agents=1)
    assert owner("q1", plain[0]) != owner("q1", plain[1])
    assert owner("q1", None) == "q1"  # a plain Python caller: the question's own


@pytest.mark.filterwarnings("error::RuntimeWarning")  # numpy's overflow warning: noise on serve's stderr
@pytest.mark.parametrize("location", ["POINT (inf inf)", "POINT (1e999 1e999)", "LINESTRING (0 0, nan nan)",
                                      "POINT EMPTY", "not WKT"])
def test_a_location_is_a_geometry_with_a_point_the_judge_can_measure_and_score_never_fails_on_one(
        demo, tmp_path: Path, location: str) -> None:
    """A location without a finite point was accepted and then failed `reproduce score` (math domain error):
    serve refuses it; a predictions file that holds one is scored wrong, not a traceback."""
    data = Path(__file__).parent / "data" / "benchmark"  # the demo data has no location question
    with open_tools(ServeRequest(config="all", templates=["V13"], data=data, dsn=demo[0])) as tools, \
            pytest.raises(ToolRefused) as refused:
        question = tools.question_ids()[0]
        tools.submit_answer(question, [{"geometry": location}])
    assert "not a geometry as WKT (not empty, finite coordinates)" in str(refused.value)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text(json.dumps({"id": question, "answer": [{"geometry": location}]}) + "\n")
    scored = reproduce("score", predictions, "--config", "all", "--template", "V13", "--data", data,
                       "--json-out", tmp_path / "scores.json")
    assert scored.returncode == 0 and "Warning" not in scored.stderr, scored.stderr
    [result] = [found for found in json.loads((tmp_path / "scores.json").read_text())["results"]
                if found["id"] == question]
    assert result["paper"] == "fail"


def test_a_client_s_name_and_version_are_cut_on_its_lines() -> None:
    """They are on every call's line: a client's 2,000,000-character name would fill the trajectory."""
    from types import SimpleNamespace

    from reproduce.serve.callers import MAX_GIVEN, _given

    given = _given(SimpleNamespace(name="n" * 2_000_000, version="1.0"))
    assert given == {"name": "n" * MAX_GIVEN + "…(cut)", "version": "1.0"}


def deeply_nested(depth: int) -> list:
    nested: list = []
    for _ in range(depth):
        nested = [nested]
    return nested


@pytest.mark.parametrize("answer", [deeply_nested(100_000), [{"elevation": 10 ** 5000}]])
def test_an_answer_json_cannot_write_is_refused_as_unreadable_not_as_too_long(demo, tmp_path: Path, answer) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, path)) as tools, pytest.raises(ToolRefused) as refused:
        tools.submit_answer(f"{R1}/0", answer)
    assert str(refused.value).split(" [budget left: ")[0] == (
        "refused: an answer nested too deep or with an integer too long to write as JSON")
    [call] = [line for line in lines(path) if line["type"] == "call"]
    assert (call["refused"], call["arguments"]) == (
        "answer_unreadable", {"answer": "(not kept: an answer nested too deep or with an integer too long to write "
                                        "as JSON)"})
