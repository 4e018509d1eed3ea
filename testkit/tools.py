"""A tool a test needs (a Docker engine, chromium, the native PBF reader) that this machine lacks: the test is
skipped with the reason, in capitals so that it stands out in pytest's summary, unless GSQA_REQUIRE_TOOLS=1
(CI, which installs them all: .ci/run) makes it fail. One rule, so that no test skips silently where the tool
is required."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRED = "GSQA_REQUIRE_TOOLS"


def missing(tool: str, why: str) -> NoReturn:
    """Skip (or, under GSQA_REQUIRE_TOOLS=1, fail) the running test: `tool` is missing, `why` says what that
    means here."""
    if os.environ.get(REQUIRED) == "1":
        pytest.fail(f"{REQUIRED}=1 but {tool} is missing: {why}")
    pytest.skip(f"NO {tool.upper()}: {why}; the test did not run")
