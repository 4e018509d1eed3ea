"""reproduce/gate.py: which statements are refused before they reach the server, and the one line each gets; that
the gate reads a statement as the server does (compared with the real server on generated statements); that
every gold SQL of the benchmarks, and a call of every PostGIS function, passes. The server's refusals, worded,
go through every door in tests/test_sandbox_doors.py."""

from __future__ import annotations

import json
import lzma
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from conftest import DATA
from pglast import parser
from psycopg import pq
from psycopg.conninfo import make_conninfo

from reproduce.gate import MAX_READ_CHARACTERS, _statement_nodes, first_keyword, read, refusal

ONLY_A_QUERY = "only a query runs here (SELECT, WITH, VALUES, TABLE)"
NO_STATEMENT = f"refused: no statement (only white space or comments); {ONLY_A_QUERY}"
SEVERAL = f"refused: several statements in one; {ONLY_A_QUERY}, one statement at a time"
NUL = f"refused: the SQL holds a NUL character, where the server would stop reading it; {ONLY_A_QUERY}"
EXPLAIN = "`EXPLAIN` prints a plan, which can be of any size (a constant of the query is printed whole in it)"
SHOW = "`SHOW` prints a setting, which can be of any size; read it with current_setting('name') in a SELECT"
GOLD_SQL = DATA / "gold_sql" / "gold_sql.jsonl.xz"


def refused(why: str) -> str:
    return f"refused: {why}; {ONLY_A_QUERY}"


@pytest.mark.parametrize("statement, word", [
    ("select 1", "SELECT"),
    ("  -- why\n  /* a block\n comment */ ((SELECT 1))", "SELECT"),
    ("with x as (select 1) select * from x", "WITH"),
    ("\n\tdo $$ begin end $$", "DO"),
    ("", ""),
    ("-- only a comment", ""),
    ("42", ""),
    ("; ;NOTIFY gsqa", "NOTIFY"),
    ("/* /* nested */ SELECT */ NOTIFY gsqa", "NOTIFY"),
    ("-- a comment\n;(/* x */ select 1)", "SELECT"),
    ("/* never closed SELECT", ""),
    ("--\rDELETE FROM pois", "DELETE"),  # a carriage return ends a -- comment
    ("-- x\r\nanalyse pois", "ANALYSE"),
    ("--\fDELETE FROM pois", ""),  # a form feed does not
    ("$$DELETE$$ NOTIFY gsqa", "NOTIFY"),
    ("ROLLBACK TO SAVEPOINT a", "ROLLBACK"),
])
def test_the_first_keyword_is_read_past_comments_parentheses_and_quotes(statement: str, word: str) -> None:
    assert first_keyword(statement) == word


@pytest.mark.parametrize("statement, savepoint", [
    ("SAVEPOINT sa_savepoint_1", True),
    ("RELEASE SAVEPOINT sa_savepoint_1", True),
    ("release sa_savepoint_1", True),
    ("ROLLBACK TO SAVEPOINT sa_savepoint_1", True),
    ("/* x */ rollback to sa_savepoint_1;", True),
    ("ROLLBACK", False),
    ("ROLLBACK PREPARED 'x'", False),
    ("COMMIT AND CHAIN", False),
    ("COMMIT", False),
    ("BEGIN", False),
    ("PREPARE TRANSACTION 'x'", False),
    ("SAVEPOINT a; COMMIT", False),
    ("-- SAVEPOINT a\nCOMMIT", False),
    ("SELECT 'SAVEPOINT a'", False),
    ("SAVEPOIN a", False),
    ("", False),
])
def test_only_one_savepoint_statement_is_a_savepoint(statement: str, savepoint: bool) -> None:
    assert read(statement).savepoint is savepoint


@pytest.mark.parametrize("statement", [
    "SELECT 1", "WITH x AS (SELECT 1) SELECT * FROM x", "VALUES (1)", "TABLE pois", "(SELECT 1) UNION (SELECT 2)",
    "SELECT 1;", "; SELECT 1 ;;",
    "SELECT 1 --x\r\nDELETE FROM pois",  # `delete`: the column's name, as the server reads it
    "SELECT 1 --\f; DELETE FROM pois",  # a form feed does not end the comment
    "/* /* */ DELETE FROM pois */ SELECT 1", "SELECT $$; DELETE FROM pois$$", "SELECT $t$ $$; DELETE $$ $t$",
    "SELECT $$a$$$$b$$", "SELECT U&'d\\0061t\\+000061' UESCAPE '!'", "SELECT U&'!0027; DELETE FROM pois' UESCAPE '!'",
    "SELECT E'\\'; DELETE FROM pois --'", "SELECT 'it''s; DELETE'", 'SELECT "a;b" FROM pois',
    "SELECT 1 FROM pois WHERE name = '{\"InsertStmt\":'", 'SELECT 1 AS "{""intoClause"":"',
    "SELECT\f1",
])
def test_one_query_goes_to_the_server(statement: str) -> None:
    assert refusal(statement) is None


@pytest.mark.parametrize("statement", [
    "SELEC 1", "/* never closed SELECT", "42", "SELECT 1 /* never closed", "SELECT 'never closed",
    "SELECT $$never closed", "SELECT U&'\\zz'", "SELECT\v1", "SELECT\xa01", "\ufeffSELECT 1",
])
def test_what_the_parser_cannot_read_goes_to_the_server_for_its_syntax_error(statement: str) -> None:
    with pytest.raises(parser.ParseError):
        parser.parse_sql_json(statement)
    assert refusal(statement) is None


@pytest.mark.parametrize("statement", ["", "-- nothing", "/* x */", "; ;", " ;\r\n; -- x", "--\fDELETE FROM pois",
                                       "--\vDELETE FROM pois", "/* /* */ DELETE FROM pois */"])
def test_no_statement_is_refused(statement: str) -> None:
    assert refusal(statement) == NO_STATEMENT


@pytest.mark.parametrize("statement", [
    "SELECT 1; SELECT 2", "SELECT 1 --\r; DELETE FROM pois", "SELECT E'\\''; DELETE FROM pois --'",
    "SELECT '\\'; DELETE FROM pois --'", "; SELECT 1; ; NOTIFY gsqa;", "SELECT $a$ $b$ $a$; SELECT $b$ x $b$",
    "/* /* */ */ SELECT 1; SELECT 2",
])
def test_several_statements_are_refused(statement: str) -> None:
    assert refusal(statement) == SEVERAL


@pytest.mark.parametrize("statement", ["SELECT 1\0", "SELECT 1\0; DELETE FROM pois", "\0"])
def test_a_nul_character_is_refused(statement: str) -> None:
    assert refusal(statement) == NUL


TRANSACTION = "controls the transaction, which the sandbox owns"
SESSION = "changes the session, whose settings the sandbox fixes"
WRITES = "writes or moves data"
DATABASE = "changes the database"
STATE = "keeps state in the session"


@pytest.mark.parametrize("statement, why", [
    ("set statement_timeout = 0", f"`SET` {SESSION}"),
    ("SET LOCAL work_mem = '1MB'", f"`SET` {SESSION}"),
    ("RESET ALL", f"`RESET` {SESSION}"),
    ("DISCARD ALL", f"`DISCARD` {SESSION}"),
    ("/* x */ COMMIT", f"`COMMIT` {TRANSACTION}"),
    ("BEGIN", f"`BEGIN` {TRANSACTION}"),
    ("START TRANSACTION", f"`START` {TRANSACTION}"),
    ("END", f"`END` {TRANSACTION}"),
    ("ABORT", f"`ABORT` {TRANSACTION}"),
    ("ROLLBACK", f"`ROLLBACK` {TRANSACTION}"),
    ("SAVEPOINT a", f"`SAVEPOINT` {TRANSACTION}"),
    ("RELEASE SAVEPOINT a", f"`RELEASE` {TRANSACTION}"),
    ("ROLLBACK TO SAVEPOINT a", f"`ROLLBACK` {TRANSACTION}"),
    ("PREPARE TRANSACTION 'x'", f"`PREPARE` {TRANSACTION}"),
    ("PREPARE p AS SELECT 1", f"`PREPARE` {TRANSACTION}"),
    ("DO $$ BEGIN END $$", "`DO` runs procedural code"),
    ("INSERT INTO pois DEFAULT VALUES", f"`INSERT` {WRITES}"),
    ("--\rDELETE FROM pois", f"`DELETE` {WRITES}"),
    ("-- x\r\nDELETE FROM pois", f"`DELETE` {WRITES}"),
    ("/* /* */ SELECT 1 */ DELETE FROM pois", f"`DELETE` {WRITES}"),
    ("MERGE INTO pois USING x ON true WHEN MATCHED THEN DELETE", f"`MERGE` {WRITES}"),
    ("TRUNCATE pois", f"`TRUNCATE` {WRITES}"),
    ("COPY pois TO STDOUT", f"`COPY` {WRITES}"),
    ("ALTER ROLE CURRENT_USER SET work_mem = '1GB'", f"`ALTER` {DATABASE}"),
    ("ANALYSE pois", f"`ANALYSE` {DATABASE}"),
    ("ANALYZE pois", f"`ANALYZE` {DATABASE}"),
    ("VACUUM ANALYSE pois", f"`VACUUM` {DATABASE}"),
    ("CREATE TABLE t (a int)", f"`CREATE` {DATABASE}"),
    ("DROP TABLE pois", f"`DROP` {DATABASE}"),
    ("GRANT SELECT ON pois TO x", f"`GRANT` {DATABASE}"),
    ("COMMENT ON TABLE pois IS 'x'", f"`COMMENT` {DATABASE}"),
    ("SECURITY LABEL ON TABLE pois IS 'x'", f"`SECURITY` {DATABASE}"),
    ("REFRESH MATERIALIZED VIEW v", f"`REFRESH` {DATABASE}"),
    ("NOTIFY gsqa", "`NOTIFY` signals other sessions"),
    ("LISTEN gsqa", "`LISTEN` signals other sessions"),
    ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", f"`DECLARE` {STATE}"),
    ("FETCH c", f"`FETCH` {STATE}"),
    ("EXECUTE p", f"`EXECUTE` {STATE}"),
    ("LOCK pois", "`LOCK` locks tables"),
    ("CALL p()", "`CALL` runs a procedure"),
    ("LOAD 'x'", "`LOAD` acts on the server"),
    ("CHECKPOINT", "`CHECKPOINT` acts on the server"),
])
def test_what_is_not_a_query_is_refused_in_one_line_naming_it(statement: str, why: str) -> None:
    assert refusal(statement) == refused(why)


@pytest.mark.parametrize("statement, why", [
    ("EXPLAIN ANALYZE DELETE FROM pois", EXPLAIN),
    ("EXPLAIN (ANALYSE) INSERT INTO pois DEFAULT VALUES", EXPLAIN),
    ("EXPLAIN CREATE TABLE t AS SELECT 1", EXPLAIN),
    ("EXPLAIN EXECUTE p", EXPLAIN),
    ("EXPLAIN SELECT 1 INTO t", EXPLAIN),
    ("EXPLAIN SELECT 1", EXPLAIN),
    ("EXPLAIN VERBOSE SELECT 1", EXPLAIN),
    ("SHOW work_mem", SHOW),
    ("SHOW ALL", SHOW),
    ("WITH d AS (DELETE FROM pois RETURNING *) SELECT * FROM d", "`DELETE` inside the query writes data"),
    ("WITH m AS (UPDATE pois SET x = 1 RETURNING *) SELECT 1", "`UPDATE` inside the query writes data"),
    ("WITH x AS (INSERT INTO pois DEFAULT VALUES RETURNING 1) SELECT 1", "`INSERT` inside the query writes data"),
    ("SELECT * FROM (WITH d AS (DELETE FROM pois RETURNING 1) SELECT 1) s", "`DELETE` inside the query writes data"),
    ("WITH x AS (SELECT 1) DELETE FROM pois", f"`DELETE` {WRITES}"),
    ("WITH x AS (SELECT 1) INSERT INTO pois SELECT * FROM x", f"`INSERT` {WRITES}"),
    ("SELECT 1 INTO t", "`SELECT ... INTO` creates a table"),
    ("SELECT * INTO TEMP t FROM pois", "`SELECT ... INTO` creates a table"),
    ("SELECT 1 UNION SELECT 2 INTO t", "`SELECT ... INTO` creates a table"),
    ("SELECT * FROM pois FOR UPDATE", "`FOR UPDATE` / `FOR SHARE` locks rows"),
    ("SELECT * FROM pois FOR NO KEY UPDATE", "`FOR UPDATE` / `FOR SHARE` locks rows"),
    ("SELECT * FROM pois FOR SHARE", "`FOR UPDATE` / `FOR SHARE` locks rows"),
    ("SELECT * FROM pois FOR KEY SHARE", "`FOR UPDATE` / `FOR SHARE` locks rows"),
    ("(SELECT 1) FOR UPDATE", "`FOR UPDATE` / `FOR SHARE` locks rows"),
    ("values (1) for update", "`FOR UPDATE` / `FOR SHARE` locks rows"),
    ("SELECT * FROM (SELECT * FROM pois FOR UPDATE) s", "`FOR UPDATE` / `FOR SHARE` locks rows"),
])
def test_a_query_that_writes_plans_a_write_or_locks_is_refused_naming_what(statement: str, why: str) -> None:
    assert refusal(statement) == refused(why)


# --- the gate against the server: generated statements --------------------------------------------------------

FUZZ_SEED = 20491
FUZZ_STATEMENTS = 5000
FUZZ_SECONDS = 300  # a bound on the run, not a measure: the generator stops making statements after it
FUZZ_TABLES = {"fuzz_t": 3, "fuzz_u": 5, "fuzz_v": 6, "fuzz_w": 0}  # temporary tables of the fuzz session: rows
HOSTILE = ["; DELETE FROM fuzz_w; ", "*/ DELETE FROM fuzz_w; /*", "'; NOTIFY fuzz; '", "$$; NOTIFY fuzz; $$",
           "\r DELETE FROM fuzz_w;", "-- ", "\\'; DELETE FROM fuzz_w; --", "$t$; NOTIFY fuzz; $t$", "/* ; */",
           "\"; SHOW work_mem; \"", "\n;\r;\f;", "U&'!0027'", "\\", "$", "$1$"]
# The statement (parse tree node) kinds the bodies below make, and the command tag the server answers them with.
TAGS = {"SelectStmt": "SELECT", "VariableShowStmt": "SHOW", "ExplainStmt": "EXPLAIN", "DeleteStmt": "DELETE",
        "NotifyStmt": "NOTIFY", "VariableSetStmt": "SET", "VacuumStmt": "ANALYZE", "TransactionStmt": "SAVEPOINT"}
READ_TAGS = {"SELECT"}  # SHOW and EXPLAIN read too, but print text of any size: the gate refuses them


def _literal(rng: random.Random) -> str:
    """A string literal of any form, holding hostile text (a few are ill-formed on purpose)."""
    text = "".join(rng.choice(HOSTILE) for _ in range(rng.randint(0, 3)))
    plain = text.replace("'", "''")
    forms = [
        lambda: f"'{plain}'",
        lambda: "E'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'",
        lambda: "E'\\'" + plain + "'",  # the backslash escapes the quote: the text is in the string
        lambda: "'\\'" + plain + "'",  # standard strings: the backslash is a character, the quote ends the string
        lambda: "U&'" + plain.replace("\\", "\\\\") + "\\0027'",
        lambda: "U&'" + plain.replace("!", "!!") + "!0027!+000041' UESCAPE '!'",
        lambda: "U&'\\zz" + plain + "'",  # an invalid escape
        lambda: f"$${text.replace('$$', '$ $')}$$",
        lambda: f"$tag$ {text.replace('$tag$', '')} $tag$",
        lambda: f"$a$ $b$ {text.replace('$a$', '')} $b$ $a$",
        lambda: f"$tag$ {text}",  # never closed, unless the text closes it
    ]
    return rng.choice(forms)()


def _quoted_identifier(rng: random.Random) -> str:
    text = "".join(rng.choice(HOSTILE) for _ in range(rng.randint(1, 2)))
    return '"' + text.replace('"', '""') + ('"' if rng.random() < 0.9 else "")  # a few never closed


def _bodies(rng: random.Random, serial: int) -> list[tuple[str, ...]]:
    """The statements a generated one is made of, as tokens; all harmless in a transaction rolled back."""
    return [
        ("SELECT", "1"), ("SELECT", _literal(rng)), ("SELECT", "1", "AS", _quoted_identifier(rng)),
        ("(", "SELECT", "1", ")"), ("VALUES", "(", "1", ")", ",", "(", "2", ")"), ("TABLE", "fuzz_t"),
        ("SHOW", "work_mem"), ("EXPLAIN", "(", "ANALYZE", ",", "COSTS", "OFF", ")", "SELECT", "1"),
        ("SELECT", "1", "INTO", "TEMP", f"fuzz_into_{serial}", "FROM", "generate_series", "(", "1", ",", "4", ")"),
        ("SELECT", "*", "FROM", "fuzz_u", "FOR", "UPDATE"), ("SELECT", "*", "FROM", "fuzz_u", "FOR", "SHARE"),
        ("WITH", "d", "AS", "(", "UPDATE", "fuzz_v", "SET", "a", "=", "a", "RETURNING", "1", ")", "SELECT", "*",
         "FROM", "d"),
        ("NOTIFY", "fuzz"), ("SET", "LOCAL", "work_mem", "=", "'1MB'"), ("DELETE", "FROM", "fuzz_w"),
        ("WITH", "x", "AS", "(", "SELECT", "1", ")", "DELETE", "FROM", "fuzz_w"), ("ANALYSE", "fuzz_t"),
        ("analyze", "fuzz_t"), ("EXPLAIN", "ANALYZE", "DELETE", "FROM", "fuzz_w"), ("SAVEPOINT", "fuzz"),
    ]


def _trivia(rng: random.Random) -> str:
    """What separates tokens: white space of every kind, comments of every kind (some hiding statements, some
    ending where the server does not end them, some never closed), or nothing."""
    pieces = [
        lambda: "", lambda: " ", lambda: "\n", lambda: "\t", lambda: "\r", lambda: "\r\n", lambda: "\f",
        lambda: "\v", lambda: "\x85", lambda: "\xa0",
        lambda: "--" + rng.choice(HOSTILE) + rng.choice(["\n", "\r", "\r\n", "\f", "\v", ""]),
        lambda: "/*" + rng.choice(HOSTILE).replace("*/", "* /") + "*/",
        lambda: "/* /*" + rng.choice(HOSTILE) + "*/" + rng.choice(HOSTILE) + "*/",
        lambda: "/* /* " + rng.choice(HOSTILE) + " */",  # nested, closed once: the comment goes on
        lambda: "/*" + rng.choice(HOSTILE),
    ]
    weights = [4, 8, 3, 1, 2, 2, 1, 0.1, 0.1, 0.1, 2, 2, 1, 0.1, 0.1]
    return "".join(rng.choices(pieces, weights)[0]() for _ in range(rng.choice([1, 1, 1, 2])))


def _gap(rng: random.Random) -> str:
    """Between the tokens of a statement: trivia, with a space after it unless it ends in white space."""
    trivia = _trivia(rng)
    return trivia if trivia[-1:] in (" ", "\n", "\t", "\r", "\f") else trivia + " "


def fuzz_statement(rng: random.Random, serial: int) -> str:
    """0 to 3 statements between semicolons, trivia all around and between their tokens."""
    bodies = rng.sample(_bodies(rng, serial), rng.choice([0, 1, 1, 1, 1, 2, 3]))
    parts = [_trivia(rng) + rng.choice(["", "", ";", "; ;"])]
    for index, body in enumerate(bodies):
        parts.append(body[0] + "".join(_gap(rng) + token for token in body[1:]))
        parts.append(_trivia(rng) + (";" if index < len(bodies) - 1 else rng.choice(["", "", ";", ";;"])))
    return "".join(parts) + _trivia(rng)


@dataclass
class ServerReading:
    """What the server made of a statement: the command tag of each statement it ran, the error it stopped at,
    and whether the statement locked more than a read does (a row lock, a write, a new table)."""

    tags: list[str]
    sqlstate: str | None = None
    message: str = ""
    source: str = ""  # the server's source file the error was raised in
    locked: bool = False

    @property
    def unparsed(self) -> bool:
        """The server's lexer or grammar refused the string, before any statement of it ran."""
        return self.source in RAW_PARSER_FILES


LOCKED = (b"SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'relation' "
          b"AND mode <> 'AccessShareLock'")


def server_reading(pgconn: pq.PGconn, statement: str) -> ServerReading:
    """Send the statement with the simple query protocol, inside a transaction that is rolled back."""
    assert pgconn.exec_(b"BEGIN").status == pq.ExecStatus.COMMAND_OK
    pgconn.send_query(statement.encode())
    reading = ServerReading([])
    while (result := pgconn.get_result()) is not None:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            reading.sqlstate = (result.error_field(pq.DiagnosticField.SQLSTATE) or b"").decode()
            reading.message = " ".join((result.error_message or b"").decode(errors="replace").split())
            reading.source = (result.error_field(pq.DiagnosticField.SOURCE_FILE) or b"").decode()
        elif result.status != pq.ExecStatus.EMPTY_QUERY:
            reading.tags.append((result.command_status or b"").decode().split(" ")[0])
    if reading.sqlstate is None:
        reading.locked = pgconn.exec_(LOCKED).get_value(0, 0) != b"0"
    assert pgconn.exec_(b"ROLLBACK").status == pq.ExecStatus.COMMAND_OK
    return reading


# Where the server's raw parser raises its errors, which come before any statement of the string runs (a
# syntax error of parse analysis or of EXPLAIN's options comes from elsewhere, after the whole string was read).
RAW_PARSER_FILES = {"scan.l", "gram.y", "parser.c", "scansup.c"}
# The one place where the gate's parser (libpg_query, from PostgreSQL 15.1's source) and the server (15.20) read
# differently: the server rejects a number followed by a letter (`SELECT 1abc`, `1\xa0`: a non-ASCII character
# is a letter to its lexer), the parser reads `1 AS abc`. Nothing runs either way.
TRAILING_JUNK = "trailing junk after numeric literal"
# The clauses the gate refuses even where they take nothing: a row lock with no table to lock (`SELECT FOR SHARE`),
# the INTO of an EXPLAIN that does not run its query.
CLAUSES_REFUSED = (refused("`FOR UPDATE` / `FOR SHARE` locks rows"), refused("`SELECT ... INTO` creates a table"))


def disagreement(statement: str, reading: ServerReading) -> str | None:
    """Where the gate's reading of the statement differs from the server's, or None."""
    try:
        nodes = _statement_nodes(parser.parse_sql_json(statement))
    except parser.ParseError as error:
        if reading.unparsed:
            return None if refusal(statement) is None else f"refused what goes to the server: {refusal(statement)}"
        return f"the gate's parser cannot read it ({error}), the server ran {reading.tags} ({reading.message})"
    if reading.unparsed:
        if TRAILING_JUNK in reading.message:  # nothing runs; the gate words the statements as the parser read them
            return None
        return f"the server cannot parse it ({reading.message}), the gate's parser reads {nodes}"
    tags = [TAGS.get(node, node) for node in nodes]
    if reading.sqlstate is not None:  # an error at run time: the statements before it ran
        agree = tags[:len(reading.tags)] == reading.tags and len(tags) > len(reading.tags)
        return None if agree else f"the gate reads {tags}, the server ran {reading.tags}, then {reading.message}"
    if tags != reading.tags:
        return f"the gate reads {tags}, the server ran {reading.tags}"
    gate = refusal(statement)
    if len(tags) != 1:
        return None if gate == (SEVERAL if tags else NO_STATEMENT) else f"the gate says {gate!r} of {tags}"
    if tags[0] in READ_TAGS and not reading.locked:
        return None if gate in (None, *CLAUSES_REFUSED) else f"the gate refuses a read: {gate!r}"
    return None if gate is not None else f"the gate lets through {tags[0]}, which locked more than a read"


@pytest.fixture(scope="module")
def fuzz_server(scratch_dsn: str) -> Iterator[pq.PGconn]:
    """A raw libpq connection (blocking, the simple query protocol) as the admin, with the fuzz tables."""
    pgconn = pq.PGconn.connect(make_conninfo(scratch_dsn, client_encoding="UTF8").encode())
    assert pgconn.status == pq.ConnStatus.OK, pgconn.error_message
    for table, rows in FUZZ_TABLES.items():
        done = pgconn.exec_(f"CREATE TEMP TABLE {table} AS SELECT g AS a FROM generate_series(1, {rows}) g".encode())
        assert done.status == pq.ExecStatus.COMMAND_OK, done.error_message
    yield pgconn
    pgconn.finish()


def test_the_gate_reads_generated_statements_as_the_server_does(fuzz_server: pq.PGconn) -> None:
    rng, deadline = random.Random(FUZZ_SEED), time.monotonic() + FUZZ_SECONDS
    outcomes: Counter[str] = Counter()
    for serial in range(FUZZ_STATEMENTS):
        assert time.monotonic() < deadline, f"only {serial} statements in {FUZZ_SECONDS} s"
        statement = fuzz_statement(rng, serial)
        reading = server_reading(fuzz_server, statement)
        why = disagreement(statement, reading)
        assert why is None, f"statement {serial} of seed {FUZZ_SEED}: {statement!r}: {why}"
        outcomes[outcome(statement, reading)] += 1
    # Every outcome is reached often enough for the comparison to mean something.
    assert min(outcomes[name] for name in ("syntax error", "no statement", "several", "passed", "refused")) \
        > FUZZ_STATEMENTS // 50, outcomes


def outcome(statement: str, reading: ServerReading) -> str:
    if reading.sqlstate is not None:
        return "syntax error" if reading.unparsed else "error at run time"
    if len(reading.tags) != 1:
        return "several" if reading.tags else "no statement"
    return "passed" if refusal(statement) is None else "refused"


def test_a_number_run_into_a_letter_passes_the_gate_and_the_server_answers_its_syntax_error(
        fuzz_server: pq.PGconn) -> None:
    for statement in ("SELECT 1abc", "SELECT 1\xa0", "SELECT 0x1F"):
        reading = server_reading(fuzz_server, statement)
        assert (reading.tags, reading.sqlstate, TRAILING_JUNK in reading.message) == ([], "42601", True)
        assert _statement_nodes(parser.parse_sql_json(statement)) == ["SelectStmt"]
        assert refusal(statement) is None


# --- gold SQL and PostGIS ---------------------------------------------------------------------------------------


def test_every_gold_sql_passes_the_gate_as_one_select() -> None:
    records = [json.loads(line) for line in lzma.decompress(GOLD_SQL.read_bytes()).decode().splitlines()]
    assert len(records) == 3085
    assert len({record["id"] for record in records}) == 3085
    readings = [(record["id"], refusal(record["sql"]), _statement_nodes(parser.parse_sql_json(record["sql"])))
                for record in records]
    assert [reading for reading in readings if reading[1:] != (None, ["SelectStmt"])] == []


POSTGIS_FUNCTIONS = """
SELECT quote_ident(n.nspname) || '.' || quote_ident(p.proname) || '('
       || coalesce((SELECT string_agg('NULL::' || format_type(t, NULL), ', ' ORDER BY i)
                    FROM unnest(p.proargtypes::oid[]) WITH ORDINALITY AS a (t, i)), '') || ')',
       p.prokind
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND d.refclassid = 'pg_extension'::regclass
WHERE e.extname IN ('postgis', 'postgis_raster')
ORDER BY 1
"""


def test_a_call_of_every_postgis_function_passes_the_gate(scratch_dsn: str) -> None:
    with psycopg.connect(scratch_dsn) as conn:
        functions = conn.execute(POSTGIS_FUNCTIONS).fetchall()
    calls = [f"SELECT {call}" for call, kind in functions if kind != "p"]  # a procedure is CALLed, not selected
    assert len(calls) == len(functions) > 500
    readings = [(call, refusal(call), _statement_nodes(parser.parse_sql_json(call))) for call in calls]
    assert [reading for reading in readings if reading[1:] != (None, ["SelectStmt"])] == []


@pytest.mark.parametrize("statement, body, around", [
    ("SELECT 1", "SELECT 1", ("", "")),
    ("SELECT 1 AS elevation; -- the model's last word", "SELECT 1 AS elevation", ("", "; -- the model's last word")),
    (";; SELECT 'é' AS x;\n", " SELECT 'é' AS x", (";;", ";\n")),
    ("  VALUES (1) -- a comment to the end", "  VALUES (1) -- a comment to the end", ("", "")),
])
def test_a_query_is_delimited_as_the_parser_delimits_it(statement: str, body: str, around: tuple[str, str]) -> None:
    reading = read(statement)
    assert (reading.refusal, reading.reads_rows, reading.body, reading.around) == (None, True, body, around)
    assert reading.body_of(statement) == body


@pytest.mark.parametrize("sent, refused", [
    ("NOTIFY gsqa, U&'x' UESCAPE '%%'", "refused: `NOTIFY` signals other sessions"),  # psycopg sends one %
    ("SELECT %(kind)s AS kind, 'a%%b' AS b", None),
    ("SELECT %s, %b, %t", None),
])
def test_a_psycopg_query_is_read_as_psycopg_sends_it(sent: str, refused: str | None) -> None:
    reading = read(sent, placeholders=True)
    assert (reading.refusal or "").split(";")[0] == (refused or "")
    assert reading.reads_rows == (refused is None)


def test_text_the_server_cannot_read_or_past_the_length_is_refused_unread() -> None:
    surrogate = f"refused: the SQL is not valid Unicode text (a lone surrogate); {ONLY_A_QUERY}"
    assert refusal("SELECT '\ud800'") == surrogate
    long = "SELECT 1" + " " * MAX_READ_CHARACTERS
    assert refusal(long) == (f"refused: the SQL has {len(long):,} characters, more than the 1,000,000 read here (the "
                             f"longest gold SQL has 421,331); {ONLY_A_QUERY}")


@pytest.mark.parametrize("operator", ["+", "*"])
def test_an_expression_nested_past_an_8_mb_stack_is_read_without_crashing(operator: str) -> None:
    deep = "SELECT " + operator.join(["1"] * 200_000)  # 400,000 characters, 200,000 levels
    reading = read(deep)
    assert (reading.refusal, reading.reads_rows) == (None, True)


def test_a_long_expression_is_read_whatever_stack_the_calling_thread_has() -> None:
    """A thread of 2 MB (what glibc gives under an unlimited `ulimit -s`) would overflow on 25,000 levels: the
    gate reads anything but short SQL on its own large stack."""
    deep, found = "SELECT 1" + "+1" * 24_990, []
    previous = threading.stack_size(2 * 1024**2)
    try:
        reader = threading.Thread(target=lambda: found.append(read(deep)))
        reader.start()
    finally:
        threading.stack_size(previous)
    reader.join()
    assert (found[0].refusal, found[0].reads_rows) == (None, True)
