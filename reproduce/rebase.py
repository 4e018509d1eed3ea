"""`reproduce rebase`: new ground truth from a rebuilt database, as a dataset the reader reads, with a drift report.

Every selected gold SQL runs as `reproduce verify` runs it (same runner, reader role, timeout). The records are
written again, each as it was except its answers and a `rebase` member (the old answers, the strict verdict of
the new answer against them, seconds, instability flags), in one of the layouts `reproduce verify --data`
reads: `jsonl`, the raw one (raster configs as `qa2/<config>/<template>.jsonl`, vector as
`vector/T<k>/<nnn>/question.json`), or `parquet`, the Hugging Face one (`<config>/test-00000-of-00001.parquet`
with answers, entities and rebase as JSON strings, and a README card whose YAML front matter lists the
configs, so that the folder can be pushed to the hub as it is). A question whose new
answer is empty, timed out or errored keeps its old answer (`rebase.kept_old`) and is listed in the report;
`--keep-failed` writes what the SQL gave instead. Beside the records: `DRIFT.md` and `drift.json` (per template:
how many answers hold under the tolerances, how many changed and by how much, how many failed; the 20 largest
changes; the database's fingerprint and versions) and a `README.md` card saying how the answers were made.
The folder is written under a temporary name and renamed when complete, so a killed rebase leaves nothing the
reader would take for a dataset; with `--resume FILE` every question's outcome is kept as it finishes (in
full: they are the new answers), and a rerun with the same file runs only the questions not in it.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from gsqa_core.sandbox import READER
from reproduce import dataset, results, session
from reproduce.dataset import Record
from reproduce.judging.instability import instability
from reproduce.judging.strict import Check
from reproduce.results import Result
from reproduce.resume import ResumeFile
from reproduce.runner import Outcome
from reproduce.session import Prepared, RunRequest

RESUME_FORMAT = "gsqa-reproduce-rebase-resume/1"

LARGEST_LISTED = 20


@dataclass(frozen=True)
class Answered:
    """One question's outcome, as a line of a rebase --resume file."""

    id: str
    outcome: Outcome

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, **asdict(self.outcome)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Answered:
        return cls(data["id"], Outcome(data["kind"], float(data["seconds"]), data["rows"], data.get("error", ""),
                                       data.get("retried", "")))


@dataclass
class Rebased:
    """One question re-based: its result, judged as `verify` judges it, and the outcome whose rows are its new
    answers."""

    record: Record
    outcome: Outcome
    result: Result
    checks: list[Check] = field(default_factory=list)  # every component's measure (held or changed)

    @property
    def status(self) -> str:
        """held or changed (the strict verdict of the new answer against the published one), else why there is
        no new answer: empty (no rows, even where none is published), timeout, sql_error."""
        if self.result.outcome == "ran" and self.outcome.rows:
            return "held" if self.result.strict == "pass" else "changed"
        return "empty" if self.result.outcome == "ran" else self.result.outcome

    @property
    def failure(self) -> Check | None:
        """The first failing component of a changed answer, else None."""
        return next((check for check in self.checks if not check.passed), None) if self.status == "changed" else None

    @property
    def change(self) -> float:
        """The failing component's measure against its tolerance (0 when held), for ranking."""
        if self.status == "held":
            return 0.0
        failure = self.failure
        if failure is None or not failure.threshold or not math.isfinite(failure.value):
            return math.inf
        return failure.value / failure.threshold

    @property
    def measure(self) -> str:
        """What changed, e.g. "elevation: elevation (m) 12 (tolerance 10)"."""
        if (failure := self.failure) is None:
            return ""
        value = "n/a" if math.isinf(failure.value) else f"{failure.value:.4g}"
        return f"{failure.component}: {failure.metric} {value} (tolerance {failure.threshold})"

    def as_dict(self) -> dict[str, Any]:
        """What the --resume file keeps: the outcome, judged again when it is read back."""
        return Answered(self.record.id, self.outcome).as_dict()


@dataclass
class RebaseReport:
    out: str
    rebased: list[Rebased] = field(default_factory=list)
    skipped: int = 0

    def per_template(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, list[Rebased]] = defaultdict(list)
        for item in self.rebased:
            groups[item.record.template_id].append(item)
        table = {}
        for template, items in groups.items():
            counts = {status: sum(item.status == status for item in items)
                      for status in ("held", "changed", "empty", "timeout", "sql_error")}
            changes = [item.change for item in items if item.status == "changed" and math.isfinite(item.change)]
            unstable = sum(bool(instability(item.record.template_id, item.record.sql)) for item in items)
            table[template] = {"questions": len(items), **counts, "unstable": unstable,
                               "change_in_tolerances": _spread(changes), "by_measure": _by_measure(items)}
        return table

    @property
    def exit_code(self) -> int:
        return 0 if all(item.status in ("held", "changed") for item in self.rebased) else 1


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _by_measure(items: list[Rebased]) -> dict[str, dict[str, float]]:
    """How far the new answers are from the old ones, per component and its metric (a relative change for
    numbers, a distance for locations, a token F1 for names ...), over every question with a new answer."""
    values: dict[str, list[float]] = defaultdict(list)
    for item in items:
        for check in item.checks:
            if math.isfinite(check.value):
                values[f"{check.component}: {check.metric}"].append(check.value)
    return {measure: {"answers": len(found), **_spread(found)} for measure, found in values.items()}


FORMATS = dataset.LAYOUTS  # --format: the layouts the records are written in


def rebase(request: RunRequest, out: Path, keep_failed: bool = False, layout: str = "jsonl",
           command: str = "") -> RebaseReport:
    """Re-run the selected templates' gold SQL and write the re-based dataset to `out`; `command` is the
    command line that made it, for the dataset card."""
    if out.exists() and any(out.iterdir()):
        raise GsqaError(f"--out {out}: exists and is not empty; rebase writes a new dataset folder")
    data = session.load_selected(request)
    prepared = session.prepare(request, data.records, [READER], f"reproduce rebase --out {out}")
    report = RebaseReport(out=str(out), skipped=len(data.skipped))
    resume = session.open_resume(request, {"dataset": data.checksum, "database": prepared.facts["row_counts"],
                                           "timeout": request.timeout}, entry=Answered.from_dict,
                                 format=RESUME_FORMAT, command="reproduce rebase")
    try:
        _run(prepared, data.records, report, resume)
    finally:
        if resume:
            resume.close()
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    front = dataset.write(partial, layout, [(item.record, _new_record(item, keep_failed)) for item in report.rebased])
    _write_reports(partial, report, prepared, command, front)
    if out.exists():
        out.rmdir()
    os.replace(partial, out)
    return report


def _run(prepared: Prepared, records: list[Record], report: RebaseReport, resume: ResumeFile | None) -> None:
    """Every record's outcome (those in the resume file as they were), judged, in dataset order."""
    done = resume.done if resume else {}
    report.rebased += [_judge(record, done[record.id].outcome) for record in records if record.id in done]
    report.rebased += prepared.run([record for record in records if record.id not in done], READER, _judge, resume,
                                   {}, "rebase")
    order = {record.id: n for n, record in enumerate(records)}
    report.rebased.sort(key=lambda item: order[item.record.id])


def _judge(record: Record, outcome: Outcome) -> Rebased:
    result, judgement = results.evaluated(results.gold_job(record), outcome)
    return Rebased(record, outcome, result, judgement.strict.checks if judgement else [])


def _new_record(item: Rebased, keep_failed: bool) -> dict[str, Any]:
    """The record as the reader reads it, its answers replaced, with where they came from."""
    record, outcome = item.record, item.outcome
    failed = item.status not in ("held", "changed")
    answers = record.answers if failed and not keep_failed else outcome.rows
    provenance = {"old_answers": session.clipped(record.answers), "verdict": item.status,
                  "seconds": round(outcome.seconds, 3), "unstable": instability(record.template_id, record.sql)}
    if failed:
        provenance |= {"kept_old": not keep_failed, "error": outcome.error}
    return dataset.document(record) | {"answers": answers, "rebase": provenance}


def _write_reports(root: Path, report: RebaseReport, prepared: Prepared, command: str,
                   front: dict[str, Any]) -> None:
    """drift.json, DRIFT.md and the README card (its front matter `front`, what the layout needs, and more)."""
    made = {"command": command, "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "database": {"target": prepared.target.described, **prepared.facts},
            "timeout": prepared.request.timeout}
    largest = sorted((item for item in report.rebased if item.status == "changed"), key=lambda item: -item.change)
    drift = {"made": made, "templates": report.per_template(), "skipped": report.skipped,
             "largest_changes": [{"id": item.record.id, "question": item.record.question, "change": item.measure}
                                 for item in largest[:LARGEST_LISTED]],
             "failed": [{"id": item.record.id, "status": item.status, "error": item.outcome.error}
                        for item in report.rebased if item.status not in ("held", "changed")]}
    (root / "drift.json").write_text(json.dumps(drift, indent=1, default=str) + "\n")
    (root / "DRIFT.md").write_text(_drift_markdown(drift))
    (root / "README.md").write_text(
        dataset.front_matter(_card(front, made)) + "# GS-QA2 answers re-based on a rebuilt reference database\n\n"
        f"Made by `{made['command'] or 'reproduce rebase'}` on {made['date']} against {made['database']['target']} "
        f"({made['database']['version']}; {made['database']['postgis_full_version']}), timeout {made['timeout']} s.\n"
        "Every record is the GS-QA2 record with its answers replaced by what its gold SQL returned there; "
        "`rebase.old_answers` keeps the published ones. DRIFT.md says what changed.\n\n"
        "Licence and attribution as the GS-QA2 benchmark: the answers derive from OpenStreetMap data, © "
        "OpenStreetMap contributors, ODbL 1.0, and from ASTER GDEM v3 (METI and NASA); Wikipedia-derived facts "
        "(V7) are CC BY-SA.\n")


def _card(front: dict[str, Any], made: dict[str, Any]) -> dict[str, Any]:
    """The dataset card's front matter where the layout has one (the Hugging Face one): licence, the layout's
    `front` (its configs and their files), and how the answers were made."""
    if not front:
        return {}
    return {"license": "odbl", "pretty_name": "GS-QA2 (answers re-based)", "tags": ["geospatial", "text-to-sql"],
            **front,
            "rebase": {"command": made["command"], "date": made["date"], "timeout": made["timeout"],
                       "database": {key: made["database"][key] for key in ("target", "version", "postgis_full_version",
                                                                           "row_counts")}}}


def _drift_markdown(drift: dict[str, Any]) -> str:
    lines = ["# Drift against the published answers", "",
             "| template | questions | held | changed | empty | timeout | sql_error | not deterministic | "
             "change (in tolerances) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for template, row in drift["templates"].items():
        spread = row["change_in_tolerances"]
        change = f"{spread['min']:.2g} / {spread['median']:.2g} / {spread['max']:.2g}" if spread else "–"
        lines.append(f"| {template} | {row['questions']} | {row['held']} | {row['changed']} | {row['empty']} | "
                     f"{row['timeout']} | {row['sql_error']} | {row['unstable']} | {change} |")
    lines += ["", "Change: the first failing component's measure over its tolerance (min / median / max). Not "
              "deterministic: questions whose new answer may legitimately differ on another run or build (LIMIT "
              "without ORDER BY, ties, DEM seams: `rebase.unstable` in each record says why).", "",
              "## By measure", "", "Every question with a new answer, per answer component and its metric.", "",
              "| template | measure | answers | min | median | max |", "|---|---|---|---|---|---|"]
    for template, row in drift["templates"].items():
        lines += [f"| {template} | {measure} | {spread['answers']} | {spread['min']:.4g} | {spread['median']:.4g} | "
                  f"{spread['max']:.4g} |" for measure, spread in row["by_measure"].items()]
    lines += ["", "## The largest changes", ""]
    lines += [f"- `{item['id']}` {item['question']}: {item['change']}" for item in drift["largest_changes"]] or ["none"]
    if drift["failed"]:
        lines += ["", "## No new answer (the published one is kept unless --keep-failed)", ""]
        lines += [f"- `{item['id']}`: {item['status']} {item['error']}".rstrip() for item in drift["failed"]]
    return "\n".join(lines) + "\n"
