"""Who may call `reproduce serve --transport http` (reproduce/serve/access.py), against a real server: a request
without one of its tokens gets HTTP 401 and leaves no line; each agent of --tokens is named on its calls' lines;
without --tokens the server makes one token and says it; a --tokens file that is not private or not NAME TOKEN
lines is one line that starts nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import stat
from pathlib import Path

import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from reproduce.predictions import trajectory
from reproduce.serve.access import MIN_TOKEN_CHARACTERS
from testkit.cli import reproduce
from testkit.serve import HttpServer, http_server, mcp_client

R1 = "raster_only/elevation+poi"
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
ACCEPTS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def serve_args(demo: tuple[str, Path], path: Path) -> list[str]:
    return ["serve", "--config", "raster_only", "--data", str(demo[1]), "--dsn", demo[0], "--trajectory", str(path)]


async def ask(url: str, token: str) -> str:
    async with mcp_client(url, token) as client:
        asked = await client.call_tool("question", {"question_id": f"{R1}/0"})
        return json.loads(asked.content[0].text)["question_id"]


def test_without_one_of_its_tokens_a_request_gets_401_and_leaves_no_line(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with http_server(serve_args(demo, path), tmp_path / "serve.log", agents=2) as server:
        wrong = secrets.token_urlsafe(32)
        for headers in ({}, {"authorization": f"Bearer {wrong}"}, {"authorization": server.tokens["agent-0"][:-1]}):
            refused = httpx2.post(server.url, json=LIST_TOOLS, headers={**ACCEPTS, **headers}, timeout=30)
            assert (refused.status_code, refused.json()["error"]) == (401, "invalid_token")
        with pytest.raises(ExceptionGroup) as refused_client:
            asyncio.run(ask(server.url, wrong))
        # the SDK's client says no more than this of the 401
        assert refused_client.group_contains(MCPError, match="^Server returned an error response$", depth=None)
        assert [asyncio.run(ask(server.url, server.tokens[agent])) for agent in ("agent-0", "agent-1")] == [
            f"{R1}/0"] * 2
        assert f'"Authorization: Bearer TOKEN" with a token of {server.log.with_suffix(".tokens")} (NAME TOKEN' \
            in server.log.read_text()
    calls = trajectory.read(path).episodes[f"{R1}/0"].calls
    assert [call["client"]["agent"] for call in calls] == ["agent-0", "agent-1"]  # the refused left none


def test_without_tokens_the_server_makes_one_in_a_private_file_removed_when_it_stops(demo, tmp_path: Path) -> None:
    """The token is in a file only the server's user reads, never on stderr (which often goes to a log)."""
    path = tmp_path / "run.jsonl"
    with http_server(serve_args(demo, path), tmp_path / "serve.log", agents=0) as server:
        log = server.log.read_text()
        said = re.search(r"with a token of (\S+) \(NAME TOKEN lines\)", log)
        assert said is not None
        tokens = Path(said[1])
        assert stat.S_IMODE(tokens.stat().st_mode) == 0o600
        name, token = tokens.read_text().split()
        assert name == "agent" and len(token) >= MIN_TOKEN_CHARACTERS and token not in log
        assert asyncio.run(ask(server.url, token)) == f"{R1}/0"
    assert not tokens.exists()
    assert [call["client"]["agent"] for call in trajectory.read(path).episodes[f"{R1}/0"].calls] == ["agent"]


def test_a_session_id_a_client_writes_on_a_sessionless_request_is_not_its_id(demo, tmp_path: Path) -> None:
    """The SDK's own client (protocol 2026-07-28) opens no session: an Mcp-Session-Id it sends is not checked,
    so the call is told apart by its TCP peer, not by whatever the header says."""
    path = tmp_path / "run.jsonl"

    async def forged(server: HttpServer) -> None:
        headers = {"authorization": f"Bearer {server.tokens['agent-0']}", "mcp-session-id": "FORGED"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http, \
                Client(streamable_http_client(server.url, http_client=http)) as client:
            await client.call_tool("question", {"question_id": f"{R1}/0"})

    with http_server(serve_args(demo, path), tmp_path / "serve.log") as server:
        asyncio.run(forged(server))
    [call] = trajectory.read(path).episodes[f"{R1}/0"].calls
    assert re.fullmatch(r"127\.0\.0\.1:\d+", call["client"]["id"]), call["client"]


TOKEN = "t" * MIN_TOKEN_CHARACTERS
EXPECTED = (f"expected NAME TOKEN (an agent's name, then its token: at least {MIN_TOKEN_CHARACTERS} of A-Z a-z 0-9 - . "
            "_ ~ + /, e.g. secrets.token_urlsafe(32))")


@pytest.mark.parametrize(("text", "mode", "message"), [
    (f"alice {TOKEN}\n", 0o644, "other users may read it (mode -rw-r--r--): chmod 600 it"),
    (f"# agents\nalice {TOKEN}\nbob\n", 0o600, f"3: {EXPECTED}"),
    (f"alice {TOKEN[1:]}\n", 0o600, f"1: {EXPECTED}"),
    (f"alice {'é' * MIN_TOKEN_CHARACTERS}\n", 0o600, f"1: {EXPECTED}"),  # no HTTP client would send it as it is
    ("alice \xff\n", 0o600, "not UTF-8 text"),
    (f"alice {TOKEN}\nbob {TOKEN}\n", 0o600, "2: the token is given twice"),
    (f"alice {TOKEN}\nalice {TOKEN}x\n", 0o600, "2: alice is given twice"),
    ("# nobody\n", 0o600, ": no NAME TOKEN line"),
])
def test_a_tokens_file_not_private_or_not_name_token_lines_is_one_line(demo, tmp_path: Path, text: str, mode: int,
                                                                       message: str) -> None:
    tokens = tmp_path / "agents.tokens"
    tokens.write_bytes(b"alice \xff\n" if text == "alice \xff\n" else text.encode())
    tokens.chmod(mode)
    assert refusal(demo, tmp_path, tokens) == f"error: --tokens {tokens}{separator(message)}{message}"


def separator(message: str) -> str:
    return "" if message.startswith(":") else ":" if message[0].isdigit() else ": "


def refusal(demo: tuple[str, Path], tmp_path: Path, tokens: Path) -> str:
    """serve's one line for --tokens FILE (exit 2, nothing written)."""
    served = reproduce(*serve_args(demo, tmp_path / "run.jsonl"), "--transport", "http", "--port", "0",
                       "--tokens", tokens)
    assert served.returncode == 2 and not (tmp_path / "run.jsonl").exists()
    return served.stderr.strip()


def test_a_tokens_file_that_is_a_fifo_or_another_users_is_refused_without_reading_it(demo, tmp_path: Path) -> None:
    fifo = tmp_path / "agents.fifo"
    os.mkfifo(fifo, 0o600)  # nothing writes it: a read would wait for ever
    assert refusal(demo, tmp_path, fifo) == f"error: --tokens {fifo}: not a regular file"
    if os.geteuid() != 0:
        pytest.skip("another user's file: only root can give a file away (this run is not root)")
    theirs = tmp_path / "theirs.tokens"
    theirs.write_text(f"alice {TOKEN}\n")
    theirs.chmod(0o600)
    os.chown(theirs, 65534, 65534)  # nobody's
    assert refusal(demo, tmp_path, theirs) == f"error: --tokens {theirs}: owned by uid 65534, not by the server's user"


def test_tokens_over_stdio_are_refused(demo, tmp_path: Path) -> None:
    tokens = tmp_path / "agents.tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    tokens.chmod(0o600)
    served = reproduce(*serve_args(demo, tmp_path / "run.jsonl"), "--tokens", tokens)
    assert (served.returncode, served.stderr.strip()) == (
        2, "error: --tokens is for --transport http (a stdio server's one client started it)")
