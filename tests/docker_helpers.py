"""A Docker engine for the tests marked `docker` (tests/test_make_db.py, tests/test_fresh_machine.py,
tests/test_python_sandbox.py, tests/test_serve_python.py): the one that answers, else dockerd started here (as
root, with docker.io installed) and stopped at the end of the session; else the test is skipped with the
reason, or fails under GSQA_REQUIRE_TOOLS=1 (set by .ci/run). And the base image the images start from, and
waits on sandbox containers."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testkit.tools import missing

ROOT = Path(__file__).resolve().parent.parent
BASE_IMAGE = "debian:bookworm-slim"


def _unavailable(reason: str) -> None:
    missing("docker engine", reason)


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A reachable Docker engine, started here (dockerd in the background) if none runs and we may."""
    import docker

    def ping() -> docker.DockerClient | None:
        try:
            client = docker.from_env()
            client.ping()
            return client
        except docker.errors.DockerException:
            return None

    client, daemon = ping(), None
    if client is None:
        if os.geteuid() != 0 or shutil.which("dockerd") is None:
            _unavailable("no engine answers and dockerd cannot be started here (not root, or docker.io missing)")
        log = open(tmp_path_factory.mktemp("dockerd") / "dockerd.log", "w")  # noqa: SIM115 - lives with dockerd
        daemon = subprocess.Popen(["dockerd"], stdout=log, stderr=log, start_new_session=True)
        for _ in range(300):
            client = ping()
            if client is not None:
                break
            time.sleep(0.1)
        else:
            _unavailable(f"dockerd did not answer within 30 s (log: {log.name})")
    yield client
    client.close()
    if daemon is not None:  # started here: stopped here, so that `make test` leaves no daemon behind
        daemon.terminate()
        daemon.wait(60)


def base_image() -> str:
    """The base image, pulled or built with debootstrap as `make db` does when it is missing."""
    if subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True).returncode != 0:
        made = subprocess.run(["bash", "docker/base-image.sh", BASE_IMAGE], cwd=ROOT, capture_output=True, text=True,
                              timeout=900)
        assert made.returncode == 0, made.stderr
    return BASE_IMAGE


def a_call_runs_in(container: str) -> bool:
    """Whether a sandbox container runs a call now: its init has forked the call's process (which shows as
    init.py too; the episode's runner, run_call.py, is there between calls as well)."""
    return subprocess.run(["docker", "top", container], capture_output=True, text=True,
                          timeout=60).stdout.count("/opt/sandbox/init.py") > 1


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Until `condition()` holds; AssertionError naming `what` after two minutes."""
    for _ in range(600):
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within two minutes")
