"""Benchmark of `reproduce verify`: harness overhead per question, and the speed-up of parallel workers.

1. Overhead: the real R1 SQL (20 records, repeated) against a fixture dem_us of 1x1-pixel tiles, once in
   one psql session (`psql -f`, as gsqa_reader, minus psql's start-up) and once through the harness
   (Runner with 1 worker: transaction, SET LOCAL, prepared statement, watchdog, rollback, plus judging).
   The difference divided by the number of questions is the overhead per question. Target: < 5 ms.
2. Speed-up: CPU-bound questions (a fixed amount of arithmetic in the server) with 1..N workers.
   Target: >= 1.8x with 2 workers.
3. Judging: the verdict and the strict diff of every real record in --data (default: the repository's
   copy, tests/data/benchmark; a full copy of the benchmark gives the figure for all of it) against its
   own stored answer, per question (runs in the main thread while the workers query).
4. Predictions (--predictions): `reproduce score` as a user runs it. a) Answer-only: a benchmark of the full
   size (3,300 questions: the real records of --data, repeated to each template's count, synthetic rows for the
   templates without a copy) and 4 runs of answers (two thirds the stored answers, a third perturbed), scored
   with every report: wall, CPU and peak memory of the command (median of --runs; target < 10 s). b) SQL: the
   R1 questions as a model's predictions against the same SQL as verify's gold run, on the same fixture: one
   pipeline (reproduce/results.py), so the difference per question is the noise (target: none).
5. Replicas (--replicas): the same questions, CPU-bound and sleep-bound, on one server and on a primary
   plus a hot standby (pg_basebackup -R, testkit/standby.py), --max-workers per server: wall times
   and the speed-up. Then the scheduling model: the makespan of file order against longest first for
   several servers x workers, by list scheduling of the durations of a recorded run (--durations: a
   `reproduce verify --json-out` report or --resume file), or of a synthetic heavy-tailed mix.

Usage: .venv/bin/python bench/reproduce_bench.py [--repeat 15] [--cpu-questions 12] [--max-workers 2] [--keep]
       [--data DIR] [--replicas [--durations FILE]] [--predictions [--runs 3]]
Needs the local PostgreSQL (as for the tests); creates and drops the database gsqa_bench_reproduce (--keep
leaves it, with the R1-R4 and VR1-VR3 fixture in which the stored answers hold, to try `reproduce` on).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import make_conninfo

from gsqa_core.roles import login_dsn
from gsqa_core.sandbox import READER
from ingest.initdb import initialize
from reproduce import configs, dataset
from reproduce.dataset import Record
from reproduce.judging import tolerances
from reproduce.predictions.layouts import Prediction
from reproduce.results import SqlJob, evaluate, gold_job
from reproduce.runner import Outcome, Runner, Server
from reproduce.schedule import earlier_durations
from testkit.refdb import load_stored_answers
from testkit.standby import primary_and_standby

ROOT = Path(__file__).resolve().parent.parent


DATABASE = "gsqa_bench_reproduce"
CPU_SQL = "SELECT sum(sqrt(g::float8)) AS elevation FROM generate_series(1, {n}) AS g"


def create_database() -> str:
    admin = os.environ.get("DATABASE_URL", "")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    dsn = make_conninfo(admin, dbname=DATABASE)
    initialize(dsn)
    return dsn


def drop_database() -> None:
    with psycopg.connect(os.environ.get("DATABASE_URL", ""), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def timed_psql(reader: str, statements: list[str]) -> float:
    """Seconds one psql session needs for the statements, its start-up (an empty script) subtracted."""
    def run(script: str) -> float:
        with tempfile.NamedTemporaryFile("w", suffix=".sql") as handle:
            handle.write(script)
            handle.flush()
            start = time.perf_counter()
            subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-o", os.devnull, "-f", handle.name,
                            reader], check=True)
            return time.perf_counter() - start
    return run("\n".join(statements)) - run("SELECT 1;")


def timed_harness(reader: str, records: list[Record], workers: int, replicas: list[Server] = ()) -> float:
    start = time.perf_counter()
    for job, outcome in Runner(reader, 120.0, workers, replicas=replicas).run([gold_job(r) for r in records]):
        evaluate(job, outcome)
    return time.perf_counter() - start


BENCHMARK = ROOT / "tests" / "data" / "benchmark"
STORED = ["R1", "R2", "R3", "R4", "VR1", "VR2", "VR3"]  # the templates whose stored answers the fixture makes hold


def overhead(dsn: str, reader: str, repeat: int) -> None:
    stored = dataset.load(BENCHMARK, [configs.template(name) for name in STORED]).records
    with psycopg.connect(dsn) as conn:
        load_stored_answers(conn, stored)
    r1 = [record for record in stored if record.template_id == "R1"]
    records = r1 * repeat
    statements = [record.sql.strip() for record in records]
    timed_harness(reader, r1, 1)  # warm the cache
    psql_s, harness_s = timed_psql(reader, statements), timed_harness(reader, records, 1)
    per_question = (harness_s - psql_s) / len(records) * 1000
    print(f"overhead: {len(records)} R1 questions; psql {psql_s:.3f} s, harness {harness_s:.3f} s, "
          f"overhead {per_question:.2f} ms/question (target < 5)")


def speed_up(reader: str, questions: int, max_workers: int, rows: int) -> None:
    records = [Record(f"bench/cpu/{n}", "R1", "bench", "cpu", "", CPU_SQL.format(n=rows), "", [], {})
               for n in range(questions)]
    base = None
    for workers in range(1, max_workers + 1):
        seconds = timed_harness(reader, records, workers)
        base = base or seconds
        print(f"speed-up: {questions} CPU-bound questions, {workers} worker(s): {seconds:.2f} s, "
              f"{base / seconds:.2f}x")


def judging(data: Path) -> None:
    records = dataset.load(data, configs.templates_of("all")).records
    start = time.perf_counter()
    for record in records:
        evaluate(gold_job(record), Outcome("rows", 0.0, record.answers))
    per_question = (time.perf_counter() - start) / len(records) * 1000
    print(f"judging: {len(records)} real records against their stored answers, {per_question:.2f} ms/question")


def replicas(questions: int, max_workers: int, rows: int) -> None:
    with primary_and_standby() as (primary, standby):
        reader = login_dsn(primary.dsn(), READER)
        standby_server = Server("standby", login_dsn(standby.dsn(), READER), standby.dsn())
        for kind, statement in (("CPU-bound", CPU_SQL.format(n=rows)), ("sleep-bound", "SELECT pg_sleep(0.25)")):
            records = [Record(f"bench/{kind}/{n}", "R1", "bench", kind, "", statement, "", [], {})
                       for n in range(questions)]
            one = timed_harness(reader, records, max_workers)
            two = timed_harness(reader, records, max_workers, [standby_server])
            print(f"replicas: {questions} {kind} questions, {max_workers} worker(s) per server: one server "
                  f"{one:.2f} s, primary + standby {two:.2f} s, {one / two:.2f}x")


def full_size_dataset(data: Path, folder: Path) -> list[Record]:
    """Every canonical template at its full count in the raw layouts: real records of `data` repeated, and for
    a template with no copy a synthetic record whose answer has each component's first key."""
    real = dataset.load(data, configs.templates_of("all")).records
    records = []
    for template in configs.templates_of("all"):
        found = [record for record in real if record.template_id == template.id] or [_synthetic(template, real[0])]
        records += [found[n % len(found)] for n in range(template.questions)]
        if template.group == "vector":
            for n in range(template.questions):
                target = folder / "vector" / f"T{template.number}" / f"{n + 1:03d}" / "question.json"
                target.parent.mkdir(parents=True)
                target.write_text(json.dumps(_raw(found[n % len(found)]) | {"type": template.stem}))
        else:
            target = folder / "qa2" / template.group / f"{template.stem}.jsonl"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(json.dumps(_raw(found[n % len(found)])) + "\n"
                                      for n in range(template.questions)))
    return dataset.load(folder, configs.templates_of("all")).records


def _raw(record: Record) -> dict:
    return {"question": record.question, "sql": record.sql, "answers": record.answers,
            "answer_type": record.answer_type, "question_entities": record.question_entities}


def _synthetic(template: configs.Template, like: Record) -> Record:
    row = {component.keys[0]: "Fixture Name" if component.metric is tolerances.NAME else 100.0
           for component in tolerances.components_of(template.id)}
    return Record("", template.id, template.group, template.stem, "?", like.sql, "", [row], {})


def _perturbed(value: object) -> object:
    if isinstance(value, dict):
        return {key: _perturbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_perturbed(item) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value * 1.5 + 11
    return "nothing alike" if isinstance(value, str) else value


def predictions(data: Path, runs: int) -> None:
    """a) answer-only scoring of 4 runs x 3,300 questions as a subprocess, `runs` times."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        records = full_size_dataset(data, folder / "data")
        files = []
        for run in range(4):
            lines = [{"id": record.id, "answer": record.answers if (n + run) % 3 else _perturbed(record.answers)}
                     for n, record in enumerate(records)]
            files.append(folder / f"run{run}.jsonl")
            files[-1].write_text("".join(json.dumps(line) + "\n" for line in lines))
        size = sum(path.stat().st_size for path in files) / 1e6
        command = [str(Path(sys.executable).parent / "reproduce"), "score", *map(str, files), "--data",
                   str(folder / "data")]
        reports = ["--json-out", str(folder / "s.json"), "--csv-out", str(folder / "s.csv"), "--html",
                   str(folder / "s.html"), "--junit", str(folder / "s.xml")]
        for what, argv in (("the table", command), ("every report", command + reports)):
            measured = [timed_command(argv) for _ in range(runs)]
            walls, cpus, peaks = ([m[i] for m in measured] for i in range(3))
            print(f"score, answers only: 4 runs x {len(records):,} questions ({size:.0f} MB of predictions), {what}: "
                  f"wall {_spread(walls, 's')}, CPU {_spread(cpus, 's')}, peak memory {_spread(peaks, 'MB')} "
                  f"(median [min-max] of {runs}; target < 10 s)")


def timed_command(command: list[str]) -> tuple[float, float, float]:
    """Wall and CPU seconds and peak resident MB of one command (a fresh process for each, so ru_maxrss of
    the children is this one's: measured in a forked child that waits for it)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        report = f"{time.perf_counter() - start} {usage.ru_utime + usage.ru_stime} {usage.ru_maxrss / 1024} " \
                 f"{done.returncode}"
        os.write(write, report.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        wall, cpu, peak, code = pipe.read().split()
    os.waitpid(child, 0)
    if code != "0":
        raise SystemExit(f"{' '.join(command[:3])} ... exited {code}")
    return float(wall), float(cpu), float(peak)


def _spread(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):.2f} {unit} [{min(values):.2f}-{max(values):.2f}]"


def sql_scoring(dsn: str, reader: str, repeat: int) -> None:
    """b) the R1 SQL as a model's predictions against verify's gold run of it, interleaved, per question."""
    r1 = [record for record in dataset.load(BENCHMARK, [configs.template("R1")]).records] * repeat
    jobs = [SqlJob("bench", record, Prediction(record.id, "bench", (record.sql,))) for record in r1]
    verify_s, score_s = [], []
    for _ in range(3):
        verify_s.append(timed_harness(reader, r1, 1))
        start = time.perf_counter()
        for job, outcome in Runner(reader, 120.0, 1).run(jobs):
            evaluate(job, outcome)
        score_s.append(time.perf_counter() - start)
    per = [(s - v) / len(r1) * 1000 for s, v in zip(score_s, verify_s, strict=True)]
    print(f"score, SQL: {len(r1)} R1 questions, 1 worker: verify {_spread(verify_s, 's')}, score "
          f"{_spread(score_s, 's')}; score minus verify {_spread(per, 'ms/question')}")


def synthetic_durations(seed: int = 7) -> list[float]:
    """3,300 questions in 33 templates of 100, in template order: 21 light templates (median 0.3 s), 8 medium
    (5 s), 4 heavy (60 s, capped at the 120 s timeout), lognormal within a template."""
    rng = random.Random(seed)
    classes = [0.3] * 21 + [5.0] * 8 + [60.0] * 4
    rng.shuffle(classes)
    return [min(120.0, rng.lognormvariate(0, 0.8) * median) for median in classes for _ in range(100)]


def makespan(durations: list[float], slots: int) -> float:
    """The wall time of list scheduling: each question goes to the first free slot (worker), in order."""
    free = [0.0] * slots
    for seconds in durations:
        heapq.heappush(free, heapq.heappop(free) + seconds)
    return max(free)


def schedule_model(durations: list[float], source: str) -> None:
    print(f"scheduling model: {len(durations)} questions, {sum(durations):,.0f} s in all ({source})")
    for servers, workers in ((1, 2), (2, 2), (1, 8), (2, 8), (4, 8)):
        slots = servers * workers
        given, longest = makespan(durations, slots), makespan(sorted(durations, reverse=True), slots)
        heavy_last = makespan(sorted(durations), slots)  # file order at its worst: the heavy templates at the end
        bound = max(sum(durations) / slots, max(durations))
        print(f"  {servers} server(s) x {workers} workers: file order {given:,.0f} s (heavy last {heavy_last:,.0f} s), "
              f"longest first {longest:,.0f} s ({given / longest:.2f}x, {heavy_last / longest:.2f}x), "
              f"lower bound {bound:,.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="R1 records are repeated this often (20 each)")
    parser.add_argument("--cpu-questions", type=int, default=12)
    parser.add_argument("--cpu-rows", type=int, default=2_000_000, help="generate_series size per CPU question")
    parser.add_argument("--max-workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help=f"leave the database {DATABASE} in place")
    parser.add_argument("--data", type=Path, default=BENCHMARK, help="records to judge (default: %(default)s)")
    parser.add_argument("--replicas", action="store_true", help="only case 4: a primary and a standby, the model")
    parser.add_argument("--durations", type=Path, help="a recorded run for the scheduling model")
    parser.add_argument("--predictions", action="store_true", help="only case 4: `reproduce score`")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of the answer-only scoring")
    args = parser.parse_args()
    if args.predictions:
        predictions(args.data, args.runs)
        dsn = create_database()
        try:
            with psycopg.connect(dsn) as conn:
                load_stored_answers(conn, dataset.load(BENCHMARK, [configs.template(n) for n in STORED]).records)
            sql_scoring(dsn, login_dsn(dsn, READER), args.repeat)
        finally:
            drop_database()
        return
    if args.replicas:
        replicas(args.cpu_questions, args.max_workers, args.cpu_rows)
        durations = earlier_durations(args.durations) if args.durations else None
        schedule_model(list(durations.values()) if durations else synthetic_durations(),
                       str(args.durations) if durations else "synthetic mix, seed 7")
        return
    dsn = create_database()
    reader = login_dsn(dsn, READER)
    try:
        with psycopg.connect(dsn) as conn:
            version = conn.execute("SELECT version()").fetchone()[0]
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
        print(f"server: {version}; cores: {os.cpu_count()}; load average before: {load}")
        overhead(dsn, reader, args.repeat)
        speed_up(reader, args.cpu_questions, args.max_workers, args.cpu_rows)
        judging(args.data)
    finally:
        if args.keep:
            print(f"kept: --dsn {dsn}")
        else:
            drop_database()


if __name__ == "__main__":
    main()
