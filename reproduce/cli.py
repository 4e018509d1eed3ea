"""`reproduce`: check the reference database against the benchmark (thin typer layer over reproduce.*)."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from gsqa_core import schema
from gsqa_core.cli import DsnOption, JsonOption, command_group, interrupted_as_130, manual, reported_as_exit_code, run
from gsqa_core.errors import EXIT_OK, EXIT_SOME_FAILED, GsqaError
from gsqa_core.sandbox import MODEL, READER
from reproduce import configs, gate, readiness
from reproduce import verify as verification
from reproduce.judging import tolerances, values
from reproduce.reports import console, files, json_report
from reproduce.reports.model import of_scores, of_verify
from reproduce.runner import DEFAULT_TIMEOUT_S, MAX_ROWS, MAX_TIMEOUT_S, MIN_TIMEOUT_S
from reproduce.serve import python_sandbox
from reproduce.serve.replies import MAX_ITEMS
from reproduce.serve.tools import ServeRequest
from reproduce.session import REPORTED_CHARACTERS, Request, RunRequest
from reproduce.verify import Shown

app = command_group(
    "reproduce",
    """Re-run the GS-QA2 benchmark SQL against the reference database and compare with the stored answers.

The database is resolved as everywhere: --dsn, then $DATABASE_URL, then libpq's PG* variables.
SQL runs in the sandbox `ingest init` sets up: gold SQL as the login role gsqa_reader, a model's SQL as
gsqa_model (--reader-dsn, or the main DSN with that user and $GSQA_READER_PASSWORD / $GSQA_MODEL_PASSWORD,
else the password `ingest init` kept; over TCP on 127.0.0.1 where the local socket refuses it). Only one
query runs per question (SELECT, WITH, VALUES, TABLE); anything else is refused in one line.

Exit codes: 0 ok; 1 the run went through but something failed or differs; 2 nothing started;
130 interrupted (Ctrl-C).""",
)


ReaderDsnOption = Annotated[
    str | None,
    typer.Option("--reader-dsn", metavar="DSN",
                 help="DSN of the sandbox role the SQL runs as (default: --dsn as that role: gsqa_reader for "
                      "gold SQL, gsqa_model for a model's).", show_default=False),
]


@app.command()
@manual(postgis=schema.MIN_POSTGIS_TEXT)
def check(dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
          as_json: JsonOption = False) -> None:
    """Say whether the database is ready for benchmark runs: PostGIS >= ${postgis}, the six reference tables
    present and not empty (rows: the planner's estimate, or for a table not yet analyzed an exact count up
    to a million, "more than" above), and both sandbox logins (gsqa_reader for gold SQL, gsqa_model for a
    model's; --reader-dsn names gsqa_reader's) usable and as declared: each logs in, reads every reference
    table, owns and may create nothing, and stores exactly its declared settings (a role may change its own:
    any difference is named, and `ingest init` restores it); the server allows no prepared transactions, and
    the reference schema holds no function an extension did not install. What each session gets is shown,
    and as a note how much memory each backend of the server may take (make db's server bounds it; on
    another server it may be unbounded: docs/SANDBOX.md, "Memory", says what to set).

    Example: reproduce check --dsn postgresql://postgres@localhost:5432/gsqa

    Exit codes: 0 ready; 1 some table is missing or empty, or a role cannot log in or differs from its
    declaration; 2 unreachable database or no PostGIS.
    """
    with reported_as_exit_code():
        result = readiness.check(dsn, {READER: reader_dsn, MODEL: None})
    if as_json:
        typer.echo(json.dumps({"postgis": result.postgis_version, "tables": result.row_estimates,
                               "counted": result.counted,
                               "roles": {name: found.settings for name, found in result.audits.items()},
                               "problems": result.problems, "notes": result.notes}))
    else:
        typer.echo(f"PostGIS {result.postgis_version}")
        for name, rows in result.row_estimates.items():
            typer.echo(f"  {name:<8} {readiness.rows_text(rows, result.counted[name])}")
        for found in result.audits.values():
            if found.settings:
                settings = ", ".join(f"{name} {value}" for name, value in found.settings.items() if name != "user")
                typer.echo(f"{found.role.name} ({found.role.runs}): {settings}")
        for problem in result.problems:
            typer.echo(f"not ready: {problem}")
        for note in result.notes:
            typer.echo(f"note: {note}")
    if result.problems:
        raise typer.Exit(EXIT_SOME_FAILED)


# The choices come from the registry, so the help and the error for an unknown name list the real names.
ConfigName = enum.Enum("ConfigName", {name: name for name in configs.CONFIG_NAMES}, type=str)
DataOption = Annotated[Path | None, typer.Option(
    "--data", metavar="DIR", help="Local benchmark data: a folder with qa2/ and/or vector/ (T<k>/), or "
    "<config>/*.parquet as on Hugging Face. Default: the Hugging Face dataset Zoe/GS-QA2 (cached).",
    show_default=False)]
TimeoutOption = Annotated[float, typer.Option("--timeout", metavar="SECONDS", min=MIN_TIMEOUT_S, max=MAX_TIMEOUT_S,
                                              help="Seconds each statement may run, on the server (a client "
                                              "watchdog stops it 2 s later).")]
ResumeOption = Annotated[Path | None, typer.Option("--resume", metavar="FILE", help="Append results to FILE; "
                                                   "skip questions already in it.", show_default=False,
                                                   dir_okay=False)]
ForceOption = Annotated[bool, typer.Option("--force", help="Reuse a --resume file written for another dataset, "
                                           "database or timeout; run on a --replica that lags or differs.")]
ConfigOption = Annotated[ConfigName, typer.Option("--config", help="Which part of the benchmark.")]
WorkersOption = Annotated[int, typer.Option("--workers", metavar="N", min=1, show_default=False,
                                            help="Parallel connections per server (default: cores).")]
TemplateOption = Annotated[list[str], typer.Option("--template", metavar="ID", help="Template id or stem "
                                                   "(repeatable); the only way to run the 9 exploratory templates.")]
IdOption = Annotated[list[str], typer.Option("--id", metavar="ID", help="Question id (repeatable).")]
MaxRowsOption = Annotated[int, typer.Option("--max-rows", metavar="N", min=1, help="A result with more rows is an "
                                            "error (the largest stored answer has 6,885).")]
ReplicaOption = Annotated[list[str], typer.Option("--replica", metavar="DSN", help="Another server holding the same "
                                                  "database, e.g. a hot standby (repeatable); --workers N run on "
                                                  "each.")]
JsonOutOption = Annotated[Path | None, typer.Option("--json-out", metavar="FILE", show_default=False, dir_okay=False,
                                                    help="Every question's result as JSON.")]
JunitOption = Annotated[Path | None, typer.Option("--junit", metavar="FILE", show_default=False, dir_okay=False,
                                                  help="JUnit XML (a testcase per question).")]
CsvOutOption = Annotated[Path | None, typer.Option("--csv-out", metavar="FILE", show_default=False, dir_okay=False,
                                                  help="The figures in long format (run, model, method, config, "
                                                  "template, metric, value).")]
HtmlOption = Annotated[Path | None, typer.Option("--html", metavar="FILE", show_default=False, dir_okay=False,
                                                 help="One self-contained HTML page.")]
CORES = os.cpu_count() or 1
AnyRequest = TypeVar("AnyRequest", bound=Request)


def _request(kind: type[AnyRequest], parameters: dict[str, Any]) -> AnyRequest:
    """A command's request, by keyword: each of the command's parameters (its `locals()`) fills the request's
    field of the same name, a --config choice as its name; the other parameters are the command's own."""
    names = {field.name for field in dataclasses.fields(kind)}
    return kind(**{name: value.value if isinstance(value, enum.Enum) else value
                   for name, value in parameters.items() if name in names})


@app.command()
@manual(tolerances=tolerances.tolerances_text(), postgis=schema.MIN_POSTGIS_TEXT)
def verify(
    config: ConfigOption,
    data: DataOption = None, dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    workers: WorkersOption = CORES, templates: TemplateOption = [], ids: IdOption = [],  # noqa: B006
    json_out: JsonOutOption = None, csv_out: CsvOutOption = None, junit: JunitOption = None,
    html: HtmlOption = None, resume: ResumeOption = None,
    force: ForceOption = False,
    baseline: Annotated[Path | None, typer.Option("--baseline", metavar="FILE",
                                                  help="An earlier --json-out: list what changed.",
                                                  show_default=False, dir_okay=False)] = None,
    max_rows: MaxRowsOption = MAX_ROWS, replicas: ReplicaOption = [],  # noqa: B006
) -> None:
    """Re-run the benchmark SQL of the selected questions as gsqa_reader and compare every result with the
    stored answer under the paper's tolerances (${tolerances}), plus a strict row-level comparison reported
    as `exact`; beside them the paper's verdict (`paper %`): each template scored as the benchmark authors
    score it (docs/BENCHMARK-FORMAT.md, "Two verdicts").

    Before the first question: the data must load, the report files must be writable, PostGIS must be >= ${postgis},
    the tables the selected SQL reads must exist and hold rows (else the templates that read them are named,
    with the command line that runs the others), and gsqa_reader must log in and be as declared. Each question
    runs as gsqa_reader, as one query (anything else is refused in one line without running) in its own
    read-only transaction with SET LOCAL statement_timeout, rows capped (--max-rows;
    64 MB of values, 64 MB for one value: past either it is an error saying how much was read), and is
    rolled back, the session reset; a watchdog cancels a question on the server 2 s past its timeout and
    ends its backend 2 s later if the SQL caught the cancel (docs/SANDBOX.md).

    Prints a table per config and template (questions, pass % (the strict verdict), exact %, paper %, counts
    per word, seconds), the first failing questions with their evidence and the skipped ones grouped by
    template and reason; a progress bar goes to stderr. The files are those `reproduce score --gold` writes,
    of the one run `gold` (docs/BENCHMARK-FORMAT.md, "Outputs"): --json-out each question's record (outcome,
    paper and strict verdicts with their reasons, exact) with the figures per template; --csv-out the
    figures in long format; --junit a testcase per question; --html one self-contained page: the database
    and its versions, the pass rate per template, and every question that did not pass with its text, both
    verdicts, expected against actual values, the rows, the SQL and the `reproduce show ID` command;
    --baseline lists the changes since an earlier --json-out (older reports too), regressions first.
    --resume refuses a file written for another dataset, database (row counts) or timeout unless --force.

    Words (a question's strict verdict when its SQL ran, else its outcome): pass, fail (the first failing
    component, both values), empty (no rows), timeout, sql_error (the SQL error), skipped (not in the data,
    with the reason). Known instability (LIMIT without ORDER BY, ties, DEM seams, stale stored answers) is
    listed under detail.unstable.

    Several servers: each --replica (a hot standby, `make replicas`) gets N workers of its own and every
    question runs on exactly one server (the report's `server`). Before the first question each replica must
    pass the same preflight and hold the primary's database: caught up with the primary's WAL (a standby,
    waited for up to 30 s), the same exact row counts, load log and PostGIS; one that lags or differs is
    refused unless --force. A server lost during the run gives its running questions to the others (each
    counted once); the report says which and when.
    Questions start longest first: by the times of --baseline or the --resume file when given, else by the
    size of the tables their SQL reads.

    Example: reproduce verify --config raster_only --data tests/data/benchmark --json-out run.json

    Exit codes (as `reproduce score`'s: 0 ok, 1 ran but an input failed or an answer differs, 2 nothing
    started): 0 every selected question in the data passes; 1 the run went through but some did not pass, or
    every server was lost before the end (--resume continues); selected questions not in the data are listed
    apart and change no exit code; 2 nothing started (usage error, unreadable data, no selected question in
    the data, an output file that cannot be written, unreachable database, failed preflight, a replica that
    lags or differs);
    130 interrupted: running queries were cancelled on the server and the --resume file flushed.
    """
    request = _request(RunRequest, locals())
    outputs = _report_files(locals())
    with reported_as_exit_code():
        files.check_writable([*outputs.values(), resume])
        previous = json_report.read_words(baseline) if baseline else None
        kept = f"; finished questions are in {resume}" if resume else ""
        with interrupted_as_130(f"running queries were cancelled{kept}"):
            run = verification.verify(request, durations=baseline)
    report = of_verify(run, previous)
    typer.echo(console.text(report))
    files.write(report, outputs)
    passed = all(result.strict == "pass" for result in run.results if result.outcome != "skipped")
    raise typer.Exit(EXIT_OK if passed else EXIT_SOME_FAILED)


def _report_files(parameters: dict[str, Any]) -> dict[str, Path | None]:
    """The report files a command's options ask for: its parameters named as files.FORMATS names them."""
    return {name: parameters[name] for name in files.FORMATS if name in parameters}


@app.command()
def rebase(
    config: ConfigOption,
    out: Annotated[Path, typer.Option("--out", metavar="DIR", help="A new folder for the re-based dataset.",
                                      file_okay=False)],
    data: DataOption = None, dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    workers: WorkersOption = CORES, templates: TemplateOption = [],  # noqa: B006
    keep_failed: Annotated[bool, typer.Option("--keep-failed", help="Write what a failed question gave (empty, "
                                              "timeout, error) instead of keeping its published answer.")] = False,
    max_rows: MaxRowsOption = MAX_ROWS,
    layout: Annotated[str, typer.Option("--format", metavar="jsonl|parquet",
                                        help="jsonl: the raw layout; parquet: the Hugging Face one, with a dataset "
                                        "card.")] = "jsonl",
    resume: ResumeOption = None,
    force: ForceOption = False,
    as_json: JsonOption = False,
) -> None:
    """Re-base the benchmark on this database: re-run every selected gold SQL as `verify` does and write the
    records again to --out with the new answers, in a layout `verify --data` reads: the raw one
    (`qa2/<config>/<template>.jsonl`, `vector/T<k>/<nnn>/question.json`) or, with `--format parquet`, the
    Hugging Face one (`<config>/*.parquet` and a README card whose YAML lists the configs and how the answers
    were made, ready to push to the hub), each record with a `rebase` member (the
    published answers, the verdict of the new answer against them, seconds, instability flags), plus
    DRIFT.md and drift.json (per template: held, changed and by how much, failed; the 20 largest changes;
    the database's versions) and a README card (with the licence). A question whose SQL returns nothing,
    times out or fails keeps its published answer and is listed (`--keep-failed` writes what it gave). The
    folder appears only when complete; `reproduce verify --data` on it then passes every question rebase
    wrote. Whole templates are re-based (ids are positions in their files). With `--resume FILE` each
    question's outcome is kept as it finishes; the same command again runs only the rest. For a database
    whose answers legitimately differ from the published ones: a newer OpenStreetMap extract, another
    PostGIS.

    Example: reproduce rebase --config raster_only --data tests/data/benchmark --out rebased/

    Exit codes: 0 every question gave an answer; 1 some did not (listed); 2 nothing started (usage error,
    --out not empty, unreadable data, a --resume file of another dataset, database or timeout, unreachable
    database, failed preflight); 130 interrupted: nothing written to --out, the --resume file flushed.
    """
    request = _request(RunRequest, locals())
    from reproduce import rebase as rebasing

    if layout not in rebasing.FORMATS:
        raise typer.BadParameter(f"{layout!r} is not one of {', '.join(rebasing.FORMATS)}", param_hint="--format")
    with reported_as_exit_code():
        kept = f"; finished questions are in {resume}, run the same command to go on" if resume else ""
        with interrupted_as_130(f"running queries were cancelled, nothing was written to --out{kept}"):
            report = rebasing.rebase(request, out, keep_failed, layout, shlex.join(["reproduce", *sys.argv[1:]]))
    table = report.per_template()
    if as_json:
        typer.echo(json.dumps({"out": report.out, "templates": table}))
    else:
        typer.echo(f"{'template':10} {'questions':>9} {'held':>6} {'changed':>8} {'empty':>6} {'timeout':>8} "
                   f"{'sql_error':>9}")
        for name, row in table.items():
            typer.echo(f"{name:10} {row['questions']:>9} {row['held']:>6} {row['changed']:>8} {row['empty']:>6} "
                       f"{row['timeout']:>8} {row['sql_error']:>9}")
        typer.echo(f"written to {report.out} (DRIFT.md says what moved)")
    raise typer.Exit(report.exit_code)


@app.command()
def score(
    predictions: Annotated[list[Path], typer.Argument(metavar="PRED...", help="One run of one model and method: a "
                                                      "file or a folder of predictions (JSON Lines, or the GS-QA2 "
                                                      "runs' files); an Inspect log: a run per epoch.",
                                                      show_default=False)] = [],  # noqa: B006
    names: Annotated[list[str], typer.Option("--name", metavar="NAME", help="A name for each PRED, in order "
                                             "(default: its file or folder name).")] = [],  # noqa: B006
    gold: Annotated[bool, typer.Option("--gold", help="Also score the dataset's own SQL as a run named gold "
                                       "(it scores as `verify` verifies).")] = False,
    config: ConfigOption = "all", templates: TemplateOption = [], ids: IdOption = [],  # noqa: B006
    data: DataOption = None, dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
    replicas: ReplicaOption = [], workers: WorkersOption = CORES,  # noqa: B006
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    resume: ResumeOption = None,
    force: ForceOption = False,
    json_out: JsonOutOption = None,
    csv_out: CsvOutOption = None,
    html: HtmlOption = None, junit: JunitOption = None, max_rows: MaxRowsOption = MAX_ROWS,
) -> None:
    """Score a model's predictions: each PRED is one run (one model, one method), a file or a folder.
    Predictions are JSON Lines, one a line: {"id": "raster_only/aspect+poi/0", "sql": "SELECT ..."} or
    {"id": ..., "answer": [{"aspect_degrees": 182.5}]} (rows like the stored answers, or a bare value),
    optionally with "model", "method", "seconds", "tokens". Also read, detected from their content: the GS-QA2
    raster text-to-SQL runner's per-question files and the GS-QA vector runs' sql_generate.json and
    *_json_parse.json (docs/BENCHMARK-FORMAT.md, Predictions); ids in any of the three schemes (2100,
    aspect+poi-0, raster_only:aspect+poi:0) mean the same question. An Inspect log of `inspect eval
    gsqa_refdb/...` (.eval or .json, or a folder of them; the `inspect` extra) gives a run per log and epoch,
    with the model's tokens and cost per question (docs/INSPECT.md).

    SQL runs exactly as `verify` runs gold SQL, but as the model role gsqa_model (--gold's as gsqa_reader;
    --reader-dsn is gsqa_model's login): one statement in its own read-only
    transaction, server-side timeout, rows capped, rolled back; with several ```sql blocks in a model's text
    they run in order and the first that runs without an error is the answer. Answers are judged directly;
    when every prediction is an answer no database is needed. A location given only as an address is never
    geocoded: it is `unscorable`.

    Outcomes: ran (then judged: pass or fail), empty, sql_error, timeout, no_prediction (counted as wrong),
    unreadable (the line could not be read), unscorable. The headline is the paper's verdict (`paper %`, with
    a 95% Wilson interval), the strict verdict beside it. Prints per run one column group and per template,
    config and in all a line; for two or more runs an exact McNemar test per template for each pair of runs.
    Several runs of one model and method (their "model" and "method"): pass^k (the questions every run passed), the
    questions whose verdict flips between them and the spread of their pass rates, the runs' own noise; a
    pair of runs whose difference is within it is said to be. Where the runs give them, what each used per
    template: an agent's calls (clients, refusals by reason, budget stops, tool seconds, run_python calls,
    failures and seconds) and the model's tokens and cost (on the console, in every file but --junit;
    docs/BENCHMARK-FORMAT.md, "The usage summary").
    --json-out and --junit give every question (the same files as `reproduce verify` writes); the --html page
    (verify's too) has the runs, sortable tables of the figures, the pairs and repeated runs, the lines not
    read, and a card per question that did not pass (or has an agent's calls, or runs that disagree) with
    filters by run, template, outcome and where runs disagree: both verdicts, the predicted and the stored
    answer side by side (long answers folded, never cut), the gold SQL, an agent's calls, and maps with a
    legend and scale for locations. --csv-out has the pairs and repeated runs too.

    Example: reproduce score gpt4o.jsonl sonnet.jsonl --config raster_only --csv-out scores.csv

    Exit codes (as `reproduce verify`'s: 0 ok, 1 ran but an input failed or an answer differs, 2 nothing
    started; a model's wrong answer is its score, not a failure): 0 scored (whatever the accuracy); 1 scored,
    but some predictions could not be read (listed with file and line); selected questions not in the data
    are listed apart and change no exit code; 2 nothing scored (no readable prediction, usage error,
    unreadable data, an unreachable database when SQL must run, failed preflight); 130 interrupted (the
    --resume file flushed: the same command scores the rest).
    """
    from reproduce import score as scoring

    if not predictions and not gold:
        raise typer.BadParameter("give at least one PRED (a predictions file or folder), or --gold",
                                 param_hint="PRED")
    request = _request(scoring.ScoreRequest, locals())
    outputs = _report_files(locals())
    with reported_as_exit_code():
        files.check_writable([*outputs.values(), resume])
        kept = f"; scored questions are in {resume}, the same command scores the rest" if resume else ""
        with interrupted_as_130(f"running queries were cancelled{kept}"):
            scored = scoring.score(request)
    report = of_scores(scored)
    typer.echo(console.text(report))
    files.write(report, outputs)
    raise typer.Exit(EXIT_SOME_FAILED if scored.problems else EXIT_OK)


@app.command()
@manual(clip=f"{REPORTED_CHARACTERS:,}", sql_limit=f"{gate.MAX_SQL_CHARACTERS:,}",
        answer_limit=f"{gate.MAX_ANSWER_CHARACTERS:,}", reply_limit=f"{gate.MAX_REPLY_BYTES:,}",
        output=f"{python_sandbox.Limits().output_bytes:,}", items=f"{MAX_ITEMS:,}",
        containers=str(python_sandbox.MAX_CONTAINERS))
def serve(
    config: ConfigOption = "all", templates: TemplateOption = [], ids: IdOption = [],  # noqa: B006
    data: DataOption = None, dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
    max_calls: Annotated[int, typer.Option("--max-calls", metavar="N", min=1, help="Calls per question, refused "
                                           "ones too (not: the server's own failures, calls after the episode "
                                           "ended, schema).")] = ServeRequest.max_calls,
    max_seconds: Annotated[float, typer.Option("--max-seconds", metavar="SECONDS", min=0.1, help="Wall-clock "
                                               "seconds per question from its first call, the agent's own time "
                                               "between calls included.")] = ServeRequest.max_seconds,
    max_tool_seconds: Annotated[float | None, typer.Option("--max-tool-seconds", metavar="SECONDS", min=0.1,
                                                           show_default=False, help="Seconds per question that its "
                                                           "calls may take in the server, the agent's own time not "
                                                           "counted (default: no bound).")] = None,
    max_rows: Annotated[int, typer.Option("--max-rows", metavar="N", min=1, help="Rows a query returns (the "
                                          "first N, marked truncated).")] = ServeRequest.max_rows,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    trajectory: Annotated[Path | None, typer.Option("--trajectory", metavar="FILE", dir_okay=False,
                                                    show_default=False, help="Append every call to FILE (JSON "
                                                    "Lines); a rerun on it continues its episodes.")] = None,
    kept_by: Annotated[str | None, typer.Option("--kept-by", metavar="NAME", show_default=False,
                                                help="Without --trajectory: who keeps the calls instead (an "
                                                "evaluation framework's log, e.g. Inspect's): named on the start "
                                                "line in place of the warning that nothing keeps them.")] = None,
    model: Annotated[str, typer.Option("--model", metavar="NAME", help="The model, as the trajectory and "
                                       "`reproduce score` report it.")] = ServeRequest.model,
    method: Annotated[str, typer.Option("--method", metavar="NAME", help="The method (agent, multi-stage SQL "
                                        "agent, ...).")] = ServeRequest.method,
    transport: Annotated[str, typer.Option("--transport", metavar="stdio|http", help="stdio: one client on "
                                           "stdin/stdout; http: streamable HTTP at http://HOST:PORT/mcp for "
                                           "many.")] = "stdio",
    host: Annotated[str, typer.Option("--host", help="Where --transport http listens.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Where --transport http listens.")] = 8765,
    tokens: Annotated[Path | None, typer.Option("--tokens", metavar="FILE", dir_okay=False, show_default=False,
                                                help="The agents of --transport http: NAME TOKEN lines (a token: "
                                                "secrets.token_urlsafe(32)), the file private (chmod 600); else "
                                                "one token in a new private file the start line names.")] = None,
    connections: Annotated[int, typer.Option("--connections", metavar="N", min=1, help="Database connections the "
                                             "calls share on each server (a call waits for a free one)."
                                             )] = ServeRequest.connections,
    replicas: Annotated[list[str], typer.Option("--replica", metavar="DSN", help="A hot standby of the database "
                                                "(repeatable): the episodes are spread over the primary and these, "
                                                "--connections on each.")] = [],  # noqa: B006
    tools: Annotated[str, typer.Option("--tools", metavar="sql|python|sql,python", help="The agent's tools beside "
                                       "question, schema and submit_answer: query (sql), run_python (python: needs "
                                       "--export and `make sandbox-image`), or both.")] = ServeRequest.tools,
    export: Annotated[Path | None, typer.Option("--export", metavar="DIR", file_okay=False, show_default=False,
                                                help="The `ingest export` folder of this database that run_python "
                                                "reads at /data.")] = None,
) -> None:
    """Serve the reference database to agents over the Model Context Protocol: the tools question(question_id)
    (its text and the answer it expects: components, units, format), schema() (what `reproduce schema`
    says), query(question_id, sql) (one read-only query in the sandbox as gsqa_model, as `score` runs a
    model's SQL: rows as JSON (NULLs as null, geometries as WKT, numerics as numbers where exact else as
    text, dates, times, intervals and ranges as the server writes them), the first --max-rows, texts past
    ${clip} characters, arrays and JSON past ${items} items cut with a marker saying how to get less, and no
    more rows than fit in ${reply_limit} bytes, with a note when rows were left out (fetching and encoding
    count against --timeout); an error or refusal in one line, the server's with its SQLSTATE, position and
    hint) and submit_answer(question_id, answer) (rows
    like the stored answers, a value, or a list of values: recorded, never judged here; it ends the
    question's episode); SQL past ${sql_limit} characters and answers past ${answer_limit} characters of JSON
    are refused, and so is an answer that does not fit the question's components (a row must name each by
    one of its column names, with a value of its kind: a finite number, a name (a letter or digit, at most 255
    characters), a WKT geometry with a finite point, yes or no; the refusal names what is expected; charged,
    the episode stays open). Each selected question is an episode with its own budget: --max-calls calls
    (refused ones too; not charged: a call the server could not serve for its own failure or limit, the
    database or sandbox unreachable, the containers taken, and calls after the episode ended), --max-seconds
    of wall-clock from its first call (the agent's own time between calls included) and, if given,
    --max-tool-seconds of time its calls take in the server (each statement's timeout is the smaller of
    --timeout and the time left on either clock; waiting for a free connection spends both); past any, or
    after submit_answer (one per question, however many arrive at once), its tools answer with an error
    saying why. schema() is free: the same text for every agent, read from the database once per server. The
    --connections are shared fairly: while several clients call, none holds more than its share. An unknown
    question id is an error naming it; the other questions go on. An MCP client gets
    each error as the tool's error result, the SDK's "Error executing tool NAME: " before the line. The open
    question ids are the resource gsqa://questions, one table's schema gsqa://schema/NAME, and the prompt
    gsqa_agent gives the benchmark's agent instructions (the tools, the budget, the answer's form; with a
    question_id, the question and the answer it expects): neither counts as a call. Every reply is one
    compact JSON text (no structured content besides, which the SDK would send as a second copy). All agents
    of one server share its questions, so one server is one run (one --model and --method); start another
    server (or --port) for another run. Over HTTP each request must carry "Authorization: Bearer TOKEN" (else
    HTTP 401): a token of --tokens FILE (one agent per line: its calls are told apart as `agent`, and its
    sessions share one share of the connections and containers), else of the file the start line names.

    --tools python (with --export DIR, an `ingest export` folder of this database, and `make sandbox-image`)
    serves run_python(question_id, code) for code-writing agents, instead of query or beside it (--tools
    sql,python): the code runs in a new process in the question's own container (no network, a read-only
    root, the export read-only at /data, no capabilities, limited CPU, memory and processes, a scratch
    /tmp/work kept for the question; docs/SANDBOX.md), for at most --timeout and the episode's time left; its
    stdout and stderr come back each as its first and last bytes, ${output} in all; a terrain question's
    places come with question() as WKT. The container is removed when the episode ends, when its time is up,
    or when the server stops (at once at Ctrl-C or SIGTERM: the calls running in it end lost); at most
    ${containers} run at once (a new episode's first run_python past them is refused); the containers of a
    killed server are removed by the next one.

    --trajectory FILE (one server per file) keeps every call as a JSON line, written when the call ends:
    question id, the client it came from (its MCP session, TCP peer or stdio, and the name it gave), tool,
    arguments, outcome, whether charged, rows, the reply as the agent got it (bounded as sent) and its sha256,
    the model's usage the client attached in the call's _meta ({"usage": {"input_tokens": N,
    "output_tokens": N, "cost": X}}: numbers only, else not kept and the line says why), seconds, budget
    left; the submitted answer; each
    episode's stop (submitted, budget; none when the server ended first). A server killed mid-episode loses
    only the calls still running; the same command on the same file continues: submitted and spent episodes
    stay over, open ones keep the calls and seconds they used (the time the server was down not counted); a
    file of another --model, --method, budget or dataset is refused. `reproduce score FILE` scores it.
    Without --trajectory the server warns that nothing keeps the calls, unless --kept-by names who does (the
    Inspect tasks' servers: `--kept-by "the Inspect log"`).

    --replica DSN (repeatable; a hot standby, `make replicas`) spreads the episodes over more servers, as
    verify does: each must be caught up with the primary and hold the same data before anything is served
    (one line names one that does not); each episode's queries run on one server, in turn, and move to the
    next when it cannot be reached (the call line's `server` names where a query ran).

    Nothing goes to stdout but the protocol (stdio); the server says where it serves on stderr.

    Example: reproduce serve --config raster_only --trajectory run.jsonl --model my-agent --transport http

    Exit codes: 0 the client closed stdio, or Ctrl-C or SIGTERM stopped the server (over HTTP once the calls
    under way have ended, over stdio at once); 2 nothing
    started (usage error, unreadable data, an unknown --id, a trajectory of another run or in use, an
    address that cannot be listened at, unreachable database, failed preflight).
    """
    request = _request(ServeRequest, locals())
    if transport not in ("stdio", "http"):
        raise typer.BadParameter(f"{transport!r} is not one of stdio, http", param_hint="--transport")
    with reported_as_exit_code():
        try:
            from reproduce.serve import protocol
        except ModuleNotFoundError as missing:
            raise GsqaError(str(missing)) from None
        files.check_writable([trajectory])
        tools, known = protocol.start(request, transport, host, port, kept_by, tokens)
    with tools:
        protocol.serve(tools, transport, host, port, known)


@app.command()
def show(
    question: Annotated[str, typer.Argument(help="Question id, e.g. raster_only/elevation+poi/0.")],
    data: DataOption = None, dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
) -> None:
    """Re-run one question and show its SQL, the stored answer, the actual result, and the verdict per
    answer component (stored value, value returned, metric, threshold), then the strict row diff, the
    paper's scoring (each template as the benchmark authors score it, docs/BENCHMARK-FORMAT.md) and the known
    reasons the answer may legitimately differ.

    Example: reproduce show raster_only/elevation+poi/0 --data tests/data/benchmark

    Exit codes: 0 the question passes; 1 it does not (fail, empty, timeout, sql_error); 2 unknown id,
    unreadable data, unreachable database or failed preflight.
    """
    request = _request(RunRequest, locals())
    with reported_as_exit_code():
        shown = verification.show(question, request)
    typer.echo(_describe(shown))
    raise typer.Exit(EXIT_OK if shown.result.strict == "pass" else EXIT_SOME_FAILED)


def _describe(shown: Shown, max_rows: int = 20) -> str:
    record, outcome = shown.record, shown.outcome
    def rows(items: list) -> str:  # geometries in one format, WKT, on both sides
        more = f"\n... {len(items) - max_rows} more rows" if len(items) > max_rows else ""
        return "\n".join(json.dumps({key: values.shown(value) for key, value in item.items()}, default=str)
                         for item in items[:max_rows]) + more
    lines = [f"{record.id} [{record.template_id}] {record.question}", "", "-- SQL", record.sql.strip(), "",
             f"-- stored answer ({len(record.answers)} rows)", rows(record.answers), ""]
    judgement = shown.judgement
    if judgement is None:
        lines += [f"-- result: {shown.result.outcome} after {outcome.seconds:.2f} s: {outcome.error}"]
    else:
        lines += [f"-- actual result ({len(outcome.rows)} rows, {outcome.seconds:.2f} s)", rows(outcome.rows), "",
                  f"-- strict verdict: {shown.result.word('strict')}"]
        lines += [f"  {'ok  ' if c.passed else 'FAIL'} {c.component}: {c.metric} = {c.value:.6g} "
                  f"(threshold {c.threshold}); stored {values.shown(c.expected)!r}, got {values.shown(c.actual)!r}"
                  for c in judgement.strict.checks]
        diff = judgement.diff
        lines += ["", "-- exact: " + ("yes" if diff.exact else json.dumps(diff.as_dict(), default=str))]
        lines += ["", f"-- paper verdict: {judgement.paper.status}: {judgement.paper.reason}"]
    lines += [f"-- unstable: {flag}" for flag in shown.flags]
    return "\n".join(lines)


@app.command("schema")
def schema_description(
    dsn: DsnOption = None, reader_dsn: ReaderDsnOption = None,
    layout: Annotated[str, typer.Option("--format", metavar="text|markdown|json|sql",
                                        help="text: in the manner of the benchmark's schema prompt; markdown; "
                                        "json: for programs; sql: CREATE TABLE statements with comments.")] = "text",
) -> None:
    """Describe the database as a text-to-SQL prompt needs it, read from the live database: each reference
    table with its columns and types and its exact row count; per column, from the planner's statistics, its
    share of NULLs, a tag column's common values (tourism, amenity, highway, ...) and text columns that hold
    numbers; the indexes (GiST, and what uses them: ST_DWithin, ST_Intersects, KNN `<->`); the units
    (geography measures in metres, band 1 elevation in metres) and the casts raster functions need
    (`geometry::geometry`); PostGIS's own tables are left out. For pois, roads, parks, lakes and regions the
    geometry types present, their SRID and the extent (every geometry is read once); for public.dem_us the
    tile size, pixel size, band type, nodata, extent and tile count (of the reference's 265,950 when the
    last `ingest all` loaded the published tile list); and the limits a model's SQL runs under (gsqa_model;
    --reader-dsn is its login). What is
    not ready (tables missing or empty, stages of `ingest all` that did not finish, the model role's login) is
    listed last. The table being read goes to stderr. To run a baseline on the database, see
    reproduce.baseline (an SQLAlchemy engine as gsqa_model); for an agent, `reproduce serve`.

    Example: reproduce schema --format markdown > schema.md

    Exit codes: 0 described, everything ready; 1 described, something not ready; 2 unreachable database or no
    PostGIS.
    """
    from reproduce import describe

    if layout not in describe.FORMATS:
        raise typer.BadParameter(f"{layout!r} is not one of {', '.join(describe.FORMATS)}", param_hint="--format")
    with reported_as_exit_code():
        description = describe.describe(dsn, reader_dsn, progress=lambda line: print(line, file=sys.stderr))
    if layout == "json":
        typer.echo(json.dumps(describe.as_json(description)))
    else:
        typer.echo(describe.RENDERERS[layout](description))
    raise typer.Exit(EXIT_SOME_FAILED if description.problems else EXIT_OK)


def main() -> None:
    """The `reproduce` console script."""
    run(app)
