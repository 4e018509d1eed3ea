"""Benchmark records from any of their published layouts, as one record model, and laid out again in them: the
one owner of the layouts, reading (`load`) and writing (`write`, for `reproduce rebase`).

Layouts, detected by content (docs/BENCHMARK-FORMAT.md, Layouts):
- the Hugging Face dataset Zoe/GS-QA2 (the default; downloaded once into the huggingface_hub cache), or a
  directory laid out like it: `<config>/*.parquet`, or the data_files globs of its README front matter;
- raw GS-QA2 JSONL: `qa2/<group>/<template>.jsonl`, ids `<group>/<template>/<n>`, n the 0-based line;
- raw GS-QA vector: `T<k>/<n>/question.json` (n zero- or space-padded), ids `vector/<type>/<n-1>`.
A --data directory may hold `qa2/` and `vector/` (or `T*/`) side by side, or be one layout itself.
Questions a selected template should have but the data lacks come back as skips with the reason. `write` lays
records out as `jsonl` (qa2/ and vector/) or `parquet` (one file per config, the card's front matter naming them).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from gsqa_core.errors import GsqaError
from reproduce import configs
from reproduce.configs import Template
from reproduce.judging import values

HF_REPO = "Zoe/GS-QA2"
RASTER_GROUPS = ("raster_only", "extended", "raster_vector")
LAYOUTS = ("jsonl", "parquet")  # what `write` lays records out as: the raw layout or the Hugging Face one
# The Hugging Face release's columns as text, in its order; its other columns (answers, question_entities, and
# any member a writer adds, such as rebase's provenance) hold JSON text.
HF_TEXT_COLUMNS = ("id", "template_id", "group", "template", "question", "sql", "answer_type")
HF_FILE = "test-00000-of-00001.parquet"  # what `write` names a config's one file
_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---", re.S)


@dataclass(frozen=True)
class Record:
    id: str
    template_id: str
    group: str
    template: str
    question: str
    sql: str
    answer_type: str
    answers: list[dict[str, Any]]
    question_entities: dict[str, Any]

    @property
    def statements(self) -> tuple[str, ...]:
        """What the runner runs for this question: its gold SQL."""
        return (self.sql,)

    @cached_property
    def distinct_answers(self) -> values.Distinct:
        """The stored answer with one row per feature (values.one_row_per_feature), made once however many
        runs are judged against it."""
        return values.one_row_per_feature(self.answers)


@dataclass(frozen=True)
class Skip:
    id: str
    template_id: str
    reason: str


@dataclass
class Dataset:
    source: str
    records: list[Record] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    file_digests: dict[str, str] = field(default_factory=dict)  # relative path -> sha256 of what was read

    @property
    def checksum(self) -> str:
        """sha256 over the files read (path and content digest), independent of the order of reading."""
        listing = "".join(f"{path}\0{digest}\n" for path, digest in sorted(self.file_digests.items()))
        return hashlib.sha256(listing.encode()).hexdigest()


def load(data: Path | None, templates: list[Template]) -> Dataset:
    """The records of `templates` from --data, or from the Hugging Face dataset when `data` is None."""
    if data is None:
        return _load_parquet_dir(_download(templates), templates, source_prefix=f"hf:{HF_REPO}@")
    if not data.is_dir():
        raise GsqaError(f"--data {data}: not a directory (expected qa2/, vector/ or <config>/*.parquet inside)")
    if _parquet_files(data, "raster_only") or _parquet_files(data, "vector") or _read_front_matter(data):
        return _load_parquet_dir(data, templates, source_prefix="")
    qa2_root, vector_root = _raw_roots(data)
    if qa2_root is None and vector_root is None:
        raise GsqaError(
            f"--data {data}: no benchmark records found. Expected qa2/<group>/<template>.jsonl, "
            "vector/T<k>/<n>/question.json (or T<k>/ directly), or <config>/*.parquet as on Hugging Face."
        )
    dataset = Dataset(source=str(data))
    for chosen in templates:
        if chosen.group == "vector":
            _load_vector_template(dataset, vector_root, chosen, data)
        else:
            _load_jsonl_template(dataset, qa2_root, chosen, data)
    return dataset


_TABLE = re.compile(r"\b(pois|roads|parks|lakes|regions|dem_us)\b", re.I)


def tables_needed(records: list[Record]) -> list[str]:
    """The reference tables the records' SQL reads (the preflight checks exactly these)."""
    return sorted({name.lower() for record in records for name in _TABLE.findall(record.sql)})


def find(record_id: str, data: Path | None) -> Record:
    """One record by id (in any of the id schemes): only its template is read."""
    record_id = str(configs.question_id(record_id))
    dataset = load(data, [configs.question_id(record_id).template])
    for record in dataset.records:
        if record.id == record_id:
            return record
    reasons = {skip.reason for skip in dataset.skipped if skip.id == record_id}
    raise GsqaError(f"no record {record_id} in {dataset.source}" + (f": {reasons.pop()}" if reasons else ""))


def _raw_roots(data: Path) -> tuple[Path | None, Path | None]:
    """Where the qa2 group folders and the vector T<k> folders are, if present."""
    qa2 = data / "qa2" if (data / "qa2").is_dir() else data
    has_qa2 = any((qa2 / group).is_dir() for group in RASTER_GROUPS)
    vector = data / "vector" if (data / "vector").is_dir() else data
    has_vector = any(vector.glob("T[0-9]*/*/question.json"))
    return (qa2 if has_qa2 else None), (vector if has_vector else None)


def _skip_all(dataset: Dataset, chosen: Template, reason: str) -> None:
    dataset.skipped += [
        Skip(f"{chosen.group}/{chosen.stem}/{n}", chosen.id, reason) for n in range(chosen.questions)
    ]


def _read(dataset: Dataset, path: Path, root: Path) -> bytes:
    content = path.read_bytes()
    dataset.file_digests[str(path.relative_to(root))] = hashlib.sha256(content).hexdigest()
    return content


def _qa2_file(qa2_root: Path, group: str, stem: str) -> Path:
    return qa2_root / group / f"{stem}.jsonl"


def _vector_file(vector_root: Path, number: int, n: int) -> Path:
    """Question n (1-based) of template T<number>, its folder zero-padded as `write` makes it."""
    return vector_root / f"T{number}" / f"{n:03d}" / "question.json"


def _load_jsonl_template(dataset: Dataset, qa2_root: Path | None, chosen: Template, data: Path) -> None:
    path = _qa2_file(qa2_root or data / "qa2", chosen.group, chosen.stem)
    if not path.is_file():
        _skip_all(dataset, chosen, f"file {path.relative_to(data)} is not in {data}")
        return
    lines = _read(dataset, path, data).rstrip(b"\n").split(b"\n")
    for n, raw_line in enumerate(lines):
        try:
            line = raw_line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise GsqaError(f"{path}:{n + 1}: not UTF-8 text (byte {error.start + 1} of the line); expected one "
                            "JSON record per line") from None
        raw = _parse_json(line, f"{path}:{n + 1}")
        dataset.records.append(_record(raw, f"{chosen.group}/{chosen.stem}/{n}", chosen))


def _load_vector_template(dataset: Dataset, vector_root: Path | None, chosen: Template, data: Path) -> None:
    folder = (vector_root or data) / f"T{chosen.number}"
    if not folder.is_dir():
        _skip_all(dataset, chosen, f"no folder T{chosen.number} (T<k>/<n>/question.json) in {data}")
        return
    found = {int(entry.name.strip()): entry for entry in folder.glob("*") if entry.name.strip().isdigit()}
    for n in range(1, chosen.questions + 1):
        path = found[n] / "question.json" if n in found else None
        if path is None or not path.is_file():
            where = _vector_file(vector_root or data, chosen.number, n).relative_to(data)
            dataset.skipped.append(Skip(f"vector/{chosen.stem}/{n - 1}", chosen.id, f"file {where} is missing"))
            continue
        raw = _parse_json(_read(dataset, path, data), str(path))
        dataset.records.append(_record(raw, f"vector/{raw.get('type', chosen.stem)}/{n - 1}", chosen))


def _parse_json(text: str | bytes, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as error:
        raise GsqaError(f"{where}: not valid JSON ({error})") from None
    if not isinstance(value, dict) or "sql" not in value or "answers" not in value:
        raise GsqaError(f"{where}: not a benchmark record (needs at least 'sql' and 'answers')")
    return value


def _record(raw: dict[str, Any], record_id: str, chosen: Template) -> Record:
    return Record(
        id=record_id,
        template_id=chosen.id,
        group=chosen.group,
        template=raw.get("type", chosen.stem) if chosen.group == "vector" else chosen.stem,
        question=raw.get("question", ""),
        sql=raw["sql"],
        answer_type=raw.get("answer_type", ""),
        answers=_as_json(raw["answers"], []),
        question_entities=_as_json(raw.get("question_entities"), {}),
    )


def _as_json(value: Any, empty: Any) -> Any:
    """The HF release stores answers and question_entities as JSON strings, the raw files as JSON."""
    if value is None:
        return empty
    return json.loads(value) if isinstance(value, str) else value


# --- Hugging Face layout -------------------------------------------------------------------------------


def _download(templates: list[Template]) -> Path:
    """A local snapshot of the configs needed, from the huggingface_hub cache or downloaded into it."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    groups = sorted({chosen.group for chosen in templates})
    try:
        return Path(snapshot_download(
            repo_id=HF_REPO, repo_type="dataset", allow_patterns=["README.md", *(f"{g}/*" for g in groups)]
        ))
    except (LocalEntryNotFoundError, HfHubHTTPError) as error:
        cause = " ".join(str(error).split())[:200]
        raise GsqaError(
            f"cannot get the dataset {HF_REPO} from the Hugging Face hub and it is not cached ({cause}). "
            "Pass --data PATH to a local copy, e.g. --data tests/data/benchmark of this repository."
        ) from None


def _read_front_matter(root: Path) -> dict[str, Any]:
    """The YAML front matter of the folder's README card ({} without one)."""
    readme = root / "README.md"
    match = _FRONT_MATTER.match(readme.read_text()) if readme.is_file() else None
    return (yaml.safe_load(match.group(1)) or {}) if match else {}


def front_matter(card: dict[str, Any]) -> str:
    """A README card's front matter as the reader reads it ("" for an empty card): YAML between `---` lines."""
    if not card:
        return ""
    plain = json.loads(json.dumps(card, default=str))  # safe_dump takes plain types only
    return "---\n" + yaml.safe_dump(plain, sort_keys=False, allow_unicode=True) + "---\n"


def _config_glob(group: str) -> str:
    return f"{group}/*.parquet"


def _parquet_files(root: Path, group: str) -> list[Path]:
    """The test-split files of a config: the README's data_files globs, else <config>/*.parquet."""
    for entry in _read_front_matter(root).get("configs", []):
        if entry.get("config_name") == group:
            return sorted(path for pattern in _test_globs(entry.get("data_files", [])) for path in root.glob(pattern))
    return sorted(root.glob(_config_glob(group)))


def _test_globs(data_files: Any) -> list[str]:
    """data_files may be a glob, a list of globs, or {split, path} entries whose path is a glob or a list."""
    entries = data_files if isinstance(data_files, list) else [data_files]
    globs: list[str] = []
    for entry in entries:
        if isinstance(entry, str):
            globs.append(entry)
        elif isinstance(entry, dict) and entry.get("split", "test") == "test":
            path = entry.get("path", [])
            globs += [path] if isinstance(path, str) else path
    return globs


def _load_parquet_dir(root: Path, templates: list[Template], source_prefix: str) -> Dataset:
    # A hub snapshot folder is named after the commit, which is what identifies the download.
    dataset = Dataset(source=f"{source_prefix}{root.name}" if source_prefix else str(root))
    wanted = {chosen.id: chosen for chosen in templates}
    for group in sorted({chosen.group for chosen in templates}):
        files = _parquet_files(root, group)
        rows = [row for path in files for row in _parquet_rows(dataset, path, root)]
        for row in rows:
            chosen = wanted.get(row.get("template_id") or row.get("template"))
            if chosen is not None and chosen.group == group:
                dataset.records.append(_record(row, row["id"], chosen))
        present = {record.template_id for record in dataset.records}
        for chosen in templates:
            if chosen.group == group and chosen.id not in present:
                where = f"{group}/*.parquet in {root}" if not files else ", ".join(p.name for p in files)
                _skip_all(dataset, chosen, f"no records of {chosen.id} ({chosen.stem}) in {where}")
    return dataset


def _parquet_rows(dataset: Dataset, path: Path, root: Path) -> list[dict[str, Any]]:
    _read(dataset, path, root)
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, ValueError) as error:
        raise GsqaError(f"{path}: not a readable parquet file ({error})") from None


# --- writing ------------------------------------------------------------------------------------------------


def document(record: Record) -> dict[str, Any]:
    """A record's members as the layouts store them (its id and template are where it is stored)."""
    return {"question": record.question, "sql": record.sql, "answers": record.answers,
            "answer_type": record.answer_type, "question_entities": record.question_entities}


def write(root: Path, layout: str, documents: list[tuple[Record, dict[str, Any]]]) -> dict[str, Any]:
    """Lay records out under `root` in `layout` (one of LAYOUTS), in the order given: each record where the
    reader finds it, stored as its document (`document(record)`, maybe with other members, which the reader
    leaves alone). Returns the front matter the folder's README card needs for the reader (`front_matter`):
    the Hugging Face layout's configs and their files, none for the raw layout (the reader tells it by its
    folders)."""
    if layout == "parquet":
        return _write_parquet(root, documents)
    _write_raw(root, documents)
    return {}


def _write_raw(root: Path, documents: list[tuple[Record, dict[str, Any]]]) -> None:
    """qa2/<config>/<template>.jsonl, one record a line; vector/T<k>/<nnn>/question.json, naming its template."""
    lines: dict[Path, list[str]] = {}
    for record, content in documents:
        if record.group == "vector":
            number = int(record.id.rsplit("/", 1)[1]) + 1
            path = _vector_file(root / "vector", configs.template(record.template_id).number, number)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(content | {"type": record.template}, indent=2, default=str) + "\n")
        else:
            lines.setdefault(_qa2_file(root / "qa2", record.group, record.template), []).append(
                json.dumps(content, default=str))
    for path, content in lines.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(content) + "\n")


def _write_parquet(root: Path, documents: list[tuple[Record, dict[str, Any]]]) -> dict[str, Any]:
    """One parquet file per config, the release's columns first; the front matter naming each config's files."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for record, content in documents:
        members = {"id": record.id, "template_id": record.template_id, "group": record.group,
                   "template": record.template, **content}
        text = {name: members.pop(name) for name in HF_TEXT_COLUMNS}
        rows.setdefault(record.group, []).append(
            text | {name: json.dumps(value, default=str) for name, value in members.items()})
    for group, table in rows.items():
        path = root / group / HF_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(table), path, compression="zstd")
    return {"configs": [{"config_name": group, "data_files": [{"split": "test", "path": _config_glob(group)}]}
                        for group in sorted(rows)]}
