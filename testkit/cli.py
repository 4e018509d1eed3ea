"""`reproduce ARGV` run in the test's own process, as its console script runs it (gsqa_core.cli.run: one-line
usage errors, the exit codes), its output captured: what a subprocess would give, without starting one. Tests
start a subprocess only where the process itself is under test (Ctrl-C, kill -9) and for `ingest`, whose
loaders fork workers that must not share the test process's connections."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator


def reproduce(*argv: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`reproduce ARGV` in this process, with `env` added to the environment for the call."""
    from gsqa_core.cli import run
    from reproduce.cli import app

    args = ["reproduce", *map(str, argv)]
    stdout, stderr = io.StringIO(), io.StringIO()
    with _argv(args), _environment(env or {}), contextlib.redirect_stdout(stdout), \
            contextlib.redirect_stderr(stderr):
        try:
            run(app)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return subprocess.CompletedProcess(args, code, stdout.getvalue(), stderr.getvalue())


@contextlib.contextmanager
def _argv(args: list[str]) -> Iterator[None]:
    kept, sys.argv = sys.argv, args
    try:
        yield
    finally:
        sys.argv = kept


@contextlib.contextmanager
def _environment(added: dict[str, str]) -> Iterator[None]:
    kept = dict(os.environ)
    os.environ.update(added)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(kept)
