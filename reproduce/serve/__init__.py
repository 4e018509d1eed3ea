"""`reproduce serve`: the reference database as a budgeted, sandboxed tool server for agents. tools.py holds
the tools as plain callables and their servers; calls.py a call, its episode's budgets and its trajectory line
(the format: reproduce/predictions/trajectory.py); pool.py the fair pool of sandbox connections; replies.py what
a reply's values look like and what is cut; answers.py an answer's shape against the question; prompts.py what
an agent is told; protocol.py the MCP server over the tools, callers.py who made each call and its usage;
python_sandbox.py the code agents' containers."""
