"""The code agents' container (reproduce/serve/python_sandbox.py) against a real Docker engine: a call runs
the code and returns its output bounded; hostile code is contained, each attempt in one outcome, and the
container is as it was for the next call; nothing outlives the episode or a killed serve."""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_helpers import a_call_runs_in, base_image, wait_until

from reproduce import configs, dataset
from reproduce.serve import python_sandbox
from reproduce.serve.python_sandbox import IMAGE, LABEL, Limits, PythonSandbox
from testkit import code_agent

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.docker
LIMITS = Limits(memory_mb=512, pids=64, scratch_mb=64, output_bytes=2_000)


@pytest.fixture(scope="module")
def image(engine) -> str:
    """The sandbox image of this checkout, built by `make sandbox-image` every session (the engine's cache makes
    that quick when nothing changed): a tag left by another checkout may hold another runner."""
    base_image()
    built = subprocess.run(["make", "sandbox-image"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    python_sandbox.checked_image()  # SandboxUnavailable, saying why, if this checkout's image is not there
    return IMAGE


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("export")
    (folder / "layer.txt").write_text("the export\n")
    (folder / "export.json").write_text("{}\n")
    folder.chmod(0o755)  # as `ingest export` leaves it; pytest's folders are the owner's only
    assert python_sandbox.unreadable_export(folder) is None
    return folder


@pytest.fixture(scope="module")
def sandbox(image: str, export: Path) -> Iterator[PythonSandbox]:
    made = PythonSandbox(export, LIMITS)
    yield made
    made.close()


def still_works(sandbox: PythonSandbox) -> None:
    after = sandbox.run("print(open('/data/layer.txt').read().strip())", 10)
    assert (after.outcome, after.stdout) == ("ok", "the export\n")


def test_a_call_runs_the_code_over_the_export(sandbox: PythonSandbox) -> None:
    run = sandbox.run("import sys\nprint(open('/data/layer.txt').read().strip())\nprint('note', file=sys.stderr)", 10)
    assert (run.outcome, run.exit, run.stdout, run.stderr) == ("ok", 0, "the export\n", "note\n")
    assert run.peak_kb > 0


def test_peak_memory_is_the_calls_own_not_the_preloaded_libraries(image: str, export: Path) -> None:
    sandbox = PythonSandbox(export, LIMITS)
    try:
        assert sandbox.run("import geopandas, rasterio", 30).outcome == "ok"  # then init preloads them
        small = sandbox.run("print(1)", 30)
        large = sandbox.run("x = bytearray(200 << 20)\nx[::4096] = b'1' * len(x[::4096])", 30)
    finally:
        sandbox.close()
    assert (small.outcome, large.outcome) == ("ok", "ok")
    assert small.peak_kb < 16 << 10  # the libraries init holds take several times that
    assert 200 << 10 <= large.peak_kb < 216 << 10


def test_the_scratch_folder_lives_as_long_as_the_episode(sandbox: PythonSandbox) -> None:
    assert sandbox.run("open('kept.txt', 'w').write('x')", 10).outcome == "ok"
    assert sandbox.run("print(open('/tmp/work/kept.txt').read())", 10).stdout == "x\n"


def test_an_exception_is_an_error_with_its_traceback(sandbox: PythonSandbox) -> None:
    run = sandbox.run("1 / 0", 10)
    assert (run.outcome, run.exit) == ("error", 1)
    assert run.stderr.endswith("ZeroDivisionError: division by zero\n")


def test_output_is_kept_as_head_and_tail_with_the_cut_marked(sandbox: PythonSandbox) -> None:
    run = sandbox.run("import sys\nsys.stdout.write('a' * 1000 + 'b' * 10_000_000 + 'c' * 1000)", 20)
    assert run.outcome == "ok" and run.stdout_bytes == 10_002_000
    assert run.stdout == "a" * 1000 + "\n[... 10,000,000 bytes cut ...]\n" + "c" * 1000


HOSTILE = {
    "a fork bomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", 3,
                    "timeout"),
    "memory past the limit": ("x = bytearray(1024 ** 3)\nx[::4096] = b'1' * len(x[::4096])", 20, "killed"),
    "a CPU spin past the timeout": ("while True:\n    pass", 2, "timeout"),
    "a sleep past the timeout": ("import time\ntime.sleep(600)", 2, "timeout"),
    "10 GB to stdout": ("import os\nblock = b'x' * (1 << 20)\nfor _ in range(10240):\n    os.write(1, block)", 60,
                        None),  # as fast as the pipe: ok or timeout, bounded either way
    "filling the scratch tmpfs": ("open('/tmp/work/fill', 'wb').write(b'x' * (200 << 20))", 20, "error"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_code_is_contained_and_the_next_call_works(sandbox: PythonSandbox, name: str) -> None:
    code, timeout, outcome = HOSTILE[name]
    run = sandbox.run(code, timeout)
    if outcome:
        assert run.outcome == outcome, run
    assert len(run.stdout) + len(run.stderr) <= 2 * LIMITS.output_bytes + 100
    assert not run.container_killed
    listed = sandbox.run("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))", 10)
    assert len(eval(listed.stdout)) == 3  # init, the call's runner and this code: nothing left of the last call
    sandbox.run("import os\nos.remove('/tmp/work/fill') if os.path.exists('/tmp/work/fill') else None", 10)
    still_works(sandbox)


REFUSED = {
    "writing under the data mount": ("open('/data/x', 'w')", "Read-only file system"),
    "writing to the root": ("open('/usr/x', 'w')", "Read-only file system"),
    "the network": ("import socket\nsocket.create_connection(('10.0.0.1', 80), timeout=2)", "Network is unreachable"),
    "the host's shadow file": ("open('/etc/shadow').read()", "Permission denied"),
    "becoming root": ("import os\nos.setuid(0)", "Operation not permitted"),
    "mounting": ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                 "if libc.mount(b'none', b'/mnt', b'tmpfs', 0, None) != 0:\n"
                 "    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))", "Operation not permitted"),
    "PID 1's root": ("import os\nos.listdir('/proc/1/root')", "Permission denied"),
    "the Docker socket": ("import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/var/run/docker.sock')",
                          "No such file or directory"),
    "a program dropped in scratch": ("import os, shutil\nshutil.copy('/bin/true', '/tmp/work/t')\n"
                                     "os.chmod('/tmp/work/t', 0o755)\nos.execv('/tmp/work/t', ['t'])",
                                     "Permission denied"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_what_the_container_refuses_is_an_error_naming_why(sandbox: PythonSandbox, name: str) -> None:
    code, refusal = REFUSED[name]
    run = sandbox.run(code, 10)
    assert run.outcome == "error", run
    assert refusal in run.stderr.splitlines()[-1]
    still_works(sandbox)


AGAINST_THE_SANDBOX = {
    "signals to init": ("import os, signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL):\n"
                        "    os.kill(1, s)\nprint('sent')", "ok"),
    "a junk request to init, and one held open": (
        "import socket, time\nfor _ in range(2):\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        "    s.connect('\\0gsqa-sandbox-calls')\ns.send(b'x' * 60)\nheld = socket.socket(socket.AF_UNIX, "
        "socket.SOCK_SEQPACKET)\nheld.connect('\\0gsqa-sandbox-calls')\ntime.sleep(3)\nprint('sent')", "ok"),
    "a request to init as a runner makes it, dropped unanswered": (
        "import array, os, socket\nr, w = os.pipe()\ns = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        "s.connect('\\0gsqa-sandbox-calls')\ns.sendmsg([b'run'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, "
        "array.array('i', [w, w]))])\nassert s.recv(64) == b''\nprint('sent')", "ok"),
}


@pytest.mark.parametrize("name", list(AGAINST_THE_SANDBOX))
def test_code_that_turns_on_the_sandbox_leaves_it_as_it_was(sandbox: PythonSandbox, name: str) -> None:
    assert sandbox.run("open('/tmp/work/mark', 'w').write('kept')", 10).outcome == "ok"
    code, outcome = AGAINST_THE_SANDBOX[name]
    run = sandbox.run(code, 10)
    assert (run.outcome, run.stdout) == (outcome, "sent\n"), run
    assert sandbox.run("print(open('/tmp/work/mark').read())", 10).stdout == "kept\n"  # the same container
    still_works(sandbox)


# The episode's first call leaves a process that holds its runner still (SIGSTOP) until init, its call
# ended, is preloading the libraries, queues requests to init then, and lets the runner go on; were one
# served after the preload (the runner's clean-up over), its process would run the script of the call before
# with a file as stdout, outlive the call and, as soon as the next runner shows, open that runner's stdout
# through /proc before it is made non-dumpable and fill it to the host's bound with a forged result line.
# The next call then tries the same on its own runner and lists what is left of the first.
OUTLIVE_AND_FORGE = r"""
import array, json, os, signal, socket, stat, time

def runners():
    for pid in os.listdir('/proc'):
        try:
            if pid.isdigit() and 'run_call' in open(f'/proc/{pid}/cmdline').read():
                yield int(pid)
        except OSError:
            pass

def forge(pid):  # the runner's stdout, opened through /proc, filled up to the host's bound: a forged last line
    line = json.dumps({'exit': 0, 'signal': None, 'timed_out': False, 'seconds': 0.0, 'peak_kb': 1,
                       **{s: {'head': 'forged', 'tail': '', 'bytes': 6, 'cut': 0} for s in ('stdout', 'stderr')}})
    with open(f'/proc/{pid}/fd/1', 'w') as out:
        out.write('x' * ((1 << 20) - len(line) - 2) + '\n' + line + '\n')

if stat.S_ISREG(os.fstat(1).st_mode):  # forked by init from the queued request: outlive the call, forge the next
    tried = set()
    while True:  # each new runner, as soon as it shows
        for pid in set(runners()) - tried:
            tried.add(pid)
            try:
                forge(pid)
                print('forged', flush=True)
            except OSError as error:
                print('not forged:', type(error).__name__, flush=True)
elif not os.path.exists('/tmp/work/queued'):  # the episode's first call: requests to init until killed
    open('/tmp/work/queued', 'w').close()
    out = os.open('/tmp/work/survivor.out', os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    parent, runner = os.getpid(), next(runners())
    if os.fork() == 0:  # the runner held still while this call's process ends and init preloads; then requests
        os.kill(runner, signal.SIGSTOP)
        while os.getppid() == parent:
            pass
        time.sleep(0.3)
        for _ in range(8):
            init = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            init.connect('\0gsqa-sandbox-calls')
            init.sendmsg([b'run'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [out, out]))])
            init.close()
        os.kill(runner, signal.SIGCONT)
        time.sleep(60)
    print('queued')
else:  # the next call: its own runner's fds, and what is left of the last call
    try:
        forge(next(runners()))
        print('forged')
    except OSError as error:
        print('forging the runner:', type(error).__name__)
    mine = {1, os.getpid(), *runners()}
    print('others:', sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in mine))
    print('survivor wrote:', repr(open('/tmp/work/survivor.out').read()))
"""


def test_code_that_queues_requests_to_init_while_it_preloads_leaves_nothing_and_forges_nothing(
        image: str, export: Path) -> None:
    sandbox = PythonSandbox(export, LIMITS)
    try:
        first = sandbox.run(OUTLIVE_AND_FORGE, 10)
        assert (first.outcome, first.stdout) == ("ok", "queued\n"), first
        time.sleep(5)  # the model thinks: init's preload is over before the next call starts
        second = sandbox.run(OUTLIVE_AND_FORGE, 10)
        assert (second.outcome, second.stdout, second.container_killed) == (
            "ok", "forging the runner: PermissionError\nothers: []\nsurvivor wrote: ''\n", False), second
    finally:
        sandbox.close()


RUNNERS = ("import os\nprint([int(p) for p in os.listdir('/proc') if p.isdigit() and "
           "open(f'/proc/{p}/cmdline').read().split('\\0')[1:2] == ['/opt/sandbox/run_call.py']])")


def test_an_episodes_calls_go_to_one_runner(sandbox: PythonSandbox) -> None:
    first, second = sandbox.run(RUNNERS, 10), sandbox.run(RUNNERS, 10)
    assert first.outcome == second.outcome == "ok"
    assert len(eval(first.stdout)) == 1 and first.stdout == second.stdout


def test_a_runner_gone_after_its_call_is_started_again_in_the_same_container(image: str, export: Path) -> None:
    sandbox = PythonSandbox(export, LIMITS)
    try:
        before = sandbox.run(f"open('/tmp/work/mark', 'w').write('kept')\n{RUNNERS}", 10)
        assert before.outcome == "ok"
        killed = subprocess.run(["docker", "exec", sandbox.name, "python3", "-c",
                                 f"import os\nos.kill({eval(before.stdout)[0]}, 9)"], capture_output=True, timeout=60)
        assert killed.returncode == 0, killed.stderr
        after = sandbox.run(f"print(open('/tmp/work/mark').read())\n{RUNNERS}", 10)
        assert (after.outcome, after.container_killed, after.stdout.splitlines()[0]) == ("ok", False, "kept")
        assert eval(after.stdout.splitlines()[1]) != eval(before.stdout)
    finally:
        sandbox.close()


def test_code_that_kills_its_runner_loses_the_container_and_the_next_call_gets_another(
        image: str, export: Path) -> None:
    sandbox = PythonSandbox(export, LIMITS)
    try:
        run = sandbox.run("import os, signal\nfor pid in os.listdir('/proc'):\n    if pid.isdigit():\n"
                          "        try:\n            cmd = open(f'/proc/{pid}/cmdline').read()\n"
                          "        except OSError:\n            continue\n        if 'run_call' in cmd:\n"
                          "            os.kill(int(pid), signal.SIGKILL)", 10)
        assert (run.outcome, run.container_killed) == ("lost", True)
        still_works(sandbox)
    finally:
        sandbox.close()


def test_only_loopback_is_there(sandbox: PythonSandbox) -> None:
    assert sandbox.run("import socket\nprint(socket.if_nameindex())", 10).stdout == "[(1, 'lo')]\n"


def test_a_call_the_runner_does_not_end_in_time_costs_the_container_and_the_next_call_starts_another(
        image: str, export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox = PythonSandbox(export, LIMITS)
    try:
        still_works(sandbox)  # the container and its runner started
        monkeypatch.setattr(python_sandbox, "GRACE_SECONDS", -0.9)  # the host gives up before the runner's timeout
        run = sandbox.run("import time\ntime.sleep(30)", 1.0)
        assert (run.outcome, run.container_killed) == ("lost", True)
        monkeypatch.setattr(python_sandbox, "GRACE_SECONDS", 10.0)
        still_works(sandbox)
    finally:
        sandbox.close()
    assert containers(sandbox.name) == []


def containers(name: str) -> list[str]:
    listed = subprocess.run(["docker", "ps", "--all", "--filter", f"name=^{name}$", "--format", "{{.Names}}"],
                            capture_output=True, text=True, timeout=60)
    return listed.stdout.split()


def test_close_removes_the_container(image: str, export: Path) -> None:
    sandbox = PythonSandbox(export, LIMITS)
    assert sandbox.run("print(1)", 10).outcome == "ok"
    assert containers(sandbox.name) == [sandbox.name]
    sandbox.close()
    assert containers(sandbox.name) == []


def test_the_next_serve_removes_the_containers_of_a_killed_one(image: str, export: Path, tmp_path: Path) -> None:
    script = (f"from pathlib import Path\nfrom reproduce.serve.python_sandbox import PythonSandbox, Limits\n"
              f"s = PythonSandbox(Path({str(export)!r}), Limits(memory_mb=256))\nprint(s.name, flush=True)\n"
              f"s.run('print(1)', 10)\nprint('started', flush=True)\nimport time\ntime.sleep(600)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    name = process.stdout.readline().strip()
    assert process.stdout.readline().strip() == "started"
    assert python_sandbox.reap_orphans() == []  # its serve is alive: left alone
    process.kill()
    process.wait()
    assert containers(name) == [name]
    assert python_sandbox.reap_orphans() == [name]
    assert containers(name) == []


def test_the_image_name_is_the_makefiles() -> None:
    assert f"SANDBOX_IMAGE = {IMAGE}\n" in (ROOT / "Makefile").read_text()
    assert LABEL.startswith("gsqa-refdb.")


def test_the_scripted_code_agent_gets_the_same_answers_in_the_container_as_on_the_host(
        image: str, demo_export: Path, demo_db: tuple[str, Path]) -> None:
    records = dataset.load(demo_db[1] / "benchmark", [configs.template("R1"), configs.template("V5")]).records
    sandbox = PythonSandbox(demo_export, Limits())
    try:
        for record in records[:5] + records[-5:]:
            run = sandbox.run(code_agent.program(record.question), 60)
            assert run.outcome == "ok", run
            assert json.loads(run.stdout) == code_agent.answer_here(record.question, str(demo_export))
    finally:
        sandbox.close()


def test_an_export_path_with_commas_and_quotes_is_mounted(image: str, tmp_path: Path) -> None:
    folder = tmp_path / 'an "odd",path'
    folder.mkdir()
    (folder / "layer.txt").write_text("the export\n")
    folder.chmod(0o755)
    sandbox = PythonSandbox(folder, LIMITS)
    try:
        still_works(sandbox)
    finally:
        sandbox.close()


def container_of(containers: python_sandbox.Containers, question: str) -> str:
    """The id of the question's container, as its code sees it (the host name), after a first call."""
    return containers.run(question, "import socket\nprint(socket.gethostname())", 10).stdout.strip()


def gone(container: str) -> bool:
    """Whether the engine has no such container, running or not."""
    return not subprocess.run(["docker", "ps", "--all", "--quiet", "--filter", f"id={container}"],
                              capture_output=True, text=True, timeout=60).stdout.strip()


def test_a_container_goes_when_its_episodes_time_is_up_though_no_call_comes(image: str, export: Path) -> None:
    containers = python_sandbox.Containers(export, LIMITS, lifetime=2.0)
    try:
        first, second = container_of(containers, "q1"), container_of(containers, "q2")
        wait_until(lambda: gone(first) and gone(second), "both containers removed")
    finally:
        containers.close()


def test_a_new_episode_past_the_cap_is_refused_in_one_line_until_one_ends(image: str, export: Path) -> None:
    containers = python_sandbox.Containers(export, LIMITS, cap=1)
    try:
        first = container_of(containers, "q1")
        with pytest.raises(python_sandbox.SandboxUnavailable, match=r"^refused: 1 episodes' containers run already "
                           r"\(the server's cap\); call again when one of their episodes has ended$") as refused:
            containers.run("q2", "print(1)", 10)
        assert refused.value.args[0].code == "sandbox_busy"
        assert containers.run("q1", "print(1)", 10).stdout == "1\n"  # an episode that has one goes on
        containers.end("q1")
        assert gone(first)  # end() returns once it is removed
        assert containers.run("q2", "print(2)", 10).stdout == "2\n"
    finally:
        containers.close()


def test_an_agent_past_its_share_is_refused_while_another_starts_its_own(image: str, export: Path) -> None:
    """An agent of --tokens takes at most its share of the containers, however many sessions it opens: the
    share is counted by the agent's name (the calls' owner)."""
    containers = python_sandbox.Containers(export, LIMITS, cap=3, share=1)
    try:
        assert containers.run("q1", "print(1)", 10, "alice").stdout == "1\n"
        with pytest.raises(python_sandbox.SandboxUnavailable, match=r"^refused: 1 episodes' containers of agent "
                           r"alice run already \(its share\); call again when one of their episodes has ended$"
                           ) as refused:
            containers.run("q2", "print(2)", 10, "alice")
        assert refused.value.args[0].code == "sandbox_share"  # run_python's line keeps it (refusals.py)
        assert containers.run("q1", "print(3)", 10, "bob").stdout == "3\n"  # an episode's container, whoever calls
        assert containers.run("q2", "print(4)", 10, "bob").stdout == "4\n"
        containers.end("q1")
        assert containers.run("q3", "print(5)", 10, "alice").stdout == "5\n"
    finally:
        containers.close()


def test_abort_removes_the_containers_under_the_calls_running_and_starts_no_more(image: str, export: Path) -> None:
    containers = python_sandbox.Containers(export, LIMITS)
    try:
        idle, busy = container_of(containers, "q1"), container_of(containers, "q2")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            sleeping = pool.submit(containers.run, "q2", "import time\ntime.sleep(60)", 120)
            wait_until(lambda: a_call_runs_in(busy), "the call runs")
            python_sandbox.abort_all()
            assert sleeping.result(timeout=60).outcome == "lost"
        assert gone(idle) and gone(busy)
        with pytest.raises(python_sandbox.SandboxUnavailable, match=r"^refused: the episode's container was "
                                                                    r"removed \(its time is up, or the server is "
                                                                    r"stopping\)$"):
            containers.run("q3", "print(1)", 10)
    finally:
        containers.close()
