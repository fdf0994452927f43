"""Argument names that collide with envkit's or pydantic's own names still reach the environment."""

from __future__ import annotations

import json
import logging

import pytest
from sample_envs import ClashingNamesEnvironment, CounterAction, CounterObservation
from websockets.sync.client import connect

from envkit import EnvClient, EnvError, create_app
from envkit.client import websocket_url
from envkit.testing import running_server


@pytest.fixture
def clash_url():
    app = create_app(ClashingNamesEnvironment, CounterAction, CounterObservation, max_concurrent_envs=2)
    with running_server(app) as url:
        yield url


def ask(sock, frame) -> dict:
    sock.send(json.dumps(frame))
    return json.loads(sock.recv(timeout=10))


def test_tool_and_reset_arguments_named_like_internals_reach_the_environment(clash_url: str) -> None:
    with EnvClient(clash_url).sync() as env:
        assert env.reset(function="f", tool="t").observation["tag"] == "function=f extra=['tool']"
        assert env.call("call_function", function="lookup").text == "called lookup"
        assert env.call("configure", model_config="fast", _private=3, json=True).text == \
            "model_config=fast _private=3 json=True"
        assert env.call("configure", model_config="slow").text == "model_config=slow _private=0 json=False"


def test_a_name_the_environment_cannot_take_is_refused_clearly(
        clash_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="envkit.server")
    with connect(websocket_url(clash_url), proxy=None) as sock:
        reply = ask(sock, {"type": "reset", "data": {"self": 1, "function": "g"}})
        assert reply["data"]["code"] == "VALIDATION_ERROR"   # `self` cannot reach reset(self, ...): refused by name
        assert "takes no argument 'self'" in reply["data"]["message"]
        assert ask(sock, {"type": "reset", "data": {"function": "g"}})["data"]["observation"]["tag"] == \
            "function=g extra=[]"
        reply = ask(sock, {"type": "call", "data": {"tool": "call_function", "args": {"function": "x", "self": 1}}})
        assert reply["data"]["code"] == "VALIDATION_ERROR"
        assert "self: Extra inputs are not permitted" in reply["data"]["message"]
        assert ask(sock, {"type": "state"})["type"] == "state"   # the session carries on
    with EnvClient(clash_url).sync() as env:
        env.reset()
        with pytest.raises(EnvError) as refused:
            env.call("configure", model_config=1)
        assert refused.value.code == "VALIDATION_ERROR" and "model_config" in refused.value.message
