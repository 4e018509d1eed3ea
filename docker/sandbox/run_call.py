"""The runner of an episode's `run_python` calls inside the sandbox container: reproduce/serve/python_sandbox.py
starts it once per container with `docker exec`, before any call, and sends it one request per call on its
stdin; for each, it writes on its stdout an empty reply as soon as it has taken the request, then the call's
reply (each framed: a 4-byte big-endian length, then JSON). The agent's code runs in a new process that the
container's init (init.py) forks for it; its stdout and stderr come back through pipes kept bounded here
(head and tail, the count of bytes cut); at the timeout its process group is killed; afterwards every process
the call left behind is killed too (kill(-1) spares only this process and init), before the reply is written.

This process makes itself non-dumpable first, so that the agent's code (the same user) cannot open its
/proc/PID/fd to write a forged reply or read the next request; no process of the code is alive before that
(it starts before the episode's first call, or, started again, after the clean-up of the call its predecessor
last answered), and the host bounds what it reads in any case. init asks for each call's request with a
nonce, which the request carries back."""

import array
import ctypes
import json
import os
import signal
import socket
import struct
import sys
import threading
import time

ADDRESS = "\0gsqa-sandbox-calls"  # init.py's
SCRIPT = "/tmp/.call.py"
PR_SET_DUMPABLE = 4
FRAME = struct.Struct(">I")  # python_sandbox.py's


class Bounded:
    """The first and last `half` bytes of a stream and its total length."""

    def __init__(self, half: int) -> None:
        self.half, self.head, self.tail, self.total = half, bytearray(), bytearray(), 0

    def drain(self, fd: int) -> None:
        with open(fd, "rb", buffering=0) as stream:
            while chunk := stream.read(65536):
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


def others() -> set[int]:
    """The container's live processes but init and this one (zombies are init's to reap)."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (1, os.getpid()):
            try:
                state = open(f"/proc/{name}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                found.add(int(name))
    return found


def kill_the_rest() -> None:
    """Every process but this one and init, also those that left the call's session; again while a fork
    bomb's children outrun one pass."""
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        if not others():
            return
        time.sleep(0.005)


def connected() -> socket.socket:
    """A connection to init's socket; at a container's first call init may not listen yet."""
    for _ in range(500):
        init = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            init.connect(ADDRESS)
            return init
        except ConnectionRefusedError:
            init.close()
            time.sleep(0.01)
    raise SystemExit("the container's init does not listen")


def run_call(code: str, timeout: float, output_bytes: int) -> dict:
    """One call: the code run by a process init forks, what it printed (bounded) and how it ended."""
    with open(SCRIPT, "w", encoding="utf-8", errors="surrogatepass") as script:  # a lone surrogate: a SyntaxError
        script.write(code)
    streams = {"stdout": Bounded(output_bytes // 2), "stderr": Bounded(output_bytes // 2)}
    pipes = [os.pipe() for _ in streams]
    started = time.monotonic()
    with connected() as init:
        nonce = init.recv(64)
        init.sendmsg([nonce], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w for _, w in pipes]))])
        for _, write_end in pipes:
            os.close(write_end)
        readers = [threading.Thread(target=kept.drain, args=(read_end,), daemon=True)
                   for kept, (read_end, _) in zip(streams.values(), pipes, strict=True)]
        for reader in readers:
            reader.start()
        pid = json.loads(init.recv(256))["pid"]
        timed_out = False
        init.settimeout(timeout)
        try:
            ended = json.loads(init.recv(256))
        except TimeoutError:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)  # the call made its own session: its group is its pid
            except ProcessLookupError:
                pass
            init.settimeout(10)
            ended = json.loads(init.recv(256))
    seconds = time.monotonic() - started
    kill_the_rest()
    for reader in readers:
        reader.join(5)
    status = ended["status"]
    return {"exit": status if status >= 0 else None,
            "signal": signal.Signals(-status).name if status < 0 else None,
            "timed_out": timed_out, "seconds": round(seconds, 3), "peak_kb": ended["peak_kb"],
            **{name: kept.as_dict() for name, kept in streams.items()}}


def read_frame(stream) -> bytes | None:
    """The next request; None at the end of the stream (the host closed it, or went)."""
    header = stream.read(FRAME.size)
    if len(header) < FRAME.size:
        return None
    (size,) = FRAME.unpack(header)
    body = stream.read(size)
    return body if len(body) == size else None


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    while (request := read_frame(requests)) is not None:
        write_frame(replies, b"")  # taken: the host knows from here that this call may run code
        write_frame(replies, json.dumps(run_call(**json.loads(request))).encode())


def write_frame(stream, reply: bytes) -> None:
    stream.write(FRAME.pack(len(reply)) + reply)
    stream.flush()


main()
