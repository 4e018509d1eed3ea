"""PID 1 of a sandbox container: the warm parent of every call's process, and the reaper of what they leave.

For each call the episode's runner (run_call.py, started once by `docker exec`) connects to this process's
socket and passes the write ends of the call's output pipes; this process forks, and the child runs
/tmp/.call.py as `__main__` in a session of its own, in /tmp/work, with those pipes as stdout and stderr. The
child is a new process each call, forked from one that has already imported the libraries the agents use
(PRELOADED, after the episode's first call, while the model thinks), so a call does not pay their import.
When a call's process ends, its exit status and peak memory (its own: above what it had at the fork, which
counts what this process had imported) go back over the connection.

Only a runner is served: the process that connected must have been started by `docker exec` (its parent is
outside the container: PPid 0), never the agent's code or anything it started (their parents lead back to
this process), and it must answer this process's nonce with its request. So a request the code queued while
this process was busy (the preload) is never served: its sender is gone (a pid reused since by a runner
does not know the nonce), and no process of a call outlives the runner's clean-up after the call.

PID 1 survives a call's kill(-1) and ignores the signals it has no handler for (the agent's code cannot
SIGTERM it); it is not dumpable, so the code (the same user) cannot open its /proc/1/ entries or its socket's
peer. A connection whose request does not come at once is dropped: nothing the code sends can block it.
"""

import array
import ctypes
import json
import os
import resource
import runpy
import select
import signal
import socket
import struct
import sys
import traceback

ADDRESS = "\0gsqa-sandbox-calls"  # abstract: nothing on the scratch tmpfs to delete or replace
SCRIPT, WORKDIR = "/tmp/.call.py", "/tmp/work"
PRELOADED = ("numpy", "pandas", "pyarrow.parquet", "shapely", "pyproj", "geopandas", "rasterio")
libc = ctypes.CDLL(None)


def run_the_call(output: int, errors: int, baseline: int) -> None:
    """In the forked child: the script as a fresh `python /tmp/.call.py` would run it; never returns. First
    its peak resident size as forked goes to `baseline`, closed before the code runs."""
    os.write(baseline, str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss).encode())
    os.close(baseline)
    os.setsid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.set_wakeup_fd(-1)
    null = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((null, 0), (output, 1), (errors, 2)):
        os.dup2(fd, target)
        os.close(fd)
    libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE: the call's own process is the agent's to inspect
    os.makedirs(WORKDIR, exist_ok=True)
    os.chdir(WORKDIR)
    sys.argv = [SCRIPT]
    status = 0
    try:
        runpy.run_path(SCRIPT, run_name="__main__")
    except SystemExit as stop:
        status = _exit_status(stop.code)
    except BaseException as error:  # what python3 would print: the traceback from the script's frames on
        tb = error.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != SCRIPT:
            tb = tb.tb_next
        traceback.print_exception(type(error), error, tb)
        status = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def preload() -> None:
    for name in PRELOADED:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a library that does not import is imported by the call, or fails there
            pass


class CallServer:
    """The socket calls connect to, the calls running and the wake-up pipe of SIGCHLD."""

    def __init__(self) -> None:
        self.wake_read, wake_write = os.pipe()
        os.set_blocking(wake_write, False)
        signal.set_wakeup_fd(wake_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Python's KeyboardInterrupt would end PID 1
        self.inherited = (self.wake_read, wake_write)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.server.bind(ADDRESS)
        self.server.listen(16)
        # a call's pid -> the connection its status goes back on, and the pipe its peak as forked comes on
        self.waiting: dict[int, tuple[socket.socket, int]] = {}
        self.calls = 0

    def serve(self) -> None:
        while True:
            ready, _, _ = select.select([self.server, self.wake_read], [], [])
            if self.wake_read in ready:
                os.read(self.wake_read, 4096)
                self.reap()
            if self.server in ready:
                self.start_call()
            if self.calls == 1 and not self.waiting and "geopandas" not in sys.modules:
                preload()

    def start_call(self) -> None:
        connection, _ = self.server.accept()
        fds = _request(connection, ask=_started_by_docker_exec(connection))
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            connection.close()
            return
        baseline_read, baseline_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            self.server.close()
            connection.close()
            for fd in (*self.inherited, baseline_read):
                os.close(fd)
            run_the_call(*fds, baseline_write)
        for fd in (*fds, baseline_write):
            os.close(fd)
        _send(connection, {"pid": pid})
        self.waiting[pid] = (connection, baseline_read)
        self.calls += 1

    def reap(self) -> None:
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if (waiting := self.waiting.pop(pid, None)) is not None:
                connection, baseline = waiting
                forked_kb = int(os.read(baseline, 32) or 0)  # nothing if it was killed before it wrote
                os.close(baseline)
                _send(connection, {"status": os.waitstatus_to_exitcode(status),
                                   "peak_kb": max(0, usage.ru_maxrss - forked_kb)})
                connection.close()


def _started_by_docker_exec(connection: socket.socket) -> bool:
    """Whether the process that connected (as the kernel saw it at connect) has its parent outside the
    container, as `docker exec` starts a runner; the agent's code and whatever it starts have theirs inside."""
    pid, _, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                          struct.calcsize("3i")))
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(line for line in status if line.startswith("PPid:")).split() == ["PPid:", "0"]
    except (OSError, StopIteration):  # gone (or outside this pid namespace: pid 0)
        return False


def _request(connection: socket.socket, ask: bool) -> list[int]:
    """The file descriptors of a runner's request (`ask`), which answers a fresh nonce; none if the payload
    is not the nonce (a request sent before it was asked: by a process gone since, whose pid a runner may
    have now), if it does not come within a second, or if the peer is no runner (read, then dropped)."""
    connection.settimeout(1.0)
    nonce, fds = os.urandom(16) if ask else None, array.array("i")
    try:
        if nonce:
            connection.send(nonce)
        payload, ancillary, _, _ = connection.recvmsg(64, socket.CMSG_LEN(2 * fds.itemsize))
    except OSError:
        return []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    if payload != nonce:
        for fd in fds:
            os.close(fd)
        return []
    return list(fds)


def _send(connection: socket.socket, message: dict) -> None:
    try:
        connection.send(json.dumps(message).encode())
    except OSError:
        pass  # the caller is gone (killed past its grace): nothing to tell


libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
CallServer().serve()
