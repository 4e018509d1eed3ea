"""What the tests and the benches share to stand up and drive real parts (not shipped in the wheel): the rule
for a missing tool (tools.py). Importable wherever the repository root is on the path: a checkout's editable
install, or pytest's `pythonpath`."""
