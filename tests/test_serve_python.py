"""`reproduce serve --tools python`: code-writing agents' run_python over the demo database's export, against a
real Docker engine. A scripted code agent (testkit/code_agent.py: geopandas for V5, rasterio over the VRT for
R1) scores paper 100.0 on all 120 demo questions as callables and over HTTP, a few over stdio; every call is
charged and kept in the trajectory with its code and output; each episode's container goes when it ends, and
bad input is one line that starts nothing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from docker_helpers import a_call_runs_in, wait_until
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from test_python_sandbox import image  # noqa: F401 - the fixture: the sandbox image, built where missing

from reproduce import configs, dataset
from reproduce.serve import python_sandbox
from reproduce.serve.tools import ServeRequest, ToolRefused, open_tools
from testkit import code_agent
from testkit.cli import reproduce
from testkit.serve import BIN, HttpServer, http_server

pytestmark = pytest.mark.docker
R1 = "raster_only/elevation+poi"


@pytest.fixture(scope="module")
def records(demo: tuple[str, Path]) -> dict[str, dataset.Record]:
    loaded = dataset.load(demo[1], [configs.template("R1"), configs.template("V5")]).records
    return {record.id: record for record in loaded}


def request(demo: tuple[str, Path], export: Path, path: Path | None, **options) -> ServeRequest:
    return ServeRequest(config="all", templates=["R1", "V5"], data=demo[1], dsn=demo[0], trajectory=path,
                        tools=options.pop("tools", "python"), export=export, **options)


def paper_verdicts(demo: tuple[str, Path], path: Path, folder: Path) -> dict[str, str]:
    scored = reproduce("score", path, "--config", "all", "--template", "R1", "--template", "V5", "--data", demo[1],
                       "--json-out", folder / "scores.json")
    assert scored.returncode == 0, scored.stderr
    return {result["id"]: result["paper"] for result in json.loads((folder / "scores.json").read_text())["results"]}


def owned_by(pid: int) -> list[str]:
    """The containers the serve process `pid` started (python_sandbox.owner_label), running or not."""
    listed = subprocess.run(["docker", "ps", "--all", "--filter", f"label={python_sandbox.LABEL}", "--format",
                             f'{{{{.Names}}}}\t{{{{.Label "{python_sandbox.LABEL}"}}}}'], capture_output=True,
                            text=True, timeout=60)
    return [name for name, _, owner in (line.partition("\t") for line in listed.stdout.splitlines())
            if owner.split(":")[:2] == [socket.gethostname(), str(pid)]]


def served_by(path: Path) -> int:
    """The pid of the serve that wrote the trajectory (its run line)."""
    return json.loads(path.read_text().splitlines()[0])["pid"]


def test_a_code_agent_scores_every_demo_question_through_the_callables(
        demo, demo_export: Path, records, image: str, tmp_path: Path) -> None:  # noqa: F811
    path = tmp_path / "run.jsonl"

    def episode(tools, question: str) -> None:
        asked = tools.question(question)
        ran = tools.run_python(question, code_agent.program(asked["question"]))
        assert (ran["outcome"], ran["exit"], ran["stderr"]) == ("ok", 0, ""), ran
        tools.submit_answer(question, json.loads(ran["stdout"]))

    with open_tools(request(demo, demo_export, path, model="code-agent", method="scripted")) as tools:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda question: episode(tools, question), tools.question_ids()))
        assert tools.question_ids() == [] and owned_by(os.getpid()) == []  # each went with its episode
    assert paper_verdicts(demo, path, tmp_path) == dict.fromkeys(records, "pass")
    calls = [line for line in map(json.loads, path.read_text().splitlines()) if line.get("tool") == "run_python"]
    assert len(calls) == len(records)
    first = calls[0]
    assert first["arguments"]["code"] == code_agent.program(records[first["question_id"]].question)
    assert (first["outcome"], first["exit"], first["stderr"], first["call"]) == ("ok", 0, "", 2)
    assert json.loads(first["stdout"]) and first["peak_kb"] > 0


def test_a_code_agent_over_http_and_over_stdio(demo, demo_export: Path, records, image: str,  # noqa: F811
                                               tmp_path: Path) -> None:
    args = ["serve", "--config", "all", "--template", "R1", "--template", "V5", "--data", str(demo[1]), "--dsn",
            demo[0], "--tools", "python", "--export", str(demo_export)]

    async def answer(client: Client, question: str) -> None:
        asked = json.loads((await client.call_tool("question", {"question_id": question})).content[0].text)
        ran = await client.call_tool("run_python", {"question_id": question,
                                                    "code": code_agent.program(asked["question"])})
        assert not ran.is_error, ran.content[0].text
        submitted = await client.call_tool("submit_answer", {"question_id": question,
                                                             "answer": json.loads(json.loads(ran.content[0].text)
                                                                                  ["stdout"])})
        assert not submitted.is_error, submitted.content[0].text

    async def agents(server: HttpServer) -> None:
        async def agent(questions: list[str]) -> None:
            async with server.client() as client:
                assert {tool.name for tool in (await client.list_tools()).tools} == {
                    "question", "schema", "run_python", "submit_answer"}
                for question in questions:
                    await answer(client, question)
        ids = list(records)
        await asyncio.gather(*(agent(ids[k::4]) for k in range(4)))

    with http_server([*args, "--trajectory", str(tmp_path / "http.jsonl")], tmp_path / "serve.log") as server:
        asyncio.run(agents(server))
    assert paper_verdicts(demo, tmp_path / "http.jsonl", tmp_path) == dict.fromkeys(records, "pass")

    async def over_stdio() -> None:
        server = StdioServerParameters(command=str(BIN / "reproduce"),
                                       args=[*args, "--trajectory", str(tmp_path / "stdio.jsonl")])
        async with Client(server) as client:
            for question in (f"{R1}/0", "vector/knn+name/0"):
                await answer(client, question)

    asyncio.run(over_stdio())
    stdio = paper_verdicts(demo, tmp_path / "stdio.jsonl", tmp_path)
    assert {question for question, verdict in stdio.items() if verdict == "pass"} == {f"{R1}/0", "vector/knn+name/0"}
    assert owned_by(served_by(tmp_path / "http.jsonl")) == owned_by(served_by(tmp_path / "stdio.jsonl")) == []


def test_run_python_is_charged_like_any_call_and_its_failures_say_why(
        demo, demo_export: Path, image: str, tmp_path: Path) -> None:  # noqa: F811
    path = tmp_path / "run.jsonl"
    with open_tools(request(demo, demo_export, path, max_calls=4, timeout=2, tools="sql,python")) as tools:
        question = f"{R1}/0"
        slept = tools.run_python(question, "import time\ntime.sleep(30)")
        assert (slept["outcome"], slept["note"]) == ("timeout", "stopped at the timeout of 2 s")
        failed = tools.run_python(question, "open('/data/x', 'w')")
        assert failed["outcome"] == "error" and failed["exit"] == 1
        assert failed["stderr"].endswith("OSError: [Errno 30] Read-only file system: '/data/x'\n")
        with pytest.raises(ToolRefused, match=r"^refused: no code \(expected a Python program as text\) \[budget "
                                              r"left: 1 calls"):
            tools.run_python(question, "  ")
        rows = tools.query(question, "SELECT 1 AS one")["rows"]  # both kinds served
        assert rows == [{"one": 1}]
        with pytest.raises(ToolRefused, match=r"the episode's budget is spent \(all 4 calls used\)"):
            tools.run_python(question, "print(1)")
    assert owned_by(os.getpid()) == []
    calls = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line.get("tool"), line.get("outcome"), line.get("refused")) for line in calls
            if line["type"] == "call"] == [
        ("run_python", "timeout", None), ("run_python", "error", None), ("run_python", "refused", "no_argument"),
        ("query", "rows", None), ("run_python", "refused", "over_budget")]


def test_question_tells_a_code_agent_its_places_as_wkt_and_the_prompt_its_files(demo, demo_export: Path,
                                                                                image: str) -> None:  # noqa: F811
    with open_tools(request(demo, demo_export, None)) as tools:
        asked = tools.question(f"{R1}/0")
        prompt = tools.instructions()
        with pytest.raises(ToolRefused, match="^refused: query is not served here"):
            tools.query(f"{R1}/0", "SELECT 1")
    assert "entities" not in asked  # the demo's records name no places beside the question's text
    assert "run_python(question_id, code)" in prompt and "/data/vector/LAYER.parquet" in prompt
    assert "query(question_id, sql)" not in prompt


@pytest.mark.parametrize("args, message", [
    (["--tools", "python"], "error: --tools python needs --export DIR, an `ingest export` folder of this database"),
    (["--tools", "sql,perl"], "error: --tools sql,perl: expected sql, python or both, comma-separated"),
    (["--export", "."], "error: --export is for --tools python (run_python reads it)"),
    (["--tools", "python", "--export", "."], "error: --export . is not an `ingest export` folder (no export.json)"),
])
def test_bad_input_is_one_line_and_starts_nothing(demo, args: list[str], message: str) -> None:
    served = reproduce("serve", "--config", "raster_only", "--data", demo[1], "--dsn", demo[0], *args)
    assert (served.returncode, served.stderr.strip()) == (2, message)


def test_without_the_image_python_is_refused_in_one_line(demo, demo_export: Path, monkeypatch) -> None:
    monkeypatch.setattr(python_sandbox, "IMAGE", "gsqa-refdb-sandbox-not-built")
    with pytest.raises(Exception, match=r"^--tools python: the image gsqa-refdb-sandbox-not-built is missing: run "
                                        r"`make sandbox-image`$"):
        open_tools(request(demo, demo_export, None))


def test_an_image_of_other_sandbox_sources_is_refused_in_one_line(demo, demo_export: Path, image: str,  # noqa: F811
                                                                   monkeypatch) -> None:
    """An image whose runner is not this checkout's would make every call `lost`: serve names the fix instead.
    The stale image: this checkout's under another name, without the tag of this checkout's sources."""
    stale = "gsqa-refdb-sandbox-stale-test"
    built = subprocess.run(["docker", "tag", image, stale], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    monkeypatch.setattr(python_sandbox, "IMAGE", stale)
    try:
        with pytest.raises(Exception, match=r"^--tools python: the image gsqa-refdb-sandbox-stale-test was built from "
                                            r"other sandbox sources than this checkout's \(Dockerfile.sandbox, "
                                            r"docker/sandbox/\): run `make sandbox-image`$"):
            open_tools(request(demo, demo_export, None))
    finally:
        subprocess.run(["docker", "image", "rm", "--force", stale], capture_output=True, timeout=60)


def wait_for_a_running_call(pid: int) -> None:
    wait_until(lambda: any(a_call_runs_in(name) for name in owned_by(pid)), f"a call of serve {pid} runs")


SLEEP = "import time\ntime.sleep(60)"


def test_sigterm_to_a_stdio_serve_with_a_call_running_removes_its_container_and_ends_it(
        demo, demo_export: Path, image: str, tmp_path: Path) -> None:  # noqa: F811
    serve = subprocess.Popen([str(BIN / "reproduce"), "serve", "--config", "raster_only", "--data", str(demo[1]),
                              "--dsn", demo[0], "--tools", "python", "--export", str(demo_export), "--trajectory",
                              str(tmp_path / "run.jsonl")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=open(tmp_path / "serve.log", "w"), text=True)
    try:
        for message in ({"id": 1, "method": "initialize", "params": {
                            "protocolVersion": "2025-06-18", "capabilities": {},
                            "clientInfo": {"name": "test", "version": "1"}}},
                        {"method": "notifications/initialized"},
                        {"id": 2, "method": "tools/call", "params": {"name": "run_python", "arguments": {
                            "question_id": f"{R1}/0", "code": SLEEP}}}):
            serve.stdin.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
            serve.stdin.flush()
        wait_for_a_running_call(serve.pid)
        serve.terminate()
        assert serve.wait(timeout=30) == 0, (tmp_path / "serve.log").read_text()
    finally:
        serve.kill()
    assert owned_by(serve.pid) == []


def test_sigterm_to_an_http_serve_with_a_call_running_removes_its_container_and_ends_it(
        demo, demo_export: Path, image: str, tmp_path: Path) -> None:  # noqa: F811
    args = ["serve", "--config", "raster_only", "--data", str(demo[1]), "--dsn", demo[0], "--tools", "python",
            "--export", str(demo_export), "--trajectory", str(tmp_path / "run.jsonl")]

    async def call(server: HttpServer) -> None:
        async with server.client() as client:
            await client.call_tool("run_python", {"question_id": f"{R1}/0", "code": SLEEP})

    def caller(server: HttpServer) -> None:
        with contextlib.suppress(Exception):  # the server goes while the call runs: that is the test
            asyncio.run(call(server))

    with http_server(args, tmp_path / "serve.log") as server:
        threading.Thread(target=caller, args=(server,), daemon=True).start()
        wait_for_a_running_call(server.process.pid)
        server.process.terminate()
        assert server.process.wait(timeout=30) == 0, server.log.read_text()
    assert owned_by(server.process.pid) == []
