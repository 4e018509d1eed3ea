"""`reproduce verify --replica`: a primary and a real hot standby (pg_basebackup -R) of the same installation.

The module starts its own two servers on private sockets (the test server's configuration is not touched):
a primary holding the demo database (`ingest demo-data` + `ingest all --offline`) and its streaming standby.
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gsqa_core.db import with_user
from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import READER
from reproduce import servers
from reproduce.configs import question_id
from reproduce.dataset import Record
from reproduce.runner import AllServersLost, Runner, Server
from reproduce.schedule import earlier_durations, longest_first
from reproduce.session import RunRequest
from reproduce.verify import verify
from testkit.cli import reproduce
from testkit.standby import BIN, LocalServer, primary_and_standby


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, LocalServer, Path]]:
    """(primary, standby, demo data folder): the demo database, as README's "Try it" builds it."""
    demo = tmp_path_factory.mktemp("demo")
    subprocess.run([BIN / "ingest", "demo-data", demo], check=True, capture_output=True)
    with primary_and_standby([[BIN / "ingest", "all", demo, "--offline"]]) as (primary, standby):
        yield primary, standby, demo


def demo_request(primary: LocalServer, demo: Path, **changes: object) -> RunRequest:
    return RunRequest(config="all", templates=["R1", "V5"], data=demo / "benchmark", dsn=primary.dsn(), workers=2,
                      progress=False, **changes)


def test_a_standby_gives_the_same_answers_as_the_primary_alone(pair: tuple) -> None:
    primary, standby, demo = pair
    alone = verify(demo_request(primary, demo))
    both = verify(demo_request(primary, demo, replicas=[standby.dsn()]))
    assert len(alone.results) == len(both.results) == 120
    assert all(result.word("strict") == "pass" and result.exact for result in alone.results)
    same = [(r.id, r.word("strict"), r.exact, r.detail.get("rows"), r.paper) for r in alone.results]
    assert same == [(r.id, r.word("strict"), r.exact, r.detail.get("rows"), r.paper) for r in both.results]
    answered = {result.server for result in both.results}
    assert answered == {servers.name_of(primary.dsn()), servers.name_of(standby.dsn())}
    assert [server["role"] for server in both.provenance["servers"]] == ["primary", "standby"]
    assert both.provenance["lost"] == {}


def test_a_lagging_standby_is_refused_unless_forced(pair: tuple) -> None:
    primary, standby, demo = pair
    with psycopg.connect(standby.dsn(), autocommit=True) as paused:
        paused.execute("SELECT pg_wal_replay_pause()")
        try:
            with psycopg.connect(primary.dsn("postgres"), autocommit=True) as conn:
                conn.execute("CREATE TABLE IF NOT EXISTS lag_marker AS SELECT 1 AS one")
            with pytest.raises(GsqaError, match=r"--replica .*:55442/gsqa: a standby [\d,]+ bytes of WAL behind"):
                servers.replicas(primary.dsn(), [standby.dsn()], ["dem_us"], force=False, wait=0.5)
            [forced] = servers.replicas(primary.dsn(), [standby.dsn()], ["dem_us"], force=True, wait=0.5)
            assert forced.role == "standby" and "behind" in forced.problem
        finally:
            paused.execute("SELECT pg_wal_replay_resume()")
    [caught_up] = servers.replicas(primary.dsn(), [standby.dsn()], ["dem_us"], force=False)
    assert caught_up.problem == ""


def test_a_server_with_other_data_is_refused_in_one_line(pair: tuple, initialized_dsn: str) -> None:
    primary, _, demo = pair
    with psycopg.connect(initialized_dsn, autocommit=True) as conn:  # the test server: the tables, other rows
        conn.execute("INSERT INTO pois (geometry, poi_name) VALUES ('POINT(1 2)', 'other')")
    result = reproduce("verify", "--config", "all", "--template", "V5", "--data",
                             demo / "benchmark", "--dsn", primary.dsn(), "--replica", initialized_dsn)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: --replica ") and "not the primary's data: row counts" in line, line


def sleepers(count: int, seconds: float) -> list[Record]:
    return [Record(f"raster_only/elevation+poi/{n}", "R1", "raster_only", "elevation+poi", "",
                   f"SELECT {n} AS elevation, pg_sleep({seconds})", "", [], {}) for n in range(count)]


def reader(server: LocalServer) -> str:
    return with_user(server.dsn(), READER.name, None)


def test_a_server_stopped_mid_run_hands_its_questions_to_the_others(pair: tuple) -> None:
    primary, standby, _ = pair
    runner = Runner(reader(primary), 30.0, 2, primary.dsn(), replicas=[Server("standby", reader(standby),
                                                                               standby.dsn())])
    stopper = threading.Timer(1.0, standby.stop)
    stopper.start()
    try:
        outcomes = list(runner.run(sleepers(24, 0.4)))
    finally:
        stopper.join()
        standby.start()
    values = sorted(outcome.rows[0]["elevation"] for _, outcome in outcomes)
    assert values == list(range(24))  # each question once: none lost, none twice
    assert all(outcome.kind == "rows" for _, outcome in outcomes)
    by_server = {server: sum(outcome.server == server for _, outcome in outcomes) for server in ("primary", "standby")}
    assert by_server["standby"] >= 2 and by_server["primary"] >= 12, by_server
    assert list(runner.lost) == ["standby"] and "lost at " in runner.lost["standby"]


def test_every_server_lost_ends_the_run_after_what_it_has(pair: tuple) -> None:
    primary, standby, _ = pair
    runner = Runner(reader(standby), 30.0, 2, standby.dsn(), name="standby")
    got = []
    stopper = threading.Timer(1.0, standby.stop)
    stopper.start()
    try:
        with pytest.raises(AllServersLost, match="--resume"):
            for record, outcome in runner.run(sleepers(20, 0.4)):
                got.append((record.id, outcome.kind))
    finally:
        stopper.join()
        standby.start()
    assert 2 <= len(got) < 20 and all(kind == "rows" for _, kind in got)


def test_longest_first_from_an_earlier_run(tmp_path: Path) -> None:
    vector = question_id("vector/range+distance/1").template.id
    records = sleepers(4, 0) + [Record("vector/range+distance/1", vector, "vector", "range+distance", "", "SELECT 1",
                                       "", [], {})]
    report = tmp_path / "earlier.json"
    report.write_text(json.dumps({"results": [
        {"id": "raster_only/elevation+poi/1", "status": "pass", "seconds": 3.0},
        {"id": "raster_only/elevation+poi/2", "status": "pass", "seconds": 0.1},
        {"id": "vector/range+distance/7", "status": "timeout", "seconds": 120.0},
    ]}))
    ordered = [record.id for record in longest_first(records, earlier_durations(report), {})]
    # the vector question by its template's median (120 s), /1 and /2 by their own times, the others by their
    # template's median (1.55 s), equals in the order given
    assert ordered == ["vector/range+distance/1", "raster_only/elevation+poi/1", "raster_only/elevation+poi/0",
                       "raster_only/elevation+poi/3", "raster_only/elevation+poi/2"]
    assert longest_first(records, {"other/unknown/1": 5.0}, {})[0].id == "raster_only/elevation+poi/0"
    by_size = longest_first([Record("a/b/1", "V1", "vector", "b", "", "SELECT 1 FROM pois", "", [], {}),
                             Record("a/b/2", "V1", "vector", "b", "", "SELECT 1 FROM roads JOIN pois", "", [], {})],
                            {}, {"roads": 18_000_000, "pois": 250_000})
    assert [record.id for record in by_size] == ["a/b/2", "a/b/1"]
