"""An echo environment written with the openreward SDK (the shape of TRL's OpenReward guide example).

The task names a target word; the agent calls `echo(text=...)`; reward 1.0 and the episode ends when the text
is the target, else 0.0. Usage: echo_server.py PORT   (serves on 127.0.0.1 in the openreward venv)
"""

from __future__ import annotations

import sys

import uvicorn
from pydantic import BaseModel, Field

from openreward.environments import Environment, Server, TextBlock, ToolOutput, tool

TARGETS = {"train": ["hello", "world", "green", "river", "stone", "cloud", "light", "apple"],
           "test": ["tiger", "ocean"]}


class EchoInput(BaseModel):
    text: str = Field(description="The text to echo back.")


class EchoEnv(Environment):
    """Echo the target word back."""

    @classmethod
    def list_splits(cls) -> list[str]:
        return list(TARGETS)

    @classmethod
    def list_tasks(cls, split: str) -> list[dict]:
        return [{"id": f"{split}-{index}", "target": word} for index, word in enumerate(TARGETS[split])]

    def get_prompt(self) -> list[TextBlock]:
        return [TextBlock(text=f"Call the echo tool with the text: {self.task_spec['target']}")]

    @tool
    async def echo(self, params: EchoInput) -> ToolOutput:
        """Echo a text back; it scores 1.0 when it is the target."""
        hit = params.text.strip() == self.task_spec["target"]
        return ToolOutput(blocks=[TextBlock(text=params.text)], reward=1.0 if hit else 0.0, finished=hit)


if __name__ == "__main__":
    uvicorn.run(Server([EchoEnv]).app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
