"""Give the C heap's free pages back to the kernel, so that a long load's resident memory stays bounded.

A loader's main process receives its parsers' batches (about 1 MB each) as new bytes objects and frees each
once written. After the first such block is freed, glibc's dynamic mmap threshold rises past that size and
later blocks come from the heap, where small long-lived allocations settle into the freed holes: the holes
can no longer hold a batch, the heap grows instead, and the process's resident memory grows with the input.
`malloc_trim(0)` after each file hands the free pages of every arena back (glibc 2.8 and later), which keeps
it level (docs/PERFORMANCE.md, "Where the time goes"). A fixed mmap threshold keeps it level as well, but its
mmap, munmap and page faults for every batch make a load slower; trimming costs nothing measurable.
"""

from __future__ import annotations

import ctypes

# The running process's own C library; malloc_trim is glibc's (musl and macOS have none: nothing to do there).
_malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)


def release_free_heap() -> bool:
    """Return the heap's free pages to the kernel; True if the C library can and some memory was released."""
    return bool(_malloc_trim and _malloc_trim(0))
