"""ingest/heap.py: the freed heap of a batch-shaped allocation pattern goes back to the kernel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# In a fresh process: free one 2 MB block (glibc then raises its mmap threshold past it), then allocate 150
# blocks of about 1 MB from the heap, each followed by a small object that stays, and free the large ones: the
# heap keeps about 143 MiB of free holes below live objects, which only a trim gives back.
_PATTERN = """
from ingest.heap import release_free_heap

def resident_anon_mb():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("RssAnon")) // 1024

del_me = b"x" * 2_000_000
del del_me
blocks, kept = [], []
for k in range(150):
    blocks.append(b"x" * (1_000_000 + 64 * k))  # written, so resident (bytes(n) may get untouched zero pages)
    kept.append(bytearray(200))
del blocks
before = resident_anon_mb()
released = release_free_heap()
print(before, resident_anon_mb(), released)
"""


# glibc's dynamic thresholds depend on what the interpreter did before the pattern (a checkout under another
# path made the 1 MB blocks come and go by mmap, or the heap's top trim itself): fixed ones make the pattern the
# same everywhere. Blocks of 1 MB come from the heap, and only a trim gives its free holes back.
_THRESHOLDS = {"MALLOC_MMAP_THRESHOLD_": str(4 * 1024**2), "MALLOC_TRIM_THRESHOLD_": str(1024**3)}


def test_release_free_heap_gives_the_freed_batches_back():
    result = subprocess.run([sys.executable, "-c", _PATTERN], cwd=ROOT, capture_output=True, text=True, check=True,
                            env={**os.environ, **_THRESHOLDS})
    before, after, released = result.stdout.split()
    assert int(before) >= 140  # MiB: the freed blocks (150 x 0.95 MiB) were still resident
    assert int(after) <= int(before) - 130
    assert released == "True"
