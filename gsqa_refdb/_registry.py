"""What the `inspect_ai` entry point loads: the tasks, registered as gsqa_refdb/<name>."""

from gsqa_refdb.tasks import sql_agent, text2sql  # noqa: F401 - imported to register them
