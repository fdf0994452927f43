"""Play Wordle on an ORS server with the openreward SDK (run in the openreward venv); prints one JSON object.

Usage: sdk_wordle.py URL SECRET_OF_TRAIN_TASK_0
"""

from __future__ import annotations

import json
import sys

import aiohttp
from openreward import OpenReward
from openreward.api.errors import SessionTerminatedError, ToolCallError

url, secret = sys.argv[1], sys.argv[2]
report: dict = {}
client = OpenReward(base_url=url)
env = client.environments.get("wordle")
report["splits"] = env.list_splits()
report["num_test"] = env.num_tasks("test")
report["test_tasks"] = [task.task_spec for task in env.list_tasks("test")]
report["task"] = env.get_task("train", 0).task_spec
report["task_range"] = [task.task_spec for task in env.get_task_range("train", 2, 5)]
report["tools"] = [(tool.name, tool.input_schema) for tool in env.list_tools()]


def refusal(call) -> dict:
    try:
        call()
    except ToolCallError as error:
        return {"type": "ToolCallError", "reason": error.reason, "detail": str(error)}
    except SessionTerminatedError as error:
        return {"type": "SessionTerminatedError", "detail": str(error)}
    except aiohttp.ClientResponseError as error:
        return {"type": "ClientResponseError", "status": error.status, "detail": error.message}
    return {"type": None}


with env.session(split="train", index=0) as session:
    report["sid"] = session.sid
    report["prompt"] = [block.text for block in session.get_prompt()]
    report["messages"] = [(m.role, [b.text for b in m.blocks]) for m in session.get_messages()]
    report["session_tools"] = [tool.name for tool in session.list_tools()]
    report["unknown_tool"] = refusal(lambda: session.call_tool("shout", {"word": "x"}))
    report["wrong_arguments"] = refusal(lambda: session.call_tool("guess", {"wrd": "[crane]"}))
    first_guess = "[crane]" if secret != "crane" else "[slate]"
    out = session.call_tool("guess", {"guess": first_guess})
    report["first"] = {"text": [b.text for b in out.blocks], "reward": out.reward, "finished": out.finished,
                       "metadata": out.metadata}
    out = session.call_tool("guess", {"guess": f"[{secret}]"})
    report["win"] = {"text": [b.text for b in out.blocks], "reward": out.reward, "finished": out.finished}
    report["after_finished"] = refusal(lambda: session.call_tool("guess", {"guess": "[crane]"}))
    report["version"] = session.version()

# The session was deleted on leaving the block: a call on it now is a call on a session the server no longer has.
report["after_delete"] = refusal(lambda: session.call_tool("guess", {"guess": "[crane]"}))
report["bad_index"] = refusal(lambda: env.session(split="test", index=999).__enter__())
report["bad_split"] = refusal(lambda: env.get_task("nope", 0))
print(json.dumps(report))
client.close() if hasattr(client, "close") else None
