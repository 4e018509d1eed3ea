"""The question-run kernel below `reproduce verify`, `score` and `rebase` (and `show`, and `serve`'s preflight):
what a run of questions against the database shares, written once.

A command gives its selection (a Request: a RunRequest for a run through the Runner, serve's own for its
tools), the roles its SQL runs as, its judge and its resume entry; the kernel resolves the database once into
a Database, loads the selected records, preflights the database (and each --replica) for those roles and the
tables the records read, states the run's provenance, opens the --resume file, and runs the questions through
the Runner with one progress bar, handing each (question, outcome) to the judge and the judged result to the
resume file as it finishes. What the reports and the resume files keep of a value is clipped here too
(REPORTED_CHARACTERS).
"""

from __future__ import annotations

import datetime
import functools
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any, TypeVar

from tqdm import tqdm

from gsqa_core.db import describe_target, resolve_dsn
from gsqa_core.errors import GsqaError
from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import Role
from reproduce import configs, dataset, readiness, servers
from reproduce.dataset import Record, tables_needed
from reproduce.resume import ResumeFile
from reproduce.runner import DEFAULT_TIMEOUT_S, MAX_ROWS, Outcome, Runner, Server

Job = TypeVar("Job")  # what the Runner takes: a Record, or anything with `id` and `statements`
Result = TypeVar("Result")


# Requests are made by keyword (the commands fill them from their options by name: reproduce/cli.py).
@dataclass(kw_only=True)
class Request:
    """What every command that runs questions is asked for: the selection, the database, each statement's limit."""

    config: str = "all"
    data: Path | None = None
    dsn: str | None = None
    reader_dsn: str | None = None  # the login of the role the command's SQL runs as (--reader-dsn)
    timeout: float = DEFAULT_TIMEOUT_S
    templates: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class RunRequest(Request):
    """A run of the selected questions through the Runner (verify, show, score, rebase): its workers and
    servers, its row cap, its --resume file."""

    workers: int = 1
    max_rows: int = MAX_ROWS
    replicas: list[str] = field(default_factory=list)  # DSNs of more servers (hot standbys) to run on
    resume: Path | None = None
    force: bool = False
    progress: bool = True


@dataclass(frozen=True)
class Database:
    """The database a run works on, resolved once: the admin DSN, how reports name it, how errors describe it."""

    admin: str
    name: str  # host:port/database
    described: str  # host=... port=... database=...

    @classmethod
    def of(cls, dsn: str | None) -> Database:
        admin = resolve_dsn(dsn)
        return cls(admin, servers.name_of(admin), describe_target(admin))

    def login(self, role: Role, explicit: str | None = None) -> str:
        return login_dsn(self.admin, role, explicit)


def load_selected(request: Request) -> dataset.Dataset:
    """The records of the selected config and templates (or of the --id questions), skips included."""
    wanted = {str(configs.question_id(record_id)) for record_id in request.ids}  # --id in any scheme
    names = list(request.templates) or [configs.question_id(record_id).template.id for record_id in wanted]
    data = dataset.load(request.data, configs.select(request.config, names))
    if wanted:
        known = {record.id for record in data.records} | {skip.id for skip in data.skipped}
        if unknown := sorted(wanted - known):
            raise GsqaError(f"no question {', '.join(unknown)} in {data.source} (--id)")
        data.records = [record for record in data.records if record.id in wanted]
        data.skipped = [skip for skip in data.skipped if skip.id in wanted]
    return data


def dataset_order(data: dataset.Dataset) -> list[str]:
    """Questions in template order, then by number, the skipped ones in their place."""
    rank = {t.id: n for n, t in enumerate(configs.TEMPLATES)}
    ids = [(record.template_id, record.id) for record in data.records]
    ids += [(skip.template_id, skip.id) for skip in data.skipped]
    return [record_id for _, record_id in sorted(ids, key=lambda pair: (rank[pair[0]], _number(pair[1])))]


def _number(record_id: str) -> int:
    """The number of a record id the loader made (canonical, though a file may hold more records than the
    release has questions)."""
    tail = record_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else 0


@dataclass
class Prepared:
    """A database ready for a run: preflighted for its roles and tables, its replicas checked, its facts."""

    request: Request  # run() takes a RunRequest's workers and servers; connect() any request's row cap
    target: Database
    logins: dict[Role, str]  # each role's login DSN, resolved once
    readiness: readiness.Readiness
    replicas: list[servers.Checked]

    @functools.cached_property
    def facts(self) -> dict[str, Any]:
        """Server and PostGIS versions, exact row counts (counted once, when a report or resume file needs them)."""
        return readiness.database_facts(self.target.admin)

    def servers(self, role: Role) -> list[Server]:
        """The primary and each replica as servers that answer as `role` (the Runner's, serve's pools)."""
        return [Server(self.target.name, self.logins[role], self.target.admin),
                *(checked.server(role) for checked in self.replicas)]

    def run(self, jobs: list[Job], role: Role, judge: Callable[[Job, Outcome], Result], resume: ResumeFile | None,
            lost: dict[str, str], description: str) -> Iterator[Result]:
        """Each job's judged result as it finishes, kept in `resume`; the jobs run as `role` (the request's
        --reader-dsn is that role's login) on the primary and every replica; `lost` hears of lost servers."""
        primary, *replicas = self.servers(role)
        runner = Runner(primary.login, self.request.timeout, self.request.workers, primary.admin,
                        self.request.max_rows, replicas, primary.name)
        runner.lost = lost
        with tqdm(total=len(jobs), desc=description, unit="q", file=sys.stderr,
                  disable=not self.request.progress) as bar:
            for job, outcome in runner.run(jobs):
                result = judge(job, outcome)
                if resume:
                    resume.add(result)
                bar.update()
                yield result


def provenance(request: RunRequest, data: dataset.Dataset, command: str, prepared: Prepared | None) -> dict[str, Any]:
    """What a run's results depend on, as its reports state it (the database part only where SQL runs:
    `prepared`); `lost` is filled as servers are lost."""
    stated = {
        "tool": "gsqa-refdb", "tool_version": package_version("gsqa-refdb"), "command": command,
        "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "config": request.config, "templates": request.templates, "ids": request.ids,
        "dataset": {"source": data.source, "checksum": data.checksum, "records": len(data.records),
                    "skipped": len(data.skipped)},
        "timeout": request.timeout, "database": {}, "servers": [], "lost": {},
    }
    if prepared:
        stated["database"] = {"target": prepared.target.described, **prepared.facts}
        stated["servers"] = [{"name": prepared.target.name, "role": "primary"},
                             *({"name": checked.name, "role": checked.role,
                                **({"forced": checked.problem} if checked.problem else {})}
                               for checked in prepared.replicas)]
        stated["workers"] = request.workers
    return stated


def prepare(request: Request, records: list[Record], roles: Iterable[Role], command: str) -> Prepared:
    """Preflight the database (and a RunRequest's --replica servers) for `roles` and the tables `records` read:
    nothing runs before it passes. The request's --reader-dsn is the first role's login. A missing or empty
    table names the templates that read it, and the command line that runs the others: `command` (the words
    that start it, `reproduce verify`) with the selection's options."""
    roles = list(roles)
    # Resolved once (a login may need the kept password and a try on the socket): the preflight audits the same
    # DSNs the run then logs in with.
    target = Database.of(request.dsn)
    logins = {role: target.login(role, request.reader_dsn if n == 0 else None) for n, role in enumerate(roles)}
    ready = _preflight(request, target, records, logins, command)
    # A RunRequest's --replica servers, or serve's (never forced).
    checked = servers.replicas(target.admin, getattr(request, "replicas", []), tables_needed(records),
                               getattr(request, "force", False), roles)
    return Prepared(request, target, logins, ready, checked)


def _preflight(request: Request, target: Database, records: list[Record], logins: readiness.Logins,
               command: str) -> readiness.Readiness:
    ready = readiness.check(target.admin, logins, tables_needed(records))
    refused = readiness.not_ready(ready)
    if not refused:
        return ready
    unusable = {name for name, rows in ready.row_estimates.items() if not rows}
    blocked = {record.template_id for record in records if set(tables_needed([record])) & unusable}
    runnable = [template for template in dict.fromkeys(record.template_id for record in records)
                if template not in blocked]
    if blocked:
        refused += f"; the templates that read them: {', '.join(sorted(blocked, key=_template_order))}"
        if runnable:
            data = f" --data {request.data}" if request.data else ""
            options = " ".join(f"--template {template}" for template in runnable)
            refused += f"; to run the others: {command} --config {request.config}{data} {options}"
    raise GsqaError(refused)


def _template_order(template_id: str) -> tuple[str, int]:
    prefix = template_id.rstrip("0123456789")
    return prefix, int(template_id[len(prefix):] or 0)


REPORTED_CHARACTERS = 2_000  # a value in a report (JSON, JUnit, HTML, --resume) longer than this is cut


REPORTED_DEPTH = 32  # nesting of a value in a report: a model's answer nested deeper is not kept below it


def clipped(value: Any, depth: int = 0) -> Any:
    """`value` with every string past REPORTED_CHARACTERS cut, its size noted (one 400 MB value must not
    become an 800 MB report), and what is nested past REPORTED_DEPTH left out (a hostile answer nested
    thousands deep must not end the run in a RecursionError)."""
    if isinstance(value, str) and len(value) > REPORTED_CHARACTERS:
        return f"{value[:REPORTED_CHARACTERS]}… (cut: {len(value):,} characters in all)"
    if isinstance(value, dict | list) and depth >= REPORTED_DEPTH:
        return f"(not kept: nested past {REPORTED_DEPTH} levels)"
    if isinstance(value, dict):
        return {key: clipped(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list):
        return [clipped(item, depth + 1) for item in value]
    return value


def open_resume(request: RunRequest, header: dict[str, Any], **entry: Any) -> ResumeFile | None:
    """The request's --resume file (None without one), for results of the kind `entry` describes
    (ResumeFile's entry, format, command and key); its header also records the selection, so that a rerun
    with another --config, --template or --id is told the selection changed."""
    if not request.resume:
        return None
    selection = {"config": request.config, "templates": request.templates, "ids": request.ids}
    return ResumeFile(request.resume, {"selection": selection, **header}, request.force, **entry)
