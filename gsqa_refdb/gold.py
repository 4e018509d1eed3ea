"""`--model gsqa/gold`: a model provider that answers every question with its gold SQL, for an offline run of
the tasks from Inspect's command line (`inspect eval gsqa_refdb/text2sql --model gsqa/gold`): text2sql gets the
gold SQL in a ```sql block; an agent (tools given) calls `query` with it, then `submit_answer` with the rows
it got. Both score 100 % unless something between the model and the judge is broken.

It reports its usage itself (no tokens: it reads nothing and pays nothing), so Inspect counts none: Inspect
0.3.285's mock model counts tokens with tiktoken's o200k_base, which tiktoken downloads on first use, so
`--model mockllm/model` fails offline. `-M data=DIR` is the benchmark's data, as `-T data=DIR` (else the Hugging
Face dataset). The question comes from the prompt's `Question <id>:` line, which both tasks give."""

from __future__ import annotations

import json
import re
from typing import Any

from inspect_ai.model import ChatMessage, GenerateConfig, ModelAPI, ModelOutput, ModelUsage, modelapi
from inspect_ai.tool import ToolChoice, ToolInfo

from gsqa_refdb import adapter

MODEL = "gold"
_QUESTION = re.compile(r"Question (\S+):")


@modelapi(name="gsqa")
class GoldModel(ModelAPI):
    def __init__(self, model_name: str, base_url: str | None = None, api_key: str | None = None,
                 config: GenerateConfig | None = None, data: str | None = None, **model_args: Any) -> None:
        super().__init__(model_name, base_url, api_key, [], config or GenerateConfig())
        if model_name != MODEL:
            raise ValueError(f"gsqa/{model_name}: the one model of this provider is gsqa/{MODEL}")
        self.data = data

    async def generate(self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice,
                       config: GenerateConfig) -> ModelOutput:
        question = next(found.group(1) for message in input if message.role == "user"
                        if (found := _QUESTION.search(message.text)))
        sql = adapter.gold_sql(question, self.data)
        results = [message for message in input if message.role == "tool"]
        if not tools:
            output = ModelOutput.from_content(self.model_name, f"```sql\n{sql}\n```")
        elif not results:
            output = ModelOutput.for_tool_call(self.model_name, "query", {"question_id": question, "sql": sql})
        else:
            rows = json.loads(results[-1].text)["rows"]
            output = ModelOutput.for_tool_call(self.model_name, "submit_answer",
                                               {"question_id": question, "answer": rows})
        output.usage = ModelUsage(input_tokens=0, output_tokens=0, total_tokens=0)
        return output
