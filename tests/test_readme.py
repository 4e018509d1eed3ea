"""The README's runnable blocks run as written: each ```sh block after a `<!-- runnable` comment is run with
bash (stopping at the first failing command), with its /tmp paths and database names made unique."""

from __future__ import annotations

import getpass
import os
import re
import subprocess
from pathlib import Path

import pytest
import typer.main
from conftest import drop_database
from psycopg.conninfo import conninfo_to_dict

from ingest.cli import app as ingest_app
from reproduce.cli import app as reproduce_app
from testkit import local_server

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"<!-- runnable[^>]*-->\s*```sh\n(.*?)```", re.S)


def runnable_blocks() -> list[str]:
    return _BLOCK.findall((ROOT / "README.md").read_text())


def libpq_environment(server_dsn: str) -> dict[str, str]:
    """The test server as PG* variables, so that the README's `createdb` and `postgresql:///name` reach it."""
    keys = {"host": "PGHOST", "port": "PGPORT", "user": "PGUSER", "password": "PGPASSWORD"}
    return {keys[key]: value for key, value in conninfo_to_dict(server_dsn).items() if key in keys and value}


def test_the_readme_has_runnable_blocks() -> None:
    assert len(runnable_blocks()) >= 1


@pytest.mark.parametrize("tool, app", [("ingest", ingest_app), ("reproduce", reproduce_app)])
def test_the_command_table_names_every_command(tool: str, app: typer.Typer) -> None:
    readme = (ROOT / "README.md").read_text()
    listed = set(re.findall(rf"^\| `{tool} ([a-z-]+)", readme, re.M))
    assert listed == set(typer.main.get_command(app).commands)


def needs_docker(block: str) -> bool:
    return "make sandbox-image" in block


@pytest.mark.parametrize("block", [block for block in runnable_blocks() if not needs_docker(block)])
def test_readme_block_runs_as_written(block: str, server_dsn: str, tmp_path: Path) -> None:
    run_block(block, server_dsn, tmp_path)


@pytest.mark.docker
@pytest.mark.parametrize("block", [block for block in runnable_blocks() if needs_docker(block)])
def test_readme_block_with_docker_runs_as_written(block: str, engine, server_dsn: str, tmp_path: Path) -> None:
    run_block(block, server_dsn, tmp_path)


def test_try_it_runs_on_a_stock_debian_server(tmp_path: Path) -> None:
    """The "Try it" block against a cluster authenticating as Debian's stock one (peer on the socket,
    scram-sha-256 on 127.0.0.1), where the user has a superuser role of their name and nothing else is set:
    the reader gets its password from `ingest init` and logs in over TCP."""
    [try_it] = [block for block in runnable_blocks() if "reproduce verify" in block]
    with local_server.stock_debian_cluster() as server:
        run_block(try_it, server.dsn("postgres", user=getpass.getuser()), tmp_path)


def run_block(script: str, server_dsn: str, tmp_path: Path) -> None:
    """Run a README block with bash against the server, its database names and /tmp paths made unique."""
    databases = sorted(set(re.findall(r"createdb (\w+)", script)))
    suffix = f"_readme_{os.getpid()}"
    for name in databases:
        script = re.sub(rf"\b{name}\b", name + suffix, script)
    script = re.sub(r"/tmp/([\w-]+)", lambda m: str(tmp_path / m[1]), script)
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"} | libpq_environment(server_dsn)
    try:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=600)
    finally:
        for name in databases:
            drop_database(server_dsn, name + suffix)
    assert result.returncode == 0, f"README block failed:\n{script}\n{result.stdout}\n{result.stderr}"
    if "reproduce verify" in script:  # the block's claim: every question passes
        total = next(line for line in result.stdout.splitlines() if line.startswith("total"))
        assert total.split()[1:4] == ["120", "100.0", "100.0"], result.stdout
    if "reproduce score" in script:  # the block's claim: the scripted agent scores paper 100.0 on R1's 20
        total = next(line for line in result.stdout.splitlines() if line.startswith("total"))
        assert total.split()[1:7] == ["20", "100.0", "100.0", "100.0", "83.9-100.0", "100.0"], result.stdout
