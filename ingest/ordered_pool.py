"""Worker processes that turn jobs into streams of items, handed back in job order with bounded memory.

Both loaders need the same thing: parse or encode several inputs in parallel, but write them into one
connection in a fixed order (a table's heap and serial ids follow the order of the sources). Jobs are
dealt round-robin to N processes. Each streams the items of its current job through its own bounded
queue, and the consumer reads the queues in job order. So memory stays bounded (`queue_items` items per
process) however many and large the inputs are, nothing is copied whole between processes, and the
consumer starts on a job as soon as its first item is ready while the other processes work ahead.

Processes rather than threads because parsing and packing hold the GIL. They are forked (on Linux) when
the pool starts, before the parent opens any connection, so they cost no interpreter start-up; elsewhere
they are spawned (then `work` must be a module-level function). A worker dies with its parent.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import signal
import sys
from collections.abc import Callable, Generator, Iterator
from typing import Any

Work = Callable[[Any], Generator[Any, None, Any]]


class WorkerCrashed(RuntimeError):
    """A worker hit a bug (not an input problem): the load stops with its message."""


class JobStream:
    """The items of one job as they arrive; afterwards `result`, the value the job's generator returned."""

    def __init__(self, results: multiprocessing.Queue, failure: type[Exception]) -> None:
        self._results = results
        self._failure = failure
        self.finished = False
        self.result: Any = None

    def items(self) -> Iterator[Any]:
        """Yields every item; raises the pool's failure type if the job reported an input problem."""
        while not self.finished:
            kind, payload = self._results.get()
            if kind == "item":
                yield payload
                continue
            self.finished = True
            if kind == "failed":
                raise self._failure(payload)
            if kind == "crashed":
                raise WorkerCrashed(payload)
            if kind == "raised":
                raise payload
            self.result = payload

    def outcome(self) -> Any:
        """Consume what is left of this job and return its result; raises as items() does."""
        for _ in self.items():
            pass
        return self.result

    def drain(self) -> None:
        """Consume what is left of this job, so the worker's queue is at the next one."""
        try:
            self.outcome()
        except self._failure:
            pass


class OrderedPool:
    """`work(job)` is a generator: it yields the job's items and returns its result. Raising `failure`
    (an input problem) ends the job with that message; the other jobs go on. An exception of a type in
    `passed_on` (e.g. a lost database connection) is raised as it is to the consumer of the job's stream;
    any other exception is a bug and reaches the consumer as WorkerCrashed. `warm_up`, if given, runs in
    each worker as it starts, while the consumer prepares its jobs; it must not raise."""

    def __init__(self, workers: int, work: Work, failure: type[Exception], queue_items: int = 4,
                 name: str = "ingest-worker", passed_on: tuple[type[Exception], ...] = (),
                 warm_up: Callable[[], None] | None = None) -> None:
        context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        self._failure = failure
        self._jobs = [context.Queue() for _ in range(workers)]
        self._results = [context.Queue(maxsize=queue_items) for _ in range(workers)]
        for queue in self._results:
            widen_pipe(queue)
        self._processes = [
            context.Process(target=_serve, args=(work, failure, passed_on, warm_up, jobs, results), daemon=True,
                            name=f"{name}-{n}")
            for n, (jobs, results) in enumerate(zip(self._jobs, self._results, strict=True))
        ]
        for process in self._processes:
            process.start()

    def streams(self, jobs: list[Any]) -> Iterator[JobStream]:
        """Hand the jobs to the workers now; a JobStream per job, in the given order, each to be read or
        drained before the next."""
        for number, job in enumerate(jobs):
            self._jobs[number % len(self._jobs)].put(job)
        return (JobStream(self._results[number % len(self._results)], self._failure) for number in range(len(jobs)))

    def close(self) -> None:
        stop_processes(self._processes)

    def __enter__(self) -> OrderedPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _serve(work: Work, failure: type[Exception], passed_on: tuple[type[Exception], ...],
           warm_up: Callable[[], None] | None, jobs: multiprocessing.Queue, results: multiprocessing.Queue) -> None:
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if warm_up:
        warm_up()
    for job in iter(jobs.get, None):
        try:
            generator = work(job)
            while True:
                try:
                    results.put(("item", next(generator)))
                except StopIteration as done:
                    results.put(("done", done.value))
                    break
        except failure as error:
            results.put(("failed", str(error)))
        except passed_on as error:
            results.put(("raised", error))
        except Exception as error:  # a bug: report it rather than leave the consumer waiting forever
            results.put(("crashed", f"{type(error).__name__}: {error} (in {multiprocessing.current_process().name})"))


def stop_processes(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """End worker processes and wait for them. Terminated, not asked: a worker may be blocked on a full queue
    mid-job, and nothing of what it holds persists (its rows reach the database only through the consumer,
    or in a transaction of its own that dies with its connection)."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.join()


def widen_pipe(queue: multiprocessing.Queue) -> None:
    """Items are about a megabyte (osm/batches.py); through the default 64 kB pipe each costs the two processes a
    dozen switches, which slow `ingest osm` noticeably (GeoJSON parsers, PBF readers)."""
    try:
        import fcntl

        fcntl.fcntl(queue._writer.fileno(), 1031, 1 << 20)  # F_SETPIPE_SZ (Linux)
    except (ImportError, AttributeError, OSError):
        pass


def die_with_parent() -> None:
    """A killed loader must not leave workers behind (Linux: PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
