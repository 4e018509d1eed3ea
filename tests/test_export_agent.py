"""The same answers from the files: a scripted code agent that reads only the export of the demo database
(geopandas for V5, the nearest museum to a hotel; rasterio sampling the VRT for R1, the elevation at a museum)
answers all 120 demo questions, and `reproduce score`, offline, passes every one by our verdict and the
paper's."""

from __future__ import annotations

import json
from pathlib import Path

from reproduce import configs, dataset
from testkit.cli import reproduce
from testkit.code_agent import answer_here

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/gsqa_nowhere"  # the agent and the score need no database


def test_a_code_agent_on_the_export_answers_all_120_demo_questions(demo_export: Path, demo_db: tuple[str, Path],
                                                                   tmp_path: Path) -> None:
    data = demo_db[1] / "benchmark"
    records = dataset.load(data, [configs.template("R1"), configs.template("V5")]).records
    predictions = tmp_path / "code-agent.jsonl"
    answers = {record.id: answer_here(record.question, str(demo_export)) for record in records}
    predictions.write_text("".join(json.dumps({"id": qid, "answer": answer}) + "\n" for qid, answer in answers.items()))
    out = tmp_path / "scores.json"
    scored = reproduce("score", predictions, "--config", "all", "--template", "R1", "--template", "V5", "--data",
                       data, "--dsn", UNREACHABLE, "--json-out", out)
    assert scored.returncode == 0, scored.stdout + scored.stderr
    results = json.loads(out.read_text())["results"]
    assert len(results) == 120
    assert {(result["outcome"], result["paper"]) for result in results} == {("ran", "pass")}
