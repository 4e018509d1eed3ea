"""`ingest snapshot` against building from local sources, on the demo region and on the larger synthetic data
dir of bench/make_db.py, with the projection to the full database; and a physical base backup of the same
database beside it, to choose the default format.

    .venv/bin/python bench/snapshot.py [--inputs demo,large] [--dsn DSN] [--work DIR] [--no-physical] [--json]

Per input (the sources of bench/make_db.py, made once under --work):
  build    `ingest all SOURCE --offline` into a fresh database: a build from local sources (no download)
  create   `ingest snapshot create` of that database (dump format): time and size
  restore  `ingest snapshot restore` of it into a fresh database: time, and the peak disk (the snapshot
           folder with restore's scratch, plus the target database, sampled every 200 ms)
  physical a private cluster (initdb, as the postgres user, on its own port) holding the restored database:
           `pg_basebackup -Ft -z` of it (time, size), then its restore: the tars extracted into a new data
           directory, the server started, `ingest check` run (time, peak disk: tars plus extracted cluster;
           the checks a base backup fails are listed)
The projection scales the large input's per-MB times and sizes to the full database by its size (the dem
stage's table, 12-30 GB, and the vector tables, about 26 GB, docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.make_db import INPUTS, fresh_database, make_source  # noqa: E402
from bench.measure import Disk, DiskPeak, folder_bytes  # noqa: E402

INGEST = Path(sys.executable).parent / "ingest"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
PRIVATE_PORT = 5499
FULL_DATABASE_GB = 21 + 26  # dem_us (mid-range of 12-30 GB) and the vector tables with indexes


def timed(argv: list[str], sampler: DiskPeak | None = None) -> float:
    if sampler:
        sampler.start()
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if sampler:
        sampler.stop.set()
        sampler.join()
    if result.returncode:
        raise SystemExit(f"{' '.join(argv[:3])} failed (exit {result.returncode}): "
                         f"{result.stdout[-500:]} {result.stderr[-500:]}")
    return seconds


def database_bytes(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]


def one_input(server_dsn: str, work: Path, name: str) -> dict:
    source = make_source(work, name)
    what = "dem" if INPUTS[name][1] == 0 else "dem,osm"
    built = fresh_database(server_dsn, f"gsqa_bench_snapshot_{name}")
    build_s = timed([str(INGEST), "all", str(source), "--offline", "--what", what, "--dsn", built])
    folder = work / f"snapshot-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    create_s = timed([str(INGEST), "snapshot", "create", str(folder), "--dsn", built])
    target_name = f"gsqa_bench_snapshot_{name}_restored"
    target = fresh_database(server_dsn, target_name)
    sampler = DiskPeak(Disk({"snapshot": folder}, server_dsn, target_name))
    restore_s = timed([str(INGEST), "snapshot", "restore", str(folder), "--dsn", target], sampler)
    return {"build_s": build_s, "create_s": create_s, "restore_s": restore_s,
            "database_bytes": database_bytes(built), "snapshot_bytes": folder_bytes(folder),
            "restore_peak_disk_bytes": sampler.peak, "source_bytes": folder_bytes(source)}


def as_postgres(*argv: str | Path) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *map(str, argv)]


def physical(work: Path, snapshot: Path) -> dict:
    """A base backup of a private cluster holding the snapshot's database, and its restore."""
    private = work / "physical"
    subprocess.run(as_postgres(PG_BIN / "pg_ctl", "-D", private / "cluster", "-m", "immediate", "stop"),
                   capture_output=True)
    shutil.rmtree(private, ignore_errors=True)
    private.mkdir(parents=True)
    shutil.chown(private, "postgres", "postgres")
    cluster, socket = private / "cluster", private
    subprocess.run(as_postgres(PG_BIN / "initdb", "-D", cluster, "-U", "postgres"),
                   check=True, capture_output=True)
    start = as_postgres(PG_BIN / "pg_ctl", "-D", cluster, "-w", "-o", f"-p {PRIVATE_PORT} -k {socket}", "start")
    subprocess.run(start, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # the server keeps
    # pg_ctl's output open: a pipe would never close
    dsn = f"host={socket} port={PRIVATE_PORT} user=postgres dbname=gsqa"
    try:
        subprocess.run(as_postgres("createdb", "-h", socket, "-p", PRIVATE_PORT, "gsqa"), check=True)
        timed([str(INGEST), "snapshot", "restore", str(snapshot), "--dsn", dsn])
        backup = private / "backup"
        backup_s = timed(as_postgres(PG_BIN / "pg_basebackup", "-h", socket, "-p", PRIVATE_PORT, "-U", "postgres",
                                     "-D", backup, "-Ft", "-z", "--checkpoint=fast"))
    finally:
        subprocess.run(as_postgres(PG_BIN / "pg_ctl", "-D", cluster, "-w", "stop"), capture_output=True)
    restored = private / "restored"
    sampler = DiskPeak(Disk({"backup": backup, "restored": restored}))
    sampler.start()
    started = time.monotonic()
    subprocess.run(as_postgres("mkdir", "-m", "700", restored), check=True)
    subprocess.run(as_postgres("tar", "-xzf", backup / "base.tar.gz", "-C", restored), check=True)
    subprocess.run(as_postgres("tar", "-xzf", backup / "pg_wal.tar.gz", "-C", restored / "pg_wal"), check=True)
    subprocess.run(as_postgres(PG_BIN / "pg_ctl", "-D", restored, "-w", "-o", f"-p {PRIVATE_PORT} -k {socket}",
                               "start"), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The activity statistics (last ANALYZE) are not in a base backup, so check's "analyzed" fails though
        # the planner's statistics came back: counted, not fatal.
        check = subprocess.run([str(INGEST), "check", "--dsn", dsn, "--json"], capture_output=True, text=True)
        restore_s = time.monotonic() - started
        failed_checks = [item["check"] for item in json.loads(check.stdout) if not item["ok"]]
    finally:
        sampler.stop.set()
        sampler.join()
        subprocess.run(as_postgres(PG_BIN / "pg_ctl", "-D", restored, "-w", "stop"), capture_output=True)
    return {"backup_s": backup_s, "backup_bytes": folder_bytes(backup), "restore_s": restore_s,
            "failed_checks": failed_checks,
            "cluster_bytes": folder_bytes(restored), "restore_peak_disk_bytes": sampler.peak}


def project(large: dict) -> dict:
    scale = FULL_DATABASE_GB * 1e9 / large["database_bytes"]
    result = {"scale": scale, "restore_h": large["restore_s"] * scale / 3600,
              "build_from_local_sources_h": large["build_s"] * scale / 3600,
              "snapshot_gb": large["snapshot_bytes"] * scale / 1e9}
    if "physical" in large:
        result["physical_restore_h"] = large["physical"]["restore_s"] * scale / 3600
        result["physical_backup_gb"] = large["physical"]["backup_bytes"] * scale / 1e9
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", default="demo,large")
    parser.add_argument("--dsn", default=os.environ.get("DATABASE_URL", ""))
    parser.add_argument("--work", type=Path, default=Path("/tmp/gsqa-bench-make-db"))
    parser.add_argument("--no-physical", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict = {}
    for name in args.inputs.split(","):
        results[name] = one_input(args.dsn, args.work, name)
        if not args.no_physical:
            results[name]["physical"] = physical(args.work, args.work / f"snapshot-{name}")
        if not args.json:
            print(name, json.dumps(results[name], indent=1))
    if "large" in results:
        results["projection"] = project(results["large"])
    print(json.dumps(results if args.json else results.get("projection"), indent=1))


if __name__ == "__main__":
    main()
