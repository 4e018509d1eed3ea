"""GS-QA2 as an Inspect evaluation (the `inspect` extra): the tasks gsqa_refdb/text2sql and gsqa_refdb/sql_agent,
scored by our judge; `reproduce score LOG.eval` reads their logs as runs (reproduce/predictions/inspect_log.py,
which owns what is read of a log). Inspect finds the tasks through the `inspect_ai` entry point
named after this package (gsqa_refdb/_registry.py); it names a task after the top-level package that defines
it, which is why this package is not below `reproduce`. Only gsqa_refdb/adapter.py imports `reproduce`."""
