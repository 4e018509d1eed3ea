"""The Docker stack, checked statically (no Docker engine on our machines): compose config, hadolint,
and the steps `make db` would run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, cwd=ROOT, timeout=120, **kwargs)


def compose_config(*extra: str) -> dict:
    result = run(str(BIN / "docker-compose"), "-f", "docker-compose.yml", *extra, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_compose_file_is_valid_and_wires_db_and_loader() -> None:
    config = compose_config("--profile", "loader")
    db, loader = config["services"]["db"], config["services"]["loader"]
    assert db["build"]["dockerfile"] == "Dockerfile.postgis"
    assert "127.0.0.1 -U postgres -d gsqa" in " ".join(db["healthcheck"]["test"])
    assert int(db["shm_size"]) > 1024**3  # above maintenance_work_mem = 1GB
    assert any(volume["type"] == "volume" for volume in db["volumes"])
    assert loader["depends_on"]["db"]["condition"] == "service_healthy"
    assert "@db:5432/gsqa" in loader["environment"]["DATABASE_URL"]


def test_host_port_is_configurable() -> None:
    import os

    result = run(str(BIN / "docker-compose"), "-f", "docker-compose.yml", "config", "--format", "json",
                 env={**os.environ, "GSQA_DB_PORT": "15432"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["services"]["db"]["ports"][0]["published"] == "15432"


def test_dockerfiles_pass_hadolint() -> None:
    result = run(str(BIN / "hadolint"), "Dockerfile", "Dockerfile.postgis")
    assert result.returncode == 0, result.stdout + result.stderr


def test_postgis_image_is_pinned_and_ships_the_init_script() -> None:
    text = (ROOT / "Dockerfile.postgis").read_text()
    assert "FROM postgis/postgis:15-3.5" in text
    assert (ROOT / "sql/docker/50_gsqa_init.sh").stat().st_mode & 0o111
    assert "postgis_raster" in (ROOT / "sql/docker/50_gsqa_init.sh").read_text()


def test_make_db_names_its_steps_in_order() -> None:
    result = run("make", "-n", "db")
    assert result.returncode == 0, result.stderr
    steps = [
        "--profile loader build", "up --detach --wait db", "bulk_load_on.sql",
        '"init" "dem /data/dem" "osm /data/osm" "finalize"',
        "run --rm loader",
        "bulk_load_off.sql",
    ]
    positions = [result.stdout.find(step) for step in steps]
    assert -1 not in positions, result.stdout
    assert positions == sorted(positions), result.stdout


def test_bulk_load_switches_are_reverted_one_for_one() -> None:
    on = (ROOT / "sql/bulk_load_on.sql").read_text()
    off = (ROOT / "sql/bulk_load_off.sql").read_text()
    switched = {line.split()[3] for line in on.splitlines() if line.startswith("ALTER SYSTEM SET")}
    reset = {line.split()[3].rstrip(";") for line in off.splitlines() if line.startswith("ALTER SYSTEM RESET")}
    assert switched == reset and "fsync" in switched


def test_server_config_keeps_minimal_wal_startable() -> None:
    settings = dict(
        line.split("#")[0].replace(" ", "").split("=", 1)
        for line in (ROOT / "docker/postgresql-gsqa.conf").read_text().splitlines()
        if "=" in line.split("#")[0]
    )
    assert settings["wal_level"] == "minimal" and settings["max_wal_senders"] == "0"


def test_make_db_without_compose_says_what_to_install_in_one_line() -> None:
    result = run("make", "db", "COMPOSE=gsqa-no-such-docker compose")
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert len(lines) == 1 and "Compose v2 plugin" in lines[0] and "make db-local" in lines[0]
    assert "--profile loader build" not in result.stdout  # nothing was started
