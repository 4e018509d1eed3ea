"""Loading the real records from each layout: raw qa2 JSONL, raw vector folders, Hugging Face parquet."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATA

from gsqa_core.errors import GsqaError
from reproduce import configs, dataset

BENCHMARK = DATA / "benchmark"
FIELDS = ["id", "template_id", "group", "template", "question", "sql", "answer_type", "answers", "question_entities"]


@pytest.fixture(scope="module")
def everything() -> dataset.Dataset:
    return dataset.load(BENCHMARK, configs.templates_of("all"))


def test_shared_benchmark_serves_config_all(everything: dataset.Dataset) -> None:
    manifest_rows = len((BENCHMARK / "vector" / "MANIFEST.tsv").read_text().splitlines()) - 1
    assert len(everything.records) == manifest_rows + 15 * 20  # 15 qa2 files of 20 records
    assert len(everything.records) + len(everything.skipped) == 3300
    assert len({record.id for record in everything.records}) == len(everything.records)
    per_template = Counter(record.template_id for record in everything.records)
    v12_rows = sum(row.startswith("12\t") for row in (BENCHMARK / "vector" / "MANIFEST.tsv").read_text().splitlines())
    assert per_template["R1"] == 20 and per_template["V12"] == v12_rows > 0 and "VR4" not in per_template


def test_ids_follow_the_release_conventions(everything: dataset.Dataset) -> None:
    by_id = {record.id: record for record in everything.records}
    first_line = json.loads((BENCHMARK / "qa2/raster_only/slope+poi.jsonl").read_text().splitlines()[0])
    assert by_id["raster_only/slope+poi/0"].sql == first_line["sql"]
    folder_one = json.loads((BENCHMARK / "vector/T7/001/question.json").read_text())
    seventh = by_id["vector/knn+name+multihop1/0"]
    assert (seventh.template_id, seventh.group, seventh.sql) == ("V7", "vector", folder_one["sql"])


def test_missing_files_become_skips_with_the_reason(everything: dataset.Dataset) -> None:
    present = {row.split("\t")[0] + "/" + row.split("\t")[1]
               for row in (BENCHMARK / "vector/MANIFEST.tsv").read_text().splitlines()[1:]}
    missing = {f"{template}/{number}" for template in range(1, 29) for number in range(1, 101)} - present
    vector_skips = {f"{skip.template_id[1:]}/{int(skip.id.rsplit('/', 1)[1]) + 1}"
                    for skip in everything.skipped if skip.id.startswith("vector/")}
    assert vector_skips == missing
    vr4 = [skip for skip in everything.skipped if skip.template_id == "VR4"]
    assert len(vr4) == 20 and "extended/range+distance+elevation.jsonl" in vr4[0].reason


def test_space_padded_vector_folders_as_upstream(tmp_path: Path) -> None:
    for number in (1, 42):
        target = tmp_path / "T5" / f"{number:3d}"
        target.mkdir(parents=True)
        shutil.copy(BENCHMARK / f"vector/T5/{number:03d}/question.json", target / "question.json")
    loaded = dataset.load(tmp_path, [configs.template("V5")])
    assert [record.id for record in loaded.records] == ["vector/knn+name/0", "vector/knn+name/41"]
    assert len(loaded.skipped) == 98


def _write_parquet(path: Path, records: list[dataset.Record]) -> None:
    """Records as the Hugging Face release stores them: answers and entities as JSON strings."""
    columns = {name: [getattr(r, name) for r in records] for name in FIELDS}
    columns["answers"] = [json.dumps(value) for value in columns["answers"]]
    columns["question_entities"] = [json.dumps(value) for value in columns["question_entities"]]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, compression="zstd")


@pytest.mark.parametrize("layout", ["config folders", "front matter globs"])
def test_hugging_face_layout(tmp_path: Path, everything: dataset.Dataset, layout: str) -> None:
    raster = [record for record in everything.records if record.group == "raster_only"]
    if layout == "config folders":
        _write_parquet(tmp_path / "raster_only" / "test-00000-of-00001.parquet", raster)
    else:
        _write_parquet(tmp_path / "data" / "ro-part1.parquet", raster[:100])
        _write_parquet(tmp_path / "data" / "ro-part2.parquet", raster[100:])
        (tmp_path / "data" / "notes.txt").write_text("not parquet")  # pyarrow would choke on the folder
        (tmp_path / "README.md").write_text(
            "---\nconfigs:\n- config_name: raster_only\n  data_files:\n  - split: test\n    path: data/ro-*.parquet\n"
            "---\n# GS-QA2\n")
    loaded = dataset.load(tmp_path, configs.templates_of("raster_only"))
    assert loaded.records == raster
    assert loaded.source == str(tmp_path) and len(loaded.file_digests) == (1 if layout == "config folders" else 2)


@pytest.mark.parametrize("layout", dataset.LAYOUTS)
def test_each_layout_written_reads_back_to_the_same_records(tmp_path: Path, everything: dataset.Dataset,
                                                            layout: str) -> None:
    front = dataset.write(tmp_path, layout, [(record, dataset.document(record)) for record in everything.records])
    (tmp_path / "README.md").write_text(dataset.front_matter(front) + "# GS-QA2 written again\n")
    again = dataset.load(tmp_path, configs.templates_of("all"))  # the parquet reader goes config by config

    def by_id(records: list) -> list:
        return sorted(records, key=lambda record: record.id)

    assert by_id(again.records) == by_id(everything.records)
    if layout == "parquet":  # which templates have no records (a parquet file lists no missing questions)
        assert {skip.template_id for skip in again.skipped} == (
            {chosen.id for chosen in configs.templates_of("all")} - {record.template_id for record in again.records})
        assert front == {"configs": [{"config_name": group, "data_files": [{"split": "test",
                                                                            "path": f"{group}/*.parquet"}]}
                                     for group in ("extended", "raster_only", "vector")]}
        assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*.parquet")) == [
            f"{group}/test-00000-of-00001.parquet" for group in ("extended", "raster_only", "vector")]
    else:
        assert sorted(skip.id for skip in again.skipped) == sorted(skip.id for skip in everything.skipped)
        assert front == {} and not (tmp_path / "README.md").read_text().startswith("---")
        assert ((tmp_path / "qa2/raster_only/slope+poi.jsonl").read_text().splitlines()[0]
                == (BENCHMARK / "qa2/raster_only/slope+poi.jsonl").read_text().splitlines()[0])
        assert json.loads((tmp_path / "vector/T7/001/question.json").read_text())["type"] == "knn+name+multihop1"


def test_unreadable_data_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "qa2" / "raster_only").mkdir(parents=True)
    (tmp_path / "qa2" / "raster_only" / "elevation+poi.jsonl").write_text('{"sql": "SELECT 1"\n')
    with pytest.raises(GsqaError, match="elevation\\+poi.jsonl:1: not valid JSON"):
        dataset.load(tmp_path, [configs.template("R1")])
    with pytest.raises(GsqaError, match="no benchmark records found"):
        dataset.load(tmp_path / "qa2" / "raster_only", [configs.template("R1")])


def test_checksum_changes_with_the_content(tmp_path: Path) -> None:
    target = tmp_path / "qa2" / "raster_only"
    target.mkdir(parents=True)
    shutil.copy(BENCHMARK / "qa2/raster_only/elevation+poi.jsonl", target)
    before = dataset.load(tmp_path, [configs.template("R1")]).checksum
    (target / "elevation+poi.jsonl").write_text((target / "elevation+poi.jsonl").read_text().replace("286.0", "287.0"))
    assert dataset.load(tmp_path, [configs.template("R1")]).checksum != before


def test_without_data_and_offline_the_message_suggests_data(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    result = subprocess.run([str(Path(sys.executable).parent / "reproduce"), "verify", "--config", "raster_only"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--data" in result.stderr and "Zoe/GS-QA2" in result.stderr


COMMIT = "c" * 40


class FakeHub(BaseHTTPRequestHandler):
    """The few Hugging Face hub endpoints snapshot_download uses: revision info, the file tree, the files."""

    files: dict[str, bytes] = {}

    def _reply(self, body: bytes, headers: dict[str, str], send_body: bool) -> None:
        self.send_response(200)
        for key, value in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _route(self, send_body: bool) -> None:
        path = self.path.split("?")[0]
        resolve = f"/datasets/{dataset.HF_REPO}/resolve/{COMMIT}/"
        if path.startswith(f"/api/datasets/{dataset.HF_REPO}/tree/"):
            tree = [{"type": "file", "path": name, "size": len(body), "oid": hashlib.sha1(body).hexdigest()}
                    for name, body in self.files.items()]
            self._reply(json.dumps(tree).encode(), {"Content-Type": "application/json"}, send_body)
        elif path.startswith(f"/api/datasets/{dataset.HF_REPO}/revision/"):
            info = {"id": dataset.HF_REPO, "sha": COMMIT, "siblings": [{"rfilename": name} for name in self.files]}
            self._reply(json.dumps(info).encode(), {"Content-Type": "application/json"}, send_body)
        elif path.startswith(resolve) and path[len(resolve):] in self.files:
            body = self.files[path[len(resolve):]]
            etag = f'"{hashlib.sha256(body).hexdigest()}"'
            self._reply(body, {"X-Repo-Commit": COMMIT, "ETag": etag}, send_body)
        else:
            self.send_response(404)
            self.end_headers()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._route(True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._route(False)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub(tmp_path: Path, everything: dataset.Dataset) -> Iterator[str]:
    parquet = tmp_path / "r1.parquet"
    _write_parquet(parquet, [r for r in everything.records if r.template_id == "R1"])
    FakeHub.files = {"README.md": b"# GS-QA2\n", "raster_only/test-00000-of-00001.parquet": parquet.read_bytes()}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_default_source_is_downloaded_once_then_cached(hub: str, tmp_path: Path, everything: dataset.Dataset) -> None:
    script = ("import json; from reproduce import configs, dataset; d = dataset.load(None, [configs.template('R1')]); "
              "print(json.dumps([d.source, [r.id for r in d.records], [r.answers for r in d.records]]))")
    env = {**os.environ, "HF_ENDPOINT": hub, "HF_HOME": str(tmp_path / "hf")}
    online = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert online.returncode == 0, online.stderr
    source, ids, answers = json.loads(online.stdout)
    r1 = [r for r in everything.records if r.template_id == "R1"]
    assert source == f"hf:{dataset.HF_REPO}@{COMMIT}"
    assert (ids, answers) == ([r.id for r in r1], [r.answers for r in r1])
    offline = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                             env={**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:1"})
    assert offline.returncode == 0, offline.stderr
    assert json.loads(offline.stdout)[0] == source


def test_a_line_that_is_not_utf8_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    target = tmp_path / "qa2" / "raster_only"
    target.mkdir(parents=True)
    good = (BENCHMARK / "qa2/raster_only/elevation+poi.jsonl").read_bytes().split(b"\n")
    (target / "elevation+poi.jsonl").write_bytes(b"\n".join([good[0], b'{"question": "caf\xe9"}', *good[2:]]))
    with pytest.raises(GsqaError) as caught:
        dataset.load(tmp_path, [configs.template("R1")])
    assert str(caught.value).startswith(f"{target / 'elevation+poi.jsonl'}:2: not UTF-8 text")
