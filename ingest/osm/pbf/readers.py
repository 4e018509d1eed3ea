"""The reader processes of a direct load and their progress bar: two processes, forked before the loader opens
any connection, each reading its ReadPlan with the native reader (or, where it is not built, with pyosmium)
and handing each source's batches to the loader's writers through a bounded queue per kind and layer.

Their memory is mostly node locations: each reader that needs them keeps its own index in memory, 16 bytes per
node (the native reader's 17), up to 1 GiB of input (plans.py), then one sparse file on disk."""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ingest.ordered_pool import JobStream, die_with_parent, stop_processes, widen_pipe
from ingest.osm.batches import SourceError
from ingest.osm.pbf.native import native_reader, read_natively
from ingest.osm.pbf.plans import READERS, READERS_ON_DISK, ReadPlan, fail_sources, file_reads
from ingest.osm.pbf.sources import KINDS, PbfReport, kind_of
from ingest.osm.rules import KIND_LAYERS

READY_BATCHES_PER_SOURCE = 8  # batches of about 1 MB a reader may hold ready for each (kind, layer) queue


class Readers:
    """The reader processes of a direct load (two: READERS or READERS_ON_DISK), forked (Linux) before the
    loader opens any connection and told their ReadPlan once the load is planned; they die with the loader.
    Per (kind, layer) a bounded queue of JobStream messages, one source after the other; their reports at
    the end."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self.queues = {(kind, layer): context.Queue(maxsize=READY_BATCHES_PER_SOURCE)
                       for kind in KINDS for layer in KIND_LAYERS[kind]}
        for queue in self.queues.values():
            widen_pipe(queue)
        self.plans = [context.Queue() for _ in range(max(len(READERS), len(READERS_ON_DISK)))]
        self.reports: Any = context.Queue()
        self.processes = [context.Process(target=_serve_reader, daemon=True, name=f"ingest-osm-reader-{number}",
                                          args=(plans, self.queues, self.reports))
                          for number, plans in enumerate(self.plans, start=1)]
        for process in self.processes:
            process.start()
        self.sizes: dict[str, int] = {}  # reader -> bytes it will read
        self.pids: dict[str, int | None] = {}  # reader -> its process
        self.location_index = ""

    def start(self, plans: list[ReadPlan]) -> None:
        for number, queue in enumerate(self.plans):
            queue.put(plans[number] if number < len(plans) else None)
        self.sizes = {plan.name: file_reads(plan.reads) * sum(path.stat().st_size for path, _ in plan.extracts)
                      for plan in plans}
        self.pids = {plan.name: process.pid for plan, process in zip(plans, self.processes, strict=False)}
        self.location_index = next((plan.index for plan in plans if plan.index), "")

    def stream(self, name: str, layer: str) -> JobStream:
        return JobStream(self.queues[(kind_of(name), layer)], SourceError)

    def report(self, sources: list[Path]) -> PbfReport:
        """Every reader's report merged (after the streams are consumed)."""
        merged = PbfReport(sources=[str(path) for path in sources], location_index=self.location_index)
        for _ in self.sizes:
            merged.merge(self.reports.get())
        merged.close_relations()
        return merged

    def close(self) -> None:
        stop_processes(self.processes)

    def __enter__(self) -> Readers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _serve_reader(plans: Any, queues: dict[tuple[str, str], Any], reports: Any) -> None:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's to handle
    plan = plans.get()
    if plan is None:
        return

    def send(kind: str, layer: str, message: tuple) -> None:
        queues[(kind, layer)].put(message)

    try:
        if native_reader() is not None:
            report = read_natively(plan, send)
        else:
            from ingest.osm.pbf.pyosmium import copy_rows, run_reader  # (pyosmium's import: only where it reads)

            report, _ = run_reader(plan, lambda path, layers, features: copy_rows(path, layers, features, send),
                                   geojson=False, fail=lambda layers, message: fail_sources(send, layers, message))
    except Exception as error:  # a bug: tell the writers rather than leave them waiting
        for kind, layers in plan.produces.items():
            for layer in layers:
                send(kind, layer, ("crashed", f"{type(error).__name__}: {error} (in the {plan.name} reader)"))
        raise
    reports.put(report)


class ReadProgress:
    """One bar on stderr for the readers: the bytes of the extracts they have read (from /proc/PID/io on
    Linux; osmium does not say where it is in a file), with the rate and the time left, and the features
    sent to the tables so far (`features()`)."""

    def __init__(self, readers: Readers, enabled: bool, features: Callable[[], int]) -> None:
        self.readers, self.features = readers, features
        self.bar = tqdm(total=sum(readers.sizes.values()), unit="B", unit_scale=True, disable=not enabled,
                        desc="ingest osm: reading the extracts")
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True, name="ingest-osm-progress")

    def __enter__(self) -> ReadProgress:
        if not self.bar.disable:
            index = self.readers.location_index
            if index:
                where = "in memory" if index == "flex_mem" else f"on disk in {index.split(',', 1)[1]}"
                self.bar.write(f"node locations: {index.split(',')[0]} ({where})", file=sys.stderr)
            self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        if exc_info[0] is None:
            self._advance_to(self.bar.total)
        self.bar.close()

    def _poll(self) -> None:
        read = dict.fromkeys(self.readers.sizes, 0)
        while not self.stop.wait(0.5):
            for reader, limit in self.readers.sizes.items():
                read[reader] = max(read[reader], min(limit, _bytes_read(self.readers.pids[reader])))
            self._advance_to(sum(read.values()))

    def _advance_to(self, bytes_read: int) -> None:
        self.bar.set_postfix_str(f"{self.features():,} features", refresh=False)
        self.bar.update(bytes_read - self.bar.n)


def _bytes_read(pid: int | None) -> int:
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{pid}/io") as stats:
            for line in stats:
                if line.startswith("rchar:"):
                    return int(line.split()[1])
    return 0
