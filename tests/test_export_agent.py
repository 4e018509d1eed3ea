"""The same answers from the files: a scripted code agent that reads only the export of the demo database
(geopandas for V5, the nearest museum to a hotel; rasterio sampling the VRT for R1, the elevation at a museum)
answers all 120 demo questions, and `reproduce score`, offline, passes every one by our verdict and the
paper's."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import geopandas
import pytest
import rasterio
from load_helpers import ingest
from pyproj import Geod

from reproduce import configs, dataset
from testkit.cli import reproduce

UNREACHABLE = "postgresql://nobody@127.0.0.1:1/gsqa_nowhere"  # the agent and the score need no database


@pytest.fixture(scope="module")
def exported(demo_db: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    finalized = ingest("finalize", "--dsn", demo_db[0])  # a copy of a database has no statistics: check wants them
    assert finalized.returncode == 0, finalized.stderr
    folder = tmp_path_factory.mktemp("export") / "out"
    done = ingest("export", str(folder), "--dsn", demo_db[0])
    assert done.returncode == 0, done.stderr
    return folder


class CodeAgent:
    """What a code-writing agent would write for these two templates, given the export's folder."""

    def __init__(self, export: Path) -> None:
        with warnings.catch_warnings():  # geopandas says it computes on the plane; distances below are geodesic
            warnings.simplefilter("ignore", UserWarning)
            self.pois = geopandas.read_parquet(export / "vector" / "pois.parquet")
        self.dem = export / "dem" / "dem_us.vrt"
        self.geod = Geod(ellps="WGS84")

    def answer(self, question: str) -> list[dict]:
        if place := re.fullmatch(r"What is the elevation at (.+)\?", question):
            return self.elevation(place[1])
        if place := re.fullmatch(r"What's the closest museum nearby (.+)\?", question):
            return self.nearest_museum(place[1])
        raise AssertionError(f"not a demo question: {question}")

    def elevation(self, name: str) -> list[dict]:
        point = self.pois.loc[self.pois.poi_name == name, "geometry"].iloc[0]
        with rasterio.open(self.dem) as dem:
            [value] = next(dem.sample([(point.x, point.y)]))
        return [{"elevation": float(value)}]

    def nearest_museum(self, name: str) -> list[dict]:
        hotel = self.pois.loc[self.pois.poi_name == name, "geometry"].iloc[0]
        museums = self.pois[self.pois.tourism == "museum"]
        _, _, metres = self.geod.inv([hotel.x] * len(museums), [hotel.y] * len(museums), museums.geometry.x,
                                     museums.geometry.y)
        nearest = museums.iloc[int(metres.argmin())]
        return [{"id": int(nearest.id), "geometry": nearest.geometry.wkt, "poi_name": nearest.poi_name,
                 "osm_id": int(nearest.osm_id), "tourism": nearest.tourism}]


def test_a_code_agent_on_the_export_answers_all_120_demo_questions(exported: Path, demo_db: tuple[str, Path],
                                                                   tmp_path: Path) -> None:
    data = demo_db[1] / "benchmark"
    records = dataset.load(data, [configs.template("R1"), configs.template("V5")]).records
    agent = CodeAgent(exported)
    predictions = tmp_path / "code-agent.jsonl"
    predictions.write_text("".join(json.dumps({"id": record.id, "answer": agent.answer(record.question)}) + "\n"
                                   for record in records))
    out = tmp_path / "scores.json"
    scored = reproduce("score", predictions, "--config", "all", "--template", "R1", "--template", "V5", "--data",
                       data, "--dsn", UNREACHABLE, "--json-out", out)
    assert scored.returncode == 0, scored.stdout + scored.stderr
    results = json.loads(out.read_text())["results"]
    assert len(results) == 120
    assert {(result["outcome"], result["paper"]) for result in results} == {("ran", "pass")}
