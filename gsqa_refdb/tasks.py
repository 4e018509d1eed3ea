"""GS-QA2 as Inspect tasks: `inspect eval gsqa_refdb/text2sql`, `gsqa_refdb/sql_agent` and
`gsqa_refdb/code_agent`.

Both select what `reproduce` selects, under its option names: `-T config=raster_only -T template=R1
-T data=DIR -T id=QUESTION_ID` (template and id take one value or a list: `-T template=[R1,R2]`), `-T dsn=...`
and `-T reader_dsn=...` (else the database as every command finds it: DATABASE_URL, libpq's PG* variables,
`make db`'s), `-T timeout=SECONDS` per statement. A sample is one question, its id the question's id, the
samples in dataset order.

- text2sql: the question, the answer it expects (columns, units) and `reproduce schema`'s description of the
  database in the prompt; one generation; its ```sql blocks (else its text) run as gsqa_model in our sandbox and
  judged (gsqa_refdb/scorer.py).
- sql_agent: a ReAct agent with the tools of `reproduce serve` (question, schema, query, submit_answer) over MCP,
  one stdio server per sample serving that question alone with the budgets `-T max_calls=N -T max_seconds=S
  -T max_rows=N`; the sample ends when submit_answer has recorded an answer (or the model calls no tool), and
  the recorded answer is judged. Inspect's limits per sample come from the same budget (inspect_limits).
- code_agent: the same agent with run_python in place of query (`reproduce serve --tools python`): its programs
  run in the question's own sandbox container over the files of `-T export=DIR` (an `ingest export` folder of
  this database; `make sandbox-image`).

`-T connections=N` (4): how many SQL judgements (text2sql, at most 8) or agents (sql_agent, at most 4: each
agent's server holds a session, and while it starts its preflight another) run at once, so that the run stays
within gsqa_model's connection limit (8), which every run on the database shares.

A task that cannot be made (no database, an unknown config or template, ...) says why in one line on stderr,
`error: ...` as every command of ours, and raises TaskNotMade, which `inspect eval` ends on (exit 1) without a
traceback.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from typing import ParamSpec

from inspect_ai import Task, task
from inspect_ai._util.error import SilentException  # what Inspect's command line exits on without a traceback
from inspect_ai.agent import AgentState, as_solver, react
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.model import ChatMessageSystem, ChatMessageUser
from inspect_ai.solver import Generate, Solver, TaskState, generate, solver
from inspect_ai.tool import mcp_server_stdio
from inspect_ai.util import concurrency

from gsqa_core.errors import GsqaError
from gsqa_refdb import adapter
from gsqa_refdb.scorer import MODEL_SESSIONS, answer_judge, has_submitted, sql_judge

TEXT2SQL_INSTRUCTIONS = """You write one PostgreSQL 15 query with PostGIS that answers a geospatial question of the
GS-QA2 benchmark on the reference database described below. Reply with the query in a ```sql block; its rows
are the answer, with the columns the question expects.

"""
# Inspect's message limit of an agent's sample: the question, then an assistant message and a tool result per
# call of the budget, and as many again for schema() (which no budget counts) and the refusals past the budget.
MESSAGES_PER_CALL = 4
Made = ParamSpec("Made")


def inspect_limits(max_calls: int, max_seconds: float) -> dict[str, int]:
    """Inspect's limits of an agent's sample, from the budget its `reproduce serve` enforces (one declaration:
    the task passes serve's to Inspect). Messages: the question and MESSAGES_PER_CALL per call. Working time
    (not clock time: a sample waiting for a gsqa_model session, or for the provider's rate limit, spends none of
    it, as it spends none of serve's): serve's seconds, which Inspect counts from the sample's start and serve
    from the first call, so Inspect ends a sample first, by at most the model's first turn. Tokens: serve has no
    such budget; Inspect's own --token-limit applies as given."""
    return {"message_limit": 1 + MESSAGES_PER_CALL * max_calls, "working_limit": math.ceil(max_seconds)}


class TaskNotMade(SilentException):
    """A task could not be made: its message is the line already printed (Inspect's own PrerequisiteError goes
    through its console, which wraps long lines and prints nothing under --display none)."""


def _one_line_errors(make: Callable[Made, Task]) -> Callable[Made, Task]:
    """The task's maker, a user's error (GsqaError) printed as one line on stderr and raised as TaskNotMade."""
    @functools.wraps(make)
    def made(*args: Made.args, **kwargs: Made.kwargs) -> Task:
        try:
            return make(*args, **kwargs)
        except GsqaError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            raise TaskNotMade(str(error)) from None
    return made


def _listed(value: str | list[str] | None) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])


@task
@_one_line_errors
def text2sql(config: str = "all", template: str | list[str] | None = None, id: str | list[str] | None = None,
             data: str | None = None, dsn: str | None = None, reader_dsn: str | None = None,
             timeout: float = 120.0, connections: int = 4) -> Task:
    """Text-to-SQL: the model writes one query from the question and the schema; the query is run and judged."""
    request = adapter.selection(config, _listed(template), _listed(id), data, dsn, reader_dsn, timeout, connections)
    records = adapter.questions(request)
    system = ChatMessageSystem(content=TEXT2SQL_INSTRUCTIONS + adapter.schema_prompt(request))
    samples = [Sample(id=record.id, input=[system, ChatMessageUser(content=_question_text(record))],
                      metadata={"template": record.template_id}) for record in records]
    return Task(dataset=MemoryDataset(samples, name=f"gs-qa2 {config}"), solver=generate(),
                scorer=sql_judge(adapter.Judge(request, records), connections))


def _question_text(record: adapter.Record) -> str:
    return (f"Question {record.id}: {record.question}\nThe answer it expects: "
            f"{json.dumps(adapter.expected_answer(record.template_id))}")


@task
@_one_line_errors
def sql_agent(config: str = "all", template: str | list[str] | None = None, id: str | list[str] | None = None,
              data: str | None = None, dsn: str | None = None, reader_dsn: str | None = None,
              timeout: float = 120.0, max_calls: int = 20, max_seconds: float = 600.0, max_rows: int = 100,
              connections: int = 4) -> Task:
    """An SQL agent: a ReAct loop over the tools of `reproduce serve`; its submitted answer is judged."""
    request = adapter.selection(config, _listed(template), _listed(id), data, dsn, reader_dsn, timeout, connections,
                                max_calls=max_calls, max_seconds=max_seconds, max_rows=max_rows,
                                sessions_each=adapter.SERVE_SESSIONS)
    return _agent_task(request, config, connections)


@task
@_one_line_errors
def code_agent(config: str = "all", template: str | list[str] | None = None, id: str | list[str] | None = None,
               data: str | None = None, dsn: str | None = None, reader_dsn: str | None = None,
               timeout: float = 120.0, max_calls: int = 20, max_seconds: float = 600.0, export: str | None = None,
               connections: int = 4) -> Task:
    """A code-writing agent: a ReAct loop over question, schema, run_python and submit_answer; its programs run in
    our sandbox container over the export; its submitted answer is judged."""
    request = adapter.selection(config, _listed(template), _listed(id), data, dsn, reader_dsn, timeout, connections,
                                max_calls=max_calls, max_seconds=max_seconds, sessions_each=adapter.SERVE_SESSIONS,
                                tools="python", export=export)
    return _agent_task(request, config, connections)


def _agent_task(request: adapter.ServeRequest, config: str, connections: int) -> Task:
    records = adapter.questions(request)
    prompts = adapter.agent_prompts(request)
    samples = [Sample(id=record.id, input=prompts[record.id], metadata={"template": record.template_id})
               for record in records]
    return Task(dataset=MemoryDataset(samples, name=f"gs-qa2 {config}"), solver=serve_agent(request, connections),
                scorer=answer_judge(adapter.Judge(request, records)),
                **inspect_limits(request.max_calls, request.max_seconds))


@solver
def serve_agent(request: object, connections: int) -> Solver:
    """react() with the tools of a `reproduce serve` over stdio that serves the sample's question alone."""
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        command, args, env = adapter.serve_process(request, str(state.sample_id))
        tools = mcp_server_stdio(name="gsqa-refdb", command=command, args=args, env=env)
        agent = react(prompt=None, tools=[tools], submit=False, on_continue=_until_submitted)
        async with concurrency(MODEL_SESSIONS, connections):  # each holds the sessions of its server
            return await as_solver(agent)(state, generate)
    return solve


async def _until_submitted(state: AgentState) -> bool:
    """Go on while the model calls tools and no answer is recorded."""
    return bool(state.output.message.tool_calls) and not has_submitted(state.messages)
