"""The other templates: their real SQL runs against a fixture database, and the answers computed there are
judged by the template's metric (docs/BENCHMARK-FORMAT.md, Tolerances) when moved just inside / beyond tolerance.

The fixture: a DEM covering every geometry of the SQL, the pois/parks/lakes/roads rows of the stored
answers, and one road per VR5 question. To keep the suite fast, vector templates run a sample of their
questions (the heavy polygon templates take about 0.5 s each); every real record is judged DB-free in
test_compare.py.
"""

from __future__ import annotations

import dataclasses

import psycopg
import pytest
from conftest import DATA
from perturb import EXPECTED, perturbed

from reproduce import configs, dataset
from reproduce.dataset import tables_needed
from reproduce.judging import strict
from reproduce.session import RunRequest
from reproduce.verify import verify
from testkit.refdb import load_computed_fixture

STORED = {"R1", "R2", "R3", "R4", "VR1", "VR2", "VR3"}  # test_verify_stored.py
PER_VECTOR_TEMPLATE = 3


@pytest.fixture(scope="module")
def sample() -> list[dataset.Record]:
    records = dataset.load(DATA / "benchmark", configs.templates_of("all")).records
    taken: dict[str, int] = {}
    chosen = []
    for record in records:
        if record.template_id in STORED:
            continue
        if record.group == "vector":
            taken[record.template_id] = taken.get(record.template_id, 0) + 1
            if taken[record.template_id] > PER_VECTOR_TEMPLATE:
                continue
        chosen.append(record)
    return chosen


@pytest.fixture(scope="module")
def computed_db(initialized_dsn: str, sample: list[dataset.Record]) -> str:
    with psycopg.connect(initialized_dsn) as conn:
        load_computed_fixture(conn, sample)
    return initialized_dsn


@pytest.fixture(scope="module")
def outcomes(computed_db: str, sample: list[dataset.Record]) -> dict[str, tuple[dataset.Record, object]]:
    from gsqa_core.roles import login_dsn
    from gsqa_core.sandbox import READER
    from reproduce.runner import Runner

    return {record.id: (record, outcome) for record, outcome in Runner(login_dsn(computed_db, READER), 10.0, 2)
            .run(sample)}


def test_the_sample_covers_every_present_template(sample: list[dataset.Record]) -> None:
    present = {record.template_id for record in sample}
    assert present == set(EXPECTED) - STORED
    assert set(tables_needed(sample)) == {"dem_us", "lakes", "parks", "pois", "roads"}


def test_every_sampled_question_runs_without_error_or_timeout(outcomes: dict) -> None:
    failed = {rid: outcome.error for rid, (_, outcome) in outcomes.items() if outcome.kind != "rows"}
    assert failed == {}


def test_raster_answers_computed_on_the_fixture_are_values(outcomes: dict) -> None:
    for record, outcome in outcomes.values():
        if record.group != "vector":
            assert outcome.rows, record.id
            for key, _ in EXPECTED[record.template_id]:
                assert outcome.rows[0].get(key) is not None, (record.id, key, outcome.rows)


def test_computed_answers_are_judged_by_the_template_metric(outcomes: dict) -> None:
    judged = set()
    for record, outcome in outcomes.values():
        computed = outcome.rows
        for key, metric in EXPECTED[record.template_id]:
            if not computed or not any(row.get(key) is not None for row in computed) and key != "*name":
                continue
            if metric in ("name", "names") and not any(c.isalnum() for c in str(computed)):
                continue
            gold = dataclasses.replace(record, answers=computed)
            assert strict.strict_verdict(record.template_id, gold.answers, computed).status == "pass"
            inside = strict.strict_verdict(record.template_id, gold.answers, perturbed(computed, key, metric, True))
            beyond = strict.strict_verdict(record.template_id, gold.answers, perturbed(computed, key, metric, False))
            assert (inside.status, beyond.status) == ("pass", "fail"), (record.id, key, inside.first_failure)
            judged.add(record.template_id)
    assert judged >= {"R5", "R6", "R7", "R8", "R9", "R10", "R11", "VR5", "V5", "V13", "V21", "V25"}


def test_verify_reports_the_computed_fixture_run(computed_db: str) -> None:
    request = RunRequest(config="raster_only", data=DATA / "benchmark", dsn=computed_db, timeout=10.0, workers=2,
                         templates=["R5", "R6", "R7", "R10"], progress=False)
    results = verify(request).results
    assert len(results) == 80 and {r.word("strict") for r in results} <= {"pass", "fail"}
    mismatch = next(r for r in results if r.word("strict") == "fail")  # the ramp DEM is not the real terrain
    assert mismatch.detail["failure"]["component"] in {"slope_degrees", "aspect_degrees", "tri_value"}
