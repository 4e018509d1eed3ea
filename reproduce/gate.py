"""What a sandboxed statement is refused for, said in one line: every door that runs SQL we did not write (the
runner under verify and score, `reproduce.baseline.engine()`) asks here first, and words the server's refusals
here too.

The gate is for the messages, not the safety: what the roles may do is decided by their privileges at the
server (gsqa_core/sandbox.py), which holds whatever gets past. Before the server sees it, a statement that is
not a query is refused by its first word (read as the server reads it: past white space, comments, nested
ones too, empty statements and parentheses): a model or agent reads "refused:
`SET` changes the session ..." instead of a driver's text. The server's own refusals (a privilege, read-only
mode, several statements in one) come back as "refused: ..." with what was refused.
"""

from __future__ import annotations

import re

import psycopg

QUERIES = ("SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW")
# What an agent's tool call may carry (reproduce serve): more is refused unread, and not kept.
MAX_SQL_CHARACTERS = 100_000  # the longest gold SQL has under 5,000
MAX_ANSWER_CHARACTERS = 10_000_000  # of an answer as JSON; the largest stored answer (6,885 rows) is about 2 MB
# What an SQLAlchemy session sends for a nested transaction; engine() lets them pass (they cannot end the
# transaction its session began; a ROLLBACK only ends it sooner).
SAVEPOINTS = ("SAVEPOINT", "RELEASE", "ROLLBACK")
_ONLY = f"only a query runs here ({', '.join(QUERIES)})"
_WHY = {
    **dict.fromkeys(("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE", "PREPARE"),
                    "controls the transaction, which the sandbox owns"),
    **dict.fromkeys(("SET", "RESET", "DISCARD"), "changes the session, whose settings the sandbox fixes"),
    "DO": "runs procedural code",
    **dict.fromkeys(("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "COPY"), "writes or moves data"),
    **dict.fromkeys(("CREATE", "ALTER", "DROP", "GRANT", "REVOKE", "REASSIGN", "COMMENT", "SECURITY", "REINDEX",
                     "CLUSTER", "VACUUM", "ANALYZE", "REFRESH", "IMPORT"), "changes the database"),
    **dict.fromkeys(("LISTEN", "NOTIFY", "UNLISTEN"), "signals other sessions"),
    "LOCK": "locks tables",
    **dict.fromkeys(("DECLARE", "FETCH", "MOVE", "CLOSE", "EXECUTE", "DEALLOCATE"), "keeps state in the session"),
    "CALL": "runs a procedure",
    **dict.fromkeys(("LOAD", "CHECKPOINT"), "acts on the server"),
}
_WORD = re.compile(r"[A-Za-z_]+")
_SEVERAL = "cannot insert multiple commands into a prepared statement"


def first_word(statement: str) -> str:
    """The statement's first keyword, upper case ("" if none), past what the server skips before it: white
    space, `--` comments, block comments (which nest in PostgreSQL), empty statements (`;`) and opening
    parentheses."""
    word = _WORD.match(statement, _lead_end(statement))
    return word.group(0).upper() if word else ""


def _lead_end(statement: str) -> int:
    at = 0
    while at < len(statement):
        if statement[at].isspace() or statement[at] in ";(":
            at += 1
        elif statement.startswith("--", at):
            newline = statement.find("\n", at)
            at = len(statement) if newline < 0 else newline + 1
        elif statement.startswith("/*", at):
            at = _comment_end(statement, at)
        else:
            break
    return at


def _comment_end(statement: str, at: int) -> int:
    """Where the block comment opened at `at` ends, nested ones included (the end of the text if never)."""
    depth = 0
    while at < len(statement):
        if statement.startswith("/*", at):
            depth, at = depth + 1, at + 2
        elif statement.startswith("*/", at):
            depth, at = depth - 1, at + 2
            if depth == 0:
                return at
        else:
            at += 1
    return at


def refusal(statement: str) -> str | None:
    """Why the statement is refused before it reaches the server (one line), or None: it is a query, or not a
    command at all, which the server answers itself (a syntax error keeps its own message)."""
    word = first_word(statement)
    if word not in _WHY:
        return None
    return f"refused: `{word}` {_WHY[word]}; {_ONLY}"


def server_refusal(error: psycopg.Error) -> str | None:
    """The server's refusal of a sandboxed statement in one line, or None for an error of the SQL itself."""
    primary = " ".join((error.diag.message_primary or "").split()) if error.diag else ""
    if error.sqlstate == "42601" and primary == _SEVERAL:
        return f"refused: several statements in one; {_ONLY}, one statement at a time"
    if error.sqlstate == "42501":  # insufficient_privilege
        return f"refused: {primary} (the sandbox role may only read the reference tables)"
    if error.sqlstate == "25006":  # read_only_sql_transaction
        return f"refused: {primary} (the sandbox only reads)"
    return None
