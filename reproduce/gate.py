"""What a sandboxed statement is refused for, said in one line: every door that runs SQL we did not write (the
runner under verify, score and serve, `reproduce.baseline.engine()`) asks here first, and words the server's
refusals here too (each reason's code and line: reproduce/refusals.py).

The statement is read by PostgreSQL 15's own parser (libpg_query, through pglast), so the gate sees what the
server will see: where a `--` comment ends (a carriage return ends it too), nested block comments, dollar
quotes, `U&` and `E` strings, empty statements, the British `ANALYSE`. It lets through exactly one statement
that only reads: a SELECT (VALUES and TABLE are SELECTs, and WITH may begin one), without `INTO`, row locks
or a data-modifying WITH anywhere in it. Not SHOW or EXPLAIN: their text cannot be capped on the server as a
SELECT's rows are (reproduce/runner.py, `capped`), and a setting or a plan can be made of any size (a
constant folded into a plan's filter is printed whole). A statement the parser cannot read goes to the server, which
answers with its own syntax error and position (same grammar: nothing of it runs). A NUL character is
refused, since the server would stop reading at it.

The gate is for the messages, not the safety: what the roles may do is decided by their privileges and by the
read-only transactions the doors open (gsqa_core/sandbox.py, docs/SANDBOX.md), which hold whatever gets past.
"""

from __future__ import annotations

import concurrent.futures
import re
import threading
from dataclasses import dataclass

import psycopg
from pglast import parser

from reproduce.refusals import refused

# How a query may begin, as the refusals say it: one SELECT (a VALUES, TABLE or WITH is one too).
QUERIES = ("SELECT", "WITH", "VALUES", "TABLE")
# What an agent's tool call may carry (reproduce serve): more is refused unread, and not kept.
MAX_SQL_CHARACTERS = 100_000  # the longest gold SQL through serve's tool; score and verify take any length
# What the gate reads at most at any door: the longest gold SQL has 421,331 characters; more costs the parser
# about 90 bytes of memory a character.
MAX_READ_CHARACTERS = 1_000_000
# Characters read on the caller's own stack: at most about 800 kB of it (80 bytes a character at the deepest),
# within any stack the caller's thread may have been given (glibc gives 2 MB under an unlimited `ulimit -s`);
# longer SQL takes a hop to the large stack's thread.
_ON_THE_CALLERS_STACK = 10_000
_DEEP_STACK_BYTES = 512 * 1024**2  # address space, used as deep as the nesting goes: 1,000,000 characters' worth
# The last RawStmt's own fields, which end libpg_query's JSON tree: where the statement begins and how long it
# is, in bytes of UTF-8 (stmt_len absent: to the end).
_STATEMENT_SPAN = re.compile(r'(?:,"stmt_location":(\d+))?(?:,"stmt_len":(\d+))?}\]}$')
# psycopg's placeholders, which it sends as $n, and its escaped %.
_PLACEHOLDER = re.compile(r"%%|%(\([^)]*\))?[sbt]")
MAX_ANSWER_CHARACTERS = 10_000_000  # of an answer as JSON; the largest stored answer (6,885 rows) is about 2 MB
# What a tool's reply may be, as compact JSON: an MCP client reads it inside a JSON-RPC message (the official
# SDK's streamable HTTP client refuses an event past 1 MiB), where escaping can nearly double it.
MAX_REPLY_BYTES = 400_000
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
    "SHOW": "prints a setting, which can be of any size; read it with current_setting('name') in a SELECT",
    "EXPLAIN": "prints a plan, which can be of any size (a constant of the query is printed whole in it)",
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


@dataclass(frozen=True)
class Reading:
    """A statement as the server will read it: why it is refused (one line), or None; whether it is a SELECT
    (which can be a subquery: `reads_rows`) with its text as the parser delimits it (no trailing `;` or
    comment: `body`); whether it is a nested transaction's own statement (`savepoint`: refused, but
    engine() lets a framework's savepoints through)."""

    refusal: str | None
    reads_rows: bool = False
    body: str = ""
    savepoint: bool = False
    around: tuple[str, str] = ("", "")  # what stands before and after the statement: `;`, white space, comments

    def body_of(self, sent: str) -> str:
        """The statement's text in `sent`, the form it was read from (a psycopg query's own placeholders):
        `sent` without what stands around the statement, where it stands there as read."""
        head, tail = self.around
        if sent.startswith(head) and sent.endswith(tail) and len(head) + len(tail) <= len(sent):
            return sent[len(head):len(sent) - len(tail)]
        return sent


def read(statement: str, placeholders: bool = False) -> Reading:
    """Read one statement as the server will. With `placeholders`, the text is a psycopg query with parameters
    (`%(name)s`, `%s`, `%%`), read as psycopg will send it."""
    if len(statement) > MAX_READ_CHARACTERS:
        return Reading(refused("too_long_to_read", size=len(statement), limit=MAX_READ_CHARACTERS, only=_ONLY))
    if placeholders:
        statement = _PLACEHOLDER.sub(lambda found: "%" if found.group(0) == "%%" else "$1", statement)
    if "\0" in statement:
        return Reading(refused("nul_byte", only=_ONLY))
    try:
        tree = _parse(statement)
    except parser.ParseError:
        return Reading(None)  # the server, with the same grammar, answers with its syntax error and position
    except UnicodeEncodeError:
        return Reading(refused("not_unicode", only=_ONLY))
    nodes = _statement_nodes(tree)
    why = _refusal(statement, tree, nodes)
    if why or nodes != ["SelectStmt"]:
        savepoint = nodes == ["TransactionStmt"] and any(f'"kind":"{kind}"' in tree for kind in SAVEPOINT_KINDS)
        return Reading(why, savepoint=savepoint)
    begin, end = _span(statement, tree)
    return Reading(None, reads_rows=True, body=statement[begin:end], around=(statement[:begin], statement[end:]))


def refusal(statement: str) -> str | None:
    """Why the statement is refused before it reaches the server (one line), or None: it is one statement that
    only reads, or one the parser cannot read, which the server answers with its own syntax error."""
    return read(statement).refusal


def _refusal(statement: str, tree: str, nodes: list[str]) -> str | None:
    if not nodes:
        return refused("no_statement", only=_ONLY)
    if len(nodes) > 1:
        return refused("several_statements", only=_ONLY)
    if nodes[0] != "SelectStmt":
        word = _WRITES.get(nodes[0]) or first_keyword(statement)  # `WITH x AS (...) DELETE` is a DELETE
        return refused("not_a_query", word=word, why=_WHY.get(word, "is not a query"), only=_ONLY)
    return next((refused("query_writes", why=why, only=_ONLY) for key, why in _INSIDE if key in tree), None)


def _parse(statement: str) -> str:
    """libpg_query's JSON tree. Its parser and writer recurse once per level of nesting on the C stack, which a
    long expression (`1+1+...`, 65,000 levels) overflows in a thread of the usual 8 MB: long statements are
    read in a thread whose stack holds MAX_READ_CHARACTERS' worth of levels."""
    if len(statement) < _ON_THE_CALLERS_STACK:
        return parser.parse_sql_json(statement)
    return _deep_reader().submit(parser.parse_sql_json, statement).result()


_DEEP_READER: list[concurrent.futures.ThreadPoolExecutor] = []
_DEEP_READER_MADE = threading.Lock()


def _deep_reader() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread with the large stack, made on first use (under a lock: threading.stack_size is the
    process's, and must be given back before any other thread starts)."""
    with _DEEP_READER_MADE:
        if not _DEEP_READER:
            previous = threading.stack_size(_DEEP_STACK_BYTES)
            try:
                reader = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="gsqa-gate")
                reader.submit(lambda: None).result()  # the thread starts now, with the large stack
            finally:
                threading.stack_size(previous)
            _DEEP_READER.append(reader)
        return _DEEP_READER[0]


def _statement_nodes(tree: str) -> list[str]:
    """The node name of each statement of a parse tree in libpg_query's JSON: {"version":N,"stmts":[{"stmt":
    {"SelectStmt":{...}},"stmt_len":N},...]}. Only a RawStmt has the key "stmt"."""
    nodes, at = [], 0
    while (at := tree.find('{"stmt":{"', at)) >= 0:
        at += len('{"stmt":{"')
        nodes.append(tree[at:tree.index('"', at)])
    return nodes


def _span(statement: str, tree: str) -> tuple[int, int]:
    """Where the one statement begins and ends in `statement` (characters), as the parser delimits it: without
    the empty statements before it, nor a `;` and what follows it."""
    found = _STATEMENT_SPAN.search(tree, len(tree) - 80)
    encoded = statement.encode()
    begin = int(found.group(1) or 0)
    end = begin + int(found.group(2)) if found.group(2) else len(encoded)
    return len(encoded[:begin].decode()), len(encoded[:end].decode())


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
    if isinstance(error, psycopg.ProgrammingError) and "didn't produce a result" in str(error):  # the driver's
        return refused("no_rows", only=_ONLY)
    primary = " ".join((error.diag.message_primary or "").split()) if error.diag else ""
    if error.sqlstate == "42601" and primary == _SEVERAL:
        return refused("several_statements", only=_ONLY)
    if error.sqlstate == "42501":  # insufficient_privilege
        return refused("privilege", message=primary)
    if error.sqlstate == "25006":  # read_only_sql_transaction
        return refused("read_only", message=primary)
    if error.sqlstate == "53200":  # out_of_memory: past the memory a backend of the server may take
        return refused("memory", message=primary)
    return None
