"""PID 1 of a sandbox container: reaps every process that ends (orphans of the agent's code are re-parented
here), and stays. A call's kill(-1) spares PID 1, so the container outlives the processes a call leaves
behind; docker-init would not (it exits with its one child). SIGTERM ends it (`docker stop`). Like the call
runner, it is not dumpable: the agent's code (the same user) cannot open its /proc/1/ entries."""

import ctypes
import os
import signal

ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGTERM})
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    if signal.sigwaitinfo({signal.SIGCHLD, signal.SIGTERM}).si_signo == signal.SIGTERM:
        break
