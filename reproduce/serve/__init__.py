"""`reproduce serve`: the reference database as a budgeted, sandboxed tool server for agents. tools.py holds
the tools as plain callables and the episodes' budgets, trajectory.py the file every call is kept in,
protocol.py the MCP server over them."""
