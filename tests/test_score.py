"""`reproduce score` on real records (tests/data/benchmark) with predictions written here, against a fixture
database in which the stored answers of R1-R4 and VR1-VR3 hold (testkit/refdb.py)."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import psycopg
import pytest
from conftest import DATA
from test_runner import running_sandbox_queries

from reproduce import configs, dataset
from reproduce.results import Result, outcomes_markdown
from reproduce.score import ScoreRequest, score
from reproduce.session import RunRequest
from reproduce.verify import verify
from testkit.cli import reproduce
from testkit.tools import missing

BIN = Path(sys.executable).parent
BENCHMARK = DATA / "benchmark"
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/gsqa_nowhere"
TEMPLATES = ["R1", "R2", "R3", "R4", "VR1", "VR2", "VR3"]
R1 = "raster_only/elevation+poi"
METRE_OF_LATITUDE = 1 / 111_195.08  # degrees, on the verdicts' sphere (radius 6,371,008.8 m)


def records_of(template: str) -> list[dataset.Record]:
    return dataset.load(BENCHMARK, [configs.template(template)]).records


def word(entry: dict) -> str:
    """A --json-out record's word under the paper's verdict (Result.word)."""
    return Result.from_dict(entry).word("paper")


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def same_record(result: Result) -> dict:
    """A result as --json-out writes it, without what differs between two runs of the same SQL (its time)."""
    return {key: value for key, value in result.as_dict().items() if key != "seconds"}


def test_gold_sql_scores_as_verify_verifies(stored_db: str) -> None:
    verified = {r.id: r for r in verify(RunRequest(config="all", data=BENCHMARK, dsn=stored_db, timeout=5.0,
                                                   workers=2, templates=TEMPLATES, progress=False)).results}
    scored = score(ScoreRequest(gold=True, templates=TEMPLATES, data=BENCHMARK, dsn=stored_db, workers=2,
                                timeout=5.0, progress=False))
    assert [r.id for r in scored.results] == list(verified) and len(verified) == 140
    assert [same_record(r) for r in scored.results] == [same_record(verified[r.id]) for r in scored.results]
    assert {r.run for r in scored.results} == {"gold"}


def test_the_demo_database_gives_verify_and_score_gold_the_same_records(demo: tuple[str, Path],
                                                                         tmp_path: Path) -> None:
    """The README's demo: every gold SQL through `reproduce verify` and through `reproduce score --gold`, each
    question's --json-out record equal (but for its time)."""
    dsn, benchmark = demo
    common = ["--config", "all", "--data", str(benchmark), "--dsn", dsn, "--workers", "2"]
    verified = reproduce("verify", *common, "--json-out", str(tmp_path / "verify.json"))
    scored = reproduce("score", "--gold", *common, "--json-out", str(tmp_path / "score.json"))
    assert scored.returncode == 0, scored.stderr
    assert verified.returncode in (0, 1), verified.stderr
    by_verify = json.loads((tmp_path / "verify.json").read_text())["results"]
    by_score = json.loads((tmp_path / "score.json").read_text())["results"]
    ran = [entry for entry in by_verify if entry["outcome"] != "skipped"]
    assert len(ran) == len(by_score) > 0
    def timeless(entries: list[dict]) -> dict[str, dict]:
        return {entry["id"]: {key: value for key, value in entry.items() if key != "seconds"} for entry in entries}
    assert timeless(by_score) == timeless(ran)


def test_the_documented_outcomes_are_the_declaration() -> None:
    assert outcomes_markdown() in (DATA.parent.parent / "docs" / "BENCHMARK-FORMAT.md").read_text()


def test_older_reports_and_resume_lines_read_in_todays_fields() -> None:
    """Result lines as verify and score wrote them before one result type (reports, --resume files) are read
    with today's fields and words."""
    verified = Result.from_dict({"id": f"{R1}/1", "template_id": "R1", "status": "mismatch", "exact": False,
                                 "detail": {"rows": 1}, "seconds": 0.5, "paper_status": "mismatch",
                                 "paper_reason": "best pair fails", "server": "h:5432/db"})
    assert (verified.run, verified.outcome, verified.strict, verified.paper, verified.paper_reason,
            verified.seconds, verified.server) == ("gold", "ran", "fail", "fail", "best pair fails", 0.5, "h:5432/db")
    errored = Result.from_dict({"id": f"{R1}/2", "template_id": "R1", "status": "error", "exact": False,
                                "detail": {"error": "boom"}, "seconds": 0.1})
    assert (errored.outcome, errored.strict, errored.strict_reason, errored.paper, errored.word("strict")) == (
        "sql_error", "fail", "sql_error: boom", "fail", "sql_error")  # as a failed SQL's reason is worded today
    skipped = Result.from_dict({"id": f"{R1}/3", "template_id": "R1", "status": "skipped", "exact": False,
                                "detail": {"reason": "not in the data"}, "paper_status": ""})
    assert (skipped.outcome, skipped.paper, skipped.paper_reason) == ("skipped", "fail", "not in the data")
    scored = Result.from_dict({"run": "m", "id": f"{R1}/4", "template_id": "R1", "status": "mismatch",
                               "paper": "fail", "paper_reason": "x", "strict": "pass", "strict_reason": "y",
                               "seconds": 0.0, "detail": {}})
    assert (scored.key, scored.outcome, scored.paper, scored.strict, scored.word("paper")) == (
        ("m", f"{R1}/4"), "ran", "fail", "pass", "fail")
    unread = Result.from_dict({"run": "m", "id": f"{R1}/5", "template_id": "R1", "status": "no_prediction",
                               "paper": "fail", "paper_reason": "none", "strict": "fail", "strict_reason": "none"})
    assert Result.from_dict(unread.as_dict()) == unread and unread.outcome == "no_prediction"


def test_older_lines_say_why_as_today_and_what_they_did_not_record_is_not_known() -> None:
    """An older verify line's strict reason as the judge words it today (the failing component, no rows, the
    error), never its outcome; an older score line recorded no exact diff: not exact where its strict verdict
    failed, not known (None) where it passed."""
    failure = {"component": "elevation", "metric": "elevation (m)", "threshold": 10.0, "expected": 100.0,
               "actual": 120.5, "value": 20.5, "passed": False}
    older = [{"status": "mismatch", "detail": {"failure": failure}}, {"status": "mismatch", "detail": {"rows": 1}},
             {"status": "empty", "detail": {"rows": 0}}, {"status": "timeout", "detail": {"error": "canceled"}},
             {"status": "pass", "detail": {}}]
    assert [Result.from_dict({"id": f"{R1}/{n}", "exact": False, **line}).strict_reason
            for n, line in enumerate(older)] == [
        "elevation: stored 100.0, got 120.5, elevation (m) 20.5 vs 10.0",
        "a component fails (the older report kept no failing value)", "no rows (the stored answer has some)",
        "timeout: canceled", "every component passes"]
    score_line = {"run": "m", "id": f"{R1}/0", "template_id": "R1", "paper": "pass", "paper_reason": "",
                  "strict_reason": ""}
    assert [(Result.from_dict({**score_line, "status": status, "strict": strict}).exact)
            for status, strict in (("pass", "pass"), ("pass", "fail"), ("mismatch", "fail"), ("empty", "fail"))] == [
        None, False, False, False]


def test_score_resume_judges_again_an_older_line_that_recorded_no_exact_diff(tmp_path: Path) -> None:
    """A --resume file with lines as score wrote them before `exact` (status, paper, strict): the questions whose
    exactness they cannot tell are judged again, the others kept."""
    stored = {r.id: r.answers[0]["elevation"] for r in records_of("R1")}
    predictions = write_jsonl(tmp_path / "p.jsonl", [answer(f"{R1}/{n}", stored[f"{R1}/{n}"] + (0 if n < 2 else 50))
                                                      for n in range(4)])
    resume, out = tmp_path / "resume.jsonl", tmp_path / "s.json"
    command = ["score", predictions, "--config", "raster_only", "--template", "R1", "--data", BENCHMARK,
               "--resume", resume, "--json-out", out]
    assert reproduce(*command).returncode == 0
    header, *lines = [json.loads(line) for line in resume.read_text().splitlines()]
    older = [{**{key: value for key, value in line.items() if key not in ("outcome", "exact")},
              "status": "pass" if line["paper"] == "pass" else "mismatch", "detail": {"older": True}}
             for line in lines]
    resume.write_text("".join(json.dumps(line) + "\n" for line in [header, *older]))
    assert reproduce(*command).returncode == 0
    results = {result["id"]: result for result in json.loads(out.read_text())["results"]}
    # 0 and 1 passed: judged again (their detail is today's); 2 and 3 failed: kept as read, not exact
    assert [(results[f"{R1}/{n}"]["exact"], "older" in results[f"{R1}/{n}"]["detail"]) for n in range(4)] == [
        (True, False), (True, False), (False, True), (False, True)]
    assert json.loads(out.read_text())["summary"]["p"]["raster_only/R1"]["exact"] == 2


def sql_predictions() -> tuple[list[dict], dict[str, str]]:
    """R1 questions predicted with SQL, each with the word it must get (Result.word under the paper's verdict)."""
    gold = {r.id: r.sql for r in records_of("R1")}
    cases = {
        "pass": gold[f"{R1}/0"],
        "mismatch": gold[f"{R1}/1"].replace("AS elevation", "+ 30 AS elevation"),
        "wrong columns": "SELECT 'x' AS poi_name, 5 AS other FROM public.dem_us LIMIT 1",
        "syntax error": "SELEC elevation FROM public.dem_us",
        "timeout": "SELECT pg_sleep(10)::text AS nap, 1 AS elevation",
        "write": "DELETE FROM public.dem_us RETURNING 1 AS elevation",
        "two statements": "SELECT 1 AS elevation; DELETE FROM public.dem_us",
        "signal": "SELECT pg_terminate_backend(pid) AS elevation FROM pg_stat_activity",
        "empty": "SELECT 1 AS elevation FROM public.dem_us WHERE false",
        "set role": "SET ROLE postgres",
    }
    statuses = {"pass": "pass", "mismatch": "fail", "wrong columns": "fail", "syntax error": "sql_error",
                "timeout": "timeout", "write": "sql_error", "two statements": "sql_error", "signal": "sql_error",
                "empty": "empty", "set role": "sql_error"}
    lines = [{"id": f"{R1}/{n}", "sql": sql} for n, sql in enumerate(cases.values())]
    expected = {f"{R1}/{n}": statuses[case] for n, case in enumerate(cases)}
    expected.update({f"{R1}/{n}": "no_prediction" for n in range(len(cases), 20)})
    return lines, expected


def test_sql_predictions_run_in_the_sandbox(stored_db: str, tmp_path: Path) -> None:
    lines, expected = sql_predictions()
    with psycopg.connect(stored_db) as conn:
        tiles = conn.execute("SELECT count(*) FROM dem_us").fetchone()[0]
    out = tmp_path / "scores.json"
    result = reproduce("score", str(write_jsonl(tmp_path / "model.jsonl", lines)), "--config", "raster_only",
                       "--template", "R1", "--data", str(BENCHMARK), "--dsn", stored_db, "--timeout", "1",
                       "--json-out", str(out))
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    results = {r["id"]: r for r in document["results"]}
    assert {key: word(r) for key, r in results.items()} == expected
    assert document["questions"][f"{R1}/1"]["sql"] == records_of("R1")[1].sql
    assert results[f"{R1}/1"]["detail"]["sql"] == [lines[1]["sql"]]
    assert results[f"{R1}/1"]["detail"]["rows"] == [{"elevation": records_of("R1")[1].answers[0]["elevation"] + 30}]
    assert results[f"{R1}/3"]["paper_reason"].startswith("sql_error: syntax error at or near")
    assert results[f"{R1}/6"]["detail"]["error"] == ("refused: several statements in one; only a query runs here "
                                                     "(SELECT, WITH, VALUES, TABLE), one statement at a "
                                                     "time")
    with psycopg.connect(stored_db) as conn:  # nothing a prediction did stayed
        assert conn.execute("SELECT count(*) FROM dem_us").fetchone()[0] == tiles
    line = next(line for line in result.stdout.splitlines() if line.startswith("raster_only  R1"))
    # predicted 10 of 20, executed (answered) 4, paper 1 (5.0 %, Wilson 0.9-23.6), strict 1, 1 timeout, 5 errors,
    # nothing unscorable
    assert line.split()[2:] == ["20", "50.0", "20.0", "5.0", "0.9-23.6", "5.0", "1", "5", "0"]


def test_candidates_run_in_order_and_the_first_that_runs_counts(stored_db: str, tmp_path: Path) -> None:
    gold = records_of("R1")[0]
    folder = tmp_path / "gpt4o_raster_only" / "elevation+poi"
    folder.mkdir(parents=True)
    (folder / "elevation+poi-0.json").write_text(json.dumps({
        "id": "elevation+poi-0", "source_stem": "elevation+poi", "predicted_sql": "SELEC 1",
        "predicted_sql_candidates": ["SELEC 1", gold.sql, "SELECT 1 AS elevation"]}))
    scored = score(ScoreRequest(predictions=[tmp_path / "gpt4o_raster_only"], ids=[gold.id],
                                config="raster_only",
                                data=BENCHMARK, dsn=stored_db, progress=False))
    [result] = scored.results
    assert (result.word("paper"), result.detail["candidate"], scored.runs[0].model) == ("pass", "2 of 3", "gpt4o")


def answer(record_id: str, value: object) -> dict:
    return {"id": record_id, "answer": value}


def shifted_north(wkt: str, metres: float) -> str:
    x, y = wkt.removeprefix("POINT (").removesuffix(")").split()
    return f"POINT ({x} {float(y) + metres * METRE_OF_LATITUDE})"


def test_answers_are_judged_without_a_database(tmp_path: Path) -> None:
    vr2 = records_of("VR2")[3].answers[0]["geometry"]
    lines = [
        answer("raster_only/elevation_compare+two_pois/0", "Diamond Mill OHV Staging Area, WA"),  # F1 10/12
        answer("raster_only/elevation_compare+two_pois/1", "Sushi Nakazawa, Washington, WA"),  # F1 6/8
        answer("raster_only/aspect+poi/12", 359.5),  # stored 3.81: 4.31 degrees across north
        answer("raster_only/aspect+poi/13", 26.9),  # stored 32.01: 5.11 degrees
        answer("extended/knn+distance+slope/0", [{"road_name": "Northwest 26th Street", "dist_m": 36.3,
                                                  "slope_deg": 0.84}]),
        answer("extended/knn+distance+slope/1", [{"road_name": "Heritage Parkway", "dist_m": 337.3,
                                                  "slope_deg": 12.8}]),  # slope 6.06 degrees off
        answer("extended/range+loc+elevation_condition/3", [{"geometry": shifted_north(vr2, 4)}]),
        answer("extended/range+loc+elevation_condition/4", [{"geometry": shifted_north(vr2, 6)}]),
        answer("extended/range+loc+elevation_condition/5", [{"address": "1 Main Street"}]),
    ]
    out = tmp_path / "scores.json"
    result = reproduce("score", str(write_jsonl(tmp_path / "answers.jsonl", lines)), "--data", str(BENCHMARK),
                       "--dsn", UNREACHABLE, "--template", "R2", "--template", "R6", "--template", "VR2",
                       "--template", "VR5", "--json-out", str(out))
    assert result.returncode == 0, result.stderr
    got = {r["id"]: (r["outcome"], r["paper"]) for r in json.loads(out.read_text())["results"]
           if r["outcome"] != "no_prediction"}
    assert got == {
        "raster_only/elevation_compare+two_pois/0": ("ran", "pass"),
        "raster_only/elevation_compare+two_pois/1": ("ran", "fail"),
        "raster_only/aspect+poi/12": ("ran", "pass"), "raster_only/aspect+poi/13": ("ran", "fail"),
        "extended/knn+distance+slope/0": ("ran", "pass"), "extended/knn+distance+slope/1": ("ran", "fail"),
        "extended/range+loc+elevation_condition/3": ("ran", "pass"),
        "extended/range+loc+elevation_condition/4": ("ran", "fail"),
        "extended/range+loc+elevation_condition/5": ("unscorable", "fail"),
    }


def test_the_authors_parsed_vector_answers(tmp_path: Path) -> None:
    """A GS-QA vector run's sql_json_parse.json: integer ids, the parser model's ```json blocks, their field
    names (name, geometry, address, azimuth_angle), scored offline."""
    angle = records_of("V21")[0].answers[0]["angle"]
    def parsed(raw_id: int, answer: dict) -> dict:
        return {"id": raw_id, "content": f"Here you go:\n```json\n{json.dumps(answer)}\n```", "run_seconds": 3.2}
    folder = tmp_path / "gpt4o"
    folder.mkdir()
    (folder / "sql_json_parse.json").write_text(json.dumps([
        parsed(200, {"name": "Goat Rock"}),  # V5 question 0
        parsed(201, {"name": "Nowhere In Particular"}),
        parsed(1800, {"name": "Sea Life Aquarium", "geometry": "POINT (-83.296505 42.70361)"}),  # V17
        parsed(1801, {"name": "Somewhere", "address": "1 Main Street, Springfield"}),
        parsed(1000, {"name": "x", "azimuth_angle": angle + 4}),  # V21: the angle of one stored row, 4 deg off
        parsed(1001, {"name": "x", "azimuth_angle": 400}),  # outside 0-360: no answer for the authors
    ]))
    out = tmp_path / "s.json"
    result = reproduce("score", str(folder), "--config", "vector", "--template", "V5", "--template", "V17",
                       "--template", "V21", "--data", str(BENCHMARK), "--dsn", UNREACHABLE, "--json-out", str(out))
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert (document["runs"][0]["model"], document["runs"][0]["method"]) == ("gpt4o", "text2sql")
    got = {r["id"]: word(r) for r in document["results"] if r["outcome"] != "no_prediction"}
    assert got == {"vector/knn+name/0": "pass", "vector/knn+name/1": "fail", "vector/knn+loc/0": "pass",
                   "vector/knn+loc/1": "unscorable", "vector/range+angle/0": "pass",
                   "vector/range+angle/1": "fail"}
    # the repository's copy holds 11 of these 300 questions: the others are counted apart, not as wrong
    assert "289 questions not in the data, not scored (see --json-out)" in result.stdout
    assert len(document["results"]) == 11 and len(document["skipped"]) == 289
    line = next(line.split() for line in result.stdout.splitlines() if line.split()[:2] == ["vector", "V17"])
    assert line[-1] == "1"  # the address, counted apart


def test_two_runs_side_by_side_with_a_paired_test(tmp_path: Path) -> None:
    stored = {r.id: r.answers[0]["elevation"] for r in records_of("R1")}
    def run(passing: set[int]) -> list[dict]:
        return [answer(f"{R1}/{n}", stored[f"{R1}/{n}"] + (0 if n in passing else 50)) for n in range(20)]
    first = write_jsonl(tmp_path / "a.jsonl", run(set(range(16))))  # passes 0-15
    second = write_jsonl(tmp_path / "b.jsonl", run({0, 1, 2, 3, 4, 5, 16, 17}))  # 6 shared, 2 its own
    out, table = tmp_path / "s.json", tmp_path / "s.csv"
    result = reproduce("score", str(first), str(second), "--name", "model-A", "--config", "raster_only",
                       "--template", "R1", "--data", str(BENCHMARK), "--json-out", str(out), "--csv-out", str(table),
                       "--junit", str(tmp_path / "s.xml"))
    assert result.returncode == 0, result.stderr
    pair = next(p for p in json.loads(out.read_text())["pairs"] if p["template"] == "R1")
    # 10 questions only A passed, 2 only B: p = 2 * (C(12,0) + C(12,1) + C(12,2)) / 2^12
    assert (pair["first"], pair["second"], pair["both"], pair["only_first"], pair["only_second"]) == \
        ("model-A", "b", 6, 10, 2)
    assert math.isclose(pair["p"], 2 * 79 / 4096)
    paired = [line.split() for line in result.stdout.split("model-A vs b:")[1].splitlines()]
    assert ["raster_only", "R1", "20", "6", "10", "2", "0.0386"] in paired
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert {(r["run"], r["template"], r["value"]) for r in rows if r["metric"] == "paper_pct"
            and r["config"] == "raster_only"} == {("model-A", "R1", "80.0"), ("model-A", "all", "80.0"),
                                                  ("b", "R1", "40.0"), ("b", "all", "40.0")}
    suites = ET.parse(tmp_path / "s.xml").getroot()
    assert [(s.get("name"), s.get("tests"), s.get("failures")) for s in suites] == [("model-A", "20", "4"),
                                                                                    ("b", "20", "12")]


@pytest.mark.parametrize("content, code, message", [
    ("", 2, "an empty file (expected one prediction per line)"),
    ("not json\n", 2, "not JSON"),
    ('{"id": "raster_only/elevation+poi/99", "answer": 1}\n', 2, "names no benchmark question"),
    ('{"id": "raster_only/elevation+poi/0", "answer": 1}\nnot json\n', 1, "not read: {file}:2: not JSON"),
    ('{"id": "raster_only/elevation+poi/0", "answer": 1}\n{"id": "elevation+poi-0", "answer": 2}\n', 0,
     "warning: {file}:2: raster_only/elevation+poi/0 is predicted again (also at {file}:1): the last prediction is "
     "scored"),
    ('{"id": "raster_only/elevation+poi/0", "answer": 1}\n{"id": "elevation+poi-0"}\n', 0,
     "warning: {file}:2: raster_only/elevation+poi/0: neither 'sql' nor 'answer': not a prediction, read past"),
])
def test_bad_predictions_are_named_with_file_and_line(tmp_path: Path, content: str, code: int, message: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    result = reproduce("score", str(path), "--config", "raster_only", "--template", "R1", "--data", str(BENCHMARK))
    assert result.returncode == code, result.stdout + result.stderr
    assert message.format(file=path) in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_a_folder_without_predictions_scores_nothing(tmp_path: Path) -> None:
    result = reproduce("score", str(tmp_path), "--config", "raster_only", "--data", str(BENCHMARK))
    assert result.returncode == 2
    assert result.stderr == (f"error: nothing to score: no readable prediction of the 220 selected questions "
                             f"({tmp_path}: a folder with no predictions (*.jsonl, or the GS-QA2 runs' *.json))\n")


def test_ctrl_c_then_the_same_command_scores_only_the_rest(stored_db: str, tmp_path: Path) -> None:
    stored = {r.id: r.answers[0]["elevation"] for r in records_of("R1")}
    lines = [{"id": f"{R1}/0", "sql": f"SELECT pg_sleep(2)::text AS nap, {stored[f'{R1}/0']} AS elevation"}]
    lines += [answer(f"{R1}/{n}", stored[f"{R1}/{n}"]) for n in range(1, 20)]
    predictions, resume = write_jsonl(tmp_path / "p.jsonl", lines), tmp_path / "resume.jsonl"
    command = [str(BIN / "reproduce"), "score", str(predictions), "--config", "raster_only", "--template", "R1",
               "--data", str(BENCHMARK), "--dsn", stored_db, "--resume", str(resume)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not running_sandbox_queries(stored_db) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=15)
    assert process.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr
    assert len(resume.read_text().splitlines()) == 1 + 19  # the header and the answers judged before the SQL
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert rerun.returncode == 0, rerun.stderr
    assert len(resume.read_text().splitlines()) == 1 + 20
    assert next(line for line in rerun.stdout.splitlines() if line.startswith("raster_only  R1")).split()[5] == "100.0"


def test_html_report_with_filters_and_a_map_renders_in_a_browser(tmp_path: Path) -> None:
    vr2 = records_of("VR2")[3].answers[0]["geometry"]
    stored_r1 = records_of("R1")[0].answers[0]["elevation"]
    predictions = write_jsonl(tmp_path / "p.jsonl", [
        answer("extended/range+loc+elevation_condition/3", [{"geometry": shifted_north(vr2, 6)}]),
        answer(f"{R1}/0", 1.0), {"id": f"{R1}/1", "seconds": 2}])
    many = [{"geometry": shifted_north(vr2, 50), "poi_name": f"Place {n} " + "x" * 200} for n in range(60)]
    other = write_jsonl(tmp_path / "q.jsonl", [answer("extended/range+loc+elevation_condition/3", many),
                                               answer(f"{R1}/0", stored_r1)])
    page = tmp_path / "score.html"
    result = reproduce("score", predictions, other, "--template", "VR2", "--template", "R1", "--data", BENCHMARK,
                       "--html", page)
    assert result.returncode == 0, result.stderr
    text = page.read_text()
    assert "nearest predicted to stored: 6.0 m (tolerance 5 m)" in text
    assert "<text x='22' y='16' font-size='11'>stored</text>" in text and " m</text>" in text  # legend, scale
    assert '<select name="outcome" onchange="filterCards()">' in text and "<option>no_prediction</option>" in text
    assert text.count("<table class='sortable'>") == 2 and "<h2>Pairs of runs</h2>" in text  # runs, pairs
    assert f"warning (p): {tmp_path / 'p.jsonl'}:3: {R1}/1: neither &#x27;sql&#x27; nor &#x27;answer&#x27;" in text
    assert 'data-run="p" data-template="R1" data-outcome="ran" data-paper="fail" data-disagree="1"' in text
    assert "<summary>all " in text  # the 60 rows folded, not cut
    assert "<li>R1: LIMIT without ORDER BY" in text and "may legitimately vary: LIMIT" not in text
    chromium = shutil.which("chromium")
    if chromium is None:
        missing("chromium", "apt-get install chromium to render the HTML report in a browser")
    shot = tmp_path / "score.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_several_runs_of_one_model_give_pass_k_flips_and_their_own_noise(tmp_path: Path) -> None:
    """Three runs of model m pass questions {0-9}, {0-7, 10, 11}, {0-8}: pass^3 8 of 20, 4 flip, rates 50, 50,
    45 (spread 5); two runs of n pass {0-10} and {0-11} (55 and 60: spread 5). m against n: a difference of 5
    points is within the runs' own noise, 10 or 15 points is not."""
    stored = {r.id: r.answers[0]["elevation"] for r in records_of("R1")}

    def run(model: str, passing: set[int]) -> list[dict]:
        return [{**answer(f"{R1}/{n}", stored[f"{R1}/{n}"] + (0 if n in passing else 50)), "model": model,
                 "method": "text2sql"} for n in range(20)]
    files = [write_jsonl(tmp_path / f"{name}.jsonl", run(model, passing)) for name, model, passing in (
        ("m1", "m", set(range(10))), ("m2", "m", {*range(8), 10, 11}), ("m3", "m", set(range(9))),
        ("n1", "n", set(range(11))), ("n2", "n", set(range(12))))]
    out, table = tmp_path / "s.json", tmp_path / "s.csv"
    result = reproduce("score", *files, "--config", "raster_only", "--template", "R1", "--data", BENCHMARK,
                       "--json-out", out, "--csv-out", table)
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    m = next(group for group in document["repeated"] if group["model"] == "m")
    assert m["runs"] == ["m1", "m2", "m3"]
    assert m["lines"][0] == {"config": "raster_only", "template": "R1", "questions": 20, "pass_k": 40.0,
                             "flip": 20.0, "rates": [50.0, 50.0, 45.0], "spread": 5.0}
    assert [m["passed"][f"{R1}/{n}"] for n in (0, 8, 9, 10, 12)] == [3, 2, 1, 1, 0]
    assert "m (text2sql), 3 runs (m1, m2, m3)" in result.stdout
    pairs = {(p["first"], p["second"], p["template"]): p for p in document["pairs"]}
    assert [(pairs[pair]["difference"], pairs[pair]["noise"], pairs[pair]["within_noise"]) for pair in (
        ("m1", "n1", "R1"), ("m1", "n2", "R1"), ("m3", "n2", "R1"))] == [
        (-5.0, 5.0, True), (-10.0, 5.0, False), (-15.0, 5.0, False)]
    assert pairs[("m1", "m2", "R1")]["same_model"] and pairs[("m1", "m2", "R1")]["noise"] is None
    assert "m1 vs m2: exact McNemar test on the paper verdict (paired by question); two runs of one model" \
        in result.stdout
    rows = list(csv.DictReader(io.StringIO(table.read_text())))
    assert {"run": "m1 + m2 + m3", "model": "m", "method": "text2sql", "config": "raster_only", "template": "R1",
            "metric": "pass_k_pct", "value": "40.0"} in rows
    assert {"run": "m1 vs n1", "model": "", "method": "", "config": "raster_only", "template": "R1",
            "metric": "pair_difference", "value": "-5.0"} in rows


def test_hostile_answers_are_judged_wrong_and_never_end_the_run(tmp_path: Path) -> None:
    """An integer past a float's range, an answer nested past what reports keep, a line nested past what the
    JSON reader goes: each is one question's verdict or one line not read; the other questions are scored."""
    path = tmp_path / "hostile.jsonl"
    path.write_text(json.dumps({"id": f"{R1}/0", "answer": [{"elevation": 10**400}]}) + "\n"
                    + json.dumps({"id": f"{R1}/1", "answer": json.loads("[" * 500 + "]" * 500)}) + "\n"
                    + '{"id": "' + f"{R1}/2" + '", "answer": ' + "[" * 5000 + "]" * 5000 + "}\n")
    out = tmp_path / "scores.json"
    scored = reproduce("score", path, "--config", "raster_only", "--template", "R1", "--data", BENCHMARK, "--dsn",
                       UNREACHABLE, "--json-out", out, "--html", tmp_path / "scores.html")
    assert scored.returncode == 1, scored.stderr  # a line not read
    assert f"not read: {path}:3: JSON nested deeper than the reader goes" in scored.stdout
    results = {result["id"]: result for result in json.loads(out.read_text())["results"]}
    assert [(results[f"{R1}/{n}"]["outcome"], results[f"{R1}/{n}"]["paper"]) for n in range(3)] == [
        ("ran", "fail"), ("ran", "fail"), ("no_prediction", "fail")]
    assert "(not kept: nested past 32 levels)" in json.dumps(results[f"{R1}/1"]["detail"]["answer"])
