"""What every benchmark here measures of a command, in one place: wall time, client CPU (the command's process
tree), server CPU (every postgres process of this machine), peak client memory (RSS of the largest client
process, PSS of all of them together), and optionally peak disk (folders, one database, the server's WAL),
for the whole run and per phase; plus the power-law projection of a measure from two scales.

Sizes in MB are MiB (2**20 bytes). The sampler reads /proc every 100 ms (disk every second). It is cheap on
purpose: it shares the cores with what it measures. CPU of processes that exit counts up to their last sample
(the last value seen per pid).
"""

from __future__ import annotations

import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
INTERVAL_S = 0.1
DISK_EVERY = 10  # samples: disk once a second


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


class Disk:
    """Bytes on disk now, by part: each folder by its name, the database, and the server's WAL
    (pg_ls_waldir, which needs a superuser or pg_monitor; the WAL is the whole server's). One connection,
    to `server_dsn`, made again if it drops (a restore may drop and create the database)."""

    def __init__(self, folders: dict[str, Path], server_dsn: str | None = None, database: str | None = None,
                 wal: bool = False) -> None:
        self.folders, self.server_dsn, self.database, self.wal = folders, server_dsn, database, wal
        self.conn: psycopg.Connection | None = None

    def parts(self) -> dict[str, int]:
        sizes = {name: folder_bytes(folder) for name, folder in self.folders.items()}
        if self.server_dsn is None:
            return sizes
        queries = ([("database", "SELECT pg_database_size(%s)", [self.database])] if self.database else []) + \
                  ([("wal", "SELECT coalesce(sum(size), 0)::bigint FROM pg_ls_waldir()", [])] if self.wal else [])
        for name, sql, params in queries:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = psycopg.connect(self.server_dsn, autocommit=True)
                sizes[name] = self.conn.execute(sql, params).fetchone()[0]
            except psycopg.Error:
                sizes[name] = 0  # the database does not exist (yet, or any more)
        return sizes

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


@dataclass
class Usage:
    """One phase of a run, or the whole run."""

    name: str
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    server_cpu_s: float = 0.0
    peak_client_rss_mb: float = 0.0  # the largest client process
    peak_client_pss_mb: float = 0.0  # all client processes together, shared pages split between them
    peak_disk_mb: dict[str, float] = field(default_factory=dict)  # each part's peak, and "total": the sum's peak

    def rounded(self) -> Usage:
        return Usage(self.name, round(self.wall_s, 2), round(self.client_cpu_s, 2), round(self.server_cpu_s, 2),
                     round(self.peak_client_rss_mb, 1), round(self.peak_client_pss_mb, 1),
                     {part: round(mb, 1) for part, mb in self.peak_disk_mb.items()})


class Sampler(threading.Thread):
    """Samples the client process tree below `client_pid` and the postmasters' trees until `stop` is set;
    `mark(name)` ends the current phase and starts the next one."""

    def __init__(self, client_pid: int, disk: Disk | None = None, first_phase: str = "run") -> None:
        super().__init__(daemon=True)
        self.client_pid, self.disk, self.stop, self.lock = client_pid, disk, threading.Event(), threading.Lock()
        self.postmasters = _postmasters()
        self.server_start = self._server_ticks()
        self.server_last: dict[int, int] = dict(self.server_start)
        self.client_last: dict[int, int] = {}
        self.peak_rss = self.peak_pss = 0
        self.peak_disk: dict[str, int] = {}
        self.samples = 0
        self.phases: list[Usage] = []
        self._phase = self._open(first_phase)

    def run(self) -> None:
        while True:
            with self.lock:
                self.sample()
            if self.stop.wait(INTERVAL_S):  # not time.sleep: stop() returns at once, not up to 100 ms later
                with self.lock:
                    self.sample(disk=self.disk is not None)
                    self.phases.append(self._close())
                if self.disk is not None:
                    self.disk.close()
                return

    def mark(self, name: str) -> None:
        with self.lock:
            self.sample(disk=self.disk is not None)
            self.phases.append(self._close())
            self._phase = self._open(name)

    def sample(self, disk: bool = False) -> None:
        tree = _tree(self.client_pid)
        if _name(self.client_pid) == "bash":  # bash runs the command; it may also exec into its last program
            tree = tree[1:]
        rss = max([0] + [_memory(pid, "Rss") for pid in tree])
        pss = sum(_memory(pid, "Pss") for pid in tree)
        self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
        self._phase["rss"], self._phase["pss"] = max(self._phase["rss"], rss), max(self._phase["pss"], pss)
        self.client_last.update({pid: ticks for pid in tree if (ticks := _cpu_ticks(pid))})
        if self.samples % DISK_EVERY == 0:  # a server the command starts (a restored cluster) counts too
            self.postmasters = _postmasters()
        self.server_last.update(self._server_ticks())
        self.samples += 1
        if self.disk is not None and (disk or self.samples % DISK_EVERY == 1):
            parts = self.disk.parts()
            for part, size in {**parts, "total": sum(parts.values())}.items():
                self.peak_disk[part] = max(self.peak_disk.get(part, 0), size)
                self._phase["disk"][part] = max(self._phase["disk"].get(part, 0), size)

    @property
    def server_cpu_s(self) -> float:
        return self._server_ticks_spent() / CLOCK_TICKS

    def _server_ticks_spent(self) -> int:
        return sum(ticks - self.server_start.get(pid, 0) for pid, ticks in self.server_last.items())

    def _open(self, name: str) -> dict:
        return {"name": name, "started": time.monotonic(), "client": sum(self.client_last.values()),
                "server": self._server_ticks_spent(), "rss": 0, "pss": 0, "disk": {}}

    def _close(self) -> Usage:
        phase = self._phase
        return Usage(phase["name"], time.monotonic() - phase["started"],
                     (sum(self.client_last.values()) - phase["client"]) / CLOCK_TICKS,
                     (self._server_ticks_spent() - phase["server"]) / CLOCK_TICKS,
                     phase["rss"] / 2**20, phase["pss"] / 2**20,
                     {part: size / 2**20 for part, size in phase["disk"].items()})

    def _server_ticks(self) -> dict[int, int]:
        return {pid: ticks for root in self.postmasters for pid in _tree(root) if (ticks := _cpu_ticks(pid))}


@dataclass
class Measured:
    """A command's run: the whole (client CPU exact, from the kernel's accounting of waited-for children) and
    its phases (client CPU from the samples)."""

    total: Usage
    phases: list[Usage]
    returncode: int


def run_measured(command: str, *, name: str = "run", disk: Disk | None = None, env: dict[str, str] | None = None,
                 phase_of: Callable[[str], str | None] | None = None, first_phase: str | None = None,
                 check: bool = True) -> Measured:
    """Run `command` under `bash -o pipefail -c` (so the sampler sees the process tree below bash), stdout
    discarded. With `phase_of`, the command's stderr is read line by line and a line for which it returns a
    name starts that phase (`first_phase` until the first such line; other lines are dropped); without it,
    stderr passes through and the run is one phase."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    process = subprocess.Popen(["bash", "-o", "pipefail", "-c", command], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE if phase_of else None, env=env, text=bool(phase_of))
    sampler = Sampler(process.pid, disk, first_phase=first_phase or name)
    sampler.start()
    last_lines: deque[str] = deque(maxlen=5)
    if phase_of is not None:
        for line in process.stderr:
            last_lines.append(line.rstrip("\n"))
            if (phase := phase_of(last_lines[-1])) is not None:
                sampler.mark(phase)
    returncode = process.wait()
    wall = time.monotonic() - started
    sampler.stop.set()
    sampler.join()
    if check and returncode != 0:
        raise SystemExit(f"{name} failed (exit {returncode}): {command}"
                         + "".join(f"\n  {line}" for line in last_lines))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    total = Usage(name, wall, client_cpu, sampler.server_cpu_s, sampler.peak_rss / 2**20, sampler.peak_pss / 2**20,
                  {part: size / 2**20 for part, size in sampler.peak_disk.items()})
    return Measured(total.rounded(), [phase.rounded() for phase in sampler.phases], returncode)


def byte_compiled(packages: tuple[str, ...] = ("gsqa_core", "ingest", "reproduce")) -> None:
    """This checkout's modules compiled to bytecode, as an installed wheel has them (pip compiles at install; the
    loader image too). An editable install run with PYTHONDONTWRITEBYTECODE set, as on these VMs, would compile
    every module it imports again at each start, which a short load pays on its one busy core."""
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(root / package) for package in packages)],
                   check=True, stdout=subprocess.DEVNULL)


def power_law(small: tuple[float, float], large: tuple[float, float], to: float = 1.0) -> tuple[float, float]:
    """(value at `to`, exponent k) of the power law v = c * scale**k through two (scale, value) points, so
    that the growth between the scales is carried to `to` as it was measured (k = 1 linear, k > 1 faster).
    A value of 0 at either scale projects linearly from the larger one."""
    (scale_a, value_a), (scale_b, value_b) = sorted([small, large])
    if value_a <= 0 or value_b <= 0 or scale_a == scale_b:
        return value_b * to / scale_b, 1.0
    exponent = math.log(value_b / value_a) / math.log(scale_b / scale_a)
    return value_b * (to / scale_b) ** exponent, exponent


def medians(rounds: list[dict[str, dict]], anchor: str, ours: str) -> dict:
    """Rounds of a comparison ({tool: {figure: value}} each) summed up: each tool's median of every figure and
    its wall's range, and the anchor's wall over ours, of the medians and per round."""
    out: dict = {}
    for tool in rounds[0]:
        walls = [r[tool]["wall_s"] for r in rounds]
        # Only the measured figures: a tool's name and the DEM bench's phases (None here) have no median.
        out[tool] = {key: statistics.median(r[tool][key] for r in rounds) for key, value in rounds[0][tool].items()
                     if isinstance(value, int | float)} | {"wall_min_s": min(walls), "wall_max_s": max(walls)}
    out["ratio_of_median_walls"] = round(out[anchor]["wall_s"] / out[ours]["wall_s"], 2)
    out["ratios_per_round"] = [round(r[anchor]["wall_s"] / r[ours]["wall_s"], 2) for r in rounds]
    return out


def _postmasters() -> list[int]:
    """PIDs of the PostgreSQL servers running here (postgres processes whose parent is not one)."""
    names = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, after = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
            names[int(entry.name)] = (name, int(after[1]))
    return [pid for pid, (name, parent) in names.items()
            if name == "postgres" and names.get(parent, ("",))[0] != "postgres"]


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (those that exit while this runs are left out)."""
    pids, index = [pid], 0
    while index < len(pids):
        try:
            tasks = os.listdir(f"/proc/{pids[index]}/task")
        except OSError:
            tasks = []
        for task in tasks:
            try:
                pids += [int(child) for child in Path(f"/proc/{pids[index]}/task/{task}/children").read_text().split()]
            except OSError:
                pass
        index += 1
    return pids


def _memory(pid: int, field_name: str) -> int:
    """Rss or Pss of a process in bytes, from /proc/PID/smaps_rollup (0 once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
