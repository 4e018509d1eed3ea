"""The zstd level of physical snapshots (ingest/snapshot/physical.py), by measurement on the large synthetic input
of bench/make_db.py: what docs/SNAPSHOTS.md chooses it by.

    .venv/bin/python bench/snapshot_zstd.py [--runs 3] [--levels none,1,3,6] [--threads 0] [--work DIR]

The large input is built once (`ingest all --offline`) into a private cluster (testkit/local_server.py), whose
server is then stopped. Each run, per level: **create** the tar stream of a physical snapshot (GNU tar, sorted,
the same files as `ingest snapshot create --format physical`) through `zstd -LEVEL -TTHREADS` (0: one per core)
into one file (none: uncompressed); **restore** that file through `zstd -d` into `tar -x` in a new folder.
Printed: wall seconds and the stream's size, median (min-max) over the runs, and their projection to the full
database (scaled by database size, as bench/snapshot.py does): the download at 50 MB/s, the extraction, and
both together.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench.make_db import make_source
from bench.snapshot import FULL_DATABASE_GB, INGEST, new_cluster
from ingest.snapshot import physical

ROOT = Path(__file__).resolve().parent.parent

LINK_MB_S = 50


def timed(command: str) -> float:
    started = time.monotonic()
    subprocess.run(command, shell=True, check=True)
    return time.monotonic() - started


def one_level(data: Path, excluded: Path, work: Path, level: str, threads: int) -> dict:
    stream, extracted = work / "stream", work / "extracted"
    compress = "cat" if level == "none" else f"zstd --quiet -{level} -T{threads} --stdout"
    create = timed(f"tar --create --file=- --format=gnu --sort=name --directory={data} --exclude-from={excluded} . "
                   f"| {compress} > {stream}")
    shutil.rmtree(extracted, ignore_errors=True)
    extracted.mkdir()
    decompress = "cat" if level == "none" else "zstd --quiet --decompress --stdout"
    restore = timed(f"{decompress} {stream} | tar --extract --file=- --directory={extracted}")
    shutil.rmtree(extracted)
    return {"create_s": create, "restore_s": restore, "mb": stream.stat().st_size / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--levels", default="none,1,3,6")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/gsqa-bench-make-db"))
    args = parser.parse_args()
    levels = args.levels.split(",")
    source = make_source(args.work, "large")
    work = args.work / "zstd-levels"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results: dict[str, list[dict]] = {level: [] for level in levels}
    with new_cluster() as built:
        subprocess.run([INGEST, "all", source, "--offline", "--dsn", built.dsn()], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with psycopg.connect(built.dsn()) as conn:
            database_mb = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 1e6
        built.stop()
        excluded = work / "excluded"
        wal = physical.unneeded_wal(built.data, physical.read_control(built.data).checkpoint_wal_file)
        excluded.write_text("".join(f"{name}\n" for name in ["./postmaster.pid", "./postmaster.opts", *wal]))
        for number in range(args.runs):
            for level in levels:
                results[level].append(one_level(built.data, excluded, work, level, args.threads))
            print(f"run {number + 1} of {args.runs} done", file=sys.stderr)
        built.start()
    shutil.rmtree(work)
    scale = FULL_DATABASE_GB * 1e3 / database_mb
    print(f"database {database_mb:.0f} MB; {args.runs} runs, median (min-max); full database: scaled by {scale:.0f}, "
          f"download at {LINK_MB_S} MB/s")
    print(f"{'level':6} {'create s':>18} {'restore s':>18} {'MB':>7} {'full GB':>8} {'download min':>13} "
          f"{'restore min':>12} {'both min':>9}")
    for level, runs in results.items():
        cells = {key: [run[key] for run in runs] for key in runs[0]}
        median = {key: statistics.median(values) for key, values in cells.items()}
        download, restore = median["mb"] * scale / LINK_MB_S / 60, median["restore_s"] * scale / 60
        print(f"{level:6} " + " ".join(f"{median[key]:.2f} ({min(cells[key]):.2f}-{max(cells[key]):.2f})".rjust(18)
                                       for key in ("create_s", "restore_s"))
              + f" {median['mb']:7.1f} {median['mb'] * scale / 1e3:8.1f} {download:13.1f} {restore:12.1f} "
                f"{download + restore:9.1f}")


if __name__ == "__main__":
    main()
