"""A fresh machine: a container from the base image with only git, make, python3 and python3-venv (plus this
host's CA certificates, which the network here may need), a plain clone of this repository's HEAD (what is
committed), then `make test` on a small selection. As root it installs the system packages itself, and the
tests start their own PostgreSQL: nothing else is done by hand.

It needs a Docker engine (tests/docker_helpers.py): skipped with the reason where none can be had, a failure
under GSQA_REQUIRE_TOOLS=1 (set by .ci/run). It downloads the system packages and the wheels: minutes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from docker_helpers import ROOT, base_image

pytestmark = pytest.mark.docker
SELECTION = "-m 'not docker' tests/test_readme.py tests/test_cli.py"  # no Docker engine in there
EXTRA_CA_DIR = Path("/usr/local/share/ca-certificates")
# The container's first steps: what a new machine starts with, then the README's commands, as root.
SCRIPT = f"""set -eu
export DEBIAN_FRONTEND=noninteractive PIP_CERT=/etc/ssl/certs/ca-certificates.crt
apt-get update -qq >/dev/null && apt-get install -y -qq git make python3 python3-venv ca-certificates >/dev/null 2>&1
cp /certs/*.crt /usr/local/share/ca-certificates/ 2>/dev/null || true
update-ca-certificates >/dev/null 2>&1
useradd --create-home someone && git clone -q /src /home/someone/gsqa-refdb
chown -R someone: /home/someone/gsqa-refdb  # their own clone (git refuses to read root's /src for them)
status=0; runuser -u someone -- make -C /home/someone/gsqa-refdb test >/tmp/as-user 2>&1 || status=$?
echo "as a user: exit $status"; grep -v '^make' /tmp/as-user >&2 || true
git clone -q /src /root/gsqa-refdb && cd /root/gsqa-refdb
make test PYTEST_ARGS="-q -p no:cacheprovider {SELECTION}"
"""


def packages_of(*groups: str) -> str:
    """The packages of these groups of setup/system-packages.txt, in its order (what `make test` installs)."""
    lines = (ROOT / "setup" / "system-packages.txt").read_text().splitlines()
    found = dict(line.split(":", 1) for line in lines if line and not line.startswith("#"))
    return " ".join(package for group in groups for package in found[group].split())


# What the fresh machine lacks of `make test`'s groups (server, test, native, venv): all but python3-venv.
NEEDED = packages_of("server", "test", "native")


def test_make_test_passes_on_a_fresh_machine(engine, tmp_path: Path) -> None:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(tmp_path / "src")], check=True, timeout=120)
    certs = tmp_path / "certs"
    certs.mkdir()
    for cert in EXTRA_CA_DIR.glob("*.crt"):
        shutil.copy(cert, certs)
    (tmp_path / "run.sh").write_text(SCRIPT)
    result = subprocess.run(["docker", "run", "--rm", "-v", f"{tmp_path / 'src'}:/src:ro", "-v", f"{certs}:/certs:ro",
                             "-v", f"{tmp_path / 'run.sh'}:/run.sh:ro", base_image(), "bash", "/run.sh"],
                            capture_output=True, text=True, timeout=3000)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "as a user: exit 2" in result.stdout  # not root: the one line to run, nothing else
    assert ("missing system packages; install them, then run the same command again: "
            f"sudo apt-get install -y {NEEDED}") in result.stderr.splitlines(), result.stderr[:2000]
    assert f"setup/system-packages: installing {NEEDED}" in output  # as root make test installed them
    assert "tests: a throwaway PostgreSQL in" in output
    summary = result.stdout.strip().splitlines()[-1]  # pytest's last line
    # all passed, none skipped: the one test that needs Docker is deselected (-m 'not docker')
    assert re.fullmatch(r"\d+ passed, 1 deselected in [\d.]+s( \([\d:]+\))?", summary), output[-6000:]
