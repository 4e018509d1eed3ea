"""setup/system-packages: the packages a group of setup/system-packages.txt names, installed as root, else
the one `sudo apt-get install` line to run and exit 2; nothing when all are there."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def setup_copy() -> Iterator[Path]:
    """The script beside a list of two groups: one of installed packages, one with a package that does not exist
    (in a folder an unprivileged user may read: pytest's own are the user's alone)."""
    with tempfile.TemporaryDirectory(prefix="gsqa-setup-") as base:
        folder = Path(base) / "setup"
        folder.mkdir()
        shutil.copy(ROOT / "setup" / "system-packages", folder)
        (folder / "system-packages.txt").write_text("# groups\nthere: bash coreutils\n"
                                                    "missing: bash gsqa-no-such-package\n")
        for path in (Path(base), folder, *folder.iterdir()):
            path.chmod(0o755)
        yield folder / "system-packages"


def as_a_user(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run as an unprivileged user (nobody when the tests run as root)."""
    prefix = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, "bash", *argv], capture_output=True, text=True, timeout=60)


def test_installed_packages_need_nothing(setup_copy: Path) -> None:
    result = as_a_user(str(setup_copy), "there")
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_a_user_gets_the_one_line_to_run_and_exit_2(setup_copy: Path) -> None:
    result = as_a_user(str(setup_copy), "there", "missing")
    assert result.returncode == 2
    assert result.stderr.splitlines() == ["missing system packages; install them, then run the same command again: "
                                          "sudo apt-get install -y gsqa-no-such-package"]


def test_an_unknown_group_is_one_line(setup_copy: Path) -> None:
    result = as_a_user(str(setup_copy), "nope")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no group nope" in result.stderr


def test_make_test_and_ci_and_the_images_share_the_list() -> None:
    makefile, ci = (ROOT / "Makefile").read_text(), (ROOT / ".ci" / "run").read_text()
    assert "bash setup/system-packages server test native venv" in makefile
    assert "bash setup/system-packages ci" in ci and ci.rstrip().endswith("make test")
    for dockerfile in ("Dockerfile", "Dockerfile.postgis"):
        assert "bash /tmp/setup/system-packages " in (ROOT / dockerfile).read_text(), dockerfile
