#!/bin/sh
# The memory (MB) each backend of make db's server may take for itself (RLIMIT_DATA), as gsqa_core/sandbox.py
# sizes it (backend_memory_mb): the model role's 8 connections and the server's 2 parallel workers together at
# most 2/3 of the memory the server may use, each at least 1536 MB. The memory is the argument (MB), else the container's limit (cgroup v2) or
# the machine's memory, whichever is smaller. tests/test_sandbox_memory.py holds this equal to sandbox.py.
set -eu
memory_mb=${1:-}
if [ -z "$memory_mb" ]; then
    memory_mb=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
    limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo max)
    if [ "$limit" != max ] && [ $((limit / 1048576)) -lt "$memory_mb" ]; then memory_mb=$((limit / 1048576)); fi
fi
share=$((memory_mb * 2 / 3 / (8 + 2)))
echo $((share > 1536 ? share : 1536))
