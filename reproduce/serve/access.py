"""Who may call `reproduce serve --transport http`: every request carries `Authorization: Bearer TOKEN`, one of
the server's tokens, or gets HTTP 401. Anyone who can reach a port can otherwise call its tools, and on a shared
machine every user reaches 127.0.0.1: without tokens another user's agent could answer this run's questions or
spend its budgets. stdio needs none (its one client is the process that started the server).

`--tokens FILE` names the agents: one `NAME TOKEN` per line (`#` comments), each token at least
MIN_TOKEN_CHARACTERS long, the file readable by its owner only (as ssh keys). Each call's line in the trajectory
then names its agent (`client.agent`), and an agent's sessions share one share of the pool and of the sandbox
containers (tools.py), so that opening new sessions gives an agent no more. Without --tokens the server makes
one token for the agent `agent` and says it in its start line on stderr, which only the user who started it
reads.

The check is the MCP SDK's bearer authentication (its TokenVerifier and AuthSettings); the SDK also binds each
session to the agent that opened it, so another agent's token cannot continue it. The SDK's OAuth metadata
names this server as the issuer of its tokens: there is no OAuth flow; a client sends its token as a header.
"""

from __future__ import annotations

import hmac
import secrets
import stat
from pathlib import Path

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from gsqa_core.errors import GsqaError

MIN_TOKEN_CHARACTERS = 32
DEFAULT_AGENT = "agent"  # the one agent of a server started without --tokens


def read_tokens(path: Path) -> dict[str, str]:
    """{token: agent name} of a --tokens file; GsqaError in one line naming the file (and line) otherwise."""
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise GsqaError(f"--tokens {path}: cannot be read ({getattr(error, 'strerror', None) or error})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise GsqaError(f"--tokens {path}: other users may read it (mode {stat.filemode(mode)}): chmod 600 it")
    tokens: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 2 or len(fields[1]) < MIN_TOKEN_CHARACTERS:
            raise GsqaError(f"--tokens {path}:{number}: expected NAME TOKEN (an agent's name, then its token of at "
                            f"least {MIN_TOKEN_CHARACTERS} characters)")
        name, token = fields
        if token in tokens or name in tokens.values():
            raise GsqaError(f"--tokens {path}:{number}: {'the token' if token in tokens else name} is given twice")
        tokens[token] = name
    if not tokens:
        raise GsqaError(f"--tokens {path}: no NAME TOKEN line")
    return tokens


def new_token() -> dict[str, str]:
    """One fresh token for DEFAULT_AGENT."""
    return {secrets.token_urlsafe(32): DEFAULT_AGENT}


class Tokens:
    """The SDK's TokenVerifier over a fixed set of tokens: the agent's name as the token's client_id."""

    def __init__(self, tokens: dict[str, str]) -> None:
        self.tokens = tokens

    async def verify_token(self, token: str) -> AccessToken | None:
        # Compared with each (in constant time), so that the time taken tells nothing of a token.
        found = [name for known, name in self.tokens.items() if hmac.compare_digest(known.encode(), token.encode())]
        return AccessToken(token=token, client_id=found[0], scopes=[]) if found else None


def auth_settings(url: str) -> AuthSettings:
    """The SDK's settings for tokens this server (at `url`) hands out itself."""
    return AuthSettings(issuer_url=url.removesuffix("/mcp"), resource_server_url=url, validate_token_resource=False)


def agent_of(request: object) -> str | None:
    """The agent whose token an HTTP request carried (the SDK's authentication put it in the request's scope)."""
    user = getattr(request, "scope", {}).get("user")
    token = getattr(user, "access_token", None)
    return token.client_id if token is not None else None
