"""R1-R4 and VR1-VR3 against a fixture database in which their stored answers must hold.

dem_us holds 1x1-pixel tiles on the ASTER grid carrying the stored elevations at the question points;
pois holds the stored answer rows (and, for VR3 counts, that many POIs at the anchor). Then the database
is perturbed just inside and just beyond the tolerances and the verdicts must follow.
"""

from __future__ import annotations

import psycopg
import pytest
from conftest import DATA

from reproduce import configs, dataset
from reproduce.session import RunRequest
from reproduce.verify import verify
from testkit.refdb import points_in

TEMPLATES = ["R1", "R2", "R3", "R4", "VR1", "VR2", "VR3"]


def run(dsn: str, *templates: str) -> dict[str, str]:
    request = RunRequest(config="all", data=DATA / "benchmark", dsn=dsn, timeout=5.0, workers=2,
                         templates=list(templates), progress=False)
    return {result.id: result for result in verify(request).results}


def test_stored_answers_hold_exactly(stored_db: str) -> None:
    results = run(stored_db, *TEMPLATES)
    assert len(results) == 140
    assert {(r.word("strict"), r.exact) for r in results.values()} == {("pass", True)}


def shift_elevations(dsn: str, metres: float) -> None:
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE dem_us SET rast = ST_MapAlgebra(rast, 1, '16BSI', format('[rast] + %%s', %s::int))",
                     [metres])


@pytest.mark.parametrize("metres, status", [(9, "pass"), (11, "fail")])
def test_elevation_tolerance_is_10_m(stored_db: str, metres: int, status: str) -> None:
    shift_elevations(stored_db, metres)
    try:
        results = run(stored_db, "R1")
    finally:
        shift_elevations(stored_db, -metres)
    assert {r.word("strict") for r in results.values()} == {status}
    assert not any(r.exact for r in results.values())  # the strict comparison sees every shift
    if status == "fail":
        failure = results["raster_only/elevation+poi/0"].detail["failure"]
        assert failure["component"] == "elevation" and failure["actual"] == failure["expected"] + 11


def test_r3_difference_and_r4_threshold_follow_one_changed_pixel(stored_db: str) -> None:
    record = dataset.find("raster_only/elevation_diff+two_pois/0", DATA / "benchmark")
    before = record.answers[0]["elevation_difference_m"]
    with psycopg.connect(stored_db) as conn:  # raise p1 by 11 m: the difference moves by 11 m
        conn.execute("UPDATE dem_us SET rast = ST_MapAlgebra(rast, 1, '16BSI', '[rast] + 11') "
                     "WHERE ST_Intersects(rast, ST_GeomFromText('POINT (-73.98719 40.741598)', 4326))")
    try:
        result = run(stored_db, "R3")[record.id]
    finally:
        with psycopg.connect(stored_db) as conn:
            conn.execute("UPDATE dem_us SET rast = ST_MapAlgebra(rast, 1, '16BSI', '[rast] - 11') "
                         "WHERE ST_Intersects(rast, ST_GeomFromText('POINT (-73.98719 40.741598)', 4326))")
    assert result.word("strict") == "fail"
    assert result.detail["failure"]["actual"] == before + 11


def test_one_more_poi_at_the_anchor_changes_the_count(stored_db: str) -> None:
    records = dataset.load(DATA / "benchmark", [configs.template("VR3")]).records
    counted = next(r for r in records if 0 < r.answers[0]["count"] < 20)  # one more is beyond 5 %
    with psycopg.connect(stored_db) as conn:
        duplicate = conn.execute(
            "INSERT INTO pois (geometry, poi_name, leisure, amenity, tourism) SELECT geometry, poi_name, leisure, "
            "amenity, tourism FROM pois WHERE ST_Intersects(geometry, ST_MakePoint(%s, %s)::geography) "
            "LIMIT 1 RETURNING id", list(points_in(counted.sql)[0])).fetchone()[0]
    try:
        results = run(stored_db, "VR3")
    finally:
        with psycopg.connect(stored_db) as conn:
            conn.execute("DELETE FROM pois WHERE id = %s", [duplicate])
    assert results[counted.id].word("strict") == "fail"
    assert results[counted.id].detail["failure"]["component"] == "count"
