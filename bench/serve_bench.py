"""Benchmark of `reproduce serve`: what a query call costs on top of the SQL, through each way an agent reaches
it, what a reply of about 1 MB costs and what of it the agent gets, and how many calls per second one HTTP
server takes from several agents at once.

The input is the README's demo database (`ingest demo-data`, `ingest all --offline`) and its 20 R1 questions
(raster_only/elevation+poi/0..19), served with budgets too large to stop anything.

1. Query overhead: the same calls along five paths, in three workloads: the R1 gold SQL of the 20 questions in
   turn and the trivial `SELECT 1` (--calls of each per run), and `1 MB text` (--reply-calls per run): one query
   of ServeRequest.max_rows rows (the rows a reply carries) of texts REPORTED_CHARACTERS long (the longest a
   reply keeps whole), enough columns for about REPLY_BYTES of values as text, which serve's reply cap
   (gate.MAX_REPLY_BYTES) cuts to its first rows. The paths:
     (a) psycopg directly as the sandbox model role gsqa_model (one connection, autocommit, execute + fetchall):
         the SQL's own cost, the baseline;
     (b) tools.query, the plain-Python tool (reproduce/serve/tools.py: pool, gate, SET LOCAL, the value cap's
         savepoint and describes, WKT, the reply fitted to its cap, rollback, DISCARD ALL, the trajectory line);
     (c) an in-process MCP client (mcp.Client(mcp_server(tools))): (b) plus the SDK's dispatch, argument
         validation, the worker thread and the result's JSON;
     (d) streamable HTTP to a `reproduce serve --transport http` subprocess, one client session: (c) plus
         HTTP, JSON-RPC framing and the event stream;
     (e) stdio to a `reproduce serve` subprocess started and driven by the SDK's client (stdio_client), as an
         agent's harness does: (c) plus the pipes and JSON-RPC framing.
   Per path: ms per call (the median over --runs repetitions of each repetition's mean, [min-max]), p95 of the
   single calls, the overhead over (a) in ms per call, wall and CPU seconds per repetition (this process; for (d)
   and (e) also the server's, from /proc), peak RSS (this process, and the server for (d) and (e)). The paths
   are interleaved within each repetition, after one warm-up pass of each. Target: the overhead of (d) and (e),
   through HTTP and stdio, under TARGET_OVERHEAD_MS per call on the R1 gold and SELECT 1 workloads. Then what
   the agent gets of the 1 MB text query: the bytes of values psycopg fetched, and per path (b) to (e) the
   bytes of the reply's text and the rows it kept of those the query returned.
2. HTTP throughput: --clients concurrent MCP clients over HTTP (asyncio tasks, each its own session on its own
   question ids), each making --http-calls query calls with the gold SQL: calls per second (median of --runs
   [min-max]), CPU of both sides, and the server's database connections, sampled from pg_stat_activity during
   the run (application_name gsqa-serve, and every gsqa_model session in the bench database): never more than
   the server's --connections (the bench exits 1 if they are). Target: TARGET_RATE calls per second (the
   median) with TARGET_CLIENTS clients.

Usage: .venv/bin/python bench/serve_bench.py [--calls 200] [--reply-calls 50] [--http-calls 100] [--clients 8]
       [--connections 8] [--runs 3] [--dsn postgresql://postgres@localhost/postgres] [--keep]
Needs a PostgreSQL with PostGIS (--dsn: an admin DSN of the server); creates and drops the database
gsqa_bench_serve there (--keep leaves it, and the demo data folder, to try `reproduce serve` on).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import mcp
import psycopg
from mcp.client.stdio import StdioServerParameters, stdio_client
from psycopg import sql
from psycopg.conninfo import make_conninfo

from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import MODEL
from reproduce import configs, dataset, gate
from reproduce.predictions import trajectory
from reproduce.serve.protocol import mcp_server
from reproduce.serve.replies import reply_text
from reproduce.serve.tools import ServeRequest, Tools, open_tools
from reproduce.session import REPORTED_CHARACTERS
from testkit.serve import BIN, HttpServer, http_server

DATABASE = "gsqa_bench_serve"
CONFIG = "raster_only"
SERVE_APPLICATION = "gsqa-serve"  # reproduce/serve/pool.py APPLICATION_NAME
DIRECT_APPLICATION = "gsqa-bench-direct"
HUGE = 1_000_000  # --max-calls and --max-seconds: no budget ever stops the bench
PATHS = {"a": "(a) psycopg direct", "b": "(b) tools.query", "c": "(c) MCP in-process", "d": "(d) MCP over HTTP",
         "e": "(e) MCP over stdio"}
SERVERS = ("d", "e")  # the paths through a `reproduce serve` subprocess
GOLD, ONE, TEXT = "R1 gold", "SELECT 1", "1 MB text"  # the workloads
REPLY_BYTES = 1_000_000  # the TEXT query's values as text, before serve's reply cap
TARGET_OVERHEAD_MS = 5  # of each path in SERVERS over (a), on GOLD and ONE
TARGET_RATE, TARGET_CLIENTS = 250, 8  # HTTP throughput: calls per second with that many clients

Work = list[tuple[str, str]]  # (question id, SQL) per call


# --- the database ---------------------------------------------------------------------------------------------


def create_database(admin: str, folder: Path) -> tuple[str, Path]:
    """The demo data written to folder/data and loaded into a fresh DATABASE: (its DSN, the benchmark folder)."""
    data = folder / "data"
    run([str(BIN / "ingest"), "demo-data", str(data)])
    drop_database(admin)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    dsn = make_conninfo(admin, dbname=DATABASE)
    run([str(BIN / "ingest"), "all", str(data), "--offline", "--dsn", dsn])
    return dsn, data / "benchmark"


def drop_database(admin: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(DATABASE)))


def run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(command[:2])} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")


# --- processes: CPU and peak memory ---------------------------------------------------------------------------


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU of a process, all its threads (/proc/PID/stat, clock ticks)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int | str = "self") -> None:
    """Start the process's peak resident size again from its current size (Linux: clear_refs 5)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as handle:
        handle.write("5")


def peak_mb(pid: int | str = "self") -> float:
    """The process's peak resident size since reset_peak (VmHWM), else since it started."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- the servers ----------------------------------------------------------------------------------------------


def serve_args(dsn: str, data: Path, connections: int, path: Path) -> list[str]:
    """`reproduce serve` on the bench's questions, budgets too large to stop anything, its trajectory at path."""
    return ["serve", "--config", CONFIG, "--data", str(data), "--dsn", dsn, "--max-calls", str(HUGE),
            "--max-seconds", str(HUGE), "--connections", str(connections), "--trajectory", str(path)]


def serving(dsn: str, data: Path, folder: Path, connections: int) -> contextlib.AbstractContextManager[HttpServer]:
    """`reproduce serve --transport http`, its stderr in folder/serve.log."""
    return http_server([*serve_args(dsn, data, connections, folder / "http.jsonl"), "--host", "127.0.0.1"],
                       folder / "serve.log")


def stdio_client_of(dsn: str, data: Path, folder: Path, connections: int, errlog: TextIO) -> mcp.Client:
    """The SDK's client of a `reproduce serve` subprocess over stdio (stdio_client starts it, as an agent's
    harness does, and stops it when the client closes), its stderr to errlog; stdio_pid says its process."""
    command = StdioServerParameters(command=str(BIN / "reproduce"),
                                    args=serve_args(dsn, data, connections, folder / "stdio.jsonl"))
    return mcp.Client(stdio_client(command, errlog=errlog))


def stdio_pid(folder: Path) -> int:
    """The process of stdio_client_of's server, as its trajectory's first line says (written as it opened)."""
    return trajectory.read(folder / "stdio.jsonl").header["pid"]


# --- the paths ------------------------------------------------------------------------------------------------


def direct_calls(conn: psycopg.Connection) -> Callable[[Work], Awaitable[list[float]]]:
    def calls(work: Work) -> list[float]:
        latencies = []
        for _, statement in work:
            start = time.perf_counter()
            conn.execute(statement).fetchall()
            latencies.append(time.perf_counter() - start)
        return latencies
    return lambda work: asyncio.to_thread(calls, work)


def tool_calls(tools: Tools) -> Callable[[Work], Awaitable[list[float]]]:
    def calls(work: Work) -> list[float]:
        latencies = []
        for question_id, statement in work:
            start = time.perf_counter()
            tools.query(question_id, statement)
            latencies.append(time.perf_counter() - start)
        return latencies
    return lambda work: asyncio.to_thread(calls, work)


async def mcp_query(client: mcp.Client, question_id: str, statement: str) -> str:
    """The query tool's reply as the agent gets it (SystemExit if it is an error)."""
    result = await client.call_tool("query", {"question_id": question_id, "sql": statement})
    if result.is_error:
        raise SystemExit(f"query {question_id} failed over MCP: {result.content}")
    return result.content[0].text


def mcp_calls(client: mcp.Client) -> Callable[[Work], Awaitable[list[float]]]:
    async def calls(work: Work) -> list[float]:
        latencies = []
        for question_id, statement in work:
            start = time.perf_counter()
            await mcp_query(client, question_id, statement)
            latencies.append(time.perf_counter() - start)
        return latencies
    return calls


@dataclass
class Repetition:
    """One repetition of a path on a workload."""

    wall: float
    cpu: float
    latencies: list[float]
    peak_mb: float
    server_cpu: float | None = None
    server_peak_mb: float | None = None


async def measured(calls: Callable[[Work], Awaitable[list[float]]], work: Work, server: int | None) -> Repetition:
    reset_peak()
    if server:
        reset_peak(server)
    cpu, server_cpu = cpu_seconds(), cpu_seconds(server) if server else 0.0
    start = time.perf_counter()
    latencies = await calls(work)
    wall = time.perf_counter() - start
    return Repetition(wall, cpu_seconds() - cpu, latencies, peak_mb(),
                      cpu_seconds(server) - server_cpu if server else None, peak_mb(server) if server else None)


# --- 1. query overhead ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Got:
    """What one call of a query gives: its bytes, and the rows in it of those the query returned."""

    size: int  # (a): of the values psycopg fetched, as text; the others: of the reply's text as the agent gets it
    rows: int
    of: int


@dataclass
class Overhead:
    workloads: dict[str, Work]
    runs: dict[tuple[str, str], list[Repetition]] = field(default_factory=dict)  # (workload, path)
    got: dict[str, Got] = field(default_factory=dict)  # path -> one call of the TEXT query


async def overhead(dsn: str, data: Path, folder: Path, server: HttpServer, work: dict[str, Work], runs: int,
                   connections: int) -> Overhead:
    found = Overhead(work)
    request = ServeRequest(config=CONFIG, data=data, dsn=dsn, max_calls=HUGE, max_seconds=HUGE,
                           trajectory=folder / "in-process.jsonl")
    with psycopg.connect(login_dsn(dsn, MODEL), autocommit=True, application_name=DIRECT_APPLICATION) as conn, \
            open_tools(request) as tools, open(folder / "stdio.log", "w") as errlog:
        async with mcp.Client(mcp_server(tools)) as local, server.client() as remote, \
                stdio_client_of(dsn, data, folder, connections, errlog) as stdio:
            clients = {"c": local, "d": remote, "e": stdio}
            paths = {"a": direct_calls(conn), "b": tool_calls(tools)} | {
                path: mcp_calls(client) for path, client in clients.items()}
            pids = dict(zip(SERVERS, (server.process.pid, stdio_pid(folder)), strict=True))
            for calls in paths.values():  # warm-up: connections, caches, the schema read in the background
                for workload in work.values():
                    await calls(workload[:20])
            for _ in range(runs):
                for name, workload in work.items():
                    for path, calls in paths.items():
                        found.runs.setdefault((name, path), []).append(await measured(calls, workload, pids.get(path)))
            found.got = await what_agents_get(conn, tools, clients, *work[TEXT][0])
    return found


async def what_agents_get(conn: psycopg.Connection, tools: Tools, clients: dict[str, mcp.Client], question_id: str,
                          statement: str) -> dict[str, Got]:
    """One call of the statement along each path."""
    rows = conn.execute(statement).fetchall()
    got = {"a": Got(sum(len(str(value).encode()) for row in rows for value in row), len(rows), len(rows))}
    texts = {"b": reply_text(await asyncio.to_thread(tools.query, question_id, statement))}
    texts |= {path: await mcp_query(client, question_id, statement) for path, client in clients.items()}
    for path, text in texts.items():
        reply = json.loads(text)
        got[path] = Got(len(text.encode()), len(reply["rows"]), reply["row_count"])
    return got


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def per_call_ms(repetitions: list[Repetition]) -> list[float]:
    return [r.wall / len(r.latencies) * 1000 for r in repetitions]


def print_overhead(found: Overhead, runs: int) -> None:
    """The table, the target's verdict and what the agent gets of the TEXT query."""
    counts = ", ".join(f"{len(work)} of {name}" for name, work in found.workloads.items())
    print(f"\n1. query overhead: calls per path and run: {counts}; {runs} run(s); ms/call: median of the runs' means "
          "[min-max]; wall and CPU: median per run; peak RSS: largest")
    print(f"{'path':<21} {'workload':<9} {'ms/call':>25} {'p95 ms':>7} {'over (a)':>9} {'wall s':>7} "
          f"{'CPU s client':>12} {'CPU s server':>12} {'peak RSS MB':>16}")
    over = {}
    for name in found.workloads:
        base = statistics.median(per_call_ms(found.runs[(name, "a")]))
        for path, label in PATHS.items():
            over[(name, path)] = print_path(f"{label:<21} {name:<9}", found.runs[(name, path)], base, path == "a")
    targeted = {key: value for key, value in over.items() if key[0] in (GOLD, ONE) and key[1] in SERVERS}
    verdict = "met" if all(value < TARGET_OVERHEAD_MS for value in targeted.values()) else "NOT met"
    said = ", ".join(f"{PATHS[path][:3]} {name} {value:+.3f} ms" for (name, path), value in targeted.items())
    print(f"target: overhead over (a) through HTTP (d) and stdio (e) < {TARGET_OVERHEAD_MS} ms/call: {said}: "
          f"{verdict}")
    direct = found.got["a"]
    print(f"{TEXT}: psycopg fetches {direct.of} rows, {direct.size:,} bytes of values as text; the agent gets "
          f"(serve's reply cap: {gate.MAX_REPLY_BYTES:,} bytes):")
    for path, got in found.got.items():
        if path != "a":
            print(f"  {PATHS[path]:<21} {got.size:>9,} bytes, {got.rows} of {got.of} rows")


def print_path(label: str, repetitions: list[Repetition], base: float, baseline: bool) -> float:
    """One row of the table; returns the path's overhead over (a), ms per call (base: (a)'s)."""
    ms = per_call_ms(repetitions)
    over = statistics.median(ms) - base
    latencies = sorted(latency for r in repetitions for latency in r.latencies)
    p95 = latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))] * 1000
    server_cpu = [r.server_cpu for r in repetitions if r.server_cpu is not None]
    server_peak = [r.server_peak_mb for r in repetitions if r.server_peak_mb is not None]
    rss = f"{max(r.peak_mb for r in repetitions):.0f}" + (f" / {max(server_peak):.0f}" if server_peak else "")
    wall, cpu = statistics.median(r.wall for r in repetitions), statistics.median(r.cpu for r in repetitions)
    print(f"{label} {spread(ms, 3):>25} {p95:>7.3f} {'-' if baseline else f'{over:+.3f}':>9} {wall:>7.3f} {cpu:>12.2f} "
          f"{f'{statistics.median(server_cpu):.2f}' if server_cpu else '-':>12} {rss:>16}")
    return over


# --- 2. HTTP throughput ---------------------------------------------------------------------------------------


class ConnectionSampler:
    """Counts the bench database's sessions in pg_stat_activity every few ms, in a thread, until stopped: the
    largest number with application_name gsqa-serve, and of gsqa_model (any application) seen."""

    def __init__(self, admin: str) -> None:
        self.admin = admin
        self.serve = self.model = self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        query = ("SELECT count(*) FILTER (WHERE application_name = %s), "
                 "count(*) FILTER (WHERE usename = %s AND application_name <> %s) "
                 "FROM pg_stat_activity WHERE datname = %s")
        with psycopg.connect(self.admin, autocommit=True) as conn:
            while not self._stop.is_set():
                serve, model = conn.execute(query, [SERVE_APPLICATION, MODEL.name, DIRECT_APPLICATION,
                                                    DATABASE]).fetchone()
                self.serve, self.model, self.samples = max(self.serve, serve), max(self.model, model), self.samples + 1
                self._stop.wait(0.005)


@dataclass
class Throughput:
    calls: int
    wall: float
    cpu: float
    server_cpu: float
    server_peak_mb: float


async def one_client(server: HttpServer, work: Work, barrier: asyncio.Barrier, times: list[tuple[float, float]]
                     ) -> None:
    async with server.client() as client:
        await barrier.wait()
        start = time.perf_counter()
        await mcp_calls(client)(work)
        times.append((start, time.perf_counter()))


async def throughput_run(server: HttpServer, work: list[Work]) -> Throughput:
    pid = server.process.pid
    reset_peak(pid)
    cpu, server_cpu = cpu_seconds(), cpu_seconds(pid)
    times: list[tuple[float, float]] = []
    barrier = asyncio.Barrier(len(work))
    async with asyncio.TaskGroup() as group:
        for client_work in work:
            group.create_task(one_client(server, client_work, barrier, times))
    wall = max(end for _, end in times) - min(start for start, _ in times)
    return Throughput(sum(map(len, work)), wall, cpu_seconds() - cpu, cpu_seconds(pid) - server_cpu, peak_mb(pid))


async def throughput(admin: str, server: HttpServer, records: list[dataset.Record], clients: int, calls: int,
                     runs: int, connections: int) -> bool:
    """Prints the figures; False if the server had more database connections than --connections."""
    work = []
    for number in range(clients):  # each client on its own questions (reused when there are fewer than clients)
        own = records[number::clients] or [records[number % len(records)]]
        work.append([(own[n % len(own)].id, own[n % len(own)].sql) for n in range(calls)])
    with ConnectionSampler(admin) as sampler:
        found = [await throughput_run(server, work) for _ in range(runs)]
    rates = [t.calls / t.wall for t in found]
    print(f"\n2. HTTP throughput: {clients} concurrent clients x {calls} query calls (R1 gold SQL), one server with "
          f"--connections {connections}, {runs} run(s); median [min-max]")
    print(f"throughput: {spread(rates, 0)} calls/s; wall {spread([t.wall for t in found])} s; CPU client "
          f"{spread([t.cpu for t in found])} s, server {spread([t.server_cpu for t in found])} s; server peak RSS "
          f"{max(t.server_peak_mb for t in found):.0f} MB")
    verdict = ("met" if statistics.median(rates) >= TARGET_RATE else "NOT met") if clients == TARGET_CLIENTS else \
        f"not measured (--clients {clients})"
    print(f"target: >= {TARGET_RATE} calls/s with {TARGET_CLIENTS} clients: {verdict}")
    within = max(sampler.serve, sampler.model) <= connections
    print(f"connections: at most {sampler.serve} with application_name {SERVE_APPLICATION}, {sampler.model} of "
          f"{MODEL.name} in {DATABASE} (any application) over {sampler.samples} samples; --connections "
          f"{connections}: {'within' if within else 'EXCEEDED'}")
    if sampler.model and not sampler.serve:
        print(f"note: none of the server's {MODEL.name} sessions had application_name {SERVE_APPLICATION}")
    return within


# --- main -----------------------------------------------------------------------------------------------------


def workloads(records: list[dataset.Record], calls: int, reply_calls: int) -> dict[str, Work]:
    gold = [(records[n % len(records)].id, records[n % len(records)].sql) for n in range(calls)]
    ids = [records[n % len(records)].id for n in range(reply_calls)]
    return {GOLD: gold, ONE: [(question_id, "SELECT 1") for question_id, _ in gold],
            TEXT: [(question_id, text_sql()) for question_id in ids]}


def text_sql() -> str:
    """The TEXT query: as many rows as a reply carries, of texts as long as a reply keeps whole (each ending in its
    row's number), in as many columns as make REPLY_BYTES."""
    rows, width = ServeRequest.max_rows, REPORTED_CHARACTERS
    texts = ", ".join(f"lpad(n::text, {width}, 'abcdefghij') AS t{k}" for k in range(-(-REPLY_BYTES // (rows * width))))
    return f"SELECT {texts} FROM generate_series(1, {rows}) AS n"


async def bench(args: argparse.Namespace, dsn: str, data: Path, folder: Path) -> bool:
    records = dataset.load(data, [configs.template("R1")]).records
    with serving(dsn, data, folder, args.connections) as server:
        found = await overhead(dsn, data, folder, server, workloads(records, args.calls, args.reply_calls), args.runs,
                               args.connections)
        print_overhead(found, args.runs)
        return await throughput(args.dsn, server, records, args.clients, args.http_calls, args.runs,
                                args.connections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@localhost/postgres",
                        help=f"admin DSN of the server where {DATABASE} is made (default: %(default)s)")
    parser.add_argument("--calls", type=int, default=200,
                        help=f"query calls per path and run in the workloads {GOLD!r} and {ONE!r}")
    parser.add_argument("--reply-calls", type=int, default=50,
                        help=f"query calls per path and run in the workload {TEXT!r}")
    parser.add_argument("--http-calls", type=int, default=100, help="query calls per client in the throughput run")
    parser.add_argument("--clients", type=int, default=8, help="concurrent HTTP clients in the throughput run")
    parser.add_argument("--connections", type=int, default=8, help="the servers' --connections")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each measurement")
    parser.add_argument("--keep", action="store_true", help=f"leave the database {DATABASE} and the demo data")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    within = False
    try:
        start = time.perf_counter()
        dsn, data = create_database(args.dsn, folder)
        with psycopg.connect(dsn) as conn:
            version = conn.execute("SELECT version()").fetchone()[0]
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
        print(f"server: {version}; cores: {os.cpu_count()}; load average before: {load}; demo database made in "
              f"{time.perf_counter() - start:.1f} s")
        within = asyncio.run(bench(args, dsn, data, folder))
    finally:
        if args.keep:
            print(f"kept: --dsn {make_conninfo(args.dsn, dbname=DATABASE)} --data {folder / 'data' / 'benchmark'}")
        else:
            drop_database(args.dsn)
            shutil.rmtree(folder, ignore_errors=True)
    if not within:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
