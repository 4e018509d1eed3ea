"""`reproduce serve` over the Model Context Protocol, against the demo database: an in-process MCP client, a
stdio subprocess client as an agent's harness starts it, 8 agents at once over streamable HTTP, kill -9 of the
server mid-episode and the rerun, and the command's bad input."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import Implementation

from reproduce import configs, dataset
from reproduce.gate import MAX_REPLY_BYTES
from reproduce.predictions import trajectory
from reproduce.serve.pool import APPLICATION_NAME
from reproduce.serve.protocol import mcp_server
from reproduce.serve.tools import ServeRequest, open_tools
from testkit.cli import reproduce
from testkit.serve import BIN, HttpServer, http_server

R1 = "raster_only/elevation+poi"


@pytest.fixture(scope="module")
def gold(demo: tuple[str, Path]) -> dict:
    return {record.id: record for record in dataset.load(demo[1], [configs.template("R1")]).records}


def serve_args(demo: tuple[str, Path], path: Path, *more: str) -> list[str]:
    return ["serve", "--config", "raster_only", "--data", str(demo[1]), "--dsn", demo[0], "--trajectory", str(path),
            *more]


async def answer_with_gold(client: Client, question: str, sql: str) -> list:
    """A scripted agent: the question, the gold SQL, its rows submitted."""
    asked = await client.call_tool("question", {"question_id": question})
    assert not asked.is_error, asked.content[0].text
    ran = await client.call_tool("query", {"question_id": question, "sql": sql})
    assert not ran.is_error, ran.content[0].text
    rows = json.loads(ran.content[0].text)["rows"]
    submitted = await client.call_tool("submit_answer", {"question_id": question, "answer": rows})
    assert not submitted.is_error, submitted.content[0].text
    return rows


def test_the_four_tools_over_an_in_process_client(demo, gold, tmp_path: Path) -> None:
    async def session(tools) -> None:
        async with Client(mcp_server(tools)) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert sorted(listed) == ["query", "question", "schema", "submit_answer"]
            assert [listed[name].annotations.read_only_hint for name in sorted(listed)] == [True, True, True, False]
            assert listed["submit_answer"].annotations.destructive_hint is False
            schema = await client.call_tool("schema", {})
            assert "Table public.dem_us" in schema.content[0].text and "Table public.pois" in schema.content[0].text
            refused = await client.call_tool("query", {"question_id": f"{R1}/0", "sql": "DROP TABLE pois"})
            assert refused.is_error
            assert refused.content[0].text.startswith("Error executing tool query: refused: `DROP` changes the "
                                                      "database")
            assert "\n" not in refused.content[0].text
            unknown = await client.call_tool("question", {"question_id": "nonsense"})
            assert unknown.is_error and "unknown question id 'nonsense'" in unknown.content[0].text
            rows = await answer_with_gold(client, f"{R1}/0", gold[f"{R1}/0"].sql)
            assert rows == gold[f"{R1}/0"].answers
            listing = await client.read_resource("gsqa://questions")
            assert json.loads(listing.contents[0].text) == [f"{R1}/{n}" for n in range(1, 20)]

    path = tmp_path / "run.jsonl"
    with open_tools(ServeRequest(config="raster_only", data=demo[1], dsn=demo[0], trajectory=path)) as tools:
        asyncio.run(session(tools))
    assert trajectory.read(path).episodes[f"{R1}/0"].stop == "submitted"


def test_an_agent_harness_starts_the_server_over_stdio(demo, gold, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"

    async def agent() -> None:
        server = StdioServerParameters(command=str(BIN / "reproduce"), args=serve_args(demo, path, "--model", "m"))
        async with Client(server) as client:
            for number in range(3):
                await answer_with_gold(client, f"{R1}/{number}", gold[f"{R1}/{number}"].sql)

    asyncio.run(agent())
    assert verdicts(demo, path, tmp_path) == {f"{R1}/{n}": "pass" if n < 3 else "fail" for n in range(20)}


def verdicts(demo: tuple[str, Path], path: Path, folder: Path) -> dict[str, str]:
    """The paper's verdict of each question, by `reproduce score` on the trajectory."""
    scored = reproduce("score", path, "--config", "raster_only", "--data", demo[1], "--json-out",
                       folder / "scores.json")
    assert scored.returncode == 0, scored.stderr
    return {result["id"]: result["paper"] for result in json.loads((folder / "scores.json").read_text())["results"]}


def sandbox_connections(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                            [APPLICATION_NAME]).fetchone()[0]


def test_eight_agents_at_once_over_http_each_see_only_their_own_questions(demo, gold, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    seen: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            seen.append(sandbox_connections(demo[0]))
            time.sleep(0.02)

    async def agent(server: HttpServer, k: int) -> list:
        async with server.client(f"agent-{k}") as client:
            return [await answer_with_gold(client, f"{R1}/{n}", gold[f"{R1}/{n}"].sql) for n in range(k, 20, 8)]

    async def agents(server: HttpServer) -> list:
        return await asyncio.gather(*(agent(server, k) for k in range(8)))

    with http_server(serve_args(demo, path, "--connections", "3"), tmp_path / "serve.log", agents=8) as server:
        process = server.process
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            answers = asyncio.run(agents(server))
        finally:
            stop.set()
            watcher.join()
        process.send_signal(signal.SIGTERM)  # as a service manager stops it
        assert process.wait(timeout=30) == 0
        assert "questions open, on http://127.0.0.1:" in server.log.read_text()
    for k, rows in enumerate(answers):  # each agent got its own questions' rows
        assert rows == [gold[f"{R1}/{n}"].answers for n in range(k, 20, 8)]
    assert 1 <= max(seen) <= 3  # the pool is bounded by --connections
    episodes = trajectory.read(path).episodes
    assert {question: {call["client"]["agent"] for call in episode.calls} for question, episode in episodes.items()
            } == {f"{R1}/{n}": {f"agent-{n % 8}"} for n in range(20)}  # each line names the token's agent
    assert {question: (len(episode.calls), episode.stop) for question, episode in episodes.items()} == {
        f"{R1}/{n}": (3, "submitted") for n in range(20)}
    assert verdicts(demo, path, tmp_path) == {f"{R1}/{n}": "pass" for n in range(20)}


def test_kill_9_mid_episode_keeps_every_finished_call_and_the_rerun_continues(demo, tmp_path: Path) -> None:
    """...and leaves no query running: the backend notices its client is gone (client_connection_check_interval)
    long before the statement's timeout."""
    path = tmp_path / "run.jsonl"
    args = serve_args(demo, path, "--max-calls", "5", "--timeout", "60")

    async def calls(server: HttpServer) -> None:
        async with server.client() as client:
            await client.call_tool("submit_answer", {"question_id": f"{R1}/0", "answer": 1.0})
            await client.call_tool("question", {"question_id": f"{R1}/1"})
            await client.call_tool("query", {"question_id": f"{R1}/1", "sql": "SELECT pg_sleep(50)"})

    def until_killed(server: HttpServer) -> None:
        with contextlib.suppress(BaseException):  # the server is killed under the third call
            asyncio.run(calls(server))

    with http_server(args, tmp_path / "killed.log") as server:
        process = server.process
        threading.Thread(target=until_killed, args=[server], daemon=True).start()
        deadline = time.monotonic() + 30
        while sandbox_sleeping(demo[0]) == 0:  # the third call is on the server
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        deadline = time.monotonic() + 20  # the check interval is 2 s; the statement would sleep 50
        while sandbox_sleeping(demo[0]):
            assert time.monotonic() < deadline, "the killed server's query still runs"
            time.sleep(0.1)
    kept = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(line["type"], line.get("tool")) for line in kept] == [
        ("run", None), ("call", "submit_answer"), ("stop", None), ("call", "question")]

    async def again(server: HttpServer) -> tuple:
        async with server.client() as client:
            done = await client.call_tool("question", {"question_id": f"{R1}/0"})
            going = await client.call_tool("question", {"question_id": f"{R1}/1"})
            return done, json.loads(going.content[0].text)

    with http_server(args, tmp_path / "again.log") as server:
        process = server.process
        done, going = asyncio.run(again(server))
        process.send_signal(signal.SIGINT)  # Ctrl-C
        assert process.wait(timeout=30) == 0
    assert done.is_error and "the answer was submitted; the episode is over" in done.content[0].text
    assert going["budget_left"]["calls"] == 3  # 5 - the question before the kill - this one


def sandbox_sleeping(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query LIKE "
                            "'%%pg_sleep(50)%%' AND state = 'active'", [APPLICATION_NAME]).fetchone()[0]


@pytest.mark.parametrize(("args", "message"), [
    (["--transport", "smoke"], "error: Invalid value for --transport: 'smoke' is not one of stdio, http"),
    (["--id", "nonsense"], "error: unknown question id 'nonsense'"),
    (["--max-calls", "0"], "error: Invalid value for '--max-calls'"),
])
def test_bad_input_is_one_line_and_starts_nothing(demo, tmp_path: Path, args: list[str], message: str) -> None:
    path = tmp_path / "run.jsonl"
    served = reproduce(*serve_args(demo, path, *args))
    assert served.returncode == 2
    assert served.stderr.startswith(message) and served.stderr.count("\n") == 1, served.stderr
    assert served.stdout == "" and not path.exists()


def test_a_trajectory_of_another_run_is_refused(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with open_tools(ServeRequest(config="raster_only", data=demo[1], dsn=demo[0], trajectory=path, model="a")):
        pass
    served = reproduce(*serve_args(demo, path, "--model", "b"))
    assert served.returncode == 2
    assert served.stderr == (f"error: --trajectory {path} holds a run with another model (model: 'a' now 'b'); "
                             "give a new file\n")


def test_an_address_in_use_is_one_line_and_starts_nothing(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        served = reproduce(*serve_args(demo, path, "--transport", "http", "--port", str(port)))
    assert served.returncode == 2
    assert served.stderr == (f"error: --host 127.0.0.1 --port {port}: cannot listen there (Address already in use); "
                             "give another --port\n")
    assert not path.exists()


def test_a_server_without_a_trajectory_warns_that_its_run_cannot_be_scored(demo) -> None:
    args = [arg for arg in serve_args(demo, Path("unused")) if arg not in ("--trajectory", "unused")]
    served = subprocess.run([str(BIN / "reproduce"), *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=120)  # stdin at its end: the stdio server ends
    assert served.returncode == 0, served.stderr
    assert served.stderr.splitlines()[0] == ("warning: no --trajectory: the calls are not kept, so this run cannot be "
                                             "scored or continued")


def test_a_reply_past_what_a_client_reads_is_cut_to_its_first_rows_and_says_so(demo, tmp_path: Path) -> None:
    """100 rows of 3 texts of 1,999 characters, inside every default cap, were 1.4 MB pretty-printed and twice
    (text and structured content): the official client refused the event. Now one compact text of at most
    MAX_REPLY_BYTES, its first rows, and a note."""
    wide = "SELECT g AS n, repeat('a', 1999) AS x, repeat('b', 1999) AS y, repeat('c', 1999) AS z " \
           "FROM generate_series(1, 100) g"

    async def ask(server: HttpServer) -> Any:
        async with server.client() as client:
            return await client.call_tool("query", {"question_id": f"{R1}/0", "sql": wide})

    with http_server(serve_args(demo, tmp_path / "run.jsonl"), tmp_path / "serve.log") as server:
        result = asyncio.run(ask(server))
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
    assert not result.is_error and len(result.content) == 1 and result.structured_content is None
    text = result.content[0].text
    reply = json.loads(text)
    fit = len(reply["rows"])
    assert len(text.encode()) <= MAX_REPLY_BYTES < len(text.encode()) + 6_100  # one more row would not fit
    assert [row["n"] for row in reply["rows"]] == list(range(1, fit + 1)) and reply["row_count"] == 100
    assert reply["truncated"] is True and reply["note"].startswith(
        f"only the first {fit} of the 100 rows fit in a reply of {MAX_REPLY_BYTES:,} bytes; select fewer")


def test_the_agent_prompt_and_one_table_s_schema_cost_no_call(demo, gold) -> None:
    async def read(tools) -> tuple:
        async with Client(mcp_server(tools)) as client:
            prompts = [prompt.name for prompt in (await client.list_prompts()).prompts]
            prompt = await client.get_prompt("gsqa_agent", {"question_id": f"{R1}/0"})
            table = await client.read_resource("gsqa://schema/pois")
            asked = json.loads((await client.call_tool("question", {"question_id": f"{R1}/0"})).content[0].text)
            return prompts, prompt.messages[0].content.text, table.contents[0].text, asked

    with open_tools(ServeRequest(config="raster_only", data=demo[1], dsn=demo[0])) as tools:
        prompts, prompt, table, asked = asyncio.run(read(tools))
    assert prompts == ["gsqa_agent"]
    assert prompt.startswith("You answer geospatial questions of the GS-QA2 benchmark")
    assert ("Budget per question: 20 calls and 600 s from its first call; each statement at most 120 s; a query "
            "returns at most 100 rows.") in prompt
    assert f"Question {R1}/0: {gold[f'{R1}/0'].question}" in prompt
    assert table.startswith("PostgreSQL ") and "Table public.pois (" in table and "Table public.roads" not in table
    assert asked["budget_left"]["calls"] == 19  # the prompt and the resource were no calls


USAGE = {"input_tokens": 1200, "output_tokens": 85, "cost": 0.0031}


async def calls_with_usage(client: Client, question: str, sql: str) -> list[tuple[str, bool]]:
    """A scripted agent that attaches its model's usage to each call's _meta (one of them malformed): what its
    client got back, text and is_error, in order."""
    got = []
    for tool, arguments, meta in (
            ("question", {"question_id": question}, {"usage": USAGE}),
            ("query", {"question_id": question, "sql": "SELECT 1; SELECT 2"}, {"usage": {"input_tokens": "12"}}),
            ("query", {"question_id": question, "sql": sql}, {"usage": {"input_tokens": 10, "output_tokens": 2}}),
            ("submit_answer", {"question_id": question, "answer": "I could not find it"}, None)):
        result = await client.call_tool(tool, arguments, meta=meta)
        got.append((result.content[0].text, result.is_error))
    return got


def test_over_stdio_each_call_line_keeps_its_client_its_usage_and_what_the_agent_got(demo, gold,
                                                                                         tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"

    async def agent() -> list:
        server = StdioServerParameters(command=str(BIN / "reproduce"), args=serve_args(demo, path))
        async with Client(server, client_info=Implementation(name="agent-a", version="2.1")) as client:
            return await calls_with_usage(client, f"{R1}/0", gold[f"{R1}/0"].sql)

    got = asyncio.run(agent())
    found = trajectory.read(path)
    calls = found.episodes[f"{R1}/0"].calls
    assert {json.dumps(call["client"]) for call in calls} == {json.dumps(
        {"id": f"stdio:{found.header['pid']}", "transport": "stdio", "name": "agent-a", "version": "2.1"})}
    assert [call.get("usage") for call in calls] == [USAGE, None, {"input_tokens": 10, "output_tokens": 2}, None]
    assert calls[1]["usage_ignored"] == ("_meta.usage.input_tokens is '12' (expected {\"input_tokens\": an integer "
                                         '>= 0, "output_tokens": an integer >= 0, "cost": a number >= 0})')
    assert [(seen["sent"], seen["is_error"]) for seen in trajectory.views(found)[f"{R1}/0"]] == got
    assert got[1][0].startswith("Error executing tool query: refused: several statements in one")
    # a reply's line holds the very text the agent got (encoded once), and each result's sha256 is of that text
    sent = [text.removeprefix(f"Error executing tool {call['tool']}: ") for (text, _), call in zip(got, calls,
                                                                                                   strict=True)]
    assert all(text in path.read_text() for text, (_, error) in zip(sent, got, strict=True) if not error)
    assert [call["result_sha256"] for call in calls] == [hashlib.sha256(text.encode()).hexdigest() for text in sent]
    assert json.loads(got[2][0])["rows"] == gold[f"{R1}/0"].answers


def test_eight_named_agents_over_http_are_told_apart_on_every_line(demo, gold, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"

    async def agent(server: HttpServer, k: int) -> list:
        async with server.client(client_info=Implementation(name=f"agent-{k}", version="1")) as client:
            return await calls_with_usage(client, f"{R1}/{k}", gold[f"{R1}/{k}"].sql)

    async def agents(server: HttpServer) -> list:
        return await asyncio.gather(*(agent(server, k) for k in range(8)))

    with http_server(serve_args(demo, path, "--connections", "2"), tmp_path / "serve.log") as server:
        got = asyncio.run(agents(server))
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
    found = trajectory.read(path)
    for k in range(8):
        calls = found.episodes[f"{R1}/{k}"].calls
        assert {(call["client"]["name"], call["client"]["transport"]) for call in calls} == {(f"agent-{k}", "http")}
        assert [(seen["sent"], seen["is_error"]) for seen in trajectory.views(found)[f"{R1}/{k}"]] == got[k]
    assert sum(call.get("usage", {}).get("output_tokens", 0) for episode in found.episodes.values()
               for call in episode.calls) == 8 * (85 + 2)


def test_session_based_http_clients_are_told_apart_by_their_mcp_session(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"

    async def agent(server: HttpServer, n: int) -> None:
        async with server.client(mode="legacy") as client:  # the initialize handshake: the server gives a session
            for _ in range(2):
                await client.call_tool("question", {"question_id": f"{R1}/{n}"})

    async def agents(server: HttpServer) -> None:
        await asyncio.gather(agent(server, 0), agent(server, 1))

    with http_server(serve_args(demo, path), tmp_path / "serve.log") as server:
        asyncio.run(agents(server))
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
    episodes = trajectory.read(path).episodes
    ids = [{call["client"]["id"] for call in episodes[f"{R1}/{n}"].calls} for n in range(2)]
    assert [len(found) for found in ids] == [1, 1] and ids[0] != ids[1]
    assert all(len(found.pop()) == 32 for found in ids)  # the Mcp-Session-Id the server gave (a uuid's hex)
