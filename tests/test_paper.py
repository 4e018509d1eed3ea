"""The paper's scoring beside the strict verdict: both accept every stored answer, and each class of
disagreement (docs/BENCHMARK-FORMAT.md, "Two verdicts") on a real record with a perturbed result."""

from __future__ import annotations

import pytest
from conftest import DATA

from reproduce import compare, configs, dataset
from reproduce.paper import paper_verdict


@pytest.fixture(scope="module")
def records() -> dict[str, dataset.Record]:
    loaded = dataset.load(DATA / "benchmark", configs.templates_of("all"))
    return {record.id: record for record in loaded.records}


def verdicts(record: dataset.Record, actual: list[dict]) -> tuple[str, str]:
    return (compare.judge(record.template_id, record.answers, actual).status,
            paper_verdict(record.template_id, record.answers, actual).status)


def test_both_accept_every_stored_answer(records: dict[str, dataset.Record]) -> None:
    assert len(records) == 393
    for record in records.values():
        assert verdicts(record, record.answers) == ("pass", "pass"), record.id


def test_an_extra_row_fails_strict_but_not_the_paper(records: dict[str, dataset.Record]) -> None:
    record = records["raster_only/aspect+poi/0"]
    assert verdicts(record, record.answers * 2) == ("mismatch", "pass")


def test_a_dropped_row_fails_strict_but_not_the_paper(records: dict[str, dataset.Record]) -> None:
    record = records["vector/range+loc/1"]
    assert len(record.answers) == 11
    assert verdicts(record, record.answers[:-1]) == ("mismatch", "pass")


def test_cross_matching_passes_the_paper_only(records: dict[str, dataset.Record]) -> None:
    record = records["vector/range+distance/1"]
    scaled = [dict(row, distance=row["distance"] * 1.06) for row in record.answers]  # every row 6 % off
    assert verdicts(record, scaled) == ("mismatch", "pass")  # a shifted row lands within 5 % of another one
    reason = paper_verdict(record.template_id, record.answers, scaled).reason
    assert reason.startswith("best pair: distance relative error")


def test_one_name_of_a_multi_row_answer_passes_the_paper_only(records: dict[str, dataset.Record]) -> None:
    record = records["vector/range+name/0"]
    assert len(record.answers) == 111
    assert verdicts(record, record.answers[5:6]) == ("mismatch", "pass")


def test_a_negative_aspect_is_flat_in_both_verdicts(records: dict[str, dataset.Record]) -> None:
    """ST_Aspect gives -1 for a flat cell: flat against a sloped reference is a difference in the data, so
    both verdicts fail it, although the authors' arithmetic (4.0 degrees on the circle) would pass it."""
    record = records["raster_only/aspect+poi/12"]
    assert record.answers == [{"aspect_degrees": pytest.approx(3.814, abs=1e-3)}]
    assert verdicts(record, [{"aspect_degrees": -1.0}]) == ("mismatch", "mismatch")
    assert verdicts(record, [{"aspect_degrees": 359.0}]) == ("pass", "pass")  # on the circle: 4.8 degrees
    assert verdicts(record, [{"aspect_degrees": 200.0}]) == ("mismatch", "mismatch")


def test_large_answers_are_searched_not_paired_exhaustively(records: dict[str, dataset.Record]) -> None:
    """Thousands of rows on both sides: the index finds the passing pair (and a failing one fails)."""
    from reproduce.paper import ALL_PAIRS_UP_TO

    big = max(records.values(), key=lambda record: len(record.answers))  # a V21 answer of 330 rows
    assert len(big.answers) ** 2 > ALL_PAIRS_UP_TO
    assert paper_verdict(big.template_id, big.answers, big.answers[::-1]).status == "pass"
    assert paper_verdict(big.template_id, big.answers, [{"angle": 1e9}]).status == "mismatch"
    names = [{"poi_name": f"Harbour View Cafe {n}", "geometry": f"POINT (-73.{n:05d} 40.5)"} for n in range(3000)]
    assert paper_verdict("V1", names, names[::-1]).status == "pass"
    assert paper_verdict("V1", names, [{"poi_name": "Mountain Inn"}]).status == "mismatch"
    assert paper_verdict("V13", names, names[1500:1501]).status == "pass"  # locations, through the latitude index
