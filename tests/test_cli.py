"""The installed console scripts, run as a user runs them: help, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_helpers import session_settings

from testkit.cli import reproduce

BIN = Path(sys.executable).parent
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/gsqa_nowhere"


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`reproduce` in this process; `ingest`, whose loaders fork, in a process of its own."""
    if argv[0] == "reproduce":
        return reproduce(*argv[1:], env=env)
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize(
    "tool, commands", [("ingest", ["init", "fetch", "all", "status", "check", "demo-data", "finalize"]),
                       ("reproduce", ["check", "verify", "show"])]
)
def test_help_lists_commands_and_exit_codes(tool: str, commands: list[str]) -> None:
    result = run(tool, "--help")
    assert result.returncode == 0, result.stderr
    assert "Exit codes" in result.stdout
    for command in commands:
        assert command in result.stdout


@pytest.mark.parametrize("argv", [("ingest", "init"), ("ingest", "finalize"), ("reproduce", "check")])
def test_unreachable_database_is_one_line_and_exit_2(argv: tuple[str, ...]) -> None:
    result = run(*argv, "--dsn", UNREACHABLE)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: cannot connect to PostgreSQL")
    assert "Traceback" not in result.stderr


def test_database_url_is_used_when_no_dsn_is_given() -> None:
    result = run("ingest", "init", env={"DATABASE_URL": UNREACHABLE})
    assert result.returncode == 2
    assert "host=127.0.0.1 port=1 database=gsqa_nowhere" in result.stderr


def test_init_twice_then_says_nothing_to_do(fresh_dsn: str) -> None:
    first = run("ingest", "init", "--dsn", fresh_dsn, "--json")
    assert first.returncode == 0, first.stderr
    assert "table public.dem_us" in json.loads(first.stdout)["created"]
    second = run("ingest", "init", "--dsn", fresh_dsn)
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("nothing to do")


def test_finalize_builds_the_vector_indexes(initialized_dsn: str) -> None:
    result = run("ingest", "finalize", "--dsn", initialized_dsn)
    assert result.returncode == 0, result.stderr
    import psycopg

    with psycopg.connect(initialized_dsn) as conn:
        names = {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%_gix'")}
    assert names == {f"{table}_geometry_gix" for table in ["pois", "roads", "parks", "lakes", "regions"]}


def test_check_reports_empty_tables_with_exit_1(initialized_dsn: str) -> None:
    result = run("reproduce", "check", "--dsn", initialized_dsn, "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["tables"]["dem_us"] == 0
    assert "table public.dem_us is empty" in report["problems"]
    assert not any("gsqa_" in problem for problem in report["problems"])
    assert report["roles"] == {role: {"user": role, **session_settings(role)} for role in ("gsqa_reader", "gsqa_model")}
    shown = run("reproduce", "check", "--dsn", initialized_dsn).stdout
    settings = ("default_transaction_read_only on, statement_timeout 2min, idle_in_transaction_session_timeout 10min, "
                "work_mem 64MB, temp_file_limit 2GB, search_path public, extra_float_digits 1, "
                "standard_conforming_strings on, client_encoding UTF8, client_connection_check_interval 2s")
    assert f"gsqa_reader (gold SQL: reproduce verify, show, rebase; score's gold run): {settings}" in shown
    assert (f"gsqa_model (model SQL: reproduce score, reproduce serve, reproduce.baseline.engine()): {settings}, "
            "max_parallel_workers_per_gather 0" in shown)


def test_check_counts_a_small_table_that_was_never_analyzed_exactly(initialized_dsn: str) -> None:
    import psycopg

    with psycopg.connect(initialized_dsn, autocommit=True) as conn:
        # 913 new rows are past autovacuum's analyze threshold: keep it from analyzing the table mid-test
        conn.execute("ALTER TABLE public.regions SET (autovacuum_enabled = false)")
        conn.execute("INSERT INTO public.regions (region_name) SELECT 'r' || n FROM generate_series(1, 913) n")
    try:
        result = run("reproduce", "check", "--dsn", initialized_dsn)
        assert "  regions  913 rows" in result.stdout, result.stdout
        assert json.loads(run("reproduce", "check", "--dsn", initialized_dsn, "--json").stdout)["counted"][
            "regions"] == "exact"
    finally:
        with psycopg.connect(initialized_dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE public.regions")
            conn.execute("ALTER TABLE public.regions RESET (autovacuum_enabled)")


def test_check_without_postgis_is_exit_2(fresh_dsn: str) -> None:
    result = run("reproduce", "check", "--dsn", fresh_dsn)
    assert result.returncode == 2
    assert "run `ingest init` first" in result.stderr


def test_finalize_before_init_says_so_in_one_line(fresh_dsn: str) -> None:
    result = run("ingest", "finalize", "--dsn", fresh_dsn)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("run `ingest init` first, then the load stages")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_help_shows_placeholders_and_value_names_as_written() -> None:
    verify = run("reproduce", "verify", "--help", env={"COLUMNS": "100"}).stdout
    assert "vector/ (T<k>/), or" in verify and "<config>/*.parquet" in verify  # not swallowed as markup
    assert "--dsn DSN" in verify and "--workers N" in verify and "--template ID" in verify
    assert "<bool>" not in verify and "<str>" not in verify and "list[str]" not in verify
    fetch = run("ingest", "fetch", "--help", env={"COLUMNS": "80"}).stdout
    assert "`dem/tiles/*.tif`" in fetch and "--bbox W,S,E,N" in fetch
    score = run("reproduce", "score", "--help", env={"COLUMNS": "100"}).stdout
    assert "reproduce score [OPTIONS] [PRED...]\n" in score.splitlines()[0] + "\n"  # several runs may be given


@pytest.mark.parametrize("command, kind, own", [
    ("verify", "RunRequest", {"progress"}),
    ("rebase", "RunRequest", {"ids", "replicas", "progress"}),
    ("show", "RunRequest", {"config", "templates", "ids", "workers", "max_rows", "replicas", "resume", "force",
                            "progress"}),
    ("score", "ScoreRequest", {"progress"}),
    ("serve", "ServeRequest", {"agents"}),  # the agents of --tokens, counted where the file is read (protocol.start)
])
def test_each_command_fills_its_request_from_its_options_by_name(command: str, kind: str, own: set[str]) -> None:
    import dataclasses
    import inspect

    from reproduce import cli, score, session
    from reproduce.serve import tools

    request = {"RunRequest": session.RunRequest, "ScoreRequest": score.ScoreRequest,
               "ServeRequest": tools.ServeRequest}[kind]
    fields = {field.name for field in dataclasses.fields(request)}
    parameters = set(inspect.signature(getattr(cli, command)).parameters)
    assert fields - parameters == own  # a field no option fills keeps the request's default


@pytest.mark.parametrize("argv, expected", [
    (["reproduce", "verify", "--config", "rastr_only"], "(did you mean raster_only?)"),
    (["reproduce", "verfy"], "Did you mean 'verify'?"),
    (["ingest", "al", "/data"], "Did you mean 'all'?"),
    (["ingest", "fetch", "/data", "--workers", "0"], "'--workers'"),
])
def test_usage_errors_are_one_line_with_a_suggestion_and_exit_2(argv: list[str], expected: str) -> None:
    result = run(*argv)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    assert expected in result.stderr and "Value error" not in result.stderr and "--help`" in result.stderr


def test_a_bare_command_prints_its_help() -> None:
    result = run("ingest")
    assert result.returncode == 2 and "Usage: ingest [OPTIONS] COMMAND" in result.stderr
    assert "\n  all " in result.stderr or "\n  all  " in result.stderr, result.stderr
