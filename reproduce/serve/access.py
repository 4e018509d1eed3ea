"""Who may call `reproduce serve --transport http`: every request carries `Authorization: Bearer TOKEN`, one of
the server's tokens, or gets HTTP 401. Anyone who can reach a port can otherwise call its tools, and on a shared
machine every user reaches 127.0.0.1: without tokens another user's agent could answer this run's questions or
spend its budgets. stdio needs none (its one client is the process that started the server).

`--tokens FILE` names the agents: one `NAME TOKEN` per line (`#` comments), each token at least
MIN_TOKEN_CHARACTERS of RFC 6750's token characters (`secrets.token_urlsafe(32)` makes one), the file a regular
file of the server's user, readable by it only (as ssh keys). Each call's line in the trajectory then names its
agent (`client.agent`), and where there are several, an agent's sessions share one share of the pool and of the
sandbox containers (tools.py), so that opening new sessions gives an agent no more. Without --tokens the server
makes one token for the agent `agent` and writes it, in the same form, to a new file only its user may read
(its start line names the file, not the token: stderr often goes to a log others read), removed when it stops.

The check is the MCP SDK's bearer authentication (its TokenVerifier and AuthSettings); the SDK also binds each
session to the agent that opened it, so another agent's token cannot continue it. There is no OAuth flow: a
client sends its token as a header. What this does not bound: sessions of the handshake-era protocol (before
2026-07-28) count against the SDK's limit for the whole server (10,000, each kept 30 minutes after its last
request), so an agent opening them in a loop can keep others' new sessions out; sessionless clients (the SDK's
own, of 2026-07-28) are not affected. Untrusted models get a server of their own (docs/SANDBOX.md).
"""

from __future__ import annotations

import atexit
import contextlib
import hmac
import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from gsqa_core.errors import GsqaError

MIN_TOKEN_CHARACTERS = 32
MAX_FILE_BYTES = 1 << 20
TOKEN = re.compile(r"[A-Za-z0-9._~+/-]+=*")  # RFC 6750's b64token: what an HTTP client sends as it is
DEFAULT_AGENT = "agent"  # the one agent of a server started without --tokens


def read_tokens(path: Path) -> dict[str, str]:
    """{token: agent name} of a --tokens file; GsqaError in one line naming the file (and line) otherwise."""
    text = _private_text(path)
    tokens: dict[str, str] = {}
    names: set[str] = set()  # tokens' values, as a set: a file of many lines is read in linear time
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2 or len(fields[1]) < MIN_TOKEN_CHARACTERS or not TOKEN.fullmatch(fields[1]):
            raise GsqaError(f"--tokens {path}:{number}: expected NAME TOKEN (an agent's name, then its token: at "
                            f"least {MIN_TOKEN_CHARACTERS} of A-Z a-z 0-9 - . _ ~ + /, e.g. secrets.token_urlsafe(32))")
        name, token = fields
        if token in tokens or name in names:
            raise GsqaError(f"--tokens {path}:{number}: {'the token' if token in tokens else name} is given twice")
        tokens[token] = name
        names.add(name)
    if not tokens:
        raise GsqaError(f"--tokens {path}: no NAME TOKEN line")
    return tokens


def _private_text(path: Path) -> str:
    """The text of a regular file of this user that no other may read (checked on the file opened: a rename
    between a check and the read changes nothing)."""
    try:
        with open(path, "rb", opener=lambda name, flags: os.open(name, flags | os.O_NONBLOCK)) as opened:
            found = os.fstat(opened.fileno())
            if not stat.S_ISREG(found.st_mode):
                raise GsqaError(f"--tokens {path}: not a regular file")
            if found.st_uid != os.geteuid():
                raise GsqaError(f"--tokens {path}: owned by uid {found.st_uid}, not by the server's user")
            if found.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise GsqaError(f"--tokens {path}: other users may read it (mode {stat.filemode(found.st_mode)}): "
                                "chmod 600 it")
            content = opened.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise GsqaError(f"--tokens {path}: cannot be read ({error.strerror})") from None
    if len(content) > MAX_FILE_BYTES:
        raise GsqaError(f"--tokens {path}: larger than {MAX_FILE_BYTES:,} bytes")
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        raise GsqaError(f"--tokens {path}: not UTF-8 text") from None


def new_token() -> tuple[dict[str, str], Path]:
    """One fresh token for DEFAULT_AGENT, and the new file (its user's only, removed at exit) that holds it as a
    --tokens file would."""
    token = secrets.token_urlsafe(32)
    descriptor, name = tempfile.mkstemp(prefix="gsqa-serve-", suffix=".tokens")  # mode 0600
    with os.fdopen(descriptor, "w") as written:
        written.write(f"{DEFAULT_AGENT} {token}\n")
    atexit.register(_remove, name)
    return {token: DEFAULT_AGENT}, Path(name)


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name)


class Tokens:
    """The SDK's TokenVerifier over a fixed set of tokens: the agent's name as the token's client_id."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        # Compared with each (in constant time), so that the time taken tells nothing of a token.
        found = [name for known, name in self.tokens.items() if hmac.compare_digest(known.encode(), token.encode())]
        return AccessToken(token=token, client_id=found[0], scopes=[]) if found else None


def auth_settings(url: str) -> AuthSettings:
    """The SDK's settings for tokens this server (at `url`) hands out itself: no resource URL, so that the SDK
    advertises no OAuth metadata (there is no OAuth flow to discover)."""
    return AuthSettings(issuer_url=url.removesuffix("/mcp"), resource_server_url=None)


def agent_of(request: object) -> str | None:
    """The agent whose token an HTTP request carried (the SDK's authentication put it in the request's scope)."""
    user = getattr(request, "scope", {}).get("user")
    token = getattr(user, "access_token", None)
    return token.client_id if token is not None else None
