"""Inspect stays optional: neither `ingest` nor `reproduce` imports it (`reproduce score` reads an Inspect log
with inspect_ai imported then: tests/test_inspect_logs.py), and inside gsqa_refdb/ only the adapter
imports `reproduce` (so that a change of reproduce's types changes the adapter alone). That Inspect finds
the tasks by their registered names, tests/test_inspect_tasks.py shows."""

import ast
from pathlib import Path

from testkit.imports import loaded_by

ROOT = Path(__file__).resolve().parent.parent


def modules(package: str) -> list[str]:
    return sorted(".".join(path.relative_to(ROOT).with_suffix("").parts) for path in (ROOT / package).rglob("*.py")
                  if path.name != "__init__.py")


def test_no_module_of_ingest_or_reproduce_imports_inspect() -> None:
    names = modules("reproduce") + ["ingest.cli", "gsqa_core.cli"]
    # score reads Inspect's logs (predictions.inspect_log), importing inspect_ai only when it is given one
    assert {"reproduce.serve.protocol", "reproduce.score", "reproduce.predictions.inspect_log"} <= set(names)
    assert loaded_by(names, ("inspect_ai", "gsqa_refdb")) == []


def imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_only_the_adapter_imports_reproduce_and_nothing_private() -> None:
    files = {path.stem: imported(path) for path in sorted((ROOT / "gsqa_refdb").glob("*.py"))}
    into_reproduce = {name for name, found in files.items() if any(m.split(".")[0] == "reproduce" for m in found)}
    private = [m for found in files.values() for m in found
               if m.split(".")[0] in ("reproduce", "gsqa_core") and m.rsplit(".", 1)[-1].startswith("_")]
    assert {"adapter", "tasks", "scorer", "_registry"} <= set(files)
    assert into_reproduce == {"adapter"}
    assert private == []

