"""The agent tools (reproduce/serve/tools.py) over the Model Context Protocol, with the official Python SDK's
MCPServer: the same methods registered as the tools `question`, `schema`, `query` (--tools sql), `run_python`
(--tools python) and `submit_answer`
(the SDK runs each call in a worker thread, so a slow query holds no other client), each reply one compact JSON
text (replies.reply_text, at most gate.MAX_REPLY_BYTES for a query), a refusal turned into the tool's error
result (is_error, the one line as its text), the open question ids as the resource gsqa://questions, each
table's schema as gsqa://schema/{name}, and the agent instructions as the prompt gsqa_agent. Each tool call
reads its client and the usage in its `_meta` from the SDK's Context (callers.py) for its trajectory line.
Transports: stdio, or streamable HTTP at http://HOST:PORT/mcp for many agents at once, each request with a
bearer token of the server's agents (access.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations
except ModuleNotFoundError as missing:
    raise ModuleNotFoundError(f"reproduce serve needs {missing.name}: pip install 'gsqa-refdb[baseline]'",
                              name=missing.name) from None

from gsqa_core.errors import GsqaError
from reproduce.serve import access as agents
from reproduce.serve import python_sandbox
from reproduce.serve.callers import caller_of
from reproduce.serve.calls import CALLER, ToolRefused
from reproduce.serve.prompts import agent_instructions
from reproduce.serve.replies import reply_text
from reproduce.serve.tools import ServeRequest, Tools, open_tools

READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
# run_python reads the data and writes only in its own scratch folder; its output may differ between calls.
RUNS = ToolAnnotations(read_only_hint=True, idempotent_hint=False, open_world_hint=False)
# submit_answer changes no data, but it records the answer and ends the episode: not read-only, not idempotent.
RECORDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                          open_world_hint=False)


def mcp_server(tools: Tools, name: str = "gsqa-refdb", transport: str = "in-process",
               access: tuple[str, dict[str, str]] | None = None) -> MCPServer:
    """An MCP server whose tools are `tools`' methods, served over `transport` (what its call lines say of
    their clients); with `access` (its URL, {token: agent}), to the bearers of those tokens only."""
    served = tools.request.served
    auth = {"auth": agents.auth_settings(access[0]), "token_verifier": agents.Tokens(access[1])} if access else {}
    server = MCPServer(name, instructions=agent_instructions(served), log_level="WARNING", **auth)
    kinds = [(tools.query, READS)] * ("sql" in served) + [(tools.run_python, RUNS)] * ("python" in served)
    for method, hints in ((tools.question, READS), (tools.schema, READS), *kinds, (tools.submit_answer, RECORDS)):
        server.add_tool(_refusals_as_tool_errors(method, transport), name=method.__name__, annotations=hints,
                        description=method.__doc__, structured_output=False)
    server.resource("gsqa://questions", name="questions", mime_type="application/json",
                    description="The ids of the questions whose episodes are still open.")(
        lambda: json.dumps(tools.question_ids()))
    server.resource("gsqa://schema/{name}", name="table", mime_type="text/plain",
                    description="One reference table as the schema tool describes it (pois, roads, parks, lakes, "
                                "regions, dem_us).")(_refusals_as_tool_errors(tools.table_text))
    server.prompt(name="gsqa_agent", description="The benchmark's agent instructions: the tools, the budget, the "
                  "answer's form; with question_id, the question and the answer it expects.")(
        _refusals_as_tool_errors(tools.instructions))
    return server


def _refusals_as_tool_errors(method: Callable[..., Any], transport: str | None = None) -> Callable[..., Any]:
    """The method, its ToolRefused raised as the SDK's ToolError: an error result with the line as its text,
    logged without a traceback. A tool's (`transport` given) takes the SDK's Context too, and runs with its
    caller (calls.CALLER) set."""
    @functools.wraps(method)
    def call(*args: Any, ctx: Context | None = None, **kwargs: Any) -> str:
        token = CALLER.set(caller_of(ctx, transport)) if ctx is not None else None
        try:
            return reply_text(method(*args, **kwargs))
        except ToolRefused as refused:
            raise ToolError(str(refused)) from None
        finally:
            if token is not None:
                CALLER.reset(token)
    # Sent once, as compact text (no structured content: mcp_server): a dict would go as pretty-printed text
    # and as structured content besides.
    signature = inspect.signature(method)
    if transport is not None:  # the SDK finds the Context parameter by its annotation, and leaves it out of the schema
        context = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context)
        signature = signature.replace(parameters=[*signature.parameters.values(), context])
        call.__annotations__ = {**method.__annotations__, "ctx": Context}
    call.__signature__ = signature.replace(return_annotation=str)
    return call


def endpoint(host: str, port: int) -> str:
    """Where --transport http serves MCP."""
    return f"http://{host}:{port}/mcp"


def refuse_taken_address(host: str, port: int) -> None:
    """GsqaError, one line, when --transport http could not listen at host:port (in use, or no such address):
    said before anything starts, not by the HTTP server after the tools are open."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as error:
        raise GsqaError(f"--host {host} --port {port}: cannot listen there ({os.strerror(error.errno)}); give another "
                        "--port") from None


def start(request: ServeRequest, transport: str, host: str, port: int, kept_by: str | None,
          tokens: Path | None = None) -> tuple[Tools, dict[str, str] | None]:
    """The tools of `reproduce serve` and the tokens of its agents over HTTP (--tokens, else a new one in a new
    file), opened (GsqaError when nothing can start), and its start lines on stderr: a warning when nothing
    keeps the calls, what is served where, and over HTTP which file holds the tokens."""
    if transport != "http":
        if tokens is not None:
            raise GsqaError("--tokens is for --transport http (a stdio server's one client started it)")
        return _opened(request, "stdio", kept_by), None
    refuse_taken_address(host, port)
    known = agents.read_tokens(tokens) if tokens is not None else None
    tools = _opened(dataclasses.replace(request, agents=len(known) if known else 1), endpoint(host, port), kept_by)
    if known is None:  # made once the tools are open: a start that fails leaves no file
        known, tokens = agents.new_token()
    print(f"reproduce serve: each request must carry \"Authorization: Bearer TOKEN\" with a token of {tokens} "
          "(NAME TOKEN lines)", file=sys.stderr, flush=True)
    return tools, known


def _opened(request: ServeRequest, where: str, kept_by: str | None) -> Tools:
    tools = open_tools(request)
    if request.trajectory is None and kept_by is None:
        print("warning: no --trajectory: the calls are not kept, so this run cannot be scored or continued",
              file=sys.stderr)
    kept = (f", calls kept in {request.trajectory}" if request.trajectory else
            f", calls kept by {kept_by}" if kept_by else "")
    print(f"reproduce serve: {len(tools.question_ids()):,} of {len(tools.records):,} questions open, on "
          f"{where}{kept}", file=sys.stderr, flush=True)
    return tools


def serve(tools: Tools, transport: str, host: str, port: int, tokens: dict[str, str] | None = None) -> None:
    """Serve until the client ends stdio, or until Ctrl-C or SIGTERM: the usual ways to stop a server, not
    failures. Either signal first removes the sandbox containers, so that the calls running in them end at
    once; then the HTTP server finishes the calls under way, and re-raises the signal it caught, which ends
    here; over stdio the tools are closed and the process ends (the SDK's read of stdin, under way in a
    thread, cannot be cancelled: it would hold the process until the client wrote again)."""
    access = (endpoint(host, port), tokens) if tokens is not None else None
    server = mcp_server(tools, transport=transport, access=access)
    signal.signal(signal.SIGTERM, _as_interrupt)
    with _stopped_by_signals(tools if transport == "stdio" else None), contextlib.suppress(KeyboardInterrupt):
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)


def _as_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


STOPPING_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def _stopped_by_signals(ends: Tools | None) -> Iterator[None]:
    """A thread that hears SIGINT and SIGTERM whichever handler runs for them (uvicorn installs its own) and
    in whichever thread the kernel delivers them (the wakeup fd: a handler runs only in the main thread, and
    only when it next runs Python): it removes the sandbox containers at once, and closes `ends` and ends the
    process if given."""
    heard, told = socket.socketpair()
    told.setblocking(False)
    before = signal.set_wakeup_fd(told.fileno(), warn_on_full_buffer=False)

    def listen() -> None:
        while received := heard.recv(64):
            if STOPPING_SIGNALS & set(received):
                python_sandbox.abort_all()
                if ends is not None:
                    ends.close()
                    os._exit(0)

    listener = threading.Thread(target=listen, name="stopping-signals", daemon=True)
    listener.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(before)
        told.close()
        listener.join()
        heard.close()
