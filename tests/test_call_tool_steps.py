"""OpenEnv's `call_tool` step on `/ws` (`{"type": "step", "data": {"type": "call_tool", "tool_name", "arguments"}}`,
the `CallToolAction` OpenEnv's MCP clients send), answered in OpenEnv's `CallToolObservation` shape, for any
environment's tools; service tools (`@tool(service=True)`) run without a reset and stay out of agents' listings.
OpenEnv's own client against a Harbor task folder is in tests/test_harbor_rollout.py."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import pytest
from sample_envs import CounterAction, CounterObservation, ServiceCounterEnvironment
from websockets.sync.client import connect

from envkit import create_app
from envkit.client import websocket_url
from envkit.testing import running_server


@pytest.fixture
def url() -> Iterator[str]:
    app = create_app(ServiceCounterEnvironment, CounterAction, CounterObservation, max_concurrent_envs=4)
    with running_server(app) as served:
        yield served


def call_tool(sock: Any, name: Any, arguments: Any = None) -> dict[str, Any]:
    data = {"type": "call_tool", "tool_name": name, **({"arguments": arguments} if arguments is not None else {})}
    sock.send(json.dumps({"type": "step", "data": data}))
    frame = json.loads(sock.recv(timeout=10))
    assert frame["type"] == "observation", frame
    return frame["data"]


def test_call_tool_steps_run_tools_and_answer_as_openenv(url: str) -> None:
    with connect(websocket_url(url), proxy=None) as sock:
        described = call_tool(sock, "describe", {})   # a service tool: no reset needed
        assert described["observation"] == {"metadata": {}, "tool_name": "describe", "error": None, "result": {
            "content": [{"type": "text", "text": '{"total":0}'}], "data": {"total": 0}, "is_error": False}}
        assert (described["reward"], described["done"]) == (None, False)
        early = call_tool(sock, "peek")                # a tool for the agent waits for the episode
        assert early["observation"]["result"] is None
        assert early["observation"]["error"]["error_type"] == "execution_error"
        assert "before reset" in early["observation"]["error"]["message"]
        sock.send(json.dumps({"type": "reset", "data": {"tag": "t"}}))
        assert json.loads(sock.recv(timeout=10))["type"] == "observation"
        added = call_tool(sock, "add", {"amount": 2})
        assert added["observation"]["result"]["data"]["observation"]["total"] == 2
        assert (added["reward"], added["done"]) == (2.0, False)
        assert call_tool(sock, "describe", {"verbose": True})["observation"]["result"]["data"] == {"total": 2,
                                                                                                     "tag": "t"}
        assert call_tool(sock, "peek")["observation"]["result"]["content"][0]["text"] == "total is 2"
        sock.send(json.dumps({"type": "step", "data": {"amount": 1}}))   # a plain step is the environment's own
        assert json.loads(sock.recv(timeout=10))["data"]["observation"]["total"] == 3


@pytest.mark.parametrize(("name", "arguments", "error_type", "words"), [
    ("nope", {}, "tool_not_found", "Unknown tool: 'nope'; this environment's tools: add, describe, peek"),
    (["describe"], {}, "tool_not_found", "Unknown tool"),
    ("describe", {"verbose": True, "extra": 1}, "invalid_args", "extra"),
    ("describe", {"verbose": "yes"}, "invalid_args", "verbose"),
    ("describe", [1], "invalid_args", "must be a JSON object"),
])
def test_a_call_that_cannot_run_says_why_and_the_session_carries_on(url: str, name: Any, arguments: Any,
                                                                   error_type: str, words: str) -> None:
    with connect(websocket_url(url), proxy=None) as sock:
        answer = call_tool(sock, name, arguments)["observation"]
        assert answer["result"] is None and answer["error"]["error_type"] == error_type
        assert words in answer["error"]["message"] and "\n" not in answer["error"]["message"]
        assert call_tool(sock, "describe", {})["observation"]["result"]["data"] == {"total": 0}


def test_service_tools_stay_out_of_what_agents_read(url: str) -> None:
    listed = httpx.get(url + "/tools", trust_env=False).json()["tools"]
    assert sorted(entry["function"]["name"] for entry in listed) == ["add", "peek"]
    assert httpx.get(url + "/metadata", trust_env=False).json()["tools"] == ["add", "peek"]
