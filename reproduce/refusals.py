"""Why a sandboxed statement or a call of serve's tools is refused, declared once: each reason's code (serve's
call line keeps it as `refused`, `reproduce score`'s usage summary counts by it), the line the caller is shown
for it (after "refused: ", its fields filled in) and what it means (the usage column's description).

A refusal is still the text it always was: `Refusal` is a str that carries its code, so every door that passes
a refusal's line on (the gate under verify, score and the baseline engine; the runner's Outcome) needs no
change, and serve reads the code where it writes the call's line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reason:
    says: str | None  # the line after "refused: " (str.format fields); None: worded where it is raised
    means: str  # what a call refused for it was: "calls refused: <means>" in the usage columns


REFUSALS: dict[str, Reason] = {
    # The episode (reproduce/serve/tools.py).
    "over_submitted": Reason("{question}: the answer was submitted; the episode is over",
                             "after the episode's answer was submitted"),
    "over_budget": Reason("{question}: the episode's budget is spent ({why}); it is over",
                          "after the episode's budget was spent"),
    "no_time_left": Reason("no time left in the episode's budget ({clocks})",
                           "too little of the episode's time left for a statement or program"),
    # The call's arguments (reproduce/serve/tools.py, answers.py).
    "not_served": Reason("{tool} is not served here (reproduce serve --tools {kind})",
                         "a tool this server does not serve"),
    "no_argument": Reason("no {noun} (expected {expected})", "no SQL or code"),
    "too_long": Reason("the {noun} is {size:,} characters{unit}; at most {limit:,}",
                       "SQL, code or an answer past its size"),
    "answer_unreadable": Reason("{why}", "an answer that cannot be read as rows (null)"),
    "answer_shape": Reason("the answer does not fit the question: {why}; expected {expected}",
                           "an answer that does not fit the question's components"),
    # run_python's sandbox (reproduce/serve/python_sandbox.py words them).
    "sandbox_ended": Reason(None, "the episode's container was removed (its time was up, or the server was stopping)"),
    "sandbox_busy": Reason(None, "the server's cap of episodes' containers was reached"),
    "sandbox_share": Reason(None, "the agent's share of the episodes' containers was reached (--tokens)"),
    # The statement, as the gate reads it (reproduce/gate.py), and the server's refusals it words.
    "too_long_to_read": Reason("the SQL has {size:,} characters, more than the {limit:,} read here (the longest "
                               "gold SQL has 421,331); {only}", "SQL past what the gate reads"),
    "nul_byte": Reason("the SQL holds a NUL character, where the server would stop reading it; {only}",
                       "SQL with a NUL character"),
    "not_unicode": Reason("the SQL is not valid Unicode text (a lone surrogate); {only}", "SQL that is not Unicode"),
    "no_statement": Reason("no statement (only white space or comments); {only}", "SQL without a statement"),
    "several_statements": Reason("several statements in one; {only}, one statement at a time",
                                 "several statements in one call"),
    "not_a_query": Reason("`{word}` {why}; {only}", "a statement that is not a query"),
    "query_writes": Reason("{why}; {only}", "a query that writes, creates a table or locks rows"),
    "no_rows": Reason("the statement returns no rows; {only}", "a statement that returns no rows"),
    "privilege": Reason("{message} (the sandbox role may only read the reference tables)",
                        "what the sandbox role may not read (the server's)"),
    "read_only": Reason("{message} (the sandbox only reads)", "a write in the read-only transaction (the server's)"),
    "memory": Reason("{message} (a statement may use only a bounded share of the server's memory)",
                     "past the memory a statement may take (the server's)"),
}
UNKNOWN = "unknown"  # a refused call whose line has no code (written before lines kept it) or one not above


class Refusal(str):
    """A refusal's one line ("refused: ..."), with its REFUSALS code."""

    code: str


def refused(code: str, **fields: Any) -> Refusal:
    """The refusal of reason `code`, its line made from REFUSALS with `fields`."""
    return coded(code, "refused: " + REFUSALS[code].says.format(**fields))


def coded(code: str, line: str) -> Refusal:
    """A refusal worded elsewhere (a reason whose `says` is None), with its code."""
    if code not in REFUSALS:
        raise ValueError(f"no refusal reason {code!r} (REFUSALS)")
    refusal = Refusal(line)
    refusal.code = code
    return refusal


def code_of(line: str) -> str:
    """The code a refusal's line carries; "" for any other text (an error, not a refusal)."""
    return getattr(line, "code", "")
