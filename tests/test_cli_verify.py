"""`reproduce verify` and `reproduce show` run as a user runs them: statuses, reports, exit codes, resume, Ctrl-C."""

from __future__ import annotations

import csv
import io
import json
import os
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

from testkit.cli import reproduce
from testkit.refdb import grid_index, insert_raster
from testkit.tools import missing

BIN = Path(sys.executable).parent
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/gsqa_nowhere"
FROM_DEM = "FROM public.dem_us LIMIT 1"
QUESTIONS = {  # R1-shaped questions with one outcome each
    "pass": (f"SELECT 100.0 AS elevation {FROM_DEM}", 100.0),
    "mismatch": (f"SELECT 120.5 AS elevation {FROM_DEM}", 100.0),
    "empty": ("SELECT 1 AS elevation FROM public.dem_us WHERE false", 100.0),
    "timeout": (f"SELECT pg_sleep(30)::text AS nap, 1 AS elevation {FROM_DEM}", 1.0),
    "sql_error": (f"SELECT no_such_column AS elevation {FROM_DEM}", 1.0),
}
IDS = {status: f"raster_only/elevation+poi/{n}" for n, status in enumerate(QUESTIONS)}


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return reproduce(*argv, env=env)


def write_questions(folder: Path, questions: dict[str, tuple[str, float]]) -> Path:
    target = folder / "qa2" / "raster_only"
    target.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"question": f"{status}?", "sql": sql, "answers": [{"elevation": gold}],
                         "answer_type": "elevation - point based", "question_entities": {}})
             for status, (sql, gold) in questions.items()]
    (target / "elevation+poi.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def db(initialized_dsn: str) -> str:
    with psycopg.connect(initialized_dsn) as conn:
        insert_raster(conn, *grid_index(10.5, 20.5), [[100]])
    return initialized_dsn


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_questions(tmp_path_factory.mktemp("data"), QUESTIONS)


def verify(db: str, data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run("verify", "--config", "raster_only", "--data", str(data), "--dsn", db, "--timeout", "1",
               "--workers", "2", *extra)


@pytest.fixture(scope="module")
def full_run(db: str, data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("reports")
    result = verify(db, data, "--template", "R1", "--json-out", str(out / "run.json"), "--junit",
                    str(out / "run.xml"), "--html", str(out / "run.html"), "--csv-out", str(out / "run.csv"))
    return result, out


def test_each_status_and_exit_1(full_run: tuple, db: str) -> None:
    result, out = full_run
    assert result.returncode == 1, result.stderr
    report = json.loads((out / "run.json").read_text())
    assert list(report) == ["provenance", "runs", "summary", "usage", "pairs", "repeated", "skipped", "questions",
                            "results"]
    assert report["usage"] == {}  # gold SQL: no calls, no tokens
    assert report["summary"]["gold"]["total/all"].items() >= {  # the gold run's counts, beside its rates
        "questions": 5, "predicted": 5, "answered": 3, "paper_passed": 1, "strict_passed": 1, "exact": 1, "ran": 2,
        "empty": 1, "timeout": 1, "sql_error": 1, "skipped": 0, "no_prediction": 0, "unreadable": 0,
        "unscorable": 0}.items()
    by_id = {entry["id"]: entry for entry in report["results"]}
    assert {status: (by_id[IDS[status]]["outcome"], by_id[IDS[status]]["strict"]) for status in QUESTIONS} == {
        "pass": ("ran", "pass"), "mismatch": ("ran", "fail"), "empty": ("empty", "fail"),
        "timeout": ("timeout", "fail"), "sql_error": ("sql_error", "fail")}
    assert all(list(entry) == ["run", "id", "template_id", "outcome", "paper", "paper_reason", "strict",
                               "strict_reason", "exact", "seconds", "server", "detail"] for entry in by_id.values())
    assert {entry["server"] for entry in by_id.values()} == {report["provenance"]["servers"][0]["name"]}
    assert by_id[IDS["pass"]]["paper"] == "pass" and by_id[IDS["mismatch"]]["paper"] == "fail"
    assert by_id[IDS["mismatch"]]["paper_reason"].startswith("best pair fails elevation elevation (m) 20.5")
    assert 0.9 <= by_id[IDS["timeout"]]["seconds"] < 2.5
    assert "no_such_column" in by_id[IDS["sql_error"]]["detail"]["error"]
    failure = by_id[IDS["mismatch"]]["detail"]["failure"]
    assert (failure["component"], failure["expected"], failure["actual"]) == ("elevation", 100.0, 120.5)
    assert running_sandbox_queries(db) == []


def test_provenance(full_run: tuple, data: Path) -> None:
    provenance = json.loads((full_run[1] / "run.json").read_text())["provenance"]
    assert provenance["database"]["version"].startswith("PostgreSQL")
    assert "POSTGIS=" in provenance["database"]["postgis_full_version"]
    assert provenance["database"]["row_counts"]["dem_us"] == 1
    assert provenance["dataset"]["source"] == str(data) and len(provenance["dataset"]["checksum"]) == 64
    assert (provenance["timeout"], provenance["workers"], provenance["tool_version"]) == (1.0, 2, "0.1.0")


def test_stdout_table_and_stderr_progress(full_run: tuple) -> None:
    result, _ = full_run
    header, r1 = result.stdout.splitlines()[:2]
    assert header.split()[:5] == ["config", "template", "questions", "pass", "%"]
    assert r1.split()[:5] == ["raster_only", "R1", "5", "20.0", "20.0"]
    assert f"{IDS['mismatch']} [R1] fail: elevation expected 100.0, got 120.5" in result.stdout
    assert "verify" in result.stderr and "5/5" in result.stderr


def test_junit_and_html(full_run: tuple) -> None:
    _, out = full_run
    suite = ET.parse(out / "run.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "2", "2")
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert cases[IDS["timeout"]].find("error").get("type") == "timeout"
    assert cases[IDS["pass"]].find("failure") is None
    page = (out / "run.html").read_text()
    assert "<svg" in page and IDS["mismatch"] in page and IDS["pass"] not in page
    assert "src=" not in page and "<link" not in page  # self-contained
    assert "<h1>reproduce verify: 1 of 5 questions pass</h1>" in page
    assert "<h3>R1 (raster_only): 4 of 5 did not pass</h3>" in page
    assert page.count("<details class='q' open>") == 1 and page.count("<details class='q'") == 4
    assert "mismatch?" in page and "<summary>SQL</summary><pre>SELECT 120.5 AS elevation" in page  # question, SQL
    assert f"reproduce show {IDS['mismatch']} --data " in page
    assert "<th>expected</th><th>actual</th>" in page and "<td>100.0</td><td>120.5</td>" in page
    assert "Stored answer: <code>[{&quot;elevation&quot;: 100.0}]</code>" in page  # the empty one
    mode = (out / "run.html").stat().st_mode & 0o777
    assert mode == 0o666 & ~_umask(), oct(mode)  # what any new file gets, not the temporary file's 0600


def test_csv_is_scores_of_the_gold_run(full_run: tuple) -> None:
    rows = list(csv.DictReader(io.StringIO((full_run[1] / "run.csv").read_text())))
    figures = {row["metric"]: row["value"] for row in rows if (row["config"], row["template"]) == ("raster_only", "R1")}
    assert {row["run"] for row in rows} == {"gold"}
    assert (figures["questions"], figures["strict_pct"], figures["paper_pct"], figures["timeout"]) == (
        "5", "20.0", "20.0", "1")


def _umask() -> int:
    current = os.umask(0o022)
    os.umask(current)
    return current


def test_html_report_renders_in_a_real_browser(full_run: tuple, tmp_path: Path) -> None:
    """Debian's chromium draws the page; CI looks at the picture (the test checks it is a full-size PNG)."""
    import shutil

    chromium = shutil.which("chromium")
    if chromium is None:
        missing("chromium", "apt-get install chromium to render the HTML report in a browser")
    _, out = full_run
    shot = tmp_path / "report.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                    f"--screenshot={shot}", "--window-size=1200,900", (out / "run.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) == (1200, 900)
    assert shot.stat().st_size > 20_000  # a drawn page, not a blank one


def test_all_pass_is_exit_0(db: str, data: Path) -> None:
    result = verify(db, data, "--id", IDS["pass"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[:4] == ["raster_only", "R1", "1", "100.0"]


def test_questions_not_in_the_data_change_no_exit_code_and_none_in_it_is_exit_2(db: str, data: Path,
                                                                               tmp_path: Path) -> None:
    """As in `reproduce score`: selected questions not in the data are counted apart, not failures; with none of
    them in the data nothing is verified."""
    result = verify(db, data, "--template", "R2")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("error: nothing to verify: no selected question is in the data (20 selected; file "
                             f"qa2/raster_only/elevation_compare+two_pois.jsonl is not in {data})\n")
    passing = write_questions(tmp_path, {"pass": QUESTIONS["pass"]})
    beside = verify(db, passing, "--template", "R1", "--template", "R2")
    assert beside.returncode == 0, beside.stdout
    assert [line.split()[:-1] for line in beside.stdout.splitlines()[1:3]] == [
        ["raster_only", "R1", "1", "100.0", "100.0", "100.0", "1", "0", "0", "0", "0", "0"],
        ["raster_only", "R2", "20", "-", "-", "-", "0", "0", "0", "0", "0", "20"]]


@pytest.mark.parametrize("argv, message", [
    (["--dsn", UNREACHABLE], "cannot connect to PostgreSQL"),
    (["--data", "/nonexistent"], "not a directory"),
    (["--id", "raster_only/elevation+poi/99"], "unknown question id 'raster_only/elevation+poi/99': it names no"),
    (["--template", "R99"], "unknown template 'R99'"),
    (["--template", "V1"], "belongs to config vector"),
    (["--json-out", "/nonexistent/run.json"], "cannot write /nonexistent/run.json"),
    (["--resume", "/nonexistent/run.jsonl"], "cannot write /nonexistent/run.jsonl"),
])
def test_nothing_started_is_one_line_and_exit_2(db: str, data: Path, argv: list[str], message: str) -> None:
    result = verify(db, data, *argv)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_config_is_required(db: str, data: Path) -> None:
    result = run("verify", "--data", str(data), "--dsn", db)
    assert result.returncode == 2 and "Missing option '--config'" in result.stderr


def test_failed_preflight_is_exit_2(initialized_dsn: str, data: Path, fresh_dsn: str) -> None:
    from ingest.initdb import initialize

    initialize(fresh_dsn)  # tables exist but dem_us is empty
    result = verify(fresh_dsn, data)
    assert result.returncode == 2 and "table public.dem_us is empty" in result.stderr
    assert "the templates that read them: R1" in result.stderr and result.stderr.count("\n") == 1


def dem_us_empty(dsn: str, folder: Path) -> Path:
    """`dsn` initialized, with a row in pois and none in dem_us; in `folder` the data of an R1 question (it
    reads dem_us) and a V23 one (it reads pois)."""
    from ingest.initdb import initialize

    initialize(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO public.pois (poi_name) VALUES ('x')")
    data = write_questions(folder, {"pass": (f"SELECT 100.0 AS elevation {FROM_DEM}", 100.0)})
    vector = data / "vector" / "T23" / "001"
    vector.mkdir(parents=True)
    (vector / "question.json").write_text(json.dumps({"question": "how many?", "sql": "SELECT count(*) FROM pois",
                                                      "answers": [{"count": 1}], "type": "range+count"}))
    return data


def test_preflight_names_the_blocked_templates_and_the_command_for_the_others(fresh_dsn: str, tmp_path: Path) -> None:
    data = dem_us_empty(fresh_dsn, tmp_path)
    result = run("verify", "--config", "all", "--data", str(data), "--dsn", fresh_dsn, "--template", "R1",
                 "--template", "V23")
    assert result.returncode == 2
    assert "the templates that read them: R1;" in result.stderr
    assert f"to run the others: reproduce verify --config all --data {data} --template V23" in result.stderr


@pytest.mark.parametrize("command", ["verify", "score", "rebase", "serve"])
def test_the_preflight_names_the_command_that_runs_it(fresh_dsn: str, tmp_path: Path, command: str) -> None:
    from reproduce import configs, dataset

    data = dem_us_empty(fresh_dsn, tmp_path)
    predictions = tmp_path / "run.jsonl"
    records = dataset.load(data, configs.select("all", ["R1", "V23"])).records
    predictions.write_text("".join(json.dumps({"id": record.id, "sql": record.sql}) + "\n" for record in records))
    words = {"verify": ["verify"], "score": ["score", predictions], "rebase": ["rebase", "--out", tmp_path / "out"],
             "serve": ["serve"]}[command]
    selection = ["--config", "all", "--data", data, "--dsn", fresh_dsn, "--template", "R1", "--template", "V23"]
    result = run(*words, *selection)
    assert result.returncode == 2
    assert result.stderr == (
        "error: the database is not ready: table public.dem_us is empty. Load the missing data (`make db`, "
        "`ingest all`; `reproduce check` shows every table); the templates that read them: R1; to run the others: "
        f"reproduce {' '.join(map(str, words))} --config all --data {data} --template V23\n")


def test_skipped_questions_are_grouped_with_their_reason(db: str, data: Path) -> None:
    result = verify(db, data, "--template", "R1", "--template", "R5")
    assert "20 skipped [R5]: file qa2/raster_only/slope+poi.jsonl is not in" in result.stdout
    from reproduce import configs, dataset
    from reproduce.reports.console import skips
    from reproduce.verify import _skipped

    vector = dataset.load(DATA / "benchmark", [configs.template("V1")])
    [line] = skips([_skipped(skip) for skip in vector.skipped]).splitlines()
    assert line.startswith("97 skipped [V1]: file vector/T1/") and line.endswith("(and 96 more like it)")


def test_baseline_lists_regressions_first(db: str, data: Path, tmp_path: Path) -> None:
    previous = {"results": [{"id": IDS["pass"], "status": "mismatch"}, {"id": IDS["mismatch"], "status": "pass"},
                            {"id": IDS["sql_error"], "status": "error"}]}  # an older report's word for it
    (tmp_path / "before.json").write_text(json.dumps(previous))
    result = verify(db, data, "--id", IDS["pass"], "--id", IDS["mismatch"], "--id", IDS["sql_error"],
                    "--baseline", str(tmp_path / "before.json"))
    tail = result.stdout.split("2 status changes since the baseline (1 regressions):\n")[1]
    expected = [f"REGRESSION {IDS['mismatch']}: pass -> fail", f"{IDS['pass']}: fail -> pass"]
    assert [line.strip() for line in tail.splitlines()] == expected


def test_resume_skips_finished_questions_and_refuses_another_setup(db: str, data: Path, tmp_path: Path) -> None:
    resume = tmp_path / "resume.jsonl"
    first = verify(db, data, "--resume", str(resume))
    lines = resume.read_text().splitlines()
    assert first.returncode == 1 and len(lines) == 6 and json.loads(lines[0])["timeout"] == 1.0
    again = verify(db, data, "--resume", str(resume), "--json-out", str(tmp_path / "again.json"))
    assert again.returncode == 1 and len(resume.read_text().splitlines()) == 6  # nothing re-run
    assert json.loads((tmp_path / "again.json").read_text())["summary"]["gold"]["total/all"]["timeout"] == 1
    refused = verify(db, data, "--resume", str(resume), "--timeout", "2")
    assert refused.returncode == 2 and "another timeout" in refused.stderr
    narrowed = verify(db, data, "--resume", str(resume), "--id", IDS["pass"])
    assert narrowed.returncode == 2
    assert f"was written for another selection (selection: {{'config': 'raster_only', 'templates': [], 'ids': []}} " \
           f"now {{'config': 'raster_only', 'templates': [], 'ids': ['{IDS['pass']}']}})" in narrowed.stderr
    forced = run("verify", "--config", "raster_only", "--data", str(data), "--dsn", db, "--timeout", "2",
                 "--resume", str(resume), "--force")
    assert forced.returncode == 1


def test_ctrl_c_cancels_running_queries_and_exits_130(db: str, tmp_path: Path) -> None:
    sleepers = write_questions(tmp_path, {f"s{n}": (f"SELECT pg_sleep(60)::text AS x {FROM_DEM}", 1.0)
                                          for n in range(4)})
    resume = tmp_path / "resume.jsonl"
    process = subprocess.Popen([str(BIN / "reproduce"), "verify", "--config", "raster_only", "--data", str(sleepers),
                                "--dsn", db, "--timeout", "60", "--workers", "2", "--resume", str(resume)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while len(running_sandbox_queries(db)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(running_sandbox_queries(db)) == 2
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=15)
    assert process.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr
    assert running_sandbox_queries(db) == []
    assert [json.loads(line)["format"] for line in resume.read_text().splitlines()] == ["gsqa-reproduce-resume/1"]


def test_show_prints_sql_answers_and_verdict_per_component(db: str, data: Path) -> None:
    shown = run("show", IDS["mismatch"], "--data", str(data), "--dsn", db)
    assert shown.returncode == 1
    assert "-- SQL\nSELECT 120.5 AS elevation" in shown.stdout
    assert '-- stored answer (1 rows)\n{"elevation": 100.0}' in shown.stdout
    assert '-- actual result (1 rows' in shown.stdout and '{"elevation": 120.5}' in shown.stdout
    assert "FAIL elevation: elevation (m) = 20.5 (threshold 10.0); stored 100.0, got 120.5" in shown.stdout
    passed = run("show", IDS["pass"], "--data", str(data), "--dsn", db)
    assert passed.returncode == 0 and "-- strict verdict: pass" in passed.stdout and "-- exact: yes" in passed.stdout
    assert "\n-- paper verdict: pass: " in passed.stdout  # both verdicts named as the reports name them
    unknown = run("show", "raster_only/nope/1", "--data", str(data), "--dsn", db)
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: unknown question id")


def test_show_prints_stored_and_returned_geometries_both_as_wkt(db: str, tmp_path: Path) -> None:
    folder = tmp_path / "qa2" / "raster_only"
    folder.mkdir(parents=True)
    (folder / "elevation+poi.jsonl").write_text(json.dumps({
        "question": "where?", "answers": [{"elevation": 100.0, "geometry": "POINT (1 2)"}],
        "sql": f"SELECT 100.0 AS elevation, ST_SetSRID(ST_MakePoint(1, 2), 4326)::geography AS geometry {FROM_DEM}",
        "answer_type": "elevation - point based", "question_entities": {}}) + "\n")
    shown = run("show", "raster_only/elevation+poi/0", "--data", str(tmp_path), "--dsn", db)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count('{"elevation": 100.0, "geometry": "POINT (1 2)"}') == 2  # stored, then returned


def test_show_and_id_take_every_id_scheme(db: str, data: Path) -> None:
    number = IDS["pass"].rsplit("/", 1)[1]
    canonical = run("show", IDS["pass"], "--data", str(data), "--dsn", db)
    for scheme in (f"elevation+poi-{number}", f"raster_only:elevation+poi:{number}"):
        shown = run("show", scheme, "--data", str(data), "--dsn", db)
        assert (shown.returncode, shown.stdout.splitlines()[:4]) == (0, canonical.stdout.splitlines()[:4])
    selected = verify(db, data, "--id", f"elevation+poi-{number}")
    assert selected.returncode == 0 and selected.stdout.splitlines()[1].split()[:3] == ["raster_only", "R1", "1"]
