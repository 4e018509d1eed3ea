"""The container a code agent's Python runs in (`reproduce serve --tools python`; docs/SANDBOX.md "Code agents").

One container per episode, from `make sandbox-image`'s image (of this checkout's sandbox sources: `checked_image`),
started at the episode's first call and removed when it ends, when its episode's time is surely up (`lifetime`
after it started, whether or not a call comes), or at once, under the calls running, when the server is told to
stop (`abort_all`, from the signal's thread); at most MAX_CONTAINERS run at once, and a new episode's first call
past them is refused in one line (waiting would spend its episode's time and hold the call's connection). No
network, a read-only root, every capability dropped, no-new-privileges, a non-root user, CPU, memory (no swap),
process and scratch limits, the export mounted read-only at /data, no logs kept by the engine, never the Docker
socket. Each call runs the code in a new process through the episode's runner, the image's
/opt/sandbox/run_call.py, which `docker exec` starts once with the container (before any code runs) and which
stays, reading one request per call on its stdin and writing the reply on its stdout, so a call pays neither the
docker CLI nor the engine's exec nor a Python start; the runner bounds the call's output and kills what it leaves
behind. The call's process is forked by the container's init (docker/sandbox/init.py), which has imported the
libraries agents use after the episode's first call, so later calls do not pay their import. If a call outlives
its timeout by more than GRACE_SECONDS, or its runner gives no reply, the container is killed and the next call
starts a new one; a runner found gone after a call it answered (its clean-up done) is started again.

Containers carry a label naming the serve process that started them (host, pid, start time), so that the
next serve on this host removes those of a serve that was killed (`reap_orphans`).

The engine is driven with the docker CLI rather than the docker SDK: the runner needs a stdin and a stdout
that the host reads with a deadline and a bound, which `docker exec -i` gives as plain pipes, and the CLI is
there wherever the engine is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reproduce.refusals import coded
from reproduce.serve import sandbox_sources

IMAGE = "gsqa-refdb-sandbox"  # `make sandbox-image` (Makefile's SANDBOX_IMAGE)
LABEL = "gsqa-refdb.serve"
DATA_MOUNT = "/data"
GRACE_SECONDS = 10.0  # past a call's timeout, before the container itself is killed
START_TIMEOUT = 60.0
REPLY_BYTES = 1 << 20  # a reply of run_call.py's: the kept output plus a few hundred bytes
FRAME = struct.Struct(">I")  # the length before each request and reply (run_call.py's)
MAX_CODE_CHARACTERS = 100_000  # of a call's code; past it the call is refused and the code not kept
MAX_CONTAINERS = 8  # running at once in one server: each may take Limits' CPU and memory


@dataclass(frozen=True)
class Limits:
    """What one episode's container may take (the `docker run` options below)."""

    cpus: float = 1.0
    memory_mb: int = 2048  # swap included: none
    pids: int = 128
    scratch_mb: int = 512  # /tmp, the code's working folder, for the episode's life
    shm_mb: int = 64
    output_bytes: int = 20_000  # of stdout and of stderr each: half head, half tail


@dataclass(frozen=True)
class PythonRun:
    """One call: how it ended, the output kept, what it took."""

    exit: int | None  # None when a signal ended it
    signal: str | None
    timed_out: bool
    seconds: float
    peak_kb: int  # the call's process's own: above its size when init forked it (init's libraries not counted)
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    timeout: float = 0.0  # the seconds the call was given
    container_killed: bool = False  # the call outlived its timeout and grace: the scratch folder is gone

    @property
    def outcome(self) -> str:
        """ok, error (a non-zero exit), timeout, killed (a signal: the memory limit, mostly), lost."""
        if self.container_killed:
            return "lost"
        if self.timed_out:
            return "timeout"
        if self.signal:
            return "killed"
        return "ok" if self.exit == 0 else "error"


class SandboxUnavailable(Exception):
    """No engine, no image, a container that would not start, or none to be started now: one line saying
    what to do (its first argument; a refusals.Refusal, with its code, where the server refuses the call)."""


ENDED = coded("sandbox_ended", "refused: the episode's container was removed (its time is up, or the server is "
              "stopping)")


def checked_image() -> str:
    """The id of this checkout's sandbox image (IMAGE tagged with its sources: sandbox_sources.py), or
    SandboxUnavailable, one line saying what to do. Containers start from the id: the tag may be built again
    while the server runs."""
    if shutil.which("docker") is None:
        raise SandboxUnavailable("the docker CLI is not installed: install Docker Engine (docker.io), then "
                                 "`make sandbox-image`")
    sources = sandbox_sources.tag()
    probe = _image_id(f"{IMAGE}:{sources}" if sources else IMAGE)
    if probe.returncode == 0:
        return probe.stdout.strip()
    if not _missing(probe):
        raise SandboxUnavailable(f"the Docker engine does not answer ({_first_line(probe.stderr)}): start it, or run "
                                 "serve without python")
    if sources and _image_id(IMAGE).returncode == 0:
        raise SandboxUnavailable(f"the image {IMAGE} was built from other sandbox sources than this checkout's "
                                 "(Dockerfile.sandbox, docker/sandbox/): run `make sandbox-image`")
    raise SandboxUnavailable(f"the image {IMAGE} is missing: run `make sandbox-image`")


def _image_id(name: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", name], capture_output=True, text=True,
                          timeout=30)


def _missing(probe: subprocess.CompletedProcess) -> bool:
    return "No such image" in probe.stderr or "No such object" in probe.stderr


def docker_run_options(limits: Limits, export: Path) -> list[str]:
    """The container's confinement, as `docker run` options."""
    return ["--network", "none", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--user", sandbox_user(), "--cpus", str(limits.cpus), "--memory", f"{limits.memory_mb}m",
            "--memory-swap", f"{limits.memory_mb}m", "--pids-limit", str(limits.pids),
            "--tmpfs", f"/tmp:rw,nosuid,nodev,noexec,size={limits.scratch_mb}m,mode=1777",
            "--shm-size", f"{limits.shm_mb}m", "--ulimit", "core=0",
            "--mount", f"type=bind,{_csv_field(f'source={export.resolve()}')},target={DATA_MOUNT},readonly",
            "--log-driver", "none"]


def sandbox_user() -> str:
    """Whom the code runs as: the user running serve (so that the export reads as it does for them), never
    root: under root, the image's unprivileged user 1000."""
    return f"{os.getuid()}:{os.getgid()}" if os.getuid() != 0 else "1000:1000"


def unreadable_export(export: Path) -> str | None:
    """Why the sandbox's user could not read the export folder, in one line; None when it can."""
    if not (export / "export.json").is_file():
        return f"{export} is not an `ingest export` folder (no export.json)"
    others_can_read = export.stat().st_mode & 0o005 == 0o005 and (export / "export.json").stat().st_mode & 0o004
    if os.getuid() == 0 and not others_can_read:
        return f"{export} is not readable by the sandbox's user (uid 1000, serve runs as root): chmod -R o+rX it"
    return None


class PythonSandbox:
    """One episode's container: started at the first call, removed by close()."""

    def __init__(self, export: Path, limits: Limits = Limits(), name: str | None = None, image: str | None = None
                 ) -> None:
        self.export, self.limits, self.image = export, limits, image or checked_image()
        self.name = name or f"gsqa-python-{uuid.uuid4().hex[:12]}"
        self.started = False
        self._runner: Runner | None = None  # while started
        self.ended = threading.Event()  # set: no call starts the container again (Containers.abort)
        self._lock = threading.Lock()  # one call at a time per container

    def run(self, code: str, timeout: float | Callable[[], float]) -> PythonRun:
        """The code in a fresh Python process; ends at `timeout` seconds (a callable: asked once the container
        is this call's, since a call waiting for the one before it spends its episode's time; the process group
        and whatever it left are killed), or at that + grace by killing the container."""
        with self._lock:
            timeout = round(timeout() if callable(timeout) else timeout, 3)
            if not self.started:
                self._start()
            request = json.dumps({"code": code, "timeout": timeout, "output_bytes": self.limits.output_bytes})
            started = time.monotonic()
            reply, finished = self._call(request.encode(), timeout + GRACE_SECONDS)
            run = _parsed(reply) if reply is not None else None
            if run is None:  # the runner itself was killed (memory, the code) or hung: start afresh next time
                self._kill()
                return PythonRun(None, "SIGKILL", not finished, round(time.monotonic() - started, 3), 0, "", "",
                                 0, 0, timeout, container_killed=True)
            return dataclasses.replace(run, timeout=timeout)

    def close(self) -> None:
        """Remove the container (and its scratch folder) once the call under way, if any, has ended; nothing
        happens if it never started."""
        with self._lock:
            if self.started:
                self._kill()

    def _call(self, request: bytes, timeout: float) -> tuple[bytes | None, bool]:
        """The runner's reply (None if it ended first), and whether it came (or the runner ended) in time. A
        runner gone before it took the request, so since the clean-up of the call it last answered (no process
        of the code is left to pre-empt the next), is started again, once."""
        deadline = time.monotonic() + timeout
        try:
            if not self._runner.took(request, deadline):
                self._runner.close()
                self._runner = Runner(self.name)
                if not self._runner.took(request, deadline):
                    return None, True
            return self._runner.receive(deadline, REPLY_BYTES), True
        except TimeoutError:
            return None, False

    def _start(self) -> None:
        if self.ended.is_set():
            raise SandboxUnavailable(ENDED)
        argv = ["docker", "run", "--detach", "--name", self.name, "--label", f"{LABEL}={owner_label()}",
                *docker_run_options(self.limits, self.export), self.image]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=START_TIMEOUT)
        if done.returncode != 0:
            subprocess.run(["docker", "rm", "--force", self.name], capture_output=True, timeout=START_TIMEOUT)
            raise SandboxUnavailable(f"the sandbox container did not start: {_first_line(done.stderr)}")
        self.started = True
        self._runner = Runner(self.name)  # before any code runs in the container: none can pre-empt it
        if self.ended.is_set():  # aborted while it started, before there was a container to remove
            self._kill()
            raise SandboxUnavailable(ENDED)

    def _kill(self) -> None:
        subprocess.run(["docker", "rm", "--force", self.name], capture_output=True, timeout=START_TIMEOUT)
        self.started = False
        if self._runner is not None:
            self._runner.close()
            self._runner = None


class Runner:
    """An episode's runner, run_call.py, started in its container by `docker exec -i` (it makes itself
    non-dumpable before it reads a request), and the framed requests and replies on its stdin and stdout, each
    read with a deadline (TimeoutError past it) and a bound. The runner acknowledges a request with an empty
    reply before it acts on it."""

    def __init__(self, container: str) -> None:
        self.process = subprocess.Popen(["docker", "exec", "--interactive", container, "python3",
                                         "/opt/sandbox/run_call.py"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
        self.stdin, self.stdout = self.process.stdin.fileno(), self.process.stdout.fileno()
        os.set_blocking(self.stdin, False)  # a runner that reads nothing must not block the write past the deadline

    def took(self, request: bytes, deadline: float) -> bool:
        """Whether the runner received the request (False: it is gone)."""
        sending = memoryview(FRAME.pack(len(request)) + request)
        while sending:
            _wait(self.stdin, select.POLLOUT, deadline)
            try:
                sending = sending[os.write(self.stdin, sending):]
            except BrokenPipeError:
                return False
        return self.receive(deadline, 0) == b""

    def receive(self, deadline: float, max_bytes: int) -> bytes | None:
        """The next reply; None if the runner ended first or announced more than max_bytes."""
        header = self._read(FRAME.size, deadline)
        size = FRAME.unpack(header)[0] if header is not None else None
        return self._read(size, deadline) if size is not None and size <= max_bytes else None

    def close(self) -> None:
        """The docker CLI ended (the runner ends with its container, or at the end of its stdin)."""
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()

    def _read(self, size: int, deadline: float) -> bytes | None:
        """Exactly `size` bytes (no more: the next reply's stay in the pipe); None at the end of the stream."""
        data = bytearray()
        while len(data) < size:
            _wait(self.stdout, select.POLLIN, deadline)
            if not (chunk := os.read(self.stdout, size - len(data))):
                return None
            data += chunk
        return bytes(data)


def _wait(fd: int, event: int, deadline: float) -> None:
    """Until the file descriptor is ready for `event` (or in error, or hung up); TimeoutError at the deadline."""
    poll = select.poll()
    poll.register(fd, event)
    left = deadline - time.monotonic()
    if left <= 0 or not poll.poll(left * 1000):
        raise TimeoutError


class Containers:
    """The episodes' containers: one per question, started at its first call, removed when its episode ends
    (`end`), `lifetime` seconds after it started (a timer: by then its episode's time is up, counted from a
    call no later than the container's first), or when the server stops (`close`, after the calls under way;
    `abort`, under them). At most `cap` at once, and at most `share` started by one agent (the calls' `owner`:
    an agent of --tokens, whichever its session). The containers a killed server left are removed first."""

    def __init__(self, export: Path, limits: Limits = Limits(), lifetime: float | None = None,
                 cap: int = MAX_CONTAINERS, share: int = MAX_CONTAINERS, image: str | None = None) -> None:
        self.export, self.limits, self.lifetime, self.cap, self.share = export, limits, lifetime, cap, share
        self.image = image or checked_image()
        self._owners: dict[str, str | None] = {}  # question -> the agent whose call started its container
        self._lock = threading.Condition()  # notified when a container is added or the whole closes
        self._running: dict[str, PythonSandbox] = {}
        self._expires: dict[str, float] = {}  # question -> time.monotonic() its container is removed at
        self._stopping = False
        reap_orphans()
        _OPEN.add(self)
        if lifetime is not None:
            threading.Thread(target=self._remove_expired, name="sandbox-lifetimes", daemon=True).start()

    def run(self, question: str, code: str, timeout: float | Callable[[], float], owner: str | None = None
            ) -> PythonRun:
        with self._lock:
            if self._stopping:
                raise SandboxUnavailable(ENDED)
            sandbox = self._running.get(question)
            if sandbox is None:
                if len(self._running) >= self.cap:
                    raise SandboxUnavailable(coded("sandbox_busy", f"refused: {self.cap} episodes' containers run "
                                                   "already (the server's cap); call again when one of their episodes "
                                                   "has ended"))
                if owner is not None and list(self._owners.values()).count(owner) >= self.share:
                    raise SandboxUnavailable(coded("sandbox_share", f"refused: {self.share} episodes' containers of "
                                                   f"agent {owner} run already (its share); call again when one of "
                                                   "their episodes has ended"))
                sandbox = self._running[question] = PythonSandbox(self.export, self.limits, image=self.image)
                self._owners[question] = owner
                if self.lifetime is not None:
                    self._expires[question] = time.monotonic() + self.lifetime
                    self._lock.notify_all()
        return sandbox.run(code, timeout)

    def end(self, question: str) -> None:
        with self._lock:
            sandbox = self._running.pop(question, None)
            self._expires.pop(question, None)
            self._owners.pop(question, None)
        if sandbox is not None:
            sandbox.close()

    def close(self) -> None:
        with self._lock:
            running, self._running, self._expires, self._owners = list(self._running.values()), {}, {}, {}
            self._stopping = True
            self._lock.notify_all()
        for sandbox in running:
            sandbox.close()

    def abort(self) -> None:
        """Remove every container now, the calls running included (each ends lost); start none after."""
        with self._lock:
            self._stopping = True
            running = list(self._running.values())
            self._lock.notify_all()
        for sandbox in running:
            sandbox.ended.set()
        if running:
            subprocess.run(["docker", "rm", "--force", *(sandbox.name for sandbox in running)],
                           capture_output=True, timeout=120)

    def _remove_expired(self) -> None:
        """The timer: each container removed at its expiry (after the call under way, which its episode's
        timeout ends), until the whole closes."""
        while True:
            with self._lock:
                if self._stopping:
                    return
                now = time.monotonic()
                expired = [question for question, at in self._expires.items() if at <= now]
                if not expired:
                    self._lock.wait(min(self._expires.values()) - now if self._expires else None)
                    continue
            for question in expired:
                self.end(question)


_OPEN: weakref.WeakSet[Containers] = weakref.WeakSet()  # for abort_all: a signal's thread has no Tools at hand


def abort_all() -> None:
    """Remove every container this process runs, now (Containers.abort): what a stopping server does first."""
    for containers in list(_OPEN):
        containers.abort()


def owner_label() -> str:
    """This process on this host, as a container label: host, pid and the pid's start time (a pid reused by
    another process after a reboot or a wrap-around does not pass for this one)."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def reap_orphans() -> list[str]:
    """Remove the containers that a serve on this host started and that outlived it (kill -9); returns
    their names. Containers of a serve still running are left alone."""
    listed = subprocess.run(["docker", "ps", "--all", "--filter", f"label={LABEL}", "--format",
                             f'{{{{.Names}}}}\t{{{{.Label "{LABEL}"}}}}'], capture_output=True, text=True, timeout=60)
    orphans = []
    for line in listed.stdout.splitlines():
        name, _, owner = line.partition("\t")
        host, _, rest = owner.partition(":")
        pid, _, started = rest.partition(":")
        if host == socket.gethostname() and pid.isdigit() and _start_time(int(pid)) != started:
            orphans.append(name)
    if orphans:
        subprocess.run(["docker", "rm", "--force", *orphans], capture_output=True, timeout=120)
    return orphans


def _start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat, field 22); "" if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def _parsed(reply: bytes) -> PythonRun | None:
    """run_call.py's reply; None if it is not one."""
    try:
        data = json.loads(reply)
    except ValueError:
        return None
    return PythonRun(data["exit"], data["signal"], data["timed_out"], data["seconds"], data["peak_kb"],
                     _joined(data["stdout"]), _joined(data["stderr"]), data["stdout"]["bytes"],
                     data["stderr"]["bytes"])


def _joined(stream: dict) -> str:
    """Head and tail, with the cut marked where bytes were left out."""
    if not stream["cut"]:
        return stream["head"] + stream["tail"]
    return f"{stream['head']}\n[... {stream['cut']:,} bytes cut ...]\n{stream['tail']}"


def _csv_field(field: str) -> str:
    """A field of --mount's comma-separated value, quoted as CSV (a path may hold commas and quotes)."""
    return '"' + field.replace('"', '""') + '"'


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or ["no message"])[0]
