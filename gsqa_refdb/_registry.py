"""What the `inspect_ai` entry point loads: the tasks, registered as gsqa_refdb/<name>, and the model provider
`gsqa` (`--model gsqa/gold`)."""

from gsqa_refdb.gold import GoldModel  # noqa: F401 - imported to register it
from gsqa_refdb.tasks import code_agent, sql_agent, text2sql  # noqa: F401 - imported to register them
