"""`reproduce rebase` on a fixture database where the stored R1-R4 answers hold: unchanged it gives them back,
shifted it re-bases them with a drift report, and `verify` passes every question of what it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest
import yaml
from conftest import DATA

from reproduce import configs, dataset
from reproduce.judging import strict
from reproduce.rebase import rebase
from reproduce.session import RunRequest
from reproduce.verify import verify
from testkit.cli import reproduce
from testkit.refdb import load_stored_answers

TEMPLATES = ["R1", "R2", "R3", "R4"]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def stored() -> list[dataset.Record]:
    return dataset.load(DATA / "benchmark", [configs.template(t) for t in TEMPLATES]).records


@pytest.fixture
def stored_db(new_database, stored: list[dataset.Record]) -> str:
    dsn = new_database("rebase", initialized=True)
    with psycopg.connect(dsn) as conn:
        load_stored_answers(conn, stored)
    return dsn


def request(dsn: str, data: Path) -> RunRequest:
    return RunRequest(config="raster_only", data=data, dsn=dsn, timeout=10.0, workers=2, templates=list(TEMPLATES),
                      progress=False)


def test_an_unchanged_database_gives_the_stored_answers_back(stored_db: str, stored: list[dataset.Record],
                                                             tmp_path: Path) -> None:
    report = rebase(request(stored_db, DATA / "benchmark"), tmp_path / "out")
    assert {item.status for item in report.rebased} == {"held"} and len(report.rebased) == 80
    rebased = {r.id: r for r in dataset.load(tmp_path / "out", [configs.template(t) for t in TEMPLATES]).records}
    for record in stored:
        again = rebased[record.id]
        assert strict.exact_diff(record.template_id, record.answers, again.answers).exact, record.id
        assert replace(again, answers=record.answers) == record  # everything else as it was
    drift = json.loads((tmp_path / "out" / "drift.json").read_text())
    assert drift["templates"]["R1"] == {"questions": 20, "held": 20, "changed": 0, "empty": 0, "timeout": 0,
                                        "sql_error": 0, "unstable": 20, "change_in_tolerances": None, "by_measure": {
                                            "elevation: elevation (m)": {"answers": 20, "min": 0.0, "median": 0.0,
                                                                         "max": 0.0}}}


def test_the_hugging_face_layout_round_trips_through_the_reader(stored_db: str, stored: list[dataset.Record],
                                                                tmp_path: Path) -> None:
    result = reproduce("rebase", "--config", "raster_only", "--data",
                             str(DATA / "benchmark"), "--dsn", stored_db, "--out", str(tmp_path / "hf"),
                             "--format", "parquet", *sum((["--template", t] for t in TEMPLATES), []))
    assert result.returncode == 0, result.stderr
    assert [p.name for p in (tmp_path / "hf" / "raster_only").iterdir()] == ["test-00000-of-00001.parquet"]
    card = (tmp_path / "hf" / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["configs"] == [{"config_name": "raster_only",
                                 "data_files": [{"split": "test", "path": "raster_only/*.parquet"}]}]
    assert front["license"] == "odbl" and front["rebase"]["command"].startswith("reproduce rebase --config")
    assert front["rebase"]["database"]["row_counts"]["dem_us"] > 0 and "ODbL" in card
    again = dataset.load(tmp_path / "hf", [configs.template(t) for t in TEMPLATES]).records
    assert [record.id for record in again] == [record.id for record in stored]
    for record, read in zip(stored, again, strict=True):  # everything as it was; the answers equal, strictly
        assert strict.exact_diff(record.template_id, record.answers, read.answers).exact, record.id
        assert replace(read, answers=record.answers) == record
    assert {r.word("strict") for r in verify(request(stored_db, tmp_path / "hf")).results} == {"pass"}


def test_a_resumed_rebase_runs_only_what_is_missing_and_writes_the_same(stored_db: str, tmp_path: Path) -> None:
    def run(out: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return reproduce("rebase", "--config", "raster_only", "--data",
                               str(DATA / "benchmark"), "--dsn", stored_db, "--out", str(tmp_path / out), *extra,
                               *sum((["--template", t] for t in TEMPLATES), []))

    resume = tmp_path / "rebase.resume"
    assert run("whole", "--resume", str(resume)).returncode == 0
    lines = resume.read_text().splitlines()
    assert len(lines) == 81 and json.loads(lines[0])["format"] == "gsqa-reproduce-rebase-resume/1"
    resume.write_text("\n".join(lines[:41]) + "\n" + lines[41][:30])  # as a kill leaves it: a line cut short
    again = run("resumed", "--resume", str(resume))
    assert again.returncode == 0, again.stderr
    assert len(resume.read_text().splitlines()) == 81  # the 40 missing questions ran again, the others did not
    for path in (tmp_path / "whole").rglob("*.jsonl"):
        resumed = (tmp_path / "resumed" / path.relative_to(tmp_path / "whole")).read_text().splitlines()
        for before, after in zip(path.read_text().splitlines(), resumed, strict=True):
            before, after = json.loads(before), json.loads(after)
            before["rebase"].pop("seconds"), after["rebase"].pop("seconds")
            assert before == after
    other = run("other", "--resume", str(resume), "--timeout", "5")
    assert other.returncode == 2 and "written for another timeout" in other.stderr
    verify_file = tmp_path / "verify.resume"
    verify_file.write_text('{"format": "gsqa-reproduce-resume/1"}\n')
    refused = run("third", "--resume", str(verify_file))
    assert refused.returncode == 2 and "not a resume file of `reproduce rebase`" in refused.stderr


def test_what_a_killed_write_left_behind_is_replaced(stored_db: str, tmp_path: Path) -> None:
    left = tmp_path / "out.partial" / "qa2" / "raster_only"
    left.mkdir(parents=True)
    (left / "elevation+poi.jsonl").write_text('{"question": "half a recor')
    assert not (tmp_path / "out").exists()  # the reader finds no dataset where the user asked for one
    rebase(request(stored_db, DATA / "benchmark"), tmp_path / "out")
    assert not (tmp_path / "out.partial").exists()
    assert len(dataset.load(tmp_path / "out", [configs.template(t) for t in TEMPLATES]).records) == 80


def test_an_unknown_format_is_a_usage_error(tmp_path: Path) -> None:
    result = reproduce("rebase", "--config", "raster_only", "--out",
                             str(tmp_path / "x"), "--format", "csv")
    assert result.returncode == 2 and "'csv' is not one of jsonl, parquet" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_shifted_database_is_rebased_and_verify_passes_what_rebase_wrote(stored_db: str, tmp_path: Path) -> None:
    with psycopg.connect(stored_db) as conn:  # 25 m higher everywhere: beyond the 10 m tolerance
        conn.execute("UPDATE dem_us SET rast = ST_MapAlgebra(rast, 1, '16BSI', '[rast] + 25')")
    result = reproduce("rebase", "--config", "raster_only", "--data",
                             str(DATA / "benchmark"), "--dsn", stored_db, "--out", str(tmp_path / "out"),
                             *sum((["--template", t] for t in TEMPLATES), []))
    assert result.returncode == 0, result.stderr
    drift = json.loads((tmp_path / "out" / "drift.json").read_text())
    assert drift["templates"]["R1"]["changed"] == 20 and drift["templates"]["R1"]["change_in_tolerances"]["min"] > 2
    assert drift["templates"]["R3"]["held"] == 20  # differences of two elevations do not move
    assert len(drift["largest_changes"]) == 20  # flipped yes/no answers (R4) rank first, then elevations
    assert any(item["change"].startswith("elevation: elevation (m) 25") for item in drift["largest_changes"])
    assert "| R1 | 20 | 0 | 20 | 0 | 0 | 0 | 20 |" in (tmp_path / "out" / "DRIFT.md").read_text()
    assert drift["templates"]["R1"]["by_measure"]["elevation: elevation (m)"] == {"answers": 20, "min": 25.0,
                                                                                  "median": 25.0, "max": 25.0}
    assert "| R1 | elevation: elevation (m) | 20 | 25 | 25 | 25 |" in (tmp_path / "out" / "DRIFT.md").read_text()
    line = json.loads((tmp_path / "out" / "qa2/raster_only/elevation+poi.jsonl").read_text().splitlines()[0])
    assert line["answers"][0]["elevation"] == line["rebase"]["old_answers"][0]["elevation"] + 25
    assert line["rebase"]["verdict"] == "changed" and line["rebase"]["unstable"]
    again = verify(request(stored_db, tmp_path / "out"))
    assert {r.word("strict") for r in again.results} == {"pass"} and len(again.results) == 80
    assert "ODbL" in (tmp_path / "out" / "README.md").read_text()


def test_a_question_without_a_new_answer_keeps_its_old_one(stored_db: str, tmp_path: Path) -> None:
    with psycopg.connect(stored_db) as conn:
        conn.execute("TRUNCATE dem_us")
        conn.execute("INSERT INTO dem_us (rast, filename) SELECT ST_MakeEmptyRaster(1, 1, 0, 0, 1), 'far away'")
    report = rebase(request(stored_db, DATA / "benchmark"), tmp_path / "out")
    assert report.exit_code == 1 and {item.status for item in report.rebased if item.record.template_id == "R1"} == {
        "empty"}
    line = json.loads((tmp_path / "out" / "qa2/raster_only/elevation+poi.jsonl").read_text().splitlines()[0])
    assert line["rebase"]["kept_old"] and line["answers"] == line["rebase"]["old_answers"]
    assert "## No new answer" in (tmp_path / "out" / "DRIFT.md").read_text()


def test_an_existing_output_folder_is_refused(stored_db: str, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = reproduce("rebase", "--config", "raster_only", "--data",
                             str(DATA / "benchmark"), "--dsn", stored_db, "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "exists and is not empty" in result.stderr
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
