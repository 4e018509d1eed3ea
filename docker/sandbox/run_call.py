"""One `run_python` call inside the sandbox container (reproduce/serve/python_sandbox.py runs it with
`docker exec`): the agent's code, read from stdin, runs in a fresh Python process of its own session in
/tmp/work; its stdout and stderr are kept bounded (head and tail, the count of bytes cut); at its timeout the
process group is killed; afterwards every process the call left behind is killed too (kill(-1) spares only
this process and the container's init). One JSON line on stdout says what happened.

This process makes itself non-dumpable first, so that the agent's code (the same user) cannot open its
/proc/PID/fd and write a forged result line; the host bounds what it reads in any case."""

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

PR_SET_DUMPABLE = 4


class Bounded:
    """The first and last `half` bytes of a stream and its total length."""

    def __init__(self, half: int) -> None:
        self.half, self.head, self.tail, self.total = half, bytearray(), bytearray(), 0

    def drain(self, stream) -> None:
        while chunk := stream.read1(65536):
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            self.tail += chunk
            del self.tail[:max(0, len(self.tail) - self.half)]

    def as_dict(self) -> dict:
        return {"head": self.head.decode("utf-8", "replace"), "tail": self.tail.decode("utf-8", "replace"),
                "bytes": self.total, "cut": self.total - len(self.head) - len(self.tail)}


def kill_the_rest(child: int) -> None:
    """Every process but this one and init, also those that left the call's session; again while a fork
    bomb's children outrun one pass (the killed child stays in /proc until it is waited for)."""
    spared = {1, os.getpid(), child}
    for _ in range(100):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not {int(name) for name in os.listdir("/proc") if name.isdigit()} - spared:
            return
        time.sleep(0.01)


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    timeout, max_bytes = float(sys.argv[1]), int(sys.argv[2])
    os.makedirs("/tmp/work", exist_ok=True)
    with open("/tmp/.call.py", "wb") as script:
        script.write(sys.stdin.buffer.read())
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "/tmp/.call.py"], cwd="/tmp/work", stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    streams = {"stdout": Bounded(max_bytes // 2), "stderr": Bounded(max_bytes // 2)}
    readers = [threading.Thread(target=kept.drain, args=(getattr(child, name),), daemon=True)
               for name, kept in streams.items()]
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        child.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    seconds = time.monotonic() - started
    kill_the_rest(child.pid)
    child.wait()
    for reader in readers:
        reader.join(5)
    code = child.returncode
    print(json.dumps({"exit": code if code >= 0 else None, "signal": signal.Signals(-code).name if code < 0 else None,
                      "timed_out": timed_out, "seconds": round(seconds, 3),
                      "peak_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                      **{name: kept.as_dict() for name, kept in streams.items()}}), flush=True)


main()
