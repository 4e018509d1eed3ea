"""Who made an MCP call, and the model's usage it attached: read from the request the SDK hands a tool (its
Context), for the call's trajectory line (calls.Caller).

The client (`client`): `id` tells clients apart: the Mcp-Session-Id of a session-based HTTP client, else its TCP
peer (HOST:PORT; a stateless client of protocol 2026-07-28 has no session), `stdio:PID` for the one client of a
stdio server, `in-process` for an in-process client; with the transport, over HTTP the agent whose bearer token
the request carried (`agent`: access.py), and the name and version the client gave (clientInfo: a harness running
several agents should name each, e.g. "agent-3").

The usage (`usage`): the call's `_meta` may carry {"usage": {"input_tokens": N, "output_tokens": N, "cost": X}}
(the model's tokens and cost for the turn that made the call; any of the three). Tokens must be integers >= 0,
cost a number >= 0. A usage that is not so is not kept and the call goes on: its line says why
(`usage_ignored`), so that bad accounting never costs an agent its episode."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from reproduce.predictions.trajectory import is_amount
from reproduce.serve.access import agent_of
from reproduce.serve.calls import Caller

USAGE_KEYS = {"input_tokens": "an integer >= 0", "output_tokens": "an integer >= 0", "cost": "a number >= 0"}
SESSION_HEADER = "mcp-session-id"
MAX_GIVEN = 200  # characters of a client's name or version kept


def caller_of(context: Any, transport: str) -> Caller:
    """The Caller of the request in `context` (the SDK's tool Context) on a server of `transport`."""
    usage, ignored = usage_of((context.request_context.meta or {}).get("usage"))
    return Caller(client=client_of(context, transport), usage=usage, usage_ignored=ignored)


def client_of(context: Any, transport: str) -> dict[str, Any]:
    params = context.session.client_params
    info = params.client_info if params is not None else None
    agent = None
    if transport == "http":
        headers = context.headers or {}
        peer = getattr(context.request_context.request, "client", None)
        # The header names a session only where the SDK checked it (a session of this agent): on a request of a
        # protocol without sessions it is whatever the client wrote.
        session = headers.get(SESSION_HEADER) if context.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS else None
        ident = session or (f"{peer[0]}:{peer[1]}" if peer else "http")
        agent = agent_of(context.request_context.request)
    else:
        ident = f"stdio:{os.getpid()}" if transport == "stdio" else transport
    return {"id": ident, "transport": transport, **({"agent": agent} if agent else {}), **_given(info)}


def _given(info: Any) -> dict[str, Any]:
    """The name and version the client gave, each cut at MAX_GIVEN characters: they are on every call's line."""
    if info is None:
        return {}
    return {key: value if len(value) <= MAX_GIVEN else value[:MAX_GIVEN] + "…(cut)"
            for key, value in (("name", str(info.name)), ("version", str(info.version)))}


def usage_of(usage: Any) -> tuple[dict[str, Any] | None, str]:
    """(the usage kept, or None; why it was not kept, or "")."""
    if usage is None:
        return None, ""
    expected = "expected {" + ", ".join(f'"{key}": {kind}' for key, kind in USAGE_KEYS.items()) + "}"
    if not isinstance(usage, Mapping):
        return None, f"_meta.usage is not an object ({expected})"
    if unknown := sorted(set(usage) - set(USAGE_KEYS)):
        return None, f"_meta.usage has {', '.join(map(repr, unknown))} ({expected})"
    for key, value in usage.items():
        if not _fits(key, value):
            return None, f"_meta.usage.{key} is {value!r:.40} ({expected})"
    return (dict(usage), "") if usage else (None, "")


def _fits(key: str, value: Any) -> bool:
    return is_amount(value) and (key == "cost" or isinstance(value, int))
