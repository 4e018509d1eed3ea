"""What a sandboxed statement is refused for, said in one line: every door that runs SQL we did not write (the
runner under verify, score and serve, `reproduce.baseline.engine()`) asks here first, and words the server's
refusals here too.

The statement is read by PostgreSQL 15's own parser (libpg_query, through pglast), so the gate sees what the
server will see: where a `--` comment ends (a carriage return ends it too), nested block comments, dollar
quotes, `U&` and `E` strings, empty statements, the British `ANALYSE`. It lets through exactly one statement
that only reads: a SELECT (VALUES and TABLE are SELECTs), SHOW, or EXPLAIN of a SELECT; without `INTO`, row
locks or a data-modifying WITH anywhere in it. A statement the parser cannot read goes to the server, which
answers with its own syntax error and position (same grammar: nothing of it runs). A NUL character is
refused, since the server would stop reading at it.

The gate is for the messages, not the safety: what the roles may do is decided by their privileges and by the
read-only transactions the doors open (gsqa_core/sandbox.py, docs/SANDBOX.md), which hold whatever gets past.
"""

from __future__ import annotations

import psycopg
from pglast import parser

# The statement kinds that only read (the parser's node names), and what the refusals call them.
QUERY_NODES = {"SelectStmt": "SELECT", "VariableShowStmt": "SHOW", "ExplainStmt": "EXPLAIN"}
QUERIES = ("SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW")
# What an agent's tool call may carry (reproduce serve): more is refused unread, and not kept.
MAX_SQL_CHARACTERS = 100_000  # the longest gold SQL through serve's tool; score and verify take any length
MAX_ANSWER_CHARACTERS = 10_000_000  # of an answer as JSON; the largest stored answer (6,885 rows) is about 2 MB
# What an SQLAlchemy session sends for a nested transaction (the parser's TransactionStmt kinds); engine() lets
# them pass: they cannot end the transaction its session began, a ROLLBACK TO only undoes part of it.
SAVEPOINT_KINDS = ("TRANS_STMT_SAVEPOINT", "TRANS_STMT_RELEASE", "TRANS_STMT_ROLLBACK_TO")
_ONLY = f"only a query runs here ({', '.join(QUERIES)})"
_WHY = {
    **dict.fromkeys(("BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE", "PREPARE"),
                    "controls the transaction, which the sandbox owns"),
    **dict.fromkeys(("SET", "RESET", "DISCARD"), "changes the session, whose settings the sandbox fixes"),
    "DO": "runs procedural code",
    **dict.fromkeys(("INSERT", "UPDATE", "DELETE", "MERGE", "TRUNCATE", "COPY"), "writes or moves data"),
    **dict.fromkeys(("CREATE", "ALTER", "DROP", "GRANT", "REVOKE", "REASSIGN", "COMMENT", "SECURITY", "REINDEX",
                     "CLUSTER", "VACUUM", "ANALYZE", "ANALYSE", "REFRESH", "IMPORT"), "changes the database"),
    **dict.fromkeys(("LISTEN", "NOTIFY", "UNLISTEN"), "signals other sessions"),
    "LOCK": "locks tables",
    **dict.fromkeys(("DECLARE", "FETCH", "MOVE", "CLOSE", "EXECUTE", "DEALLOCATE"), "keeps state in the session"),
    "CALL": "runs a procedure",
    **dict.fromkeys(("LOAD", "CHECKPOINT"), "acts on the server"),
}
_WRITES = {"InsertStmt": "INSERT", "UpdateStmt": "UPDATE", "DeleteStmt": "DELETE", "MergeStmt": "MERGE"}
# Inside a query the parser read, what makes it more than a read: (a key of its JSON tree, why). A key in the
# JSON text appears after `{` or `,` with bare quotes, which a string value of the SQL cannot produce (its
# quotes are escaped), so a substring test is exact.
_INSIDE = (
    *((f'{{"{node}":', f"`{word}` inside the query writes data") for node, word in _WRITES.items()),
    ('"intoClause":', "`SELECT ... INTO` creates a table"),
    ('"lockingClause":', "`FOR UPDATE` / `FOR SHARE` locks rows"),
)
_SEVERAL = "cannot insert multiple commands into a prepared statement"


def refusal(statement: str) -> str | None:
    """Why the statement is refused before it reaches the server (one line), or None: it is one statement that
    only reads, or one the parser cannot read, which the server answers with its own syntax error."""
    if "\0" in statement:
        return f"refused: the SQL holds a NUL character, where the server would stop reading it; {_ONLY}"
    try:
        tree = parser.parse_sql_json(statement)
    except parser.ParseError:
        return None
    nodes = _statement_nodes(tree)
    if not nodes:
        return f"refused: no statement (only white space or comments); {_ONLY}"
    if len(nodes) > 1:
        return f"refused: several statements in one; {_ONLY}, one statement at a time"
    if nodes[0] not in QUERY_NODES:
        word = _WRITES.get(nodes[0]) or first_keyword(statement)  # `WITH x AS (...) DELETE` is a DELETE
        return f"refused: `{word}` {_WHY.get(word, 'is not a query')}; {_ONLY}"
    if nodes[0] == "ExplainStmt" and not tree.startswith('{"ExplainStmt":{"query":{"SelectStmt":', _body(tree)):
        return f"refused: `EXPLAIN` runs or plans only a query here; {_ONLY}"
    return next((f"refused: {why}; {_ONLY}" for key, why in _INSIDE if key in tree), None)


def reads_rows(statement: str) -> bool:
    """Whether the statement is one SELECT (VALUES and TABLE too), which can be a subquery."""
    try:
        return _statement_nodes(parser.parse_sql_json(statement)) == ["SelectStmt"]
    except parser.ParseError:
        return False


def is_savepoint(statement: str) -> bool:
    """Whether the statement is one SAVEPOINT, RELEASE or ROLLBACK TO (a nested transaction's own)."""
    try:
        tree = parser.parse_sql_json(statement)
    except parser.ParseError:
        return False
    return _statement_nodes(tree) == ["TransactionStmt"] and any(
        f'"kind":"{kind}"' in tree for kind in SAVEPOINT_KINDS)


def _statement_nodes(tree: str) -> list[str]:
    """The node name of each statement of a parse tree in libpg_query's JSON: {"version":N,"stmts":[{"stmt":
    {"SelectStmt":{...}},"stmt_len":N},...]}. Only a RawStmt has the key "stmt"."""
    nodes, at = [], 0
    while (at := tree.find('{"stmt":{"', at)) >= 0:
        at += len('{"stmt":{"')
        nodes.append(tree[at:tree.index('"', at)])
    return nodes


def _body(tree: str) -> int:
    """Where the first statement's node begins in the JSON tree."""
    return tree.index('{"stmt":') + len('{"stmt":')


def first_keyword(statement: str) -> str:
    """The statement's first keyword as the server's lexer reads it (past white space, comments, parentheses
    and empty statements), upper case; "" if it has none."""
    try:
        tokens = parser.scan(statement)
    except parser.ParseError:
        return ""
    word = next((token.name for token in tokens if token.kind != "NO_KEYWORD"), "")
    return word.removesuffix("_P")  # the grammar's names of keywords that clash with C's (DELETE_P)


def server_refusal(error: psycopg.Error) -> str | None:
    """The server's refusal of a sandboxed statement in one line, or None for an error of the SQL itself."""
    if isinstance(error, psycopg.ProgrammingError) and not error.sqlstate:  # the driver's, for no rows at all
        return f"refused: the statement returns no rows; {_ONLY}"
    primary = " ".join((error.diag.message_primary or "").split()) if error.diag else ""
    if error.sqlstate == "42601" and primary == _SEVERAL:
        return f"refused: several statements in one; {_ONLY}, one statement at a time"
    if error.sqlstate == "42501":  # insufficient_privilege
        return f"refused: {primary} (the sandbox role may only read the reference tables)"
    if error.sqlstate == "25006":  # read_only_sql_transaction
        return f"refused: {primary} (the sandbox only reads)"
    if error.sqlstate == "53200":  # out_of_memory: past the memory a backend of the server may take
        return f"refused: {primary} (a statement may use only a bounded share of the server's memory)"
    return None
