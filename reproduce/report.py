"""Reports of a verification run: the stdout table, JSON, JUnit XML, one HTML page, and a baseline diff.

Files are written to a temporary name beside the target and then renamed, so a report is never half
written. Every report is built from the same list of Results and the same summary counts.
"""

from __future__ import annotations

import html
import json
import os
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ingest.errors import GsqaError
from reproduce.results import STATUSES, Result, summarize

_COLUMNS = ("config", "template", "questions", "pass %", "exact %", *STATUSES, "seconds")


def check_writable(paths: Iterable[Path | None]) -> None:
    """Refuse before a run the output files its end could not write (a run can take hours)."""
    for path in filter(None, paths):
        folder = Path(path).resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise GsqaError(f"cannot write {path}: folder {folder} does not exist or is not writable")


def write_atomically(path: Path, text: str) -> None:
    path = Path(path)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent or ".", prefix=f".{path.name}.",
                                     delete=False) as handle:
        handle.write(text)
    os.replace(handle.name, path)


def _by_template(results: Iterable[Result]) -> dict[tuple[str, str], list[Result]]:
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for result in results:
        groups[(result.group, result.template_id)].append(result)
    return groups


def _row(config: str, template: str, results: list[Result]) -> list[str]:
    counts = summarize(results)
    ran = counts["total"] - counts["skipped"]
    def rate(n: int) -> str:
        return f"{100 * n / ran:.1f}" if ran else "-"
    per_status = [str(sum(r.status == status for r in results)) for status in STATUSES]
    return [config, template, str(counts["total"]), rate(counts["passed"]), rate(counts["exact"]), *per_status,
            f"{sum(r.seconds for r in results):.1f}"]


def table(results: list[Result]) -> str:
    """Per config and template: questions, pass and exact rates (of those run), counts per status, time."""
    rows = [_row(config, template, group) for (config, template), group in _by_template(results).items()]
    for config in dict.fromkeys(result.group for result in results):
        rows.append(_row(config, "all", [r for r in results if r.group == config]))
    rows.append(_row("total", "", results))
    widths = [max(len(cells[i]) for cells in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
    def line(cells: list[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        padded = (cell.ljust(width) if i < 2 else cell.rjust(width) for i, (cell, width) in pairs)
        return "  ".join(padded).rstrip()
    return "\n".join([line(list(_COLUMNS)), *(line(cells) for cells in rows)])


def failures(results: list[Result], limit: int = 20) -> str:
    """The first failing questions with their evidence, one line each."""
    failing = [r for r in results if r.status not in ("pass", "skipped")]
    lines = [f"{r.id} [{r.template_id}] {r.status}: {_evidence(r)}" for r in failing[:limit]]
    if len(failing) > limit:
        lines.append(f"... and {len(failing) - limit} more (see --json-out / --html)")
    return "\n".join(lines)


def _evidence(result: Result) -> str:
    detail = result.detail
    if "error" in detail:
        return detail["error"]
    failure = detail.get("failure")
    if failure:
        value = failure.get("value")
        off = f", {failure['metric']} {value:.4g} vs {failure['threshold']}" if value is not None else ""
        return f"{failure['component']} expected {failure['expected']!r}, got {failure['actual']!r}{off}"
    return "no rows (stored answer has some)" if result.status == "empty" else result.status


def as_json(provenance: dict[str, Any], results: list[Result]) -> str:
    document = {"provenance": provenance, "summary": summarize(results),
                "results": [result.as_dict() for result in results]}
    return json.dumps(document, indent=1, default=str)


def read_baseline(path: Path) -> dict[str, str]:
    """id -> status of an earlier --json-out."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        return {entry["id"]: entry["status"] for entry in document["results"]}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GsqaError(f"--baseline {path}: not a report of `reproduce verify --json-out` ({error})") from None


def baseline_changes(previous: dict[str, str], results: list[Result]) -> list[tuple[str, str, str]]:
    """(id, before, now) for every question whose status changed: regressions first, then the rest."""
    changes = [(r.id, previous.get(r.id, "absent"), r.status) for r in results if previous.get(r.id) != r.status]
    return sorted(changes, key=lambda change: (not (change[1] == "pass"), change[0]))


def baseline_text(changes: list[tuple[str, str, str]]) -> str:
    if not changes:
        return "no status changed since the baseline"
    regressions = sum(before == "pass" for _, before, _ in changes)
    lines = [f"{len(changes)} status changes since the baseline ({regressions} regressions):"]
    lines += [f"  {'REGRESSION ' if before == 'pass' else ''}{rid}: {before} -> {now}" for rid, before, now in changes]
    return "\n".join(lines)


def junit(results: list[Result]) -> str:
    """One testsuite per template, one testcase per question; CI systems show failures and skips."""
    suites = ET.Element("testsuites", name="reproduce verify")
    for (config, template), group in _by_template(results).items():
        counts = summarize(group)
        suite = ET.SubElement(suites, "testsuite", name=f"{config}.{template}", tests=str(counts["total"]),
                              failures=str(counts["mismatched"] + counts["empty"]),
                              errors=str(counts["timed_out"] + counts["errored"]), skipped=str(counts["skipped"]),
                              time=f"{sum(r.seconds for r in group):.3f}")
        for result in group:
            case = ET.SubElement(suite, "testcase", classname=f"{config}.{template}", name=result.id,
                                 time=f"{result.seconds:.3f}")
            _junit_outcome(case, result)
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def _junit_outcome(case: ET.Element, result: Result) -> None:
    kinds: dict[str, Callable[[], tuple[str, str]]] = {
        "mismatch": lambda: ("failure", _evidence(result)), "empty": lambda: ("failure", _evidence(result)),
        "timeout": lambda: ("error", _evidence(result)), "error": lambda: ("error", _evidence(result)),
        "skipped": lambda: ("skipped", result.detail.get("reason", "")),
    }
    if result.status in kinds:
        tag, message = kinds[result.status]()
        element = ET.SubElement(case, tag, message=message, type=result.status)
        element.text = json.dumps(result.detail, indent=1, default=str)


_STYLE = """body{font:14px sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}pre{white-space:pre-wrap;margin:0;
max-height:24em;overflow:auto}.pass{color:#1a7f37}.fail{color:#cf222e}"""


def html_page(provenance: dict[str, Any], results: list[Result]) -> str:
    """One self-contained page: summary, a per-template pass-rate chart (inline SVG), the failing questions."""
    summary = summarize(results)
    database = provenance.get("database", {})
    facts = [("dataset", f"{provenance['dataset']['source']} (sha256 {provenance['dataset']['checksum'][:16]}…)"),
             ("database", f"{database.get('target', '')}; {database.get('version', '')}"),
             ("PostGIS", database.get("postgis_full_version", "")),
             ("timeout / workers", f"{provenance.get('timeout')} s / {provenance.get('workers')}"),
             ("summary", ", ".join(f"{key} {value}" for key, value in summary.items()))]
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>reproduce verify</title>",
             f"<style>{_STYLE}</style></head><body><h1>reproduce verify</h1><table>",
             *(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts),
             "</table><h2>Pass rate per template</h2>", _chart(results), "<h2>Questions that did not pass</h2>",
             _failure_table(results), "</body></html>"]
    return "\n".join(parts)


def _chart(results: list[Result]) -> str:
    bar_height, label_width, bar_width = 18, 190, 500
    groups = list(_by_template(results).items())
    rows = []
    for n, ((config, template), group) in enumerate(groups):
        counts = summarize(group)
        ran = counts["total"] - counts["skipped"]
        rate = counts["passed"] / ran if ran else 0.0
        y = n * bar_height
        text = f"{100 * rate:.0f}% of {ran}" if ran else f"skipped ({counts['skipped']})"
        rows.append(
            f"<text x='0' y='{y + 13}'>{html.escape(f'{config} {template}')}</text>"
            f"<rect x='{label_width}' y='{y + 2}' width='{bar_width}' height='{bar_height - 4}' fill='#eee'/>"
            f"<rect x='{label_width}' y='{y + 2}' width='{bar_width * rate:.1f}' height='{bar_height - 4}' "
            f"fill='#2da44e'/><text x='{label_width + bar_width + 6}' y='{y + 13}'>{text}</text>")
    height = bar_height * len(groups)
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{label_width + bar_width + 120}' height='{height}' "
            f"font-size='12'>{''.join(rows)}</svg>")


def _failure_table(results: list[Result]) -> str:
    failing = [r for r in results if r.status != "pass"]
    if not failing:
        return "<p class='pass'>Every selected question passed.</p>"
    cells = ["<table><tr><th>question</th><th>status</th><th>evidence</th><th>detail (diff)</th></tr>"]
    for result in failing:
        evidence = result.detail.get("reason") if result.status == "skipped" else _evidence(result)
        cells.append(
            f"<tr><td>{html.escape(result.id)}<br>{html.escape(result.template_id)}</td>"
            f"<td class='fail'>{result.status}</td><td>{html.escape(str(evidence))}</td>"
            f"<td><pre>{html.escape(json.dumps(result.detail, indent=1, default=str))}</pre></td></tr>")
    cells.append("</table>")
    return "\n".join(cells)
