"""`reproduce serve`: the reference database as a budgeted, sandboxed tool server for agents. tools.py holds
the tools as plain callables and the episodes' budgets, every call kept in the trajectory (its format:
reproduce/predictions/trajectory.py), protocol.py the MCP server over them."""
