"""The package boundary: the verifier (`reproduce`) shares gsqa_core with the loaders, never imports them."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_reproduce_imports_no_loader_module():
    reproduce_modules = sorted(path.stem for path in (ROOT / "reproduce").glob("*.py") if path.stem != "__init__")
    script = ("import importlib, sys\n"
              f"for name in {reproduce_modules!r}:\n"
              "    importlib.import_module('reproduce.' + name)\n"
              "print(' '.join(sorted(m for m in sys.modules if m == 'ingest' or m.startswith('ingest.'))))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "cli" in reproduce_modules and "verify" in reproduce_modules
    assert done.stdout.strip() == "", f"reproduce imports loader modules: {done.stdout.strip()}"


def test_the_command_line_tools_do_not_import_sqlalchemy():
    """SQLAlchemy and GeoAlchemy2 are for reproduce.baseline only: importing them costs every command start-up."""
    script = ("import sys\n"
              "import ingest.cli, reproduce.cli, reproduce.describe\n"
              "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'geoalchemy2'))))\n"
              "import reproduce.baseline\n"
              "print('sqlalchemy' in sys.modules and 'geoalchemy2' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["", "True"], done.stdout
