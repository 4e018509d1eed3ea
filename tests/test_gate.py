"""reproduce/gate.py: which statements are refused before they reach the server, and the one line each gets;
the server's refusals, worded (tests/test_sandbox_doors.py sends them through every door)."""

from __future__ import annotations

import pytest

from reproduce.gate import first_word, refusal

ONLY_A_QUERY = "only a query runs here (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW)"


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
])
def test_the_first_word_is_found_past_comments_and_parentheses(statement: str, word: str) -> None:
    assert first_word(statement) == word


@pytest.mark.parametrize("statement", ["SELECT 1", "WITH x AS (SELECT 1) SELECT * FROM x", "VALUES (1)", "TABLE pois",
                                       "EXPLAIN SELECT 1", "SHOW work_mem", "(SELECT 1) UNION (SELECT 2)",
                                       "SELEC 1", "", "-- nothing"])
def test_queries_and_what_is_no_command_go_to_the_server(statement: str) -> None:
    assert refusal(statement) is None


@pytest.mark.parametrize("statement, why", [
    ("set statement_timeout = 0", "`SET` changes the session, whose settings the sandbox fixes"),
    ("/* x */ COMMIT", "`COMMIT` controls the transaction, which the sandbox owns"),
    ("PREPARE TRANSACTION 'x'", "`PREPARE` controls the transaction, which the sandbox owns"),
    ("DO $$ BEGIN END $$", "`DO` runs procedural code"),
    ("INSERT INTO pois DEFAULT VALUES", "`INSERT` writes or moves data"),
    ("ALTER ROLE CURRENT_USER SET work_mem = '1GB'", "`ALTER` changes the database"),
    ("NOTIFY gsqa", "`NOTIFY` signals other sessions"),
    ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", "`DECLARE` keeps state in the session"),
    ("LOCK pois", "`LOCK` locks tables"),
])
def test_what_is_not_a_query_is_refused_in_one_line_naming_it(statement: str, why: str) -> None:
    assert refusal(statement) == f"refused: {why}; {ONLY_A_QUERY}"
