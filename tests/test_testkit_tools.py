"""testkit/tools.py: a missing tool skips the test with its reason, and fails it where CI requires the tools."""

from __future__ import annotations

import pytest

from testkit.tools import missing


def test_a_missing_tool_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GSQA_REQUIRE_TOOLS", raising=False)
    with pytest.raises(pytest.skip.Exception, match="^NO CHROMIUM: apt-get install it; the test did not run$"):
        missing("chromium", "apt-get install it")


def test_a_missing_tool_fails_where_the_tools_are_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GSQA_REQUIRE_TOOLS", "1")
    with pytest.raises(pytest.fail.Exception, match="^GSQA_REQUIRE_TOOLS=1 but chromium is missing: apt-get"):
        missing("chromium", "apt-get install it")
