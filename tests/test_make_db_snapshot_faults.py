"""Faults of the snapshot path of the Docker database: `make db FROM=DIR` (a physical and a dump snapshot) and
`make snapshot TO=DIR` killed at a random moment, then the same command again, which must exit 0 and give the
same database as an uninterrupted run.

tests/test_snapshot.py kills `ingest snapshot` alone; here the whole command dies as on a lost machine or an
OOM kill: SIGKILL to make's process group (make, its shells, the compose clients) and to the compose project's
loader and restore containers, which outlive a killed `docker compose run`. What lies between the ingest steps
is exposed that way too: the db container stopped for a copy, the superuser's password, the bulk-load settings,
a data directory half replaced. The moment is drawn uniformly between 0.5 s and the length of an uninterrupted
run of the same command (measured here) from a seeded generator: GSQA_FAULT_SEED=N replays a failure's moment
(every assertion message of these tests names the seed), as nearly as the machine's timing allows.

The databases are compared as tests/test_make_db_snapshot.py compares them: table by table, without the row of
the roles' passwords, which a restore sets from the loader's environment as a build does. Skipped like
tests/test_make_db.py where no Docker engine can be started (a failure with GSQA_REQUIRE_TOOLS=1)."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import test_make_db_snapshot
from demo_helpers import demo_cluster
from docker_helpers import base_image
from load_helpers import ingest
from test_make_db import ROOT, _bulk_settings, compose_binary
from test_make_db_snapshot import assert_restored_from, assert_verifies_from_the_host, docker_database, make_db_from
from test_snapshot import database_contents

pytestmark = pytest.mark.docker
images = test_make_db_snapshot.images  # the fixture: images of this run's own name, removed afterwards

SEED = int(os.environ.get("GSQA_FAULT_SEED") or random.SystemRandom().randrange(1_000_000))
EARLIEST_KILL = 0.5  # seconds after the start
# The table of the roles' passwords: gsqa.reader_login, being renamed gsqa.role_login; whichever exists.
PASSWORD_TABLES = ("gsqa.reader_login", "gsqa.role_login")
KILLED_SERVICES = ("loader", "restore")  # the project's one-off containers; db is a service that keeps running


@dataclass
class Snapshot:
    folder: Path
    contents: dict  # the snapshotted database's, but its passwords


@dataclass
class Restored:
    """A compose project holding an uninterrupted `make db FROM=` of a snapshot, and how long that took."""

    env: dict
    dsn: str
    seconds: float


def contents_but_the_passwords(dsn: str) -> dict:
    """database_contents with only the number of rows of the passwords' table (whichever of the two names it
    has), whose passwords the restore sets from the loader's environment as a build does."""
    contents = database_contents(dsn)
    present = [table for table in PASSWORD_TABLES if table in contents]
    assert present, f"none of {PASSWORD_TABLES} in {contents['tables']}"
    for table in present:
        contents[table] = contents[table][0]
    return contents


@pytest.fixture(scope="module")
def snapshots(demo_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Snapshot]:
    """A dump and a physical snapshot of one demo database, made in a private cluster of this machine's
    PostgreSQL (the db image's Debian packages; a physical snapshot is the whole cluster)."""
    folder = tmp_path_factory.mktemp("snapshots")
    with demo_cluster(demo_data) as server:
        contents = contents_but_the_passwords(server.dsn())
        options = {"dump": ["--part-size", "1000000"],  # first: the physical create stops the server
                   "physical": ["--part-size", "20000000", "--format", "physical", "--data-dir", str(server.data)]}
        for snapshot_format, format_options in options.items():
            created = ingest("snapshot", "create", str(folder / snapshot_format), *format_options,
                             "--dsn", server.dsn())
            assert created.returncode == 0, created.stderr
    return {snapshot_format: Snapshot(folder / snapshot_format, contents) for snapshot_format in options}


@pytest.fixture(scope="module")
def built_images(images: str) -> str:
    """The images, built before any run is timed: a first build is no part of a run's length (the range of the
    kill moments), and every run below finds them built."""
    base_image()
    for step in (["make", "ca-certificates"], [compose_binary(), "--profile", "loader", "build"]):  # as db-up
        made = subprocess.run(step, cwd=ROOT, env={**os.environ, "GSQA_IMAGES": images}, capture_output=True,
                              text=True, timeout=1800)
        assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]
    return images


@contextlib.contextmanager
def uninterrupted_restore(images: str, snapshot: Snapshot, label: str,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restored]:
    with docker_database(images, tmp_path_factory.mktemp(label), label) as (env, dsn):
        started = time.monotonic()
        make_db_from(snapshot.folder, env)
        yield Restored(env, dsn, time.monotonic() - started)


@pytest.fixture(scope="module")
def physical_restored(built_images: str, snapshots: dict[str, Snapshot],
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restored]:
    """Also the Docker database that `make snapshot` copies below."""
    with uninterrupted_restore(built_images, snapshots["physical"], "reference-physical", tmp_path_factory) as run:
        yield run


@pytest.fixture(scope="module")
def dump_restored(built_images: str, snapshots: dict[str, Snapshot],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restored]:
    with uninterrupted_restore(built_images, snapshots["dump"], "reference-dump", tmp_path_factory) as run:
        yield run


def make(*arguments: str) -> list[str]:
    return ["make", *arguments, f"COMPOSE={compose_binary()}"]


def kill_moment(test_name: str, uninterrupted_seconds: float) -> float:
    """Uniform between EARLIEST_KILL and the uninterrupted run's length, from the seed and the test's name."""
    fraction = random.Random(f"{SEED}/{test_name}").random()
    return EARLIEST_KILL + fraction * max(0.0, uninterrupted_seconds - EARLIEST_KILL)


def run_killed(command: list[str], env: dict, after: float, engine) -> str:
    """`command` started in a process group of its own, and `after` seconds later that group and the compose
    project's loader and restore containers SIGKILLed; what happened, for the assertion messages."""
    with tempfile.TemporaryFile(mode="w+") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        try:
            code = process.wait(timeout=after)
            happened = f"it had ended by then (exit {code})"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            kill_containers(engine, env["COMPOSE_PROJECT_NAME"])
            happened = "killed"
        output.seek(0)
        last_lines = output.read().splitlines()[-3:]
    return f"{happened}; its last lines: " + " | ".join(line[:300] for line in last_lines)


def kill_containers(engine, project: str) -> None:
    """SIGKILL to the project's running loader and restore containers. Until a listing a second after the
    last kill finds none: a start that a killed compose client had asked for may take effect after a listing."""
    import docker

    for round_number in range(60):
        running = [container for container in engine.containers.list(
            filters={"label": f"com.docker.compose.project={project}"})
            if container.labels.get("com.docker.compose.service") in KILLED_SERVICES]
        if not running and round_number:
            return
        for container in running:
            with contextlib.suppress(docker.errors.APIError):  # it ended meanwhile
                container.kill()
        time.sleep(1)
    pytest.fail(f"the {project} project's loader or restore containers are still running after a minute of kills")


@contextlib.contextmanager
def replayable(moment: float, seconds: float, happened: str) -> Iterator[None]:
    """Adds to an assertion's message the seed that replays the kill, when it was and what it hit (printed
    too: `pytest -rP` shows where the kills of passing runs landed)."""
    note = (f"GSQA_FAULT_SEED={SEED} replays the kill at {moment:.2f} s of an uninterrupted {seconds:.2f} s run; "
            f"{happened}")
    print(note)
    try:
        yield
    except AssertionError as error:
        raise AssertionError(f"{error}\n{note}") from error


@pytest.mark.parametrize("snapshot_format", ["physical", "dump"])
def test_make_db_from_killed_at_a_random_moment_then_the_same_command_restores_the_snapshotted_database(
        snapshot_format: str, request: pytest.FixtureRequest, built_images: str, engine,
        snapshots: dict[str, Snapshot], demo_data: Path, tmp_path: Path) -> None:
    snapshot = snapshots[snapshot_format]
    reference: Restored = request.getfixturevalue(f"{snapshot_format}_restored")
    moment = kill_moment(request.node.name, reference.seconds)
    with docker_database(built_images, tmp_path, f"killed-{snapshot_format}") as (env, dsn):
        happened = run_killed(make("db", f"FROM={snapshot.folder}"), env, moment, engine)
        with replayable(moment, reference.seconds, happened):
            make_db_from(snapshot.folder, env)
            assert_restored_from(snapshot.folder, dsn, snapshot_format)
            assert contents_but_the_passwords(dsn) == snapshot.contents
            assert _bulk_settings(dsn) == set()  # the durable settings, whatever the killed run had switched
            assert_verifies_from_the_host(demo_data, dsn)


def make_snapshot(folder: Path, env: dict) -> None:
    made = subprocess.run(make("snapshot", f"TO={folder}"), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert made.returncode == 0, made.stdout[-4000:] + made.stderr[-4000:]


def test_make_snapshot_killed_at_a_random_moment_then_the_same_command_writes_a_snapshot_of_the_same_database(
        request: pytest.FixtureRequest, built_images: str, engine, snapshots: dict[str, Snapshot],
        physical_restored: Restored, tmp_path: Path) -> None:
    started = time.monotonic()
    make_snapshot(tmp_path / "uninterrupted", physical_restored.env)
    seconds = time.monotonic() - started
    folder, moment = tmp_path / "killed", kill_moment(request.node.name, seconds)
    happened = run_killed(make("snapshot", f"TO={folder}"), physical_restored.env, moment, engine)
    with replayable(moment, seconds, happened):
        make_snapshot(folder, physical_restored.env)
        assert (folder / "manifest.json").is_file() and not (folder / ".work").exists()
        assert contents_but_the_passwords(physical_restored.dsn) == snapshots["physical"].contents  # db is back
        with docker_database(built_images, tmp_path / "again", "from-killed-snapshot") as (env, dsn):
            make_db_from(folder, env)
            assert_restored_from(folder, dsn, "physical")
            assert contents_but_the_passwords(dsn) == snapshots["physical"].contents
