"""--json-out, its one writer and reader: {provenance, runs, summary, usage, pairs, repeated, skipped, questions,
results}, the same sections for every command (docs/BENCHMARK-FORMAT.md, "Outputs")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from reproduce import session
from reproduce.dataset import Record
from reproduce.reports import usage
from reproduce.reports.analysis import pairs, repeated
from reproduce.reports.model import Report, by_run, line_name, lines, metrics
from reproduce.results import ROWS_KEPT, Result

PROBLEM_KINDS = ("problems", "warnings", "skipped")  # of a run's prediction files


def render(report: Report) -> str:
    """Every question once with its gold SQL and answer, every question of every run with its result; per run
    and line of the table its figures, and what it used (usage.py: every column, null where not known)."""
    summary = {name: {line_name(config, template): metrics(found) for config, template, found in lines(results)}
               for name, results in by_run(report.results).items()}
    runs = [{**facts, **{kind: [{"where": p.where, "why": p.why, "id": p.id} for p in getattr(run, kind)]
                         for kind in PROBLEM_KINDS}}
            for facts, run in zip(report.run_facts, report.runs, strict=True)]
    used = {name: {line_name(config, template): values for config, template, values in found}
            for name, found in usage.summary(report).items()}
    document = {"provenance": report.provenance, "runs": runs, "summary": summary, "usage": used,
                "pairs": pairs(report),
                "repeated": repeated(report),
                "skipped": [{"id": skip.id, "template_id": skip.template_id, "reason": skip.reason}
                            for skip in report.skipped],
                "questions": {record_id: _gold(record) for record_id, record in report.records.items()},
                "results": [result.as_dict() for result in report.results]}
    return json.dumps(document, default=str)  # no indent: the C encoder, 5x as fast on 13,200 results


def _gold(record: Record) -> dict[str, Any]:
    return {"template_id": record.template_id, "question": record.question, "sql": record.sql,
            "answer_rows": len(record.answers), "answers": session.clipped(record.answers[:ROWS_KEPT])}


def read_words(path: Path, verdict: str = "strict") -> dict[str, str]:
    """id -> the word (Result.word under `verdict`) of each question of an earlier --json-out, older reports'
    included (verify --baseline)."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        return {entry["id"]: Result.from_dict(entry).word(verdict) for entry in document["results"]}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise GsqaError(f"--baseline {path}: not a report of `reproduce verify --json-out` ({error})") from None
