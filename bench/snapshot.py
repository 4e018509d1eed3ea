"""`ingest snapshot` in both formats against building from local sources, on the demo region and on the larger
synthetic data dir of bench/make_db.py, with the projection to the full database: what the default format is
chosen by (docs/SNAPSHOTS.md).

    .venv/bin/python bench/snapshot.py [--runs 3] [--inputs demo,large] [--work DIR] [--json]

Each run, per input (the sources of bench/make_db.py, made once under --work), in private clusters of this
machine's PostgreSQL (testkit/local_server.py: initdb, run as the postgres user, the settings of a `make db`
load: fsync off):
  build             `ingest all SOURCE --offline` into a new cluster's database `gsqa`
  create dump       `ingest snapshot create` of it (default 2 GB parts)
  create physical   `ingest snapshot create --format physical --data-dir` of it (the server stopped, copied,
                    started again)
  restore dump      `ingest snapshot restore` into a new cluster's empty `gsqa` (ends with `ingest check`)
  restore physical  `ingest snapshot restore --data-dir` into a new data directory, the server started on it,
                    then `ingest snapshot restore` against it (reader password, origin, `ingest check`)
Measured per step (bench/measure.py): wall time; CPU of the client process tree and of every PostgreSQL server
of this machine (the steps' clusters, and whatever else runs: measure on a quiet machine); peak memory of the
client process tree (PSS, every 100 ms); peak disk of the snapshot folder and the data directories involved
together, WAL included (every second). Printed: the median
and range (min-max) over the runs, and restore / build.

The projection scales the large input's restore time per byte of database to the full database and compares
it with the full build from local sources, both as the full-build rehearsal projects them (docs/PERFORMANCE.md:
a 41 GB database, 13.7 min for `ingest all --offline`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

import psycopg

from bench.make_db import INPUTS, make_source
from bench.measure import Disk, folder_bytes, run_measured
from testkit import local_server
from testkit.local_server import LocalServer

ROOT = Path(__file__).resolve().parent.parent


INGEST = Path(sys.executable).parent / "ingest"
# docs/PERFORMANCE.md, the full-build rehearsal's projection (bench/full_build.py --project 0.05,0.1): the
# database's size, and `ingest all --offline`, a build from local sources
FULL_DATABASE_GB = 41
FULL_BUILD_MIN = 13.7
STEPS = ("build", "create dump", "create physical", "restore dump", "restore physical")


def measured(argv: list, folders: list[Path]) -> dict:
    """One step under bench/measure.py's sampler: wall, CPU of the client tree and of every server here (one
    started during the step included), peak memory of the client tree, peak disk of `folders` together."""
    usage = run_measured(shlex.join(map(str, argv)), name=str(argv[1]),
                         disk=Disk({str(number): folder for number, folder in enumerate(folders)})).total
    return {"wall_s": usage.wall_s, "cpu_s": usage.client_cpu_s + usage.server_cpu_s,
            "peak_memory_mb": usage.peak_client_pss_mb, "peak_disk_mb": usage.peak_disk_mb["total"]}


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
                                  [built.data])
        with psycopg.connect(built.dsn()) as conn:
            database_bytes = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        steps["create dump"] = measured([INGEST, "snapshot", "create", snapshots["dump"], "--dsn", built.dsn()],
                                        [snapshots["dump"], built.data])
        steps["create physical"] = measured(
            [INGEST, "snapshot", "create", snapshots["physical"], "--format", "physical", "--data-dir", built.data,
             "--dsn", built.dsn()], [snapshots["physical"], built.data])
        cluster_bytes = folder_bytes(built.data)
    with new_cluster() as target:
        steps["restore dump"] = measured([INGEST, "snapshot", "restore", snapshots["dump"], "--dsn", target.dsn()],
                                         [snapshots["dump"], target.data])
    with new_cluster(with_database=False) as target:
        settings = " ".join(f"-c {key}={value}" for key, value in local_server.FAST.items())
        script = (f'"{INGEST}" snapshot restore "$1" --data-dir "$2" && runuser -u postgres -- '
                  f'"{local_server.server_binaries() / "pg_ctl"}" -D "$2" -l "$2/../server.log" -w -o '
                  f'"-p {target.port} -k {target.sockets} {settings}" start && '
                  f'"{INGEST}" snapshot restore "$1" --dsn "{target.dsn()}"')
        steps["restore physical"] = measured(["bash", "-c", script, "restore", snapshots["physical"], target.data],
                                             [snapshots["physical"], target.data.parent])
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
                        "restore_over_full_build": restore_min / FULL_BUILD_MIN,
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
