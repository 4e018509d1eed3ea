"""`ingest snapshot` in both formats against building from local sources, on the demo region and on the larger
synthetic data dir of bench/make_db.py, with the projection to the full database: what the default format is
chosen by (docs/DESIGN.md, "Snapshots").

    .venv/bin/python bench/snapshot.py [--runs 3] [--inputs demo,large] [--work DIR] [--json]

Each run, per input (the sources of bench/make_db.py, made once under --work), in private clusters of this
machine's PostgreSQL (tests/local_server.py: initdb, run as the postgres user, the settings of a `make db`
load: fsync off):
  build             `ingest all SOURCE --offline` into a new cluster's database `gsqa`
  create dump       `ingest snapshot create` of it (default 2 GB parts)
  create physical   `ingest snapshot create --format physical --data-dir` of it (the server stopped, copied,
                    started again)
  restore dump      `ingest snapshot restore` into a new cluster's empty `gsqa` (ends with `ingest check`)
  restore physical  `ingest snapshot restore --data-dir` into a new data directory, the server started on it,
                    then `ingest snapshot restore` against it (reader password, origin, `ingest check`)
Measured per step: wall time; CPU of the client process tree and of the steps' servers (every postgres
process of the clusters involved); peak memory (PSS of both, summed, sampled every 200 ms); peak disk (the
snapshot folder and the data directories involved, WAL included, sampled every 200 ms). Printed: the median
and range (min-max) over the runs, and restore / build.

The projection scales the large input's restore time per byte of database to the full database (about 47 GB:
dem_us 12-30 GB, the vector tables with indexes about 26 GB; docs/REFERENCE-DB.md) and compares it with the
full build from local sources (README, "Time and disk": 30-40 min after the download).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import local_server  # noqa: E402
from local_server import LocalServer  # noqa: E402

from bench.dem import CLOCK_TICKS, _cpu_ticks, _memory, _tree  # noqa: E402
from bench.make_db import INPUTS, _children_cpu, make_source  # noqa: E402

INGEST = Path(sys.executable).parent / "ingest"
FULL_DATABASE_GB = 21 + 26  # dem_us (mid-range of 12-30 GB) and the vector tables with indexes
FULL_BUILD_MIN = (30, 40)  # README, "Time and disk": a full build after the download
STEPS = ("build", "create dump", "create physical", "restore dump", "restore physical")
# The command under bash, not exec'd: the sampler counts the process tree below bash.
SHELL = '"$@" >/dev/null 2>&1'


def folder_bytes(folder: Path) -> int:
    """Disk used by the files under `folder`, a file with several links (restore's scratch dump) once."""
    seen: dict[int, int] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                stat = os.lstat(os.path.join(root, name))
            except FileNotFoundError:
                continue
            seen[stat.st_ino] = stat.st_blocks * 512
    return sum(seen.values())


class Sampler(threading.Thread):
    """Every 200 ms: the peak disk of `folders`, the peak PSS of the client tree and the servers of `clusters`
    (data directories; a server may start during the step), and the servers' CPU (last value seen per pid, so
    backends that exit still count)."""

    def __init__(self, client_pid: int, folders: list[Path], clusters: list[Path]) -> None:
        super().__init__(daemon=True)
        self.client_pid, self.folders, self.clusters = client_pid, folders, clusters
        self.stop, self.peak_disk, self.peak_pss = threading.Event(), 0, 0
        self.server_start = self._server_ticks()
        self.server_last = dict(self.server_start)

    def _server_pids(self) -> list[int]:
        pids = []
        for cluster in self.clusters:
            try:
                pids += _tree(int((cluster / "postmaster.pid").read_text().split()[0]))
            except (OSError, ValueError, IndexError):
                continue
        return pids

    def _server_ticks(self) -> dict[int, int]:
        return {pid: ticks for pid in self._server_pids() if (ticks := _cpu_ticks(pid))}

    def run(self) -> None:
        while True:
            pids = _tree(self.client_pid)[1:] + self._server_pids()
            self.peak_pss = max(self.peak_pss, sum(_memory(pid, "Pss") for pid in pids))
            self.peak_disk = max(self.peak_disk, sum(folder_bytes(folder) for folder in self.folders))
            self.server_last.update(self._server_ticks())
            if self.stop.wait(0.2):
                return

    @property
    def server_cpu_s(self) -> float:
        return sum(ticks - self.server_start.get(pid, 0) for pid, ticks in self.server_last.items()) / CLOCK_TICKS


def measured(argv: list[str], folders: list[Path], clusters: list[Path]) -> dict:
    _children_cpu()  # the CPU of earlier children is not this step's
    started = time.monotonic()
    process = subprocess.Popen(["bash", "-c", SHELL, "step", *map(str, argv)])
    sampler = Sampler(process.pid, folders, clusters)
    sampler.start()
    process.wait()
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    if process.returncode:
        raise SystemExit(f"{' '.join(map(str, argv[:4]))} failed (exit {process.returncode}): run it by hand")
    return {"wall_s": wall, "cpu_s": _children_cpu() + sampler.server_cpu_s, "peak_memory_mb": sampler.peak_pss / 1e6,
            "peak_disk_mb": sampler.peak_disk / 1e6}


@contextmanager
def new_cluster(with_database: bool = True):
    with local_server.scratch_folder() as base:
        server = LocalServer(base / "data", local_server.free_port(), base / "sockets")
        if with_database:
            local_server.initdb(server)
            with local_server.running(server, local_server.FAST):
                with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
                    conn.execute("CREATE DATABASE gsqa")
                yield server
        else:
            try:
                yield server
            finally:
                if server.running:
                    server.stop()


def one_run(work: Path, name: str) -> dict:
    source = make_source(work, name)
    what = "dem" if INPUTS[name][1] == 0 else "dem,osm"
    snapshots = {form: work / f"snapshot-{name}-{form}" for form in ("dump", "physical")}
    for folder in snapshots.values():
        shutil.rmtree(folder, ignore_errors=True)
    steps: dict[str, dict] = {}
    with new_cluster() as built:
        steps["build"] = measured([INGEST, "all", source, "--offline", "--what", what, "--dsn", built.dsn()],
                                  [built.data], [built.data])
        with psycopg.connect(built.dsn()) as conn:
            database_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        steps["create dump"] = measured([INGEST, "snapshot", "create", snapshots["dump"], "--dsn", built.dsn()],
                                        [snapshots["dump"], built.data], [built.data])
        steps["create physical"] = measured(
            [INGEST, "snapshot", "create", snapshots["physical"], "--format", "physical", "--data-dir", built.data,
             "--dsn", built.dsn()], [snapshots["physical"], built.data], [built.data])
        cluster_bytes = folder_bytes(built.data)
    with new_cluster() as target:
        steps["restore dump"] = measured([INGEST, "snapshot", "restore", snapshots["dump"], "--dsn", target.dsn()],
                                         [snapshots["dump"], target.data], [target.data])
    with new_cluster(with_database=False) as target:
        settings = " ".join(f"-c {key}={value}" for key, value in local_server.FAST.items())
        script = (f'"{INGEST}" snapshot restore "$1" --data-dir "$2" && runuser -u postgres -- '
                  f'"{local_server.server_binaries() / "pg_ctl"}" -D "$2" -l "$2/../server.log" -w -o '
                  f'"-p {target.port} -k {target.sockets} {settings}" start && '
                  f'"{INGEST}" snapshot restore "$1" --dsn "{target.dsn()}"')
        steps["restore physical"] = measured(["bash", "-c", script, "restore", snapshots["physical"], target.data],
                                             [snapshots["physical"], target.data.parent], [target.data])
    return {"steps": steps, "database_mb": database_bytes / 1e6, "cluster_mb": cluster_bytes / 1e6,
            "snapshot_mb": {form: folder_bytes(folder) / 1e6 for form, folder in snapshots.items()}}


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(runs: list[dict]) -> dict:
    steps = {step: {measure: spread([run["steps"][step][measure] for run in runs])
                    for measure in runs[0]["steps"][step]} for step in STEPS}
    build = steps["build"]["wall_s"]["median"]
    return {"runs": len(runs), "steps": steps,
            "restore_over_build": {form: steps[f"restore {form}"]["wall_s"]["median"] / build
                                   for form in ("dump", "physical")},
            "database_mb": spread([run["database_mb"] for run in runs]),
            "cluster_mb": spread([run["cluster_mb"] for run in runs]),
            "snapshot_mb": {form: spread([run["snapshot_mb"][form] for run in runs]) for form in ("dump", "physical")}}


def project(large: dict) -> dict:
    """Restore and snapshot sizes scaled by database size to the full database."""
    scale = FULL_DATABASE_GB * 1e3 / large["database_mb"]["median"]
    result: dict = {"scale": scale, "full_build_min": FULL_BUILD_MIN}
    for form in ("dump", "physical"):
        restore_min = large["steps"][f"restore {form}"]["wall_s"]["median"] * scale / 60
        result[form] = {"restore_min": restore_min,
                        "restore_over_full_build": [restore_min / minutes for minutes in FULL_BUILD_MIN],
                        "snapshot_gb": large["snapshot_mb"][form]["median"] * scale / 1e3,
                        "create_min": large["steps"][f"create {form}"]["wall_s"]["median"] * scale / 60,
                        "restore_peak_disk_gb": large["steps"][f"restore {form}"]["peak_disk_mb"]["median"] * scale
                        / 1e3}
    result["build_scaled_min"] = large["steps"]["build"]["wall_s"]["median"] * scale / 60
    return result


def _cell(value: dict, digits: int = 1) -> str:
    return f"{value['median']:.{digits}f} ({value['min']:.{digits}f}-{value['max']:.{digits}f})"


def print_input(name: str, result: dict) -> None:
    print(f"\n{name}: database {_cell(result['database_mb'], 0)} MB, cluster {_cell(result['cluster_mb'], 0)} MB, "
          f"snapshot dump {_cell(result['snapshot_mb']['dump'], 0)} MB, physical "
          f"{_cell(result['snapshot_mb']['physical'], 0)} MB; {result['runs']} runs, median (min-max)")
    print(f"  {'step':17} {'wall s':>18} {'CPU s':>18} {'peak memory MB':>20} {'peak disk MB':>20}")
    for step, measures in result["steps"].items():
        print(f"  {step:17} {_cell(measures['wall_s']):>18} {_cell(measures['cpu_s']):>18} "
              f"{_cell(measures['peak_memory_mb'], 0):>20} {_cell(measures['peak_disk_mb'], 0):>20}")
    print("  restore / build: " + ", ".join(f"{form} {ratio:.2f}" for form, ratio in
                                            result["restore_over_build"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inputs", default="demo,large")
    parser.add_argument("--work", type=Path, default=Path("/tmp/gsqa-bench-make-db"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    for name in args.inputs.split(","):
        runs = []
        for number in range(args.runs):
            runs.append(one_run(args.work, name))
            print(f"{name}: run {number + 1} of {args.runs} done", file=sys.stderr)
        results[name] = summarize(runs)
        if not args.json:
            print_input(name, results[name])
    if "large" in results:
        results["projection"] = project(results["large"])
    print(json.dumps(results if args.json else results.get("projection"), indent=1))


if __name__ == "__main__":
    main()
