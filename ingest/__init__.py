"""The `ingest` command: builds the reference database, in three layers.

- The stage runner: the command line (cli) and what it prints (report), `ingest all` (build), downloads
  (fetch), `ingest init` and `finalize` (initdb), the post-load checks (check), the demo data (demo) and
  snapshots (the snapshot/ package).
- The loaders, one package each: dem/ (public.dem_us) and osm/ (the five vector tables).
- The load machinery below them: the load log (load_state), the ordered worker pool (ordered_pool), the
  free-disk check (diskspace) and the vector tables' indexes (indexes).

A loader imports gsqa_core, the machinery and its own package, never the runner (tests/test_packages.py).
"""

import os

# numpy's OpenBLAS starts a thread per core at import, which spins for a while whenever it wakes up; the
# loaders never call BLAS, and on a 2-core machine those threads take CPU from the stagers and the writer.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
