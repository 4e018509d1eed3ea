"""The memory each backend of make db's server may take: docker/backend-memory.sh (which the server's entrypoint
runs) sizes it as gsqa_core/sandbox.py declares it, for every size of server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gsqa_core import sandbox

SCRIPT = Path(__file__).resolve().parent.parent / "docker" / "backend-memory.sh"


@pytest.mark.parametrize("server_mb", [1024, 4096, 8192, 16384, 24576, 32768, 65536, 262144])
def test_the_entrypoint_sizes_a_backend_as_the_sandbox_declares(server_mb: int) -> None:
    printed = subprocess.run(["sh", SCRIPT, str(server_mb)], capture_output=True, text=True, check=True).stdout
    assert int(printed) == sandbox.backend_memory_mb(server_mb)


def test_the_model_roles_backends_hold_at_most_their_share_above_the_floor() -> None:
    numerator, denominator = sandbox.MODEL_MEMORY_SHARE
    assert sandbox.backend_memory_mb(24576) == 1638  # this machine's kind: 8 connections and 2 workers, 16 of 24 GB
    backends = sandbox.MODEL.connection_limit + sandbox.SERVER_PARALLEL_WORKERS
    assert backends * sandbox.backend_memory_mb(65536) <= 65536 * numerator / denominator
    assert sandbox.backend_memory_mb(4096) == sandbox.BACKEND_MEMORY_FLOOR_MB


def test_make_db_s_server_runs_the_parallel_workers_the_sizing_counts() -> None:
    conf = (SCRIPT.parent / "postgresql-gsqa.conf").read_text()
    [line] = [line for line in conf.splitlines() if line.startswith("max_parallel_workers ")]
    assert int(line.split("=")[1].split("#")[0]) == sandbox.SERVER_PARALLEL_WORKERS
