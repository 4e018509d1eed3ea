"""What each run used (reproduce/reports/usage.py), per run and line of the table, in every report: an agent's
tool calls from a trajectory written by the real writer (calls, clients, refusals by their lines' codes, an old
line without one as unknown, budget stops, tool
seconds, run_python calls, their failures and seconds, the usage its client attached), the tokens and cost of
JSON Lines predictions and of an Inspect log; a value nothing gives is unknown, never 0, and a report whose runs
give none of it has no such section."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from pathlib import Path

import pytest
from conftest import DATA
from inspect_ai.model import ModelOutput
from inspect_helpers import QUESTIONS, run, scripted
from test_python_sandbox import image  # noqa: F401 - the fixture: the sandbox image, built where missing

from reproduce import configs, dataset
from reproduce.predictions import trajectory
from reproduce.reports.usage import COLUMNS, columns_markdown
from reproduce.serve.tools import ServeRequest, ToolRefused, open_tools
from testkit.cli import reproduce

BENCHMARK = DATA / "benchmark"
UNREACHABLE = "postgresql://nobody@127.0.0.1:1/gsqa_nowhere"
R1, R2 = "raster_only/elevation+poi", "raster_only/elevation_compare+two_pois"
ONLY = "only a query runs here (SELECT, WITH, VALUES, TABLE)"


def episode(question: str | None, *calls: tuple[str, str, str, float, dict]) -> list[dict]:
    """Call lines of one question: (client, tool, outcome, seconds, other members) each, numbered in order."""
    return [trajectory.line_of("call", question_id=question, client=client, tool=tool, outcome=outcome,
                               seconds=seconds, **({"call": n, "elapsed": float(n)} if question else {}),
                               **{"arguments": {}, **more})
            for n, (client, tool, outcome, seconds, more) in enumerate(calls, start=1)]


def refused(code: str | None, why: str, **more: object) -> dict:
    """A refused call's members; a code of None: a line written before lines kept it."""
    return {"error": f"refused: {why}", **({"refused": code} if code else {}), **more}


def usage(**given: float) -> dict:
    return {"usage": given}


def write_trajectory(path: Path) -> Path:
    """An agent's run over R1 and R2 through the real writer (the lines serve writes), the usage its client
    attached on some calls."""
    lines = [trajectory.line_of("run", model="agent-model", method="agent"),
             *episode(None, ("a", "schema", "ok", 0.5, usage(input_tokens=9999))),  # no question: not counted
             *episode(f"{R1}/0", ("a", "question", "ok", 0.25, usage(input_tokens=100, output_tokens=10, cost=0.01)),
                      ("a", "query", "rows", 0.5, {"rows": 1, **usage(input_tokens=200, output_tokens=20, cost=0.02)}),
                      ("a", "query", "refused", 0.125, {**refused("several_statements", f"several statements in one; "
                                                                  f"{ONLY}, one statement at a time"),
                                                        **usage(input_tokens=50, output_tokens=5)}),
                      ("a", "submit_answer", "ok", 0.125, {"rows": 1, "arguments": {"answer": 286.0}})),
             trajectory.line_of("stop", question_id=f"{R1}/0", reason="submitted", why="submit_answer", calls=4,
                                elapsed=4.0),
             *episode(f"{R1}/1", ("b", "run_python", "ok", 1.5, {"exit": 0}),
                      ("b", "run_python", "error", 0.5, {"exit": 1}),
                      ("b", "run_python", "killed", 2.0, {}),  # no exit status: the writer leaves it out
                      ("b", "run_python", "timeout", 3.0, {}),
                      ("b", "run_python", "lost", 10.0, {}),
                      ("b", "run_python", "error", 0.0, {"error": "the call failed: OSError: boom"}),  # no exit: ours
                      ("b", "run_python", "refused", 0.0, refused("too_long", "the code is 200,001 characters; at most "
                                                                          "100,000"))),
             trajectory.line_of("stop", question_id=f"{R1}/1", reason="budget", why="all 6 calls used", calls=6,
                                elapsed=17.0),
             *episode(f"{R1}/1", ("b", "submit_answer", "refused", 0.0, refused(
                 "over_budget", f"{R1}/1: the episode's budget is spent (all 6 calls used); it is over",
                 charged=False))),
             # the first: a line from before lines kept a refusal's code
             *episode(f"{R1}/2", ("a", "query", "refused", 0.25, refused(None, f"`DELETE` is not a query; {ONLY}")),
                      ("c", "submit_answer", "refused", 0.125, {
                          **refused("answer_unreadable",
                                    "the answer is null (expected rows, a value or a list of values)"),
                          **usage(output_tokens=7, input_tokens=True, cost=-1)}),  # no numbers: not counted
                      ("c", "query", "error", 0.375, {"error": 'relation "x" does not exist'}),
                      ("a", "query", "refused", 0.25, refused("privilege", "permission denied for table load_log (the "
                                                              "sandbox role may only read the reference tables)"))),
             *episode(f"{R2}/0", ("a", "submit_answer", "ok", 0.25, {
                          "rows": 1, "arguments": {"answer": "Nowhere"},
                          **usage(input_tokens=1000, output_tokens=100, cost=0.5)}),
                      ("a", "submit_answer", "refused", 0.0, refused("over_submitted", f"{R2}/0: the answer was "
                                                                     "submitted; the episode is over", charged=False))),
             trajectory.line_of("stop", question_id=f"{R2}/0", reason="submitted", why="submit_answer", calls=2,
                                elapsed=2.0)]
    writer = trajectory.Writer(path)
    for line in lines:
        writer.write(line)
    writer.close()
    return path


def write_jsonl(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


# Every column of the agent's run per line; those a run without calls or usage does not give are None.
REASONS_R1 = {"refused_over_budget": 1, "refused_too_long": 1, "refused_answer_unreadable": 1,
              "refused_several_statements": 1, "refused_privilege": 1, "refused_unknown": 1}
AGENT_R1 = {"calls": 16, "not_charged": 1, "clients": 3, "refused": 6,
            **{column.name: REASONS_R1.get(column.name, 0) for column in COLUMNS if column.name.startswith("refused_")},
            "query_errors": 1, "budget_stops": 1, "tool_seconds": 19.0, "python_calls": 7,
            "python_nonzero_exit": 1, "python_killed": 1, "python_timeout": 1, "python_lost": 1,
            "python_seconds": 17.0, "input_tokens": 350, "output_tokens": 42, "cost": 0.03}
AGENT_R2 = {**dict.fromkeys(AGENT_R1, 0), "calls": 2, "not_charged": 1, "clients": 1, "refused": 1,
            "refused_over_submitted": 1, "tool_seconds": 0.25, "input_tokens": 1000, "output_tokens": 100, "cost": 0.5}
AGENT_ALL = {**AGENT_R1, "calls": 18, "not_charged": 2, "refused": 7, "refused_over_submitted": 1,
             "tool_seconds": 19.25, "input_tokens": 1350, "output_tokens": 142, "cost": 0.53}
NO_CALLS = dict.fromkeys(AGENT_R1)
TOKENS_R1 = {**NO_CALLS, "input_tokens": 70, "output_tokens": 7, "cost": 0.003}


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """`reproduce score` of the agent's trajectory, a run of answers with tokens and cost (one of them a bare
    total: no kind), and a run with neither, into every report."""
    folder = tmp_path_factory.mktemp("usage")
    agent = write_trajectory(folder / "agent.jsonl")
    tokens = write_jsonl(folder / "tokens.jsonl", [
        {"id": f"{R1}/0", "answer": 286.0, "tokens": {"input": 30, "output": 3}, "cost": 0.003},
        {"id": f"{R1}/1", "answer": 185.0, "tokens": {"input": 40, "output": 4, "total": 44}},
        {"id": f"{R2}/0", "answer": "Nowhere", "tokens": 123}])
    plain = write_jsonl(folder / "plain.jsonl", [{"id": f"{R1}/0", "answer": 286.0}])
    done = reproduce("score", agent, tokens, plain, "--config", "raster_only", "--template", "R1", "--template",
                     "R2", "--data", BENCHMARK, "--dsn", UNREACHABLE, "--json-out", folder / "s.json",
                     "--csv-out", folder / "s.csv", "--html", folder / "s.html")
    assert done.returncode == 0, done.stderr
    return done.stdout, folder


LINES = ("raster_only/R1", "raster_only/R2", "raster_only/all", "total/all")


def test_the_json_report_has_every_column_per_run_and_line(scored: tuple[str, Path]) -> None:
    document = json.loads((scored[1] / "s.json").read_text())
    assert document["usage"] == {
        "agent": dict(zip(LINES, (AGENT_R1, AGENT_R2, AGENT_ALL, AGENT_ALL), strict=True)),
        "tokens": dict(zip(LINES, (TOKENS_R1, NO_CALLS, TOKENS_R1, TOKENS_R1), strict=True))}
    runs = {run["name"]: (run["tokens"], run["cost"]) for run in document["runs"]}
    assert runs == {"agent": ({"input": 1350, "output": 142}, 0.53),
                    "tokens": ({"input": 70, "output": 7, "total": 167}, 0.003), "plain": (None, None)}
    results = {(result["run"], result["id"]): result for result in document["results"]}
    unanswered = results[("agent", f"{R1}/2")]  # what an episode without an answer spent is kept with it
    assert (unanswered["outcome"], unanswered["detail"]["meta"]) == (
        "no_prediction", {"calls": 4, "seconds": 4.0, "stop": "none", "tokens": {"output": 7}})
    assert [call["usage"] for call in results[("agent", f"{R1}/0")]["detail"]["calls"][:1]] == [
        {"input_tokens": 100, "output_tokens": 10, "cost": 0.01}]
    assert results[("agent", f"{R1}/0")]["paper"] == "pass"


def test_the_csv_report_has_every_known_value(scored: tuple[str, Path]) -> None:
    rows = list(csv.DictReader(io.StringIO((scored[1] / "s.csv").read_text())))
    names = {column.name for column in COLUMNS}
    found: dict[tuple[str, str], dict[str, str]] = {}
    for row in rows:
        if row["metric"] in names:
            found.setdefault((row["run"], f"{row['config']}/{row['template']}"), {})[row["metric"]] = row["value"]
            assert (row["model"], row["method"]) == {"agent": ("agent-model", "agent"),
                                                     "tokens": ("", "")}[row["run"]]

    def known(values: dict) -> dict[str, str]:
        return {name: str(value) for name, value in values.items() if value is not None}
    assert found == {**{("agent", line): known(values) for line, values in zip(
        LINES, (AGENT_R1, AGENT_R2, AGENT_ALL, AGENT_ALL), strict=True)},
        **{("tokens", line): known(TOKENS_R1) for line in ("raster_only/R1", "raster_only/all", "total/all")}}


# The console and HTML show the columns some line has; a sparse one (refusal reasons, python) only where not 0.
SHOWN = ["calls", "not charged", "clients", "refused", "refused over submitted", "refused over budget",
         "refused too long", "refused answer unreadable", "refused several statements", "refused privilege",
         "refused unknown", "query errors", "budget stops", "tool s", "python", "python nonzero exit", "python killed",
         "python timeout", "python lost", "python s", "input tokens", "output tokens", "cost $"]
CONSOLE_AGENT = ["16", "1", "3", "6", "0", "1", "1", "1", "1", "1", "1", "1", "1", "19.0", "7", "1", "1", "1", "1",
                 "17.0", "350", "42", "0.0300"]
CONSOLE_R2 = ["2", "1", "1", "1", "1", "0", "0", "0", "0", "0", "0", "0", "0", "0.2", "0", "0", "0", "0", "0", "0.0",
              "1,000", "100", "0.5000"]
CONSOLE_ALL = ["18", "2", "3", "7", "1", "1", "1", "1", "1", "1", "1", "1", "1", "19.2", "7", "1", "1", "1", "1",
               "17.0", "1,350", "142", "0.5300"]
CONSOLE_TOKENS = ["-"] * 20 + ["70", "7", "0.0030"]


def test_the_console_prints_the_columns_some_line_has(scored: tuple[str, Path]) -> None:
    stdout = scored[0]
    block = stdout.split("usage: the agent's tool calls and the model's tokens and cost (-: not known)\n")[1]
    header, *rows = block.split("\n\n")[0].splitlines()
    assert re.split(r"\s{2,}", header) == ["run", "config", "template", *SHOWN]
    assert [row.split() for row in rows] == [
        ["agent", "raster_only", "R1", *CONSOLE_AGENT], ["agent", "raster_only", "R2", *CONSOLE_R2],
        ["agent", "raster_only", "all", *CONSOLE_ALL], ["agent", "total", *CONSOLE_ALL],
        ["tokens", "raster_only", "R1", *CONSOLE_TOKENS], ["tokens", "raster_only", "R2", *["-"] * 23],
        ["tokens", "raster_only", "all", *CONSOLE_TOKENS], ["tokens", "total", *CONSOLE_TOKENS]]
    assert "; tokens input 1,350, output 142; cost $0.5300\n" in stdout  # the agent's run line
    assert "run plain: 1 predictions from " in stdout and "plain.jsonl\n" in stdout  # nothing known: nothing said


def test_the_html_page_has_the_same_table(scored: tuple[str, Path]) -> None:
    page = (scored[1] / "s.html").read_text()
    table = page.split("<h2>Usage</h2>")[1].split("</table>")[0]
    headers = [html.unescape(cell) for cell in re.findall(r"<th[^>]*>([^<]*)</th>", table)]
    assert headers == ["run", "config", "template", *SHOWN]
    rows = [[html.unescape(cell) for cell in re.findall(r"<td[^>]*>([^<]*)</td>", row)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.split("<tbody>")[1])]
    shown = [column.name for column in COLUMNS if column.label in SHOWN]

    def cells(values: dict) -> list[str]:
        return ["-" if values[name] is None else str(values[name]) for name in shown]
    assert rows == [["agent", "raster_only", "R1", *cells(AGENT_R1)],
                    ["agent", "raster_only", "R2", *cells(AGENT_R2)],
                    ["agent", "raster_only", "all", *cells(AGENT_ALL)], ["agent", "total", "all", *cells(AGENT_ALL)],
                    ["tokens", "raster_only", "R1", *cells(TOKENS_R1)],
                    ["tokens", "raster_only", "R2", *cells(NO_CALLS)],
                    ["tokens", "raster_only", "all", *cells(TOKENS_R1)], ["tokens", "total", "all", *cells(TOKENS_R1)]]
    runs = page.split("<h2>Runs</h2>")[1].split("</table>")[0]
    assert "<th>tokens and cost</th>" in runs and "<td>tokens input 1,350, output 142; cost $0.5300</td>" in runs
    # each question's card: its usage, and each call's
    card = page.split(f"<code>{R1}/0</code> run <b>agent</b>")[1].split("</details></div>")[0]
    assert "<p>The model's usage: tokens input 350, output 35; cost $0.0300</p>" in card
    assert "<li><b>query</b> rows, 1 rows (0.5 s, input tokens 200, output tokens 20, cost $0.02)</li>" in card
    tokens_card = page.split(f"<code>{R2}/0</code> run <b>tokens</b>")[1].split("</details></div>")[0]
    assert "<p>The model's usage: tokens 123</p>" in tokens_card


def test_a_report_without_calls_or_usage_has_no_usage_section(tmp_path: Path) -> None:
    plain = write_jsonl(tmp_path / "plain.jsonl", [{"id": f"{R1}/0", "answer": 286.0}])
    done = reproduce("score", plain, "--config", "raster_only", "--template", "R1", "--data", BENCHMARK,
                     "--json-out", tmp_path / "s.json", "--csv-out", tmp_path / "s.csv", "--html", tmp_path / "s.html")
    assert done.returncode == 0, done.stderr
    assert "usage" not in done.stdout and "tokens" not in done.stdout
    assert json.loads((tmp_path / "s.json").read_text())["usage"] == {}
    names = {column.name for column in COLUMNS}
    assert not [row for row in csv.DictReader(io.StringIO((tmp_path / "s.csv").read_text())) if row["metric"] in names]
    page = (tmp_path / "s.html").read_text()
    assert "<h2>Usage</h2>" not in page and "tokens and cost" not in page


def test_tokens_and_costs_that_are_no_amounts_are_not_counted(tmp_path: Path) -> None:
    """NaN, the infinities, negative numbers and numbers past MAX_AMOUNT (a predictions file may hold any of
    them) are no amounts: not counted, and every report stays strict JSON."""
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"id": "' + R1 + '/0", "answer": 286.0, "tokens": {"input": NaN, "output": -5}, "cost": Infinity}\n'
                   '{"id": "' + R1 + '/1", "answer": 185.0, "tokens": {"input": 1e999, "output": 1e16}, "cost": -1}\n')
    done = reproduce("score", odd, "--config", "raster_only", "--template", "R1", "--data", BENCHMARK,
                     "--json-out", tmp_path / "s.json")
    assert done.returncode == 0, done.stderr
    assert "usage: " not in done.stdout and "; tokens " not in done.stdout and "cost $" not in done.stdout
    document = json.loads((tmp_path / "s.json").read_text(), parse_constant=lambda name: pytest.fail(name))
    assert document["usage"] == {}


def test_an_agent_that_answered_nothing_is_scored_with_what_it_spent(tmp_path: Path) -> None:
    """A trajectory without a submission is a run of its own: every question wrong, its calls and usage kept."""
    path = tmp_path / "silent.jsonl"
    writer = trajectory.Writer(path)
    for line in [trajectory.line_of("run", model="agent-model", method="agent"),
                 *episode(f"{R1}/0", ("a", "query", "error", 0.5, {
                     "error": "division by zero", **usage(input_tokens=100, output_tokens=10, cost=0.01)}))]:
        writer.write(line)
    writer.close()
    done = reproduce("score", path, "--config", "raster_only", "--template", "R1", "--data", BENCHMARK,
                     "--json-out", tmp_path / "s.json")
    assert done.returncode == 0, done.stderr
    document = json.loads((tmp_path / "s.json").read_text())
    assert document["usage"]["silent"]["raster_only/R1"] == {
        **NO_CALLS, "calls": 1, "not_charged": 0, "clients": 1, "refused": 0, "query_errors": 1, "budget_stops": 0,
        "tool_seconds": 0.5, "python_calls": 0, "python_seconds": 0.0, "input_tokens": 100, "output_tokens": 10,
        "cost": 0.01, **{name: 0 for name in NO_CALLS if name.startswith(("refused_", "python_"))
                         and name != "python_seconds"}}
    assert "; tokens input 100, output 10; cost $0.0100" in done.stdout


def test_the_documented_columns_are_the_declaration() -> None:
    assert columns_markdown() in (DATA.parent.parent / "docs" / "BENCHMARK-FORMAT.md").read_text()


def test_an_episode_s_usage_is_what_its_calls_give(tmp_path: Path) -> None:
    """Summed over the calls that carry it, each member on its own; none given is none, not zero."""
    found = trajectory.read(write_trajectory(tmp_path / "t.jsonl")).episodes
    assert found[f"{R1}/0"].usage == {"tokens": {"input": 350, "output": 35}, "cost": 0.03}
    assert found[f"{R1}/1"].usage == {}
    assert found[f"{R1}/2"].usage == {"tokens": {"output": 7}}


@pytest.mark.usefixtures("inspect_offline")
def test_an_inspect_log_s_tokens_and_cost_reach_the_console_and_the_page(demo, gold, tmp_path: Path) -> None:
    """inspect_helpers.usage: question n of the five costs 100 + n tokens in, 10 + n out, 0.125 (n + 1) dollars."""
    def gold_sql(question: str, messages: list) -> ModelOutput:
        return ModelOutput.from_content("mockllm/model", f"```sql\n{gold[question].sql}\n```")
    log = run("gsqa_refdb/text2sql", demo, scripted(gold_sql), tmp_path / "logs")
    ids = [arg for question in QUESTIONS for arg in ("--id", question)]
    done = reproduce("score", log.location, "--config", "raster_only", *ids, "--data", demo[1], "--dsn", demo[0],
                     "--html", tmp_path / "s.html")
    assert done.returncode == 0, done.stderr
    block = done.stdout.split("usage: the agent's tool calls and the model's tokens and cost (-: not known)\n")[1]
    header, *rows = block.split("\n\n")[0].splitlines()
    name = Path(log.location).stem
    assert re.split(r"\s{2,}", header) == ["run", "config", "template", "input tokens", "output tokens", "cost $"]
    assert [row.split()[1:] for row in rows] == [["raster_only", "R1", "510", "60", "1.8750"],
                                                 ["raster_only", "all", "510", "60", "1.8750"],
                                                 ["total", "510", "60", "1.8750"]]
    assert all(row.startswith(f"{name}  ") for row in rows)
    assert "; tokens input 510, output 60, total 570; cost $1.8750\n" in done.stdout
    table = (tmp_path / "s.html").read_text().split("<h2>Usage</h2>")[1].split("</table>")[0]
    assert f"<tr><td>{name}</td><td>raster_only</td><td>R1</td><td class='num'>510</td><td class='num'>60</td>" \
           "<td class='num'>1.875</td></tr>" in table


@pytest.mark.docker
def test_a_served_agent_s_calls_are_summed_as_its_trajectory_has_them(demo, demo_export: Path,
                                                                        image: str, tmp_path: Path) -> None:  # noqa: F811
    """`reproduce serve`'s own tools (SQL and run_python in the sandbox container, a budget of 4 calls) write the
    trajectory; its summary counts what they wrote."""
    path = tmp_path / "run.jsonl"
    gold = {record.id: record for record in dataset.load(demo[1], [configs.template("R1")]).records}
    served = ServeRequest(config="raster_only", templates=["R1"], data=demo[1], dsn=demo[0], trajectory=path,
                          tools="sql,python", export=demo_export, max_calls=4, model="scripted")
    with open_tools(served) as tools:
        tools.schema()  # no question's: in no line
        tools.question(f"{R1}/0")
        rows = tools.query(f"{R1}/0", gold[f"{R1}/0"].sql)["rows"]
        with pytest.raises(ToolRefused, match="only a query runs here"):
            tools.query(f"{R1}/0", "DELETE FROM pois")
        tools.submit_answer(f"{R1}/0", rows)
        outcomes = [tools.run_python(f"{R1}/1", code)["outcome"] for code in (
            "print(1)", "raise SystemExit(3)", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")]
        assert outcomes == ["ok", "error", "killed"]
        tools.query(f"{R1}/1", "SELECT 1 AS elevation")  # the fourth call: the budget ends the episode
        with pytest.raises(ToolRefused, match="budget is spent"):
            tools.submit_answer(f"{R1}/1", 1)
    done = reproduce("score", path, "--config", "raster_only", "--template", "R1", "--data", demo[1],
                     "--json-out", tmp_path / "s.json")
    assert done.returncode == 0, done.stderr
    calls = [line for line in map(json.loads, path.read_text().splitlines())
             if line["type"] == "call" and line["question_id"]]
    python = [line for line in calls if line["tool"] == "run_python"]
    found = json.loads((tmp_path / "s.json").read_text())["usage"]["run"]["raster_only/R1"]
    assert {name: value for name, value in found.items() if value} == {
        "calls": 9, "not_charged": 1, "refused": 2, "refused_not_a_query": 1, "refused_over_budget": 1,
        "budget_stops": 1,
        "tool_seconds": round(sum(line["seconds"] for line in calls), 3), "python_calls": 3,
        "python_nonzero_exit": 1, "python_killed": 1,
        "python_seconds": round(sum(line["seconds"] for line in python), 3)}


def test_a_refused_line_without_a_known_code_is_counted_as_unknown_so_every_refusal_has_a_column() -> None:
    from reproduce.reports.usage import _reason

    assert [_reason({"refused": code}) for code in ("nul_byte", "made_up_code", None, 7)] == [
        "nul_byte", "unknown", "unknown", "unknown"]
    assert _reason({}) == "unknown"
