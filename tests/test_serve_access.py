"""Who may call `reproduce serve --transport http` (reproduce/serve/access.py), against a real server: a request
without one of its tokens gets HTTP 401 and leaves no line; each agent of --tokens is named on its calls' lines;
without --tokens the server makes one token and says it; a --tokens file that is not private or not NAME TOKEN
lines is one line that starts nothing."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from pathlib import Path

import httpx2
import pytest
from mcp import MCPError

from reproduce.predictions import trajectory
from reproduce.serve.access import MIN_TOKEN_CHARACTERS
from testkit.cli import reproduce
from testkit.serve import http_server, mcp_client

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
        assert "(the tokens of 2 agents in " in server.log.read_text()
    calls = trajectory.read(path).episodes[f"{R1}/0"].calls
    assert [call["client"]["agent"] for call in calls] == ["agent-0", "agent-1"]  # the refused left none


def test_without_tokens_the_server_makes_one_and_says_it(demo, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with http_server(serve_args(demo, path), tmp_path / "serve.log", agents=0) as server:
        said = re.search(r'send the header "Authorization: Bearer (\S+)"\)', server.log.read_text())
        assert said is not None and len(said[1]) >= MIN_TOKEN_CHARACTERS
        assert asyncio.run(ask(server.url, said[1])) == f"{R1}/0"
    assert [call["client"]["agent"] for call in trajectory.read(path).episodes[f"{R1}/0"].calls] == ["agent"]


TOKEN = "t" * MIN_TOKEN_CHARACTERS


@pytest.mark.parametrize(("text", "mode", "message"), [
    (f"alice {TOKEN}\n", 0o644, "other users may read it (mode -rw-r--r--): chmod 600 it"),
    (f"# agents\nalice {TOKEN}\nbob\n", 0o600, "3: expected NAME TOKEN (an agent's name, then its token of at least "
                                               f"{MIN_TOKEN_CHARACTERS} characters)"),
    (f"alice {TOKEN[1:]}\n", 0o600, "1: expected NAME TOKEN (an agent's name, then its token of at least "
                                    f"{MIN_TOKEN_CHARACTERS} characters)"),
    (f"alice {TOKEN}\nbob {TOKEN}\n", 0o600, "2: the token is given twice"),
    (f"alice {TOKEN}\nalice {TOKEN}x\n", 0o600, "2: alice is given twice"),
    ("# nobody\n", 0o600, ": no NAME TOKEN line"),
])
def test_a_tokens_file_not_private_or_not_name_token_lines_is_one_line(demo, tmp_path: Path, text: str, mode: int,
                                                                       message: str) -> None:
    tokens = tmp_path / "agents.tokens"
    tokens.write_text(text)
    tokens.chmod(mode)
    served = reproduce(*serve_args(demo, tmp_path / "run.jsonl"), "--transport", "http", "--port", "0",
                       "--tokens", tokens)
    separator = "" if message.startswith(":") else ":" if message[0].isdigit() else ": "
    assert (served.returncode, served.stderr.strip()) == (2, f"error: --tokens {tokens}{separator}{message}")
    assert not (tmp_path / "run.jsonl").exists()


def test_tokens_over_stdio_are_refused(demo, tmp_path: Path) -> None:
    tokens = tmp_path / "agents.tokens"
    tokens.write_text(f"alice {TOKEN}\n")
    tokens.chmod(0o600)
    served = reproduce(*serve_args(demo, tmp_path / "run.jsonl"), "--tokens", tokens)
    assert (served.returncode, served.stderr.strip()) == (
        2, "error: --tokens is for --transport http (a stdio server's one client started it)")
