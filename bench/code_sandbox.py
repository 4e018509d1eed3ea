"""Benchmark of the code agents' container (reproduce/serve/python_sandbox.py): what a `run_python` call costs.

Measured, each --runs times (median [min-max]):
- the first call of an episode (`print(1)`: the container starts), and the episode's end (the container removed);
- later calls: `print(1)`; one row group of pois.parquet read with pyarrow; pois read whole with geopandas;
  the elevation at a point read from the VRT with rasterio (ms per call, --calls calls each);
- 4 episodes at once, each making --calls later `print(1)` calls: ms per call against one episode alone.
Beside each: this process's CPU and its children's (the docker CLI) per call, and the container's peak
memory (its cgroup's).

Anchor: a container per call (`docker run --rm` with the same confinement and image, the code as its
command), what a harness without an episode container does; the ratio is the anchor's time over ours.
Targets (issue #53): later calls < 150 ms, the first < 1.5 s, 4 episodes at once within 2x of one alone.

The export is the demo database's (built here, as bench/serve_bench.py builds it) unless --export names one.
Needs a Docker engine and `make sandbox-image`.

Usage: .venv/bin/python bench/code_sandbox.py [--runs 3] [--calls 20] [--export DIR] [--dsn ADMIN_DSN]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.serve_bench import BIN, create_database, drop_database, run, spread
from reproduce.serve import python_sandbox
from reproduce.serve.python_sandbox import IMAGE, Limits, PythonSandbox, checked_image

WORK = {
    "print(1)": "print(1)",
    "pyarrow: one row group": "import pyarrow.parquet as pq\n"
                              "print(pq.ParquetFile('/data/vector/pois.parquet').read_row_group(0).num_rows)",
    "geopandas: pois whole": "import warnings, geopandas\nwarnings.simplefilter('ignore')\n"
                             "print(len(geopandas.read_parquet('/data/vector/pois.parquet')))",
    "rasterio: a point": "import rasterio\nwith rasterio.open('/data/dem/dem_us.vrt') as dem:\n"
                         "    print(next(dem.sample([(-75.5, 39.5)]))[0])",
}
TIMEOUT = 60.0
TARGET_LATER_MS, TARGET_FIRST_S, TARGET_CONCURRENT = 150.0, 1.5, 2.0


def cpu_seconds() -> float:
    """CPU of this process and of its waited-for children (the docker CLI processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def container_peak_mb(name: str) -> float:
    """The container's peak memory from its cgroup (v1 or v2), 0 where neither file is found."""
    found = subprocess.run(["docker", "inspect", "--format", "{{.Id}}", name], capture_output=True, text=True)
    cid = found.stdout.strip()
    for path in (f"/sys/fs/cgroup/memory/docker/{cid}/memory.max_usage_in_bytes",
                 f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.peak"):
        if os.path.exists(path):
            return int(Path(path).read_text()) / 2**20
    return 0.0


def checked(result: python_sandbox.PythonRun) -> None:
    if result.outcome != "ok":
        raise SystemExit(f"a bench call failed: {result}")


def per_call(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per call over `calls` calls."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    for _ in range(calls):
        call()
    return (time.perf_counter() - wall) / calls * 1000, (cpu_seconds() - cpu) / calls * 1000


def episode_costs(export: Path, calls: int) -> dict[str, tuple[float, float]]:
    """One episode: its first call and end, each later call's kind, and the container's peak memory."""
    sandbox = PythonSandbox(export, Limits())
    costs = {"first call (container start)": per_call(lambda: checked(sandbox.run("print(1)", TIMEOUT)), 1)}
    checked(sandbox.run("print(2)", TIMEOUT))  # init imports the libraries after the first call
    for label, code in WORK.items():
        costs[label] = per_call(lambda code=code: checked(sandbox.run(code, TIMEOUT)), calls)
    costs["container peak MB"] = (container_peak_mb(sandbox.name), 0.0)
    costs["episode end (container removed)"] = per_call(sandbox.close, 1)
    return costs


def anchor_costs(export: Path, calls: int) -> dict[str, tuple[float, float]]:
    """A container per call, the same confinement and image."""
    options = [*python_sandbox.docker_run_options(Limits(), export), checked_image()]

    def once(code: str) -> None:
        done = subprocess.run(["docker", "run", "--rm", *options, "python3", "-c", code], capture_output=True,
                              text=True, timeout=TIMEOUT)
        if done.returncode:
            raise SystemExit(f"the anchor's call failed: {done.stderr[-500:]}")

    return {label: per_call(lambda code=code: once(code), calls) for label, code in WORK.items()}


def concurrent_ms(export: Path, episodes: int, calls: int) -> float:
    """ms per `print(1)` call with `episodes` episodes calling at once (each its own container, started first)."""
    sandboxes = [PythonSandbox(export, Limits()) for _ in range(episodes)]
    try:
        for sandbox in sandboxes:
            checked(sandbox.run("print(1)", TIMEOUT))
            checked(sandbox.run("print(2)", TIMEOUT))
        times: list[float] = []
        threads = [threading.Thread(target=lambda s=s: times.append(
            per_call(lambda: checked(s.run("print(1)", TIMEOUT)), calls)[0])) for s in sandboxes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return statistics.mean(times)
    finally:
        for sandbox in sandboxes:
            sandbox.close()


def bench(export: Path, runs: int, calls: int) -> bool:
    ours = [episode_costs(export, calls) for _ in range(runs)]
    anchor = [anchor_costs(export, max(3, calls // 4)) for _ in range(runs)]
    alone = [concurrent_ms(export, 1, calls) for _ in range(runs)]
    four = [concurrent_ms(export, 4, calls) for _ in range(runs)]
    print(f"{'measure':40} {'ours ms (wall)':>24} {'CPU ms':>8} {'container per call ms':>24} {'ratio':>6}")
    for label in ours[0]:
        walls = [run_[label][0] for run_ in ours]
        line = f"{label:40} {spread(walls):>24} {statistics.median(r[label][1] for r in ours):>8.1f}"
        if label in WORK:
            theirs = [run_[label][0] for run_ in anchor]
            line += f" {spread(theirs):>24} {statistics.median(theirs) / statistics.median(walls):>6.1f}"
        print(line)
    slowdown = statistics.median(four) / statistics.median(alone)
    print(f"{'4 episodes at once, ms per print(1)':40} {spread(four):>24}   (alone {spread(alone)}: {slowdown:.2f}x)")
    later = max(statistics.median(r[label][0] for r in ours) for label in ("print(1)", "pyarrow: one row group"))
    first = statistics.median(r["first call (container start)"][0] for r in ours) / 1000
    within = later < TARGET_LATER_MS and first < TARGET_FIRST_S and slowdown < TARGET_CONCURRENT
    print(f"targets: later calls < {TARGET_LATER_MS:.0f} ms ({later:.0f}), first < {TARGET_FIRST_S} s ({first:.2f}), "
          f"4 at once < {TARGET_CONCURRENT}x ({slowdown:.2f}): {'met' if within else 'NOT met'}")
    return within


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, help="an `ingest export` folder (default: the demo's, built here)")
    parser.add_argument("--dsn", default="postgresql://postgres@localhost/postgres",
                        help="admin DSN of the server where the demo database is made (default: %(default)s)")
    parser.add_argument("--calls", type=int, default=20, help="later calls per kind, episode and run")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of each measurement")
    args = parser.parse_args()
    try:
        image = checked_image()
    except python_sandbox.SandboxUnavailable as why:
        raise SystemExit(f"bench/code_sandbox.py: {why}") from None
    folder = Path(tempfile.mkdtemp(prefix="code-sandbox-bench-"))
    try:
        export = args.export
        if export is None:
            dsn, _ = create_database(args.dsn, folder)
            export = folder / "export"
            run([str(BIN / "ingest"), "export", str(export), "--dsn", dsn])
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
        print(f"image: {IMAGE} ({image[:19]}); cores: {os.cpu_count()}; load average before: {load}; "
              f"export: {export}")
        within = bench(export, args.runs, args.calls)
    finally:
        if args.export is None:
            drop_database(args.dsn)
        shutil.rmtree(folder, ignore_errors=True)
    if not within:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
