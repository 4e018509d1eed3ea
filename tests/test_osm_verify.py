"""Real vector benchmark SQL against tables that `ingest osm` loaded: the stored answers hold.

The osmx layers are made from the stored answer rows of real records (tests/data/benchmark/vector): each
pois or parks row becomes the feature loader 1 would have turned into it (`name` for the name column,
`addr:x` for addr_x, properties.id for osm_id), plus for each POI a nameless twin closer to the question's
anchor, which loader 1's filter drops. If `ingest osm` applied its rules
wrongly, the range, KNN, angle, distance and area questions would see other rows.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from osm_helpers import feature, write_layer
from shapely import from_wkt
from shapely.geometry import mapping

from reproduce import configs, dataset
from reproduce.session import RunRequest
from reproduce.verify import verify

DATA = Path(__file__).parent / "data" / "benchmark"
BIN = Path(sys.executable).parent
COMPUTED = {"id", "geometry", "osm_id", "value", "angle", "distance", "computed_area"}
NAME_COLUMNS = {"poi_name": "pois", "park_name": "parks"}


def osmx_feature(row: dict[str, Any]) -> tuple[str, dict]:
    """The layer and osmx feature that loader 1 turns into this answer row."""
    name_column = next(column for column in NAME_COLUMNS if column in row)
    tags = {"name": row[name_column]}
    for column, value in row.items():
        if column not in COMPUTED and column != name_column:
            tags[column.replace("_", ":") if column.startswith("addr_") else column] = value
    geometry = mapping(from_wkt(row["geometry"]))
    return NAME_COLUMNS[name_column], feature(geometry, row["osm_id"], tags)


def nameless_twin(item: dict, anchor: tuple[float, float]) -> dict:
    """The feature without its name, a tenth of the way towards the question's anchor: loader 1 drops it,
    and a KNN question would answer with it if it were loaded."""
    x, y = item["geometry"]["coordinates"]
    tags = {key: value for key, value in item["properties"]["tagsMap"].items() if key != "name"}
    return feature({"type": "Point", "coordinates": [x + (anchor[0] - x) / 10, y + (anchor[1] - y) / 10]},
                   item["properties"]["id"] + 1, tags)


def write_answer_layers(records: list[dataset.Record], folder: Path) -> None:
    layers: dict[str, dict[Any, dict]] = {"pois": {}, "parks": {}}
    decoys = []
    for record in records:
        point = re.search(r"POINT \((-?[\d.]+) (-?[\d.]+)\)", record.sql)  # V11's anchor is a region
        for row in record.answers:
            layer, item = osmx_feature(row)
            layers[layer][row["osm_id"]] = item
            if point:
                decoys.append(nameless_twin(item, (float(point[1]), float(point[2]))))
    write_layer(folder / "pois" / "part-0.geojson", list(layers["pois"].values())[::2] + decoys)
    write_layer(folder / "pois" / "part-1.geojson", list(layers["pois"].values())[1::2])
    write_layer(folder / "parks" / "parks.geojson", list(layers["parks"].values()))


# (template, question index) of the records used here: pois and parks answers with a handful of rows.
CHOSEN = {("V1", 1), ("V5", 0), ("V10", 0), ("V11", 0), ("V13", 4), ("V21", 4), ("V25", 4), ("V26", 0)}


@pytest.fixture(scope="module")
def records() -> list[dataset.Record]:
    loaded = [record for record in dataset.load(DATA, configs.templates_of("vector")).records
              if (record.template_id, int(record.id.rsplit("/", 1)[1])) in CHOSEN]
    assert len(loaded) == len(CHOSEN)
    return loaded


def test_stored_answers_hold_on_the_loaded_tables(initialized_dsn: str, records: list[dataset.Record],
                                                 tmp_path: Path) -> None:
    write_answer_layers(records, tmp_path / "osm_extract")
    load = subprocess.run([str(BIN / "ingest"), "osm", str(tmp_path), "--dsn", initialized_dsn],
                          capture_output=True, text=True, timeout=300)
    assert load.returncode == 0, load.stderr
    finalize = subprocess.run([str(BIN / "ingest"), "finalize", "--dsn", initialized_dsn],
                              capture_output=True, text=True, timeout=300)
    assert finalize.returncode == 0, finalize.stderr
    data = tmp_path / "data"
    shutil.copytree(DATA, data)
    run = verify(RunRequest(config="vector", data=data, dsn=initialized_dsn, timeout=30.0, workers=2,
                            ids=[r.id for r in records], progress=False))
    outcomes = {result.id: (result.word("strict"), result.detail.get("failure")) for result in run.results}
    assert len(outcomes) == 8
    assert {status for status, _ in outcomes.values()} == {"pass"}, outcomes
