"""Predictions in every layout `reproduce score` reads, the three id schemes, and every kind of bad line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gsqa_core.errors import GsqaError
from reproduce.configs import question_id
from reproduce.predictions.layouts import answer_rows, read_run, sql_blocks

R1 = "raster_only/elevation+poi"
SELECTED = {f"{R1}/{n}" for n in range(20)} | {f"vector/intersects:area_total+area/{n}" for n in range(100)} \
    | {f"vector/knn+loc/{n}" for n in range(100)} | {f"vector/knn+angle/{n}" for n in range(100)} \
    | {"raster_only/aspect+poi/0"}


@pytest.mark.parametrize("raw, expected", [
    (2100, "vector/intersects:area_total+area/0"), ("2199", "vector/intersects:area_total+area/99"),
    (0, "vector/range:direction+loc/0"), ("aspect+poi-0", "raster_only/aspect+poi/0"),
    ("raster_only:aspect+poi:7", "raster_only/aspect+poi/7"), ("extended/range+loc+elevation_condition/19",
                                                               "extended/range+loc+elevation_condition/19"),
    ("vector:range:direction+name:3", "vector/range:direction+name/3"),
])
def test_the_three_id_schemes_map_to_one(raw: object, expected: str) -> None:
    assert str(question_id(raw)) == expected


@pytest.mark.parametrize("raw, expected", [
    ("elevation+poi-60", "raster_only/elevation+poi/0"), ("elevation+poi-79", "raster_only/elevation+poi/19"),
    ("elevation_threshold+poi-200", "raster_only/elevation_threshold+poi/0"),
    ("elevation_threshold+poi-219", "raster_only/elevation_threshold+poi/19"),
    ("slope+route-360", "raster_only/slope+route/0"),  # the last of raster_only's 19 files
    ("range+name+elevation_condition-140", "extended/range+name+elevation_condition/0"),
    ("elevation_average+name-0", "raster_vector/elevation_average+name/0"),
    ("slope_steepest_n_poi+name-139", "raster_vector/slope_steepest_n_poi+name/19"),
])
def test_the_chess_runners_numbering_across_the_group_folder(raw: str, expected: str) -> None:
    """CHESS-PostGIS numbers a group's questions across the folder's template files in alphabetical order,
    exploratory ones included; the text-to-SQL runner's numbers (below 20) still mean the template's own."""
    assert str(question_id(raw)) == expected
    assert str(question_id(raw.rsplit("-", 1)[0] + "-7")).endswith("/7")


@pytest.mark.parametrize("raw", [2800, "aspect+poi-20", "raster_only/aspect+poi/x", "nothing", True,
                                 "vector/elevation+poi/0", "elevation+poi-59", "elevation+poi-80", "slope+route-380",
                                 pytest.param("9" * 5000, id="5000 digits"), pytest.param(10**5000, id="a huge int"),
                                 pytest.param("elevation+poi-" + "9" * 5000, id="a stem and 5000 digits")])
def test_ids_that_name_no_question(raw: object) -> None:
    with pytest.raises(GsqaError):
        question_id(raw)


def write_lines(path: Path, *lines: object) -> Path:
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines)
                     + b"\n")
    return path


def test_json_lines_sql_and_answers(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "run.jsonl",
                       {"id": f"{R1}/0", "sql": "SELECT 1 AS elevation", "model": "m1", "method": "text2sql",
                        "seconds": 1.5, "tokens": 120},
                       {"id": "elevation+poi-1", "answer": 286.0},
                       {"id": f"{R1}/2", "answer": [{"elevation": 3}]},
                       {"id": 2100, "answer": {"area": 12.5}},
                       {"id": "outside/of/it", "sql": "SELECT 1"})
    run = read_run(path, "run", SELECTED - {f"{R1}/2"})
    assert (run.model, run.method, run.outside) == ("m1", "text2sql", 1)
    assert run.predictions[f"{R1}/0"].statements == ("SELECT 1 AS elevation",)
    assert run.predictions[f"{R1}/0"].meta == {"model": "m1", "method": "text2sql", "seconds": 1.5, "tokens": 120}
    assert run.predictions[f"{R1}/1"].answer == [{"elevation": 286.0}]
    assert run.predictions["vector/intersects:area_total+area/0"].answer == [{"area": 12.5}]
    assert [str(problem) for problem in run.problems] == [f"{path}:5: unknown question id 'outside/of/it': it "
                                                          "names no benchmark question; not scored"]


def test_a_run_s_tokens_and_cost_are_its_selected_lines_summed(tmp_path: Path) -> None:
    """By kind where a line gives them by kind, a bare number as the total; a line outside the selection, or
    without usage, adds nothing."""
    path = write_lines(tmp_path / "run.jsonl",
                       {"id": f"{R1}/0", "sql": "SELECT 1", "tokens": {"input": 100, "output": 20}, "cost": 0.25},
                       {"id": f"{R1}/1", "answer": 1, "tokens": 50, "cost": 0.5},
                       {"id": f"{R1}/2", "answer": 2, "tokens": {"input": 7, "total": "many"}},
                       {"id": f"{R1}/3", "answer": 3, "tokens": True, "cost": "free"},
                       {"id": f"{R1}/4", "answer": 4, "tokens": 1000, "cost": 9.0})
    run = read_run(path, "run", SELECTED - {f"{R1}/4"})
    assert (run.tokens, run.cost) == ({"input": 107, "output": 20, "total": 50}, 0.75)
    assert run.predictions[f"{R1}/0"].meta == {"tokens": {"input": 100, "output": 20}, "cost": 0.25}
    plain = read_run(write_lines(tmp_path / "none.jsonl", {"id": f"{R1}/0", "answer": 1}), "n", SELECTED)
    assert (plain.tokens, plain.cost) == ({}, None)


def test_every_bad_line_is_one_problem_naming_file_and_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "bad.jsonl",
                       b"{not json", b'{"id": "raster_only/elevation+poi/0", "sql": "SELECT \xff"}',
                       {"id": f"{R1}/1", "sql": "SELECT 1", "answer": 1}, {"id": f"{R1}/2"},
                       {"sql": "SELECT 1"}, [1, 2],
                       {"id": f"{R1}/3", "sql": "SELECT 1"}, {"id": f"{R1}/3", "sql": "SELECT 2"},
                       {"id": f"{R1}/4", "answer": None}, {"id": f"{R1}/5", "sql": "SELECT 5"})
    run = read_run(path, "bad", SELECTED)
    assert [str(problem).replace(str(path), "F") for problem in run.problems] == [
        "F:1: not JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        "F:2: not UTF-8 (byte 54 of the line)",
        f"F:3: {R1}/1 has both 'sql' and 'answer' (expected one)",
        'F:5: not a prediction (expected {"id": ..., "sql": ...} or {"id": ..., "answer": ...})',
        'F:6: not a prediction (expected {"id": ..., "sql": ...} or {"id": ..., "answer": ...})',
        f"F:9: {R1}/4: the answer is null (expected rows, a value or a list of values)",
    ]
    assert {problem.id for problem in run.problems} == {"", f"{R1}/1", f"{R1}/4"}
    assert [str(warning).replace(str(path), "F") for warning in run.warnings] == [
        f"F:4: {R1}/2: neither 'sql' nor 'answer': not a prediction, read past",
        f"F:8: {R1}/3 is predicted again (also at F:7): the last prediction is scored"]
    assert list(run.predictions) == [f"{R1}/3", f"{R1}/5"]
    assert run.predictions[f"{R1}/3"].statements == ("SELECT 2",)


def test_a_line_without_a_prediction_leaves_the_good_line_before_it(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "run.jsonl", {"id": f"{R1}/0", "sql": "```sql\nSELECT 1 AS elevation\n```"},
                       {"id": f"{R1}/0", "seconds": 3.5})
    run = read_run(path, "run", SELECTED)
    assert run.predictions[f"{R1}/0"].statements == ("SELECT 1 AS elevation",)  # the fence unwrapped
    assert run.problems == [] and len(run.warnings) == 1


def test_a_run_folder_lists_the_files_that_are_not_predictions_once(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    write_lines(folder / "predictions.jsonl", {"id": f"{R1}/0", "answer": 286})
    (folder / "config.json").write_text(json.dumps({"model": "m", "temperature": 0}))
    (folder / "run.log").write_text("started\n")
    run = read_run(folder, "run", SELECTED)
    assert list(run.predictions) == [f"{R1}/0"] and run.problems == [] and run.warnings == []
    assert sorted((Path(skip.where).name, skip.why) for skip in run.skipped) == [
        ("config.json", "not predictions (no line or entry names a question id)"),
        ("run.log", "not predictions (the run's folder holds it beside them)")]


def test_empty_file_and_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    assert [p.why for p in read_run(tmp_path / "empty.jsonl", "e", SELECTED).problems] == [
        "an empty file (expected one prediction per line)"]
    (tmp_path / "nothing").mkdir()
    (tmp_path / "nothing" / "notes.txt").write_text("hello")
    assert [p.why for p in read_run(tmp_path / "nothing", "n", SELECTED).problems] == [
        "a folder with no predictions (*.jsonl, or the GS-QA2 runs' *.json)"]
    with pytest.raises(GsqaError, match="no such file or folder"):
        read_run(tmp_path / "missing.jsonl", "m", SELECTED)


def test_raster_runner_files(tmp_path: Path) -> None:
    """The GS-QA2 raster text-to-SQL runner: cache/<provider>_<query_type>/<stem>/<stem>-<n>.json."""
    folder = tmp_path / "gpt4o_raster_only" / "elevation+poi"
    folder.mkdir(parents=True)
    base = {"source_stem": "elevation+poi", "answer_type": "elevation", "gold_answers": [], "gold_sql": "SELECT 0",
            "predicted_exec": {"output": [], "error": ""}, "usage": {"total_tokens": 99}}
    (folder / "elevation+poi-0.json").write_text(json.dumps({**base, "id": "elevation+poi-0",
                                                             "predicted_sql_candidates": ["SELEC 1", "SELECT 2"],
                                                             "predicted_sql": "SELEC 1"}))
    (folder / "elevation+poi-1.json").write_text(json.dumps({**base, "id": "elevation+poi-1", "predicted_sql": "",
                                                             "model_output": "```sql\nSELECT 3\n```"}))
    (folder / "elevation+poi-2.json").write_text(json.dumps({**base, "id": "elevation+poi-2", "predicted_sql": None,
                                                             "generation_error": "timeout"}))
    (folder.parent / "summary.json").write_text("{}")
    run = read_run(tmp_path / "gpt4o_raster_only", "r", SELECTED)
    assert (run.model, run.method, run.problems) == ("gpt4o", "text2sql", [])
    assert {key: p.statements for key, p in run.predictions.items()} == {
        f"{R1}/0": ("SELEC 1", "SELECT 2"), f"{R1}/1": ("SELECT 3",), f"{R1}/2": ()}
    assert run.predictions[f"{R1}/2"].meta == {"usage": {"total_tokens": 99}, "generation_error": "timeout"}


def test_vector_arrays_sql_generate_and_json_parse(tmp_path: Path) -> None:
    """The GS-QA vector runs: one JSON array per step under cache/<model>/."""
    folder = tmp_path / "sonnet4.6"
    folder.mkdir()
    text = "<think>first a wrong one</think>```sql\nSELECT broken\n``` then ```SQL\nSELECT area FROM x\n```"
    (folder / "sql_generate.json").write_text(json.dumps([{"id": 2100, "content": text, "run_seconds": 8.5},
                                                          {"id": 2101, "content": "no sql at all"}]))
    run = read_run(folder / "sql_generate.json", "v", SELECTED)
    assert (run.model, run.method) == ("sonnet4.6", "text2sql")
    assert run.predictions["vector/intersects:area_total+area/0"].statements == ("SELECT broken",
                                                                                  "SELECT area FROM x")
    assert run.predictions["vector/intersects:area_total+area/0"].meta == {"seconds": 8.5}
    assert run.predictions["vector/intersects:area_total+area/1"].statements == ()
    parsed = [
        {"id": 2102, "content": '```json\n{"area": 1200}\n```'},
        {"id": 1800, "content": '```json\n[{"name": "Cafe", "geometry": "POINT (1 2)"}]\n```'},
        {"id": 1801, "content": '```json\n{"name": "Cafe", "address": "1 Main St"}\n```'},
        {"id": 1400, "content": 'Answer: ```json\n{"name": "X", "azimuth_angle": 358}\n``` ```json\n{oops\n```'},
    ]
    (folder / "sql_json_parse.json").write_text(json.dumps(parsed))
    answers = read_run(folder / "sql_json_parse.json", "p", SELECTED)
    assert {key: (p.answer, p.unscorable) for key, p in answers.predictions.items()} == {
        "vector/intersects:area_total+area/2": ([{"area": 1200}], ""),
        "vector/knn+loc/0": ([{"name": "Cafe", "geometry": "POINT (1 2)"}], ""),
        "vector/knn+loc/1": ([{"name": "Cafe", "address": "1 Main St"}], "a location given only as an address: "
                             "not geocoded over the network (docs/BENCHMARK-FORMAT.md)"),
        "vector/knn+angle/0": ([{"name": "X", "angle": 358}], ""),
    }


def test_a_step_that_holds_no_predictions_is_named(tmp_path: Path) -> None:
    (tmp_path / "sql_exec.json").write_text(json.dumps([{"id": 2100, "records": []}]))
    run = read_run(tmp_path / "sql_exec.json", "x", SELECTED)
    assert [p.why for p in run.problems] == ["sql_exec.json holds rows the authors' runner got from the model's SQL; "
                                             "score sql_generate.json (the SQL itself)"]


def test_answers_as_rows() -> None:
    assert answer_rows("R6", 182.5) == [{"aspect_degrees": 182.5}]
    assert answer_rows("VR1", ["A", "B"]) == [{"name": "A"}, {"name": "B"}]
    assert answer_rows("R1", '[{"elevation": 3}]') == [{"elevation": 3}]  # JSON text, as models pass arguments
    assert answer_rows("R11", "[Route A]") == [{"answer_name": "[Route A]"}]  # text that is no JSON: a value
    assert answer_rows("V13", [{"poi": {"name": "A", "geometry": "POINT (1 2)"}}], authors=True) == [
        {"name": "A", "geometry": "POINT (1 2)"}]
    assert answer_rows("V21", [{"azimuth_angle": 12}], authors=True) == [{"angle": 12}]
    assert answer_rows("V21", [{"azimuth_angle": 12}]) == [{"azimuth_angle": 12}]  # the canonical form: as given


def test_sql_blocks_in_order() -> None:
    assert sql_blocks("```sql SELECT 1```\n```python\nx\n```\n``` sql\nSELECT 2;\n```") == ("SELECT 1", "SELECT 2;")


def test_chess_runner_files_are_read_with_their_group_wide_numbers(tmp_path: Path) -> None:
    """CHESS-PostGIS's materialised files, chess_<group>/<stem>/<stem>-<qid>.json, number raster_only's
    questions across the folder: elevation+poi's 0 and 19 are 60 and 79."""
    folder = tmp_path / "chess_raster_only" / "elevation+poi"
    folder.mkdir(parents=True)
    for qid, index in ((60, 0), (79, 19)):
        (folder / f"elevation+poi-{qid}.json").write_text(json.dumps({
            "id": f"elevation+poi-{qid}", "source_stem": "elevation+poi", "source_index": index,
            "predicted_sql": f"SELECT {index} AS elevation"}))
    run = read_run(tmp_path / "chess_raster_only", "chess", SELECTED)
    assert run.problems == []
    assert {question: prediction.statements for question, prediction in run.predictions.items()} == {
        f"{R1}/0": ("SELECT 0 AS elevation",), f"{R1}/19": ("SELECT 19 AS elevation",)}


def test_a_run_folder_names_a_cut_or_empty_prediction_file_and_refuses_two_methods(tmp_path: Path) -> None:
    """A runner file a kill cut short and an empty JSON Lines file are not read (listed), not skipped; the same
    question in two files of one folder (two methods mixed) is refused, the first file's prediction kept."""
    folder = tmp_path / "run"
    (folder / "elevation+poi").mkdir(parents=True)
    (folder / "elevation+poi" / "elevation+poi-3.json").write_text(
        '{"source_stem": "elevation+poi", "predicted_sql": "SELECT 1 AS elev')
    (folder / "empty.jsonl").write_text("")
    write_lines(folder / "a.jsonl", {"id": f"{R1}/0", "answer": 1})
    write_lines(folder / "b.jsonl", {"id": f"{R1}/0", "answer": 2})
    run = read_run(folder, "run", SELECTED)
    assert run.skipped == []
    assert sorted(Path(problem.where.split(":")[0]).name for problem in run.problems) == [
        "b.jsonl", "elevation+poi-3.json", "empty.jsonl"]
    assert run.predictions[f"{R1}/0"].answer == [{"elevation": 1}]
