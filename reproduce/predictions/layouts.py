"""A model's predictions, from any layout it comes in, as one model: per question its SQL or its answer.

A run (PRED) is a file or a folder; each file's layout is detected from its content (docs/BENCHMARK-FORMAT.md,
Predictions):
- JSON Lines, one prediction a line: {"id", "sql"} or {"id", "answer"} (the canonical form), optional
  "model", "method", "seconds", "tokens";
- the GS-QA2 raster text-to-SQL runner's files, one JSON object per question (`predicted_sql`, `source_stem`);
- the GS-QA vector runs' arrays of {"id", "content"}: `sql_generate.json` (model text with ```sql blocks) and
  `*_json_parse.json` (the parser model's text with ```json answers);
- an agent's trajectory from `reproduce serve --trajectory` (its format: trajectory.py beside): each submitted
  answer is an answer prediction, an episode without one has none (the reason says how it stopped), and
  each question's calls are kept for the reports;
- an Inspect log of a gsqa_refdb task (its reading: inspect_log.py beside), or a folder of them: each epoch of
  each log is a run of its own (`read_runs`), the model's tokens and cost per question kept with each prediction.
Every id scheme maps to the canonical `<group>/<template>/<n>` (`configs.question_id`). A line or file that cannot
be read is a Problem (where and why), never an exception: the rest of the run is still scored.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gsqa_core.errors import GsqaError
from reproduce import configs
from reproduce.judging.tolerances import LOCATION, components_of
from reproduce.predictions import inspect_log, trajectory
from reproduce.predictions.trajectory import is_amount
from reproduce.runner import json_value

_SQL_BLOCK = re.compile(r"```[ \t]*sql\b(.*?)```", re.S | re.I)
_JSON_BLOCK = re.compile(r"```[ \t]*json\b(.*?)```", re.S | re.I)
# The authors' parsed vector answers name some fields their own way; the stored answers' names are on the right.
AUTHORS_FIELDS = {"azimuth_angle": "angle"}
RUNNER_FILES_SKIPPED = {"summary.json", "run_summary.json"}
PREDICTION_KEYS = ("id", "sql", "answer", "predicted_sql", "source_stem", "content")  # a file with none holds none
NON_PREDICTION_STEPS = {  # the vector runs' other steps: what they hold, and what to score instead
    "sql_exec": "rows the authors' runner got from the model's SQL; score sql_generate.json (the SQL itself)",
    "sql_answer": "free text written from rows; score sql_json_parse.json",
    "direct_answer": "free text; score direct_json_parse.json",
    "rag_answer": "free text; score rag_json_parse.json",
}


@dataclass(frozen=True)
class Prediction:
    """One question's prediction: SQL candidates to run in order, or an answer as rows."""

    id: str
    where: str  # file:line, or the file
    statements: tuple[str, ...] = ()
    answer: list[dict[str, Any]] | None = None
    unscorable: str = ""  # why this answer cannot be judged offline (a location given only as an address)
    meta: dict[str, Any] = field(default_factory=dict)  # seconds, tokens, model, method as the prediction gave them

    @property
    def kind(self) -> str:
        return "answer" if self.answer is not None or self.unscorable else "sql"


@dataclass(frozen=True)
class Problem:
    where: str
    why: str
    id: str = ""  # the question, when the line named a known one (it is then `unreadable`, not `no_prediction`)

    def __str__(self) -> str:
        return f"{self.where}: {self.why}"


@dataclass
class PredictionRun:
    name: str
    source: str
    model: str = ""
    method: str = ""
    predictions: dict[str, Prediction] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    digests: dict[str, str] = field(default_factory=dict)  # file -> sha256, for the --resume header
    outside: int = 0  # predictions of benchmark questions outside the selected config/templates/ids
    selected: frozenset[str] = frozenset()  # the question ids being scored
    calls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # an agent's tool calls per question
    unanswered: dict[str, str] = field(default_factory=dict)  # why a question the run saw has no prediction
    unanswered_meta: dict[str, dict[str, Any]] = field(default_factory=dict)  # and what it spent (as Prediction.meta)
    warnings: list[Problem] = field(default_factory=list)  # read past, without changing the exit code
    skipped: list[Problem] = field(default_factory=list)  # files of a run folder that hold no predictions
    # The model's usage over the selected questions, where the predictions give it: tokens by kind (input,
    # output, total) and the cost in dollars.
    tokens: dict[str, int] = field(default_factory=dict)
    cost: float | None = None
    # What is kept of each prediction (score judges an answer as it is read and keeps only the verdict, so
    # that the memory of a run does not grow with its answers).
    keep: Callable[[Prediction], Prediction] = field(default=lambda prediction: prediction, repr=False)
    _seen: dict[str, str] = field(default_factory=dict, repr=False)  # question -> where it was last predicted

    def add(self, prediction: Prediction) -> None:
        """A prediction of a selected question; a later one of the same question replaces it, with a warning
        (a run appended to after a retry: its last answer is its answer)."""
        if prediction.id not in self.selected:
            self.outside += 1
            return
        if earlier := self._seen.get(prediction.id):
            if _file_of(earlier) != _file_of(prediction.where):  # two files: two methods, or two runs mixed
                self.refuse(prediction.where, f"{prediction.id} is predicted in another file too ({earlier}): a "
                                              "run is one model and method; the first is scored, give the other "
                                              "its own PRED", prediction.id)
                return
            self.warn(prediction.where, f"{prediction.id} is predicted again (also at {earlier}): the last "
                                        "prediction is scored")
        self._seen[prediction.id] = prediction.where
        self.predictions[prediction.id] = self.keep(prediction)

    def refuse(self, where: str, why: str, question: str = "") -> None:
        """A line that cannot be scored (the exit code says so); a selected question it names that has no
        readable prediction is `unreadable`."""
        self.problems.append(Problem(where, why, question if question in self.selected else ""))

    def warn(self, where: str, why: str) -> None:
        self.warnings.append(Problem(where, why))

    def count_usage(self, meta: dict[str, Any]) -> None:
        """A selected question's tokens (by kind, or a bare number: the total) and cost added to the run's."""
        tokens = meta.get("tokens")
        by_kind = {"total": tokens} if is_amount(tokens) else tokens if isinstance(tokens, dict) else {}
        for kind, count in by_kind.items():
            if is_amount(count):
                self.tokens[kind] = self.tokens.get(kind, 0) + count
        if is_amount(cost := meta.get("cost")):
            self.cost = (self.cost or 0) + cost


def _file_of(where: str) -> str:
    """The file of a prediction's place: `file:line`, `file[entry]` or the file itself."""
    return re.sub(r"(:\d+|\[\d+\])$", "", where)


def read_runs(path: Path, name: str, selected: set[str] | frozenset[str],
              keeping: Callable[[str], Callable[[Prediction], Prediction]] | None = None) -> list[PredictionRun]:
    """The runs of one PRED: an Inspect log, or a folder of them, gives a run per log and epoch; anything else
    is one run (read_run). `keeping(run name)` says what each run keeps of a prediction."""
    logs = _inspect_logs(path)
    if not logs:
        return [read_run(path, name, selected, keeping(name) if keeping else None)]
    runs: list[PredictionRun] = []
    unread = []
    for file in logs:
        label = name if file == path else f"{name}/{file.relative_to(path).with_suffix('')}"
        try:
            runs += _read_log(file, label, selected, keeping)
        except inspect_log.Unreadable as error:
            unread.append(Problem(str(file), str(error)))
    if not runs:  # every log unreadable: a run that says so
        runs = [PredictionRun(name, str(path), selected=frozenset(selected))]
    runs[0].problems += unread
    if path.is_dir():
        runs[0].skipped += [Problem(str(file), "not an Inspect log (a folder of logs is read as logs)")
                            for file in _visible_files(path) if file not in logs]
    return runs


def read_run(path: Path, name: str, selected: set[str] | frozenset[str],
             keep: Callable[[Prediction], Prediction] | None = None) -> PredictionRun:
    """Every prediction of one run (a file or a folder) for the `selected` question ids; `keep` says what is
    kept of each (default: all of it)."""
    if not path.exists():
        raise GsqaError(f"{path}: no such file or folder (expected predictions: JSON Lines or the GS-QA2 runs' files)")
    run = PredictionRun(name, str(path), selected=frozenset(selected), **({"keep": keep} if keep else {}))
    read = 0
    for file in _prediction_files(path, run):
        content = file.read_bytes()
        run.digests[str(file)] = hashlib.sha256(content).hexdigest()
        if _read_file(run, file, content, beside_others=path.is_dir()):
            read += 1
        else:
            run.skipped.append(Problem(str(file), "not predictions (no line or entry names a question id)"))
    if not read:
        run.refuse(str(path), "a folder with no predictions (*.jsonl, or the GS-QA2 runs' *.json)")
    return run


def _holds_predictions(content: bytes, whole: Any) -> bool:
    """Whether a file (`whole`: its content as one JSON value, if it is one) is predictions in a layout other
    than a trajectory: a runner's file, or JSON (Lines) whose objects carry a key of a prediction (a config.json
    beside the predictions does not)."""
    if isinstance(whole, dict):
        return any(key in whole for key in PREDICTION_KEYS)
    if isinstance(whole, list):
        return any(isinstance(entry, dict) and any(key in entry for key in PREDICTION_KEYS) for entry in whole)
    # JSON Lines, or a file a kill cut short: a key of a prediction anywhere makes it one (and its lines are read)
    return any(f'"{key}"'.encode() in content for key in PREDICTION_KEYS)


def _prediction_files(path: Path, run: PredictionRun) -> list[Path]:
    """The files of a run: the file itself, or a folder's JSON and JSON Lines files; the folder's other files
    (logs, the runners' summaries) are listed as skipped."""
    if path.is_file():
        return [path]
    found = []
    for member in _visible_files(path):
        if member.suffix in (".jsonl", ".json") and member.name not in RUNNER_FILES_SKIPPED:
            found.append(member)
        else:
            run.skipped.append(Problem(str(member), "not predictions (the run's folder holds it beside them)"))
    return found


def _visible_files(folder: Path) -> list[Path]:
    """The files of a folder and its subfolders, but hidden ones."""
    return [member for member in sorted(folder.rglob("*"))
            if member.is_file() and not any(part.startswith(".") for part in member.relative_to(folder).parts)]


def _read_file(run: PredictionRun, file: Path, content: bytes, beside_others: bool = False) -> bool:
    """Read one file of predictions in whichever layout it has; in a run folder (`beside_others`), a file
    that holds no prediction is left unread: False. An empty file is an empty run, said so."""
    if not content.strip():
        run.refuse(str(file), "an empty file (expected one prediction per line)")
        return True
    if trajectory.is_trajectory(content):
        _read_trajectory(run, file, content)
        return True
    head = content.lstrip()[:1]
    whole = _whole_json(content) if head in (b"[", b"{") else None
    if beside_others and not _holds_predictions(content, whole):
        return False
    if isinstance(whole, dict) and ("predicted_sql" in whole or "source_stem" in whole):
        _read_runner_file(run, file, whole)
    elif isinstance(whole, list):
        _read_vector_array(run, file, whole)
    else:
        _read_lines(run, file, content)
    return True


def _whole_json(content: bytes) -> Any:
    try:
        return json.loads(content)
    except (ValueError, RecursionError):
        return None  # JSON Lines (or broken): read line by line, each line judged on its own


def _read_lines(run: PredictionRun, file: Path, content: bytes) -> None:
    for number, raw in enumerate(content.split(b"\n"), start=1):
        if not raw.strip():
            continue
        where = f"{file}:{number}"
        try:
            line = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            run.refuse(where, f"not UTF-8 (byte {error.start + 1} of the line)")
            continue
        except ValueError as error:
            run.refuse(where, f"not JSON ({error})")
            continue
        except RecursionError:
            run.refuse(where, "JSON nested deeper than the reader goes")
            continue
        _read_line(run, where, line)


def _question_of(run: PredictionRun, where: str, entry: Any, expected: str) -> str | None:
    """The canonical id of an entry that names one, else None with the entry refused."""
    if not isinstance(entry, dict) or "id" not in entry:
        run.refuse(where, f"not a prediction (expected {expected})")
        return None
    try:
        return str(configs.question_id(entry["id"]))
    except GsqaError as error:
        run.refuse(where, f"{error}; not scored")
        return None


def _read_line(run: PredictionRun, where: str, line: Any) -> None:
    question = _question_of(run, where, line, '{"id": ..., "sql": ...} or {"id": ..., "answer": ...}')
    if question is None:
        return
    has_sql, has_answer = "sql" in line, "answer" in line
    if not has_sql and not has_answer:
        run.warn(where, f"{question}: neither 'sql' nor 'answer': not a prediction, read past")
        return
    if has_sql and has_answer:
        run.refuse(where, f"{question} has both 'sql' and 'answer' (expected one)", question)
        return
    # as given, but strict JSON for the reports (NaN and the infinities as their text)
    meta = {key: json_value(line[key]) for key in ("model", "method", "seconds", "tokens", "cost") if key in line}
    run.model = run.model or str(meta.get("model", ""))
    run.method = run.method or str(meta.get("method", ""))
    if question in run.selected:
        run.count_usage(meta)
    if has_sql:
        run.add(Prediction(question, where, sql_statements(line["sql"]), meta=meta))
    else:
        _add_answer(run, Prediction(question, where, meta=meta), line["answer"])


def _add_answer(run: PredictionRun, prediction: Prediction, answer: Any, authors: bool = False) -> None:
    template_id = configs.question_id(prediction.id).template.id
    try:
        rows = answer_rows(template_id, answer, authors)
    except ValueError as error:
        run.refuse(prediction.where, f"{prediction.id}: {error}", prediction.id)
        return
    why = address_only(template_id, rows)
    run.add(Prediction(prediction.id, prediction.where, answer=rows, unscorable=why, meta=prediction.meta))


def answer_rows(template_id: str, answer: Any, authors: bool = False) -> list[dict[str, Any]]:
    """An answer as rows like the stored answers: a list of row objects as they are, a scalar (or a list of
    scalars) as the template's first component. The authors' parsed answers (`authors`) have their field
    names mapped and nested objects flattened."""
    answer = _json_text_parsed(answer)
    if answer is None:
        raise ValueError("the answer is null (expected rows, a value or a list of values)")
    items = answer if isinstance(answer, list) else [answer]
    key = components_of(template_id)[0].label
    if authors:
        return [_authors_row(item) if isinstance(item, dict) else {key: item} for item in items]
    return [item if isinstance(item, dict) else {key: item} for item in items]


def _json_text_parsed(answer: Any) -> Any:
    """An answer given as JSON text of rows (models often pass tool arguments so) as those rows; other text,
    a name say, as it is."""
    if isinstance(answer, str) and answer.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(answer)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes: a value
            pass
    return answer


def _authors_row(item: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name, value in item.items():
        if isinstance(value, dict):
            row.update({AUTHORS_FIELDS.get(k, k): v for k, v in value.items() if not isinstance(v, (dict, list))})
        else:
            row[AUTHORS_FIELDS.get(name, name)] = value
    return row


def address_only(template_id: str, rows: list[dict[str, Any]]) -> str:
    """Why a location answer cannot be scored offline: rows with an address but no geometry (the authors
    geocoded addresses live; we never do, so the score stays reproducible)."""
    if components_of(template_id)[0].metric is not LOCATION:
        return ""
    if rows and all("geometry" not in row for row in rows) and any("address" in row for row in rows):
        return "a location given only as an address: not geocoded over the network (docs/BENCHMARK-FORMAT.md)"
    return ""


def sql_statements(sql: Any) -> tuple[str, ...]:
    """The SQL candidates of a prediction's `sql`: its ```sql blocks, else the whole text; none if it is blank."""
    return (sql_blocks(sql) or (sql,)) if isinstance(sql, str) and sql.strip() else ()


def sql_blocks(text: str) -> tuple[str, ...]:
    """The fenced ```sql blocks of a model's text, in order (empty ones dropped)."""
    return tuple(block.strip() for block in _SQL_BLOCK.findall(text or "") if block.strip())


# --- the GS-QA2 raster runner: one JSON object per question ---------------------------------------------


def _read_runner_file(run: PredictionRun, file: Path, record: dict[str, Any]) -> None:
    where = str(file)
    try:
        if isinstance(record.get("source_index"), int) and record.get("source_stem"):  # CHESS's own index
            raw = f"{record['source_stem']}-{record['source_index']}"
        else:
            raw = record.get("id") or f"{record.get('source_stem')}-{file.stem.rsplit('-', 1)[-1]}"
        question = str(configs.question_id(raw))
    except GsqaError as error:
        run.refuse(where, f"{error}; not scored")
        return
    candidates = [c for c in record.get("predicted_sql_candidates") or [] if isinstance(c, str) and c.strip()]
    if not candidates and isinstance(record.get("predicted_sql"), str) and record["predicted_sql"].strip():
        candidates = [record["predicted_sql"]]
    statements = tuple(candidates) or sql_blocks(str(record.get("model_output") or ""))
    folder = file.parent.parent.name  # <provider>_<query_type>/<stem>/<stem>-<n>.json
    run.model = run.model or folder.split("_", 1)[0]
    run.method = run.method or "text2sql"
    meta = {key: record[key] for key in ("timing", "usage", "generation_error") if record.get(key)}
    run.add(Prediction(question, where, statements, meta=meta))


# --- the GS-QA vector runs: one JSON array per step --------------------------------------------------------


def _read_vector_array(run: PredictionRun, file: Path, entries: list[Any]) -> None:
    step = file.stem
    if step in NON_PREDICTION_STEPS:
        run.refuse(str(file), f"{file.name} holds {NON_PREDICTION_STEPS[step]}")
        return
    answers = step.endswith("json_parse")
    run.model = run.model or file.parent.name
    run.method = run.method or ("text2sql" if step.startswith("sql") else step.split("_", 1)[0])
    for number, entry in enumerate(entries):
        where = f"{file}[{number}]"
        question = _question_of(run, where, entry, '{"id": ..., "content": ...}')
        if question is None:
            continue
        text = _text(entry.get("content"))
        meta = {"seconds": entry["run_seconds"]} if "run_seconds" in entry else {}
        if answers:
            _add_answer(run, Prediction(question, where, meta=meta), _json_blocks(text), authors=True)
        else:
            run.add(Prediction(question, where, sql_blocks(text), meta=meta))


def _text(content: Any) -> str:
    """Model content as text: a string, or a list of parts with text (as LangChain stores some replies)."""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return "" if content is None else str(content)


def _json_blocks(text: str) -> list[Any]:
    """The objects of the ```json blocks of the parser model's text (lists flattened); blocks that are not
    JSON are left out, as the authors' pipeline leaves them out."""
    found: list[Any] = []
    for block in _JSON_BLOCK.findall(text):
        try:
            value = json.loads(block)
        except (ValueError, RecursionError):
            continue
        found += _flattened(value)
    return found


def _flattened(value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        for item in value:
            yield from _flattened(item)
    else:
        yield value


# --- an agent's trajectory (reproduce serve) --------------------------------------------------------------


def _read_trajectory(run: PredictionRun, file: Path, content: bytes) -> None:
    found = trajectory.read(file, content)
    for where, why in found.problems:
        run.refuse(where, why)
    run.model = run.model or str(found.header.get("model") or "")
    run.method = run.method or str(found.header.get("method") or "agent")
    for question, episode in found.episodes.items():
        if question not in run.selected:
            run.outside += 1
            continue
        run.calls[question] = [trajectory.reported(call) for call in episode.calls]
        meta = {"calls": episode.charged, "seconds": episode.elapsed, "stop": episode.stop, **episode.usage}
        run.count_usage(meta)
        if episode.where:
            _add_answer(run, Prediction(question, episode.where, meta=meta), episode.answer)
        else:
            why = f" ({episode.why})" if episode.why else ""
            run.unanswered[question] = f"the agent submitted no answer: its episode stopped: {episode.stop}{why}"
            run.unanswered_meta[question] = meta


# --- an Inspect log (inspect_log.py): a run per epoch ---------------------------------------------------------


def _inspect_logs(path: Path) -> list[Path]:
    """The Inspect logs a PRED gives: itself, or a folder's (none: the PRED is read as predictions)."""
    if path.is_file():
        return [path] if inspect_log.is_log(path) else []
    return [file for file in _visible_files(path) if inspect_log.is_log(file)] if path.is_dir() else []


def _read_log(file: Path, label: str, selected: set[str] | frozenset[str],
              keeping: Callable[[str], Callable[[Prediction], Prediction]] | None) -> list[PredictionRun]:
    """A run per epoch of the log, named `label` (one epoch) or `label epoch N`; inspect_log.Unreadable if the
    file is no log of ours. Where its samples stop being readable, the first run says so."""
    header, samples = inspect_log.read(file)
    digest = _file_digest(file)
    runs: dict[int, PredictionRun] = {}

    def run_of(epoch: int) -> PredictionRun:
        if epoch not in runs:
            name = label if header.epochs == 1 else f"{label} epoch {epoch}"
            runs[epoch] = PredictionRun(name, str(file), header.model, header.task, selected=frozenset(selected),
                                        digests={str(file): digest}, **({"keep": keeping(name)} if keeping else {}))
        return runs[epoch]

    for epoch in range(1, header.epochs + 1):
        run_of(epoch)
    try:
        for sample in samples:
            where = str(file) if header.epochs == 1 else f"{file} epoch {sample.epoch}"
            _add_logged(run_of(sample.epoch), where, sample, header.kind)
    except inspect_log.Unreadable as error:
        runs[1].refuse(str(file), str(error))
    return [runs[epoch] for epoch in sorted(runs)]


def _file_digest(file: Path) -> str:
    with file.open("rb") as opened:
        return hashlib.file_digest(opened, "sha256").hexdigest()


def _add_logged(run: PredictionRun, where: str, sample: inspect_log.LoggedSample, kind: str) -> None:
    """One sample of the run's epoch: its SQL or answer a prediction, its usage counted; none: why, kept."""
    question = _question_of(run, where, {"id": sample.id}, "a sample whose id is a question id")
    if question is None:
        return
    if question not in run.selected:
        run.outside += 1
        return
    run.count_usage(sample.meta)
    if sample.prediction is None:
        run.unanswered[question] = sample.unanswered
        run.unanswered_meta[question] = sample.meta
    elif kind == "sql":
        run.add(Prediction(question, where, sql_statements(sample.prediction), meta=sample.meta))
    else:
        _add_answer(run, Prediction(question, where, meta=sample.meta), sample.prediction)
