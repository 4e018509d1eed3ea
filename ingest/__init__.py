"""The `ingest` command: builds the reference database, in three layers.

- The stage runner: the command line (cli), `ingest all` (build), downloads (fetch), `ingest init` and
  `finalize` (initdb), the post-load checks (check), the demo data (demo) and snapshots (snapshot).
- The loaders, one package each: dem/ (public.dem_us) and osm/ (the five vector tables).
- The load machinery below them: the load log (load_state), the ordered worker pool (ordered_pool), the
  free-disk check (diskspace) and the vector tables' indexes (indexes).

A loader imports gsqa_core, the machinery and its own package, never the runner (tests/test_packages.py).
"""
