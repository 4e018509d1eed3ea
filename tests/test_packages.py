"""The package boundaries: the verifier (`reproduce`) shares gsqa_core with the loaders, never imports them; inside
`ingest`, the stage runner sits above the loaders and the load machinery below them."""

import ast
import re
import subprocess
import sys
from pathlib import Path

from testkit.imports import loaded_by

ROOT = Path(__file__).resolve().parent.parent
# The two layers of `ingest` that are not loaders; every other module of `ingest` (the packages ingest/dem/ and
# ingest/osm/) is a loader, which may import gsqa_core, the machinery and its own package, never the runner.
RUNNER = {"cli", "report", "build", "fetch", "initdb", "check", "demo", "snapshot.manifest", "snapshot.create",
          "snapshot.card", "snapshot.restore", "snapshot.hub", "snapshot.physical", "export.vector", "export.dem",
          "export.geojson", "export.flatgeobuf", "export.manifest", "export.run", "export.verify"}
MACHINERY = {"load_state", "ordered_pool", "diskspace", "indexes"}


def test_reproduce_imports_no_loader_module():
    reproduce_modules = sorted(".".join(path.relative_to(ROOT / "reproduce").with_suffix("").parts)
                               for path in (ROOT / "reproduce").rglob("*.py") if path.name != "__init__.py")
    assert "cli" in reproduce_modules and "verify" in reproduce_modules
    loaded = loaded_by([f"reproduce.{name}" for name in reproduce_modules], ("ingest",))
    assert loaded == [], f"reproduce imports loader modules: {' '.join(loaded)}"


def test_reproduce_serve_imports_neither_loaders_nor_sqlalchemy():
    """reproduce/serve/ is held to reproduce's rules: no loader module of `ingest`, no SQLAlchemy (a command)."""
    serve_modules = sorted(path.stem for path in (ROOT / "reproduce" / "serve").glob("*.py") if path.stem != "__init__")
    script = ("import importlib, sys\n"
              f"for name in {serve_modules!r}:\n"
              "    importlib.import_module('reproduce.serve.' + name)\n"
              "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('ingest', 'sqlalchemy', "
              "'geoalchemy2'))))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "tools" in serve_modules and "protocol" in serve_modules
    assert done.stdout.strip() == "", f"reproduce.serve imports: {done.stdout.strip()}"


def test_the_command_line_tools_do_not_import_sqlalchemy():
    """SQLAlchemy and GeoAlchemy2 are for reproduce.baseline only: importing them costs every command start-up."""
    script = ("import sys\n"
              "import ingest.cli, reproduce.cli, reproduce.describe\n"
              "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'geoalchemy2'))))\n"
              "import reproduce.baseline\n"
              "print('sqlalchemy' in sys.modules and 'geoalchemy2' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["", "True"], done.stdout


def imported(path: Path) -> set[str]:
    """What a file imports, anywhere in it (a function's import counts too), as dotted names (`from M import n`
    gives M and M.n)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def ingest_imports(path: Path) -> set[str]:
    """The modules of `ingest` a file imports, as dotted names below `ingest`: `dem.tiles`, `check`."""
    return {name.removeprefix("ingest.") for name in imported(path) if name.startswith("ingest.")}


def ingest_modules() -> dict[str, Path]:
    """Every module of `ingest` by its dotted name below `ingest` (`dem.load`, `osm`, `check`)."""
    return {".".join(path.relative_to(ROOT / "ingest").with_suffix("").parts): path
            for path in sorted((ROOT / "ingest").rglob("*.py")) if path.name != "__init__.py"}


def test_the_runner_and_the_machinery_are_the_modules_they_are_declared_to_be():
    modules = ingest_modules()
    assert RUNNER | MACHINERY <= set(modules), sorted(RUNNER | MACHINERY - set(modules))
    assert {"dem.load", "dem.tiles", "dem.stagers", "dem.constraints", "dem.synthetic"} <= set(modules)


def test_a_loader_never_imports_the_runner():
    loaders = {name: path for name, path in ingest_modules().items() if name not in RUNNER | MACHINERY}
    wrong = {name: sorted(ingest_imports(path) & RUNNER) for name, path in loaders.items()}
    assert {name: runner for name, runner in wrong.items() if runner} == {}


def test_the_machinery_imports_neither_the_loaders_nor_the_runner():
    modules = ingest_modules()
    wrong = {name: sorted(imported for imported in ingest_imports(modules[name])
                          if imported.split(".")[0] not in MACHINERY) for name in sorted(MACHINERY)}
    assert {name: imported for name, imported in wrong.items() if imported} == {}


def test_no_module_imports_another_modules_private_name():
    """`from M import _name` only where `_name` is a module of package M (the native reader, ingest.osm.pbf._osmread);
    a name kept private by its module is not another module's to use."""
    wrong = []
    for package in ("gsqa_core", "ingest", "reproduce"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or (node.module or "").split(".")[0] not in (
                        "gsqa_core", "ingest", "reproduce"):
                    continue
                folder = ROOT.joinpath(*node.module.split("."))
                wrong += [f"{path.relative_to(ROOT)}: {node.module}.{alias.name}" for alias in node.names
                          if alias.name.startswith("_") and not any(folder.glob(alias.name + ".*"))]
    assert wrong == []


def test_only_the_command_line_imports_serve():
    """reproduce/serve stands on the library (the kernel, the predictions and their file formats), which never
    imports it back: only the command line (reproduce/cli.py) and serve's own modules do."""
    importers = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "reproduce").rglob("*.py")
                       if any(name.split(".")[:2] == ["reproduce", "serve"] for name in imported(path)))
    assert [path for path in importers if not path.startswith("reproduce/serve/")] == ["reproduce/cli.py"]


def test_the_pbf_path_is_the_subpackage_design_names():
    """docs/DESIGN.md's PBF rows name every module of ingest/osm/pbf/ (the native reader's source too), and the PBF
    path has no module left beside it in ingest/osm/."""
    rows = [line for line in (ROOT / "docs" / "DESIGN.md").read_text().splitlines() if line.startswith("| PBF")]
    named = {Path(name).name for row in rows for name in re.findall(r"`([\w/.]+\.(?:py|cpp))`", row)}
    package = ROOT / "ingest" / "osm" / "pbf"
    assert rows and all("`ingest/osm/pbf/" in row for row in rows)
    assert named == {path.name for path in package.iterdir() if path.suffix in (".py", ".cpp")} - {"__init__.py"}
    assert sorted(path.name for path in (ROOT / "ingest" / "osm").glob("*") if "pbf" in path.name) == ["pbf"]
