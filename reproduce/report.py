"""Reports of a verification run: the stdout table, JSON, JUnit XML, one HTML page, and a baseline diff.

Files are written to a temporary name beside the target and then renamed, so a report is never half
written. Every report is built from the same list of Results and the same summary counts.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from reproduce.report_frame import Case, html_document, junit_document
from reproduce.results import OF_PREDICTIONS, OUTCOMES, VERDICTS, Result, summarize

# verify's words for a question (Result.word under the strict verdict): the verdict when its rows were judged,
# else how its SQL came out
WORDS = (*VERDICTS, *(outcome for outcome in OUTCOMES if outcome != "ran" and outcome not in OF_PREDICTIONS))
_COLUMNS = ("config", "template", "questions", "pass %", "exact %", "paper %", *WORDS, "seconds")


def check_writable(paths: Iterable[Path | None]) -> None:
    """Refuse before a run the output files its end could not write (a run can take hours)."""
    for path in filter(None, paths):
        folder = Path(path).resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise GsqaError(f"cannot write {path}: folder {folder} does not exist or is not writable")


def write_atomically(path: Path, text: str) -> None:
    """Write through a temporary file and a rename; the file gets the permissions a new file gets under the
    umask (0644 usually), not the temporary file's 0600."""
    path = Path(path)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent or ".", prefix=f".{path.name}.",
                                     delete=False) as handle:
        handle.write(text)
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(handle.name, 0o666 & ~umask)
    os.replace(handle.name, path)


def _by_template(results: Iterable[Result]) -> dict[tuple[str, str], list[Result]]:
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for result in results:
        groups[(result.group, result.template_id)].append(result)
    return groups


def _row(config: str, template: str, results: list[Result]) -> list[str]:
    counts = summarize(results)
    ran = counts["questions"] - counts["skipped"]
    def rate(n: int) -> str:
        return f"{100 * n / ran:.1f}" if ran else "-"
    per_word = [str(sum(r.word("strict") == word for r in results)) for word in WORDS]
    return [config, template, str(counts["questions"]), rate(counts["strict_passed"]), rate(counts["exact"]),
            rate(counts["paper_passed"]), *per_word, f"{sum(r.seconds for r in results):.1f}"]


def table(results: list[Result]) -> str:
    """Per config and template: questions, strict pass and exact rates (of those run), the paper's rate, counts
    per word (Result.word under the strict verdict), time."""
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
    failing = [r for r in results if r.word("strict") not in ("pass", "skipped")]
    lines = [f"{r.id} [{r.template_id}] {r.word('strict')}: {_evidence(r)}" for r in failing[:limit]]
    if len(failing) > limit:
        lines.append(f"... and {len(failing) - limit} more (see --json-out / --html)")
    return "\n".join(lines)


def skips(results: list[Result], limit: int = 20) -> str:
    """Skipped questions grouped by template and reason, e.g. "20 skipped [R5]: file ... is not in DATA"."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for result in results:
        if result.outcome == "skipped":
            reason = result.detail.get("reason", "")
            kind = re.sub(r"\b\d{3}\b", "<n>", reason)  # one vector question file per question: one kind
            groups[(result.template_id, kind)].append(reason)
    lines = [f"{len(reasons)} skipped [{template}]: {reasons[0]}"
             + (f" (and {len(reasons) - 1} more like it)" if len(set(reasons)) > 1 else "")
             for (template, _), reasons in groups.items()]
    if len(lines) > limit:
        lines = [*lines[:limit], f"... and {len(lines) - limit} more groups (see --json-out)"]
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
    return "no rows (stored answer has some)" if result.outcome == "empty" else result.word("strict")


def as_json(provenance: dict[str, Any], results: list[Result]) -> str:
    document = {"provenance": provenance, "summary": summarize(results),
                "results": [result.as_dict() for result in results]}
    return json.dumps(document, indent=1, default=str)


def servers_text(provenance: dict[str, Any], results: list[Result]) -> str:
    """One line per server of the run: its role, how many questions it answered, whether it was lost."""
    answered = Counter(result.server for result in results if result.server)
    lines = ["servers:"]
    for server in provenance["servers"]:
        line = f"  {server['name']} ({server['role']}): {answered[server['name']]:,} questions"
        if "forced" in server:
            line += f"; run with --force although {server['forced']}"
        if lost := provenance.get("lost", {}).get(server["name"]):
            line += f"; {lost}"
        lines.append(line)
    return "\n".join(lines)


def read_baseline(path: Path) -> dict[str, str]:
    """id -> the word (Result.word under the strict verdict) of each question of an earlier --json-out, older
    reports' included."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        return {entry["id"]: Result.from_dict(entry).word("strict") for entry in document["results"]}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GsqaError(f"--baseline {path}: not a report of `reproduce verify --json-out` ({error})") from None


def baseline_changes(previous: dict[str, str], results: list[Result]) -> list[tuple[str, str, str]]:
    """(id, before, now) for every question whose word changed: regressions first, then the rest."""
    changes = [(r.id, previous.get(r.id, "absent"), r.word("strict")) for r in results
               if previous.get(r.id) != r.word("strict")]
    return sorted(changes, key=lambda change: (not (change[1] == "pass"), change[0]))


def baseline_text(changes: list[tuple[str, str, str]]) -> str:
    if not changes:
        return "no status changed since the baseline"
    regressions = sum(before == "pass" for _, before, _ in changes)
    lines = [f"{len(changes)} status changes since the baseline ({regressions} regressions):"]
    lines += [f"  {'REGRESSION ' if before == 'pass' else ''}{rid}: {before} -> {now}" for rid, before, now in changes]
    return "\n".join(lines)


def junit(results: list[Result]) -> str:
    """One testsuite per template, one testcase per question; CI systems show failures and skips. The paper's
    verdict is a property beside the strict verdict the testcase carries."""
    return junit_document("reproduce verify", {f"{config}.{template}": [_case(f"{config}.{template}", result)
                                                                       for result in group]
                                               for (config, template), group in _by_template(results).items()})


_JUNIT = {"fail": "failure", "empty": "failure", "timeout": "error", "sql_error": "error", "skipped": "skipped"}


def _case(classname: str, result: Result) -> Case:
    properties = {"outcome": result.outcome, "paper": result.paper, "paper_reason": result.paper_reason}
    word = result.word("strict")
    kind = _JUNIT.get(word)
    message = result.detail.get("reason", "") if result.outcome == "skipped" else _evidence(result)
    return Case(classname, result.id, result.seconds, properties, kind, word if kind else "",
                message if kind else "", json.dumps(result.detail, indent=1, default=str) if kind else None)


def html_page(provenance: dict[str, Any], results: list[Result], records: dict[str, Any] | None = None) -> str:
    """One self-contained page for a person: when, against what, the pass rate per template (inline SVG), and
    every question that did not pass, grouped by template, with its question, evidence, expected against
    actual values, its SQL (folded) and the `reproduce show` command that re-runs it."""
    summary = summarize(results)
    database = provenance.get("database", {})
    dataset = provenance.get("dataset", {})
    counts = ", ".join(f"{value} {key}" for key, value in summary.items()
                       if key in ("strict_passed", "exact", *OUTCOMES) and value)
    facts = [("dataset", f"{dataset.get('source', '')} (sha256 {str(dataset.get('checksum', ''))[:16]}…)"),
             ("database", f"{database.get('target', '')}"), ("server", database.get("version", "")),
             ("PostGIS", database.get("postgis_full_version", "")),
             ("timeout, workers", f"{provenance.get('timeout')} s, {provenance.get('workers')}"),
             ("questions", f"{summary['questions']}: {counts}"),
             ("paper's scoring", f"{summary['paper_passed']} pass (as the benchmark authors score each template, "
                                 "docs/BENCHMARK-FORMAT.md)")]
    when = f"{provenance.get('started_at', '')}, {provenance.get('seconds', '?')} s, {provenance.get('tool', '')} " \
           f"{provenance.get('tool_version', '')}"
    parts = [f"<h1>reproduce verify: {summary['strict_passed']} of {summary['questions']} questions pass</h1>",
             f"<p class='meta'>{html.escape(when)}</p><table class='facts'>",
             *(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts),
             "</table><h2>Pass rate per template</h2>", _chart(results),
             "<h2>Questions that did not pass</h2>", _failures_by_template(results, records or {}, dataset)]
    return html_document(f"reproduce verify: {summary['strict_passed']} of {summary['questions']} pass",
                         "\n".join(parts))


def _chart(results: list[Result]) -> str:
    groups = list(_by_template(results).items())
    bar_height, bar_width = 18, 500
    label_width = 7 * max((len(f"{config} {template}") for (config, template), _ in groups), default=10) + 10
    rows = []
    for n, ((config, template), group) in enumerate(groups):
        counts = summarize(group)
        ran = counts["questions"] - counts["skipped"]
        rate = counts["strict_passed"] / ran if ran else 0.0
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


def _failures_by_template(results: list[Result], records: dict[str, Any], dataset: dict[str, Any]) -> str:
    failing = [r for r in results if r.word("strict") not in ("pass", "skipped")]
    skipped = skips(results)
    if not failing and not skipped:
        return "<p class='pass'>Every selected question passed.</p>"
    source = str(dataset.get("source", ""))
    data_option = "" if not source or source.startswith("hf:") else f" --data {source}"
    parts = []
    for (config, template), group in _by_template(failing).items():
        total = sum(1 for r in results if r.template_id == template)
        parts.append(f"<h3>{html.escape(template)} ({html.escape(config)}): {len(group)} of {total} did not pass</h3>")
        parts += [_question_card(result, records.get(result.id), data_option, opened=n == 0)  # the first one open
                  for n, result in enumerate(group)]
    if skipped:
        parts.append(f"<h3>Skipped</h3><pre>{html.escape(skipped)}</pre>")
    return "\n".join(parts)


def _question_card(result: Result, record: Any, data_option: str, opened: bool) -> str:
    question = html.escape(getattr(record, "question", "") or "")
    head = (f"<summary><span class='status fail'>{html.escape(result.word('strict'))}</span> "
            f"<code>{html.escape(result.id)}</code> {question}</summary>")
    body = [f"<p>{html.escape(str(_evidence(result)))}</p>", _values_table(result)]
    if result.outcome != "skipped":
        body.append(f"<p>Paper's scoring: <b>{html.escape(result.paper)}</b> "
                    f"({html.escape(result.paper_reason)})</p>")
    if record is not None and "failure" not in result.detail:
        body.append(f"<p>Stored answer: <code>{html.escape(_short(record.answers))}</code></p>")
    diff = result.detail.get("diff")
    if diff:
        counts = ", ".join(f"{kind} {entry['count']}" for kind, entry in diff.items())
        body.append(f"<p>Row by row (exact): {html.escape(counts)}</p>")
    if record is not None:
        body.append(f"<details><summary>SQL</summary><pre>{html.escape(record.sql)}</pre></details>")
    body.append(f"<p>Re-run it: <code class='cmd'>reproduce show {html.escape(result.id)}"
                f"{html.escape(data_option)}</code></p>")
    return f"<details class='q'{' open' if opened else ''}>{head}{''.join(body)}</details>"


def _values_table(result: Result) -> str:
    failure = result.detail.get("failure")
    if not failure:
        return ""
    value = failure.get("value")
    cells = [failure.get("component"), failure.get("metric"), _short(failure.get("expected")),
             _short(failure.get("actual")), "" if value is None else f"{value:.4g}", failure.get("threshold")]
    return ("<table><tr><th>component</th><th>metric</th><th>expected</th><th>actual</th><th>measured</th>"
            "<th>tolerance</th></tr><tr>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells)
            + "</tr></table>")


def _short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "…"
