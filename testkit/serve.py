"""`reproduce serve --transport http` as a subprocess, for the tests and bench/serve_bench.py: on a free port,
its stderr in a file, handed over once it takes connections and stopped afterwards if it still runs."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testkit.local_server import free_port

BIN = Path(sys.executable).parent  # the venv's console scripts


@dataclass(frozen=True)
class HttpServer:
    process: subprocess.Popen
    url: str  # its MCP endpoint
    log: Path  # what it wrote to stderr


@contextlib.contextmanager
def http_server(args: list[str], log: Path, seconds: float = 60.0) -> Iterator[HttpServer]:
    """`reproduce ARGS --transport http --port P`, once it listens (RuntimeError with its stderr if it exits or
    does not listen within `seconds`)."""
    port = free_port()
    with open(log, "w") as stderr:
        process = subprocess.Popen([str(BIN / "reproduce"), *args, "--transport", "http", "--port", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        _wait_until_listening(process, port, log, seconds)
        yield HttpServer(process, f"http://127.0.0.1:{port}/mcp", log)
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
