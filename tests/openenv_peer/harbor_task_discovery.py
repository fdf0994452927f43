"""Discover a server's tasks with OpenEnv 0.10.0's Harbor client; run with the OpenEnv venv's python.

    python harbor_task_discovery.py URL   → one JSON line: what `HarborEnv` saw, and how it saw bad requests refused.

It connects as OpenEnv's docs show (`with HarborEnv(base_url=URL) as env`, which also opens an MCP session and its
WebSocket), lists the splits, counts each split's tasks (and the default split's, `""`), fetches the first and last
task and two ranges (the first three; a tail that runs past the end), and asks for an unknown split and an index out
of range, recording the HTTP status and body the client's `raise_for_status` met.
"""

import json
import sys
from typing import Any, Callable

import httpx
from openenv.harbor.client import HarborEnv


def refusal(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        call()
    except httpx.HTTPStatusError as error:
        response = error.response
        kind = response.headers.get("content-type", "")
        return {"status": response.status_code, "body": response.json() if kind.startswith("application/json")
                else response.text}
    return {"status": None}


with HarborEnv(base_url=sys.argv[1]) as env:
    splits = env.splits()
    seen: dict[str, Any] = {"splits": splits, "default_num_tasks": env.num_tasks(), "by_split": {}}
    for split in splits:
        name = split["name"]
        count = env.num_tasks(name)
        seen["by_split"][name] = {
            "num_tasks": count,
            "first": env.get_task(name, 0).model_dump(),
            "last": env.get_task(name, count - 1).model_dump(),
            "head": [task.model_dump() for task in env.get_task_range(name, 0, 3)],
            "tail": [task.model_dump() for task in env.get_task_range(name, count - 2, count + 5)],
        }
    first = splits[0]["name"]
    # the unknown split last: OpenEnv's own server answers it with a 500 and then drops the connection
    seen["refusals"] = {"index_out_of_range": refusal(lambda: env.get_task(first, 10**6)),
                        "unknown_split": refusal(lambda: env.num_tasks("no-such-split"))}
print(json.dumps(seen))
