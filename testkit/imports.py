"""What importing some modules brings in, seen in a fresh interpreter (what this process imported already does
not count): the package-boundary tests (tests/test_packages.py, tests/test_inspect_boundary.py) hold with it
that one package never loads another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def loaded_by(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    """The modules of `packages` (top-level names) loaded once every module of `modules` is imported."""
    script = ("import importlib, sys\n"
              f"for name in {modules!r}:\n"
              "    importlib.import_module(name)\n"
              f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {packages!r})))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.split()
