"""`reproduce serve --transport http` as a subprocess, for the tests and bench/serve_bench.py: on a free port,
with a --tokens file of its agents, its stderr in a file, handed over once it takes connections and stopped
afterwards if it still runs; and an MCP client that sends an agent's token."""

from __future__ import annotations

import contextlib
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from testkit.local_server import free_port

BIN = Path(sys.executable).parent  # the venv's console scripts


@dataclass(frozen=True)
class HttpServer:
    process: subprocess.Popen
    url: str  # its MCP endpoint
    log: Path  # what it wrote to stderr
    tokens: dict[str, str]  # {agent: token}, as its --tokens file names them

    def client(self, agent: str = "agent-0", **options: Any) -> contextlib.AbstractAsyncContextManager[Client]:
        """An MCP client (mcp.Client's `options`) sending `agent`'s token."""
        return mcp_client(self.url, self.tokens[agent], **options)


@contextlib.asynccontextmanager
async def mcp_client(url: str, token: str, **options: Any) -> AsyncIterator[Client]:
    """mcp.Client of a streamable HTTP server whose requests carry "Authorization: Bearer TOKEN"."""
    timeouts = httpx2.Timeout(30, read=300)  # the SDK's own client's
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeouts) as http, \
            Client(streamable_http_client(url, http_client=http), **options) as client:
        yield client


@contextlib.contextmanager
def http_server(args: list[str], log: Path, seconds: float = 60.0, agents: int = 1) -> Iterator[HttpServer]:
    """`reproduce ARGS --transport http --port P --tokens FILE` (the agents agent-0 ... agent-N-1 beside `log`;
    no --tokens if `agents` is 0), once it listens (RuntimeError with its stderr if it exits or does not listen
    within `seconds`)."""
    port, tokens = free_port(), {f"agent-{n}": secrets.token_urlsafe(32) for n in range(agents)}
    tokens_file = log.with_suffix(".tokens")
    if tokens:
        tokens_file.touch(mode=0o600)
        tokens_file.write_text("".join(f"{agent} {token}\n" for agent, token in tokens.items()))
    with open(log, "w") as stderr:
        process = subprocess.Popen([str(BIN / "reproduce"), *args, "--transport", "http", "--port", str(port),
                                    *(["--tokens", str(tokens_file)] if tokens else [])],
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        _wait_until_listening(process, port, log, seconds)
        yield HttpServer(process, f"http://127.0.0.1:{port}/mcp", log, tokens)
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_listening(process: subprocess.Popen, port: int, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"reproduce serve exited {process.returncode}:\n{log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"reproduce serve did not listen on port {port} within {seconds:g} s:\n"
                       f"{log.read_text()[-2000:]}")
