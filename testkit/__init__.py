"""What the tests and the benches share to stand up and drive real parts (not shipped in the wheel): throwaway
clusters (local_server.py) and a standby (standby.py), the reference-DB fixtures (refdb.py), a fake hub
(fake_hub.py), osmx-like layers (osmx_synth.py), make db's server settings (make_db_server.py), `reproduce` run
in-process (cli.py), `reproduce serve` over HTTP as a subprocess (serve.py), the rule for a missing tool
(tools.py) and what importing modules loads (imports.py). Importable wherever the repository root is on the
path: a checkout's editable install, or pytest's `pythonpath`."""
