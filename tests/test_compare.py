"""The tolerances of docs/BENCHMARK-FORMAT.md, Tolerances on the real records, and the strict row comparison."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import shapely
from conftest import DATA
from perturb import EXPECTED, perturbed

from reproduce import configs, dataset
from reproduce.judging import instability, strict, tolerances, values
from reproduce.judging.paper import paper_verdict

BENCHMARK = DATA / "benchmark"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def records() -> list[dataset.Record]:
    return dataset.load(Path(BENCHMARK), configs.templates_of("all")).records


def test_token_f1_is_the_multiset_definition() -> None:
    assert tolerances.token_f1("Cafe Cafe Roma", "cafe roma") == pytest.approx(0.8)  # c=2, P=2/3, R=1
    assert tolerances.token_f1("Café", "Cafe") == 0.0  # é is not in [a-z0-9]
    assert tolerances.token_f1("", "x") == 0.0 and tolerances.token_f1("x", "") == 0.0
    assert tolerances.NAME.passes(tolerances.token_f1("a a b", "a b")) and not tolerances.NAME.passes(0.79)


def test_haversine_reads_wkt_and_hex_ewkb() -> None:
    ewkb = "0101000020E6100000000000000000F03F0000000000000040"  # SRID=4326;POINT(1 2)
    assert tolerances.haversine_m(ewkb, "POINT (1 2)") == 0.0
    assert tolerances.haversine_m("POINT (0 0)", "POINT (0 1)") == pytest.approx(math.pi / 180 * 6_371_008.8)
    assert tolerances.haversine_m("POINT (0 0)", "not a geometry") == math.inf


@pytest.mark.parametrize("actual, gold, error", [(359.0, 3.0, 4.0), (0.0, 354.9, 5.1), (-1.0, -1.0, 0.0),
                                                 (-1.0, 10.0, math.inf), (10.0, -1.0, math.inf)])
def test_aspect_is_circular_and_flat_only_matches_flat(actual: float, gold: float, error: float) -> None:
    assert tolerances.aspect_error(actual, gold) == pytest.approx(error)


def test_relative_error_with_gold_zero_accepts_only_zero() -> None:
    assert tolerances.relative_error(0, 0) == 0.0
    assert tolerances.relative_error(0.001, 0) == math.inf
    assert tolerances.relative_error(105, 100) == pytest.approx(0.05) and tolerances.RELATIVE.passes(0.05)


def test_yes_no_ignores_case_and_whitespace_only() -> None:
    assert tolerances.yes_no_error(" YES ", "yes") == 0.0
    assert tolerances.yes_no_error("yes.", "yes") == 1.0


def test_every_template_has_the_documented_components() -> None:
    """Each documented template's components: the answer key it reads and the metric with its tolerance."""
    metrics = {"names": (tolerances.NAME, True), "name": (tolerances.NAME, False),
               "location": (tolerances.LOCATION, False),
               "angle": (tolerances.ANGLE, False), "aspect": (tolerances.ASPECT, False),
               "elevation": (tolerances.ELEVATION, False), "slope": (tolerances.SLOPE, False),
               "relative": (tolerances.RELATIVE, False), "yesno": (tolerances.YES_NO, False)}
    for template_id, expected in EXPECTED.items():
        declared = tolerances.components_of(template_id)
        assert len(declared) == len(expected), template_id
        for component, (key, metric) in zip(declared, expected, strict=True):
            assert (component.metric, component.joined) == metrics[metric], template_id
            assert (component.label == "name") if key == "*name" else key in component.keys, template_id
    for template in configs.TEMPLATES:
        assert tolerances.components_of(template.id)  # an undeclared template would raise


def test_the_documented_components_table_is_the_declaration() -> None:
    assert tolerances.components_markdown() in (ROOT / "docs" / "BENCHMARK-FORMAT.md").read_text()


@pytest.mark.parametrize("template_id, gold, answer", [
    ("R2", [{"higher_poi": "Mount Tamalpais"}], [{"name": "Mount Tamalpais"}]),
    ("R11", [{"answer_name": "Route A"}], [{"name": "Route A"}]),
    ("VR5", [{"road_name": "Main Street", "dist_m": 36.3, "slope_deg": 2.0}],
     [{"name": "Main Street", "distance": 36.0, "slope": 2.5}]),
    ("R5", [{"slope_degrees": 3.0}], [{"slope": 3.5}]),
])
def test_the_authors_column_names_are_accepted(template_id: str, gold: list, answer: list) -> None:
    assert strict.strict_verdict(template_id, gold, answer).status == "pass"
    assert paper_verdict(template_id, gold, answer).status == "pass"


def test_stored_answers_judged_against_themselves_pass_exactly(records: list[dataset.Record]) -> None:
    for record in records:
        assert strict.strict_verdict(record.template_id, record.answers, record.answers).status == "pass", record.id
        assert strict.exact_diff(record.template_id, record.answers, record.answers).exact, record.id


def _returned(record: dataset.Record) -> list[dict]:
    """What the SQL gives back: a V11/V12 stored row held twice comes back once (docs/BENCHMARK-FORMAT.md 3.1)."""
    answers = record.answers
    doubled = record.template_id in ("V11", "V12") and len(answers) == 2 and answers[0] == answers[1]
    return answers[:1] if doubled else answers


def _judgements(record: dataset.Record, key: str, metric: str) -> tuple[strict.Verdict, strict.Verdict]:
    returned = _returned(record)
    inside = strict.strict_verdict(record.template_id, record.answers, perturbed(returned, key, metric, True))
    beyond = strict.strict_verdict(record.template_id, record.answers, perturbed(returned, key, metric, False))
    return inside, beyond


def test_each_real_record_passes_just_inside_and_fails_just_beyond_each_tolerance(
    records: list[dataset.Record],
) -> None:
    judged = 0
    for record in records:
        for key, metric in EXPECTED[record.template_id]:
            if metric in ("name", "names") and not any(c.isalnum() for c in str(record.answers)):
                continue
            inside, beyond = _judgements(record, key, metric)
            assert inside.status == "pass", (record.id, key, inside.first_failure)
            assert beyond.status == "fail", (record.id, key)
            judged += 1
    assert judged >= len(records)


def test_failure_names_the_component_and_both_values(records: list[dataset.Record]) -> None:
    record = next(r for r in records if r.template_id == "VR5")
    _, beyond = _judgements(record, "dist_m", "relative")
    failure = beyond.first_failure
    assert (failure.component, failure.expected) == ("dist_m", record.answers[0]["dist_m"])
    assert failure.actual == pytest.approx(record.answers[0]["dist_m"] * 1.051)
    assert failure.value == pytest.approx(0.051)


def test_multi_row_answers_are_multisets_with_the_row_count_checked() -> None:
    rows = [{"osm_id": 1, "geometry": "POINT (0 0)"}, {"osm_id": 2, "geometry": "POINT (1 1)"}]
    assert strict.strict_verdict("V13", rows, list(reversed(rows))).status == "pass"
    verdict = strict.strict_verdict("V13", rows, rows[:1])
    assert verdict.status == "fail" and verdict.first_failure.component == "rows"
    assert strict.strict_verdict("V13", rows, []).status == "empty"
    assert strict.strict_verdict("V13", [], []).status == "pass"


def test_exact_ignores_serial_id_and_v7_wikipedia_keys_but_keeps_duplicates() -> None:
    stored = [{"id": 5, "osm_id": 9, "poi_name": "A", "geometry": "POINT (1.000001 2)", "multihop_answer": "1900"}]
    returned = [{"id": 77, "osm_id": 9, "poi_name": "A", "geometry": "POINT (1.0000012 2)"}]
    assert strict.exact_diff("V7", stored, returned).exact
    assert not strict.exact_diff("V5", stored, returned).exact  # multihop_answer counts outside V7
    assert strict.exact_diff("V7", stored * 2, returned).missing  # a multiset: the duplicate is missing


def test_exact_tolerances_are_1e6_relative_and_1e6_degrees() -> None:
    assert strict.exact_diff("V26", [{"distance": 1000.0}], [{"distance": 1000.0005}]).exact
    diff = strict.exact_diff("V26", [{"distance": 1000.0}], [{"distance": 1000.01}])
    assert diff.changed == [{"identity": "row", "differences": {"distance": [1000.0, 1000.01]}}]
    assert not strict.exact_diff("V13", [{"poi_name": "A", "geometry": "POINT (1 2)"}],
                                  [{"poi_name": "A", "geometry": "POINT (1.000002 2)"}]).exact


def test_instability_flags(records: list[dataset.Record]) -> None:
    r1 = next(r for r in records if r.template_id == "R1")
    assert any("LIMIT without ORDER BY" in flag for flag in instability.instability("R1", r1.sql))
    seam = "SELECT ST_Value(rast, 1, ST_GeomFromText('POINT (-87.00001 41.5)',4326)) FROM public.dem_us"
    assert any("seam" in flag for flag in instability.instability("R1", seam))
    edge = "SELECT 1 FROM dem_us WHERE x = ST_GeomFromText('POINT (-87.43125 41.5)',4326)"  # W + 4095/7200
    assert any("internal DEM tile edge" in flag for flag in instability.instability("R1", edge))
    v28 = next(r for r in records if r.template_id == "V28")
    assert any("stale" in flag for flag in instability.instability("V28", v28.sql))


def test_more_rows_than_stored_is_a_mismatch_even_for_one_stored_row() -> None:
    stored = [{"osm_id": 1, "geometry": "POINT (0 0)", "angle": 10.0}]
    extra = {"osm_id": 2, "geometry": "POINT (5 5)", "angle": 100.0}
    for template_id in ("V13", "V21"):
        verdict = strict.strict_verdict(template_id, stored, [*stored, extra])
        assert verdict.status == "fail" and verdict.first_failure.component == "rows", template_id
    assert strict.strict_verdict("R1", [{"elevation": 10}], [{"elevation": 10}, {"elevation": 10}]).status == "fail"


def test_v11_v12_stored_row_held_twice_counts_once_in_the_verdict(records: list[dataset.Record]) -> None:
    doubled = [r for r in records if r.template_id in ("V11", "V12") and len(r.answers) == 2
               and r.answers[0] == r.answers[1]]
    assert len(doubled) >= 5  # docs/BENCHMARK-FORMAT.md, Answers; tests/data carries five of the 24
    for record in doubled:
        returned = [{**record.answers[0], "id": -1}]  # the one row the LIMIT 1 SQL gives, another serial id
        assert strict.strict_verdict(record.template_id, record.answers, returned).status == "pass", record.id
        assert strict.exact_diff(record.template_id, record.answers, returned).missing, record.id
    assert strict.strict_verdict("V1", [{"poi_name": "A"}] * 2, [{"poi_name": "A"}]).status == "fail"  # no key: two


def test_a_feature_stored_under_two_serial_ids_counts_once_in_every_template(records: list[dataset.Record]) -> None:
    """Loader 1's twins (same osm_id, every other value equal but the serial id): returning the feature once
    passes; `exact` still reports the twin as missing (docs/BENCHMARK-FORMAT.md, Answers)."""
    concerned = {}
    for record in records:
        by_osm_id: dict = {}
        for row in record.answers:
            by_osm_id.setdefault(row.get("osm_id"), []).append(row)
        twins = [rows for osm_id, rows in by_osm_id.items() if osm_id is not None and len(rows) == 2
                 and rows[0]["id"] != rows[1]["id"]]
        if twins:
            concerned[record.id] = record.template_id
            once = [row for row in record.answers if all(row is not rows[1] for rows in twins)]
            assert strict.strict_verdict(record.template_id, record.answers, once).status == "pass", record.id
            assert strict.strict_verdict(record.template_id, once, record.answers).status == "pass", record.id
            assert len(strict.exact_diff(record.template_id, record.answers, once).missing) == len(twins)
    assert concerned == {"vector/range+loc/1": "V13", "vector/range+angle/0": "V21",
                         "extended/range+name+elevation_condition/0": "VR1",
                         "extended/range+name+elevation_condition/13": "VR1"}
    other = [{"id": 1, "osm_id": 7, "geometry": "POINT (0 0)"}, {"id": 2, "osm_id": 7, "geometry": "POINT (1 1)"}]
    assert strict.strict_verdict("V13", other, other[:1]).status == "fail"  # another value: another answer row


def test_null_is_never_an_answer() -> None:
    assert strict.strict_verdict("R4", [{"answer": "yes"}], [{}]).status == "fail"
    assert tolerances.yes_no_error(None, None) == math.inf
    assert strict.strict_verdict("R1", [{"elevation": 286.0}], [{}]).status == "fail"  # a NULL pixel: one empty row
    assert strict.strict_verdict("V5", [{"poi_name": "A"}], [{"osm_id": 3}]).status == "fail"


def test_exact_compares_integers_exactly() -> None:
    assert not strict.exact_diff("V23", [{"count": 1_000_000}], [{"count": 1_000_001}]).exact
    assert strict.exact_diff("V23", [{"count": 7}], [{"count": 7.0}]).exact


def test_knn_with_a_lateral_limit_is_flagged_for_both_reasons(records: list[dataset.Record]) -> None:
    vr5 = next(r for r in records if r.template_id == "VR5")
    flags = instability.instability("VR5", vr5.sql)
    assert any("LIMIT without ORDER BY" in flag for flag in flags) and any("tied rows" in flag for flag in flags)


def test_rows_that_carry_only_a_location_pair_by_nearest_geometry(records: list[dataset.Record]) -> None:
    """Every VR2 record answered with its stored points alone, in another order, passes strict; a point moved
    10 m is named by its distance, not as a row count."""
    located = [record for record in records if record.template_id == "VR2"]
    assert len(located) == 20
    for record in located:
        points = [{"geometry": row["geometry"]} for row in record.answers][::-1]
        assert strict.strict_verdict("VR2", record.answers, points).status == "pass", record.id
    record = next(record for record in located if len(record.answers) == 3)
    point = shapely.from_wkt(record.answers[0]["geometry"])
    moved = [{"geometry": f"POINT ({point.x} {point.y + math.degrees(10 / values.EARTH_RADIUS_M)})"},
             *({"geometry": row["geometry"]} for row in record.answers[1:])]
    failure = strict.strict_verdict("VR2", record.answers, moved).first_failure
    assert (failure.component, failure.expected, round(failure.value, 3)) == (
        "geometry", record.answers[0]["geometry"], 10.0)
    assert strict.strict_verdict("VR2", record.answers, moved[1:]).first_failure.component == "rows"


def test_returned_rows_with_another_identity_pair_by_location_too(records: list[dataset.Record]) -> None:
    """Stored rows keyed by osm_id, returned rows with the same points and a name of their own: paired by
    location; a list given as a name is a name like any other."""
    record = next(record for record in records if record.template_id == "VR2" and len(record.answers) == 3)
    named = [{"geometry": row["geometry"], "name": f"somewhere {n}"} for n, row in enumerate(record.answers)]
    assert strict.strict_verdict("VR2", record.answers, named).status == "pass"
    listed = [{"geometry": row["geometry"], "name": [f"somewhere {n}"]} for n, row in enumerate(record.answers)]
    assert strict.strict_verdict("VR2", record.answers, listed).status == "pass"


def test_many_returned_points_are_paired_through_an_index(records: list[dataset.Record]) -> None:
    """20,000 returned points against a stored answer: the pairs within the tolerance come from an index, so
    the verdict (a row count) is reached without pairing every stored row with every returned one."""
    record = next(record for record in records if record.template_id == "VR2" and len(record.answers) == 26)
    points = [{"geometry": row["geometry"]} for row in record.answers]
    far = [{"geometry": f"POINT ({-60 - n / 1000} 10)"} for n in range(20_000)]
    verdict = strict.strict_verdict("VR2", record.answers, points + far)
    assert verdict.status == "fail" and verdict.first_failure.component == "rows"
    assert all(check.passed for check in verdict.checks[1:])  # every stored point found its own
