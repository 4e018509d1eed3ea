"""testkit/make_db_server.py: the benches' stand-in for make db's server runs with exactly its loading settings."""

from __future__ import annotations

import psycopg

from testkit.make_db_server import loading_settings, make_db_server, malloc_environment, server_malloc_variables


def test_the_settings_are_read_from_the_files_that_declare_them() -> None:
    settings = loading_settings()
    assert settings["wal_level"] == "minimal"  # docker/postgresql-gsqa.conf
    assert settings["max_wal_size"] == "32GB"  # sql/bulk_load_on.sql overrides the conf file's 8GB
    assert settings["fsync"] == "off"
    assert malloc_environment() == {"MALLOC_MMAP_THRESHOLD_": "4194304", "MALLOC_TRIM_THRESHOLD_": "33554432"}


def test_the_server_runs_with_every_setting_and_the_allocator_environment() -> None:
    with make_db_server() as server, psycopg.connect(server.dsn("postgres")) as conn:
        running = {name: conn.execute(f"SHOW {name}").fetchone()[0] for name in loading_settings()}
        assert running == loading_settings()
        assert server_malloc_variables(conn) == malloc_environment()
