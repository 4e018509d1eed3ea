"""`reproduce serve --replica`: the episodes spread over a primary and its real hot standby (pg_basebackup -R),
as `verify --replica` spreads questions; a standby that stops hands its episodes on. The module starts its own
two servers on private sockets (testkit/standby.py), on ports of its own."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gsqa_core.errors import GsqaError
from reproduce import servers
from reproduce.serve.tools import ServeRequest, open_tools
from testkit.standby import BIN, LocalServer, primary_and_standby

R1 = "raster_only/elevation+poi"
WHERE = "SELECT pg_is_in_recovery() AS standby"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, LocalServer, Path]]:
    demo = tmp_path_factory.mktemp("demo")
    subprocess.run([BIN / "ingest", "demo-data", demo], check=True, capture_output=True)
    with primary_and_standby([[BIN / "ingest", "all", demo, "--offline"]], port=55471) as (primary, standby):
        yield primary, standby, demo


def test_episodes_take_turns_on_the_servers_and_move_on_from_one_that_stopped(pair: tuple, tmp_path: Path) -> None:
    primary, standby, demo = pair
    path = tmp_path / "run.jsonl"
    request = ServeRequest(config="raster_only", templates=["R1"], data=demo / "benchmark", dsn=primary.dsn(),
                           replicas=[standby.dsn()], trajectory=path)
    with open_tools(request) as tools:
        on = [tools.query(f"{R1}/{n}", WHERE)["rows"][0]["standby"] for n in range(4)]
        standby.stop()
        try:
            moved = tools.query(f"{R1}/1", WHERE)
        finally:
            standby.start()
    assert on == [False, True, False, True]
    assert moved["rows"] == [{"standby": False}] and moved["budget_left"]["calls"] == 18
    calls = [json.loads(line) for line in path.read_text().splitlines()][1:]
    names = {False: servers.name_of(primary.dsn()), True: servers.name_of(standby.dsn())}
    assert [call["server"] for call in calls] == [names[standby] for standby in (*on, False)]


def test_a_replica_that_is_not_the_primary_s_database_starts_nothing(pair: tuple, tmp_path: Path) -> None:
    primary, _, demo = pair
    request = ServeRequest(config="raster_only", templates=["R1"], data=demo / "benchmark", dsn=primary.dsn(),
                           replicas=[primary.dsn()], trajectory=tmp_path / "run.jsonl")
    with pytest.raises(GsqaError, match=r"^--replica .*: named twice \(or it is the primary\)$"):
        open_tools(request)
