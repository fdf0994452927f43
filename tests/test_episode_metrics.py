"""Episode metrics: declared in the contract, aggregated once, sent on the wire only to clients that ask.

Real servers on 127.0.0.1, raw WebSocket clients and `EnvClient`.
"""

from __future__ import annotations

import json
import tracemalloc

import httpx
import pytest
from websockets.sync.client import connect

from envkit import EnvClient, Metric, create_app
from envkit.client import websocket_url
from envkit.errors import ConfigurationError
from envkit.episode_metrics import check_metrics, metrics_from_metadata, summarise
from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server


WORDLE_METRICS = resolve_target("wordle").env_class.METRICS


def test_summaries_count_k_of_n_mean_where_another_holds_and_sum() -> None:
    won, guesses, invalid = WORDLE_METRICS
    episodes = [{"won": 1, "guesses": 4, "invalid_guesses": 0}, {"won": 0, "guesses": 6, "invalid_guesses": 2},
                {"won": 1, "guesses": 3, "invalid_guesses": 1}, {}]   # the last: a lost session, no values
    assert summarise(won, episodes).text() == "2/4"
    assert summarise(guesses, episodes).value == pytest.approx(3.5)   # wins only: (4 + 3) / 2
    assert summarise(guesses, episodes).text() == "3.50"
    assert summarise(invalid, episodes).text() == "3"
    assert summarise(guesses, [{"won": 0, "guesses": 6}]).text() == "-"   # no win: undefined, not 0


@pytest.mark.parametrize(("metrics", "message"), [
    ((Metric("won", "wins", "count"), Metric("won", "again")), "declared twice"),
    ((Metric("guesses", "g", "mean", where="won"),), "where='won' must name a count metric"),
    ((Metric("score", "s", "median"),), "aggregate must be one of count, mean, sum"),
    ((Metric("score", "s", "mean", success=True),), "a success metric must aggregate as 'count'"),
    ((Metric("bad name", "s"),), "must be an identifier"),
])
def test_bad_metric_definitions_are_refused_with_the_fix(metrics: tuple[Metric, ...], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        check_metrics(metrics, "MyEnv")


def test_create_app_checks_the_declared_metrics() -> None:
    target = resolve_target("wordle")
    broken = type("Broken", (target.env_class,), {"METRICS": (Metric("won", "wins", "count", where="nope"),)})
    with pytest.raises(ConfigurationError, match=r"Broken.METRICS, 'won': where='nope'"):
        create_app(broken, target.action_cls, target.observation_cls)


def frames(url: str, headers: dict[str, str] | None) -> list[str]:
    """Raw reply texts to reset, step and a tool call, on one session."""
    with connect(websocket_url(url), proxy=None, additional_headers=headers or {}) as sock:
        replies = []
        for frame in ({"type": "reset", "data": {"secret_index": 0}}, {"type": "step", "data": {"message": "[xqzzy]"}},
                      {"type": "call", "data": {"tool": "guess", "args": {"guess": "[crane]"}}}):
            sock.send(json.dumps(frame))
            replies.append(sock.recv(timeout=10))
        return replies


def test_metrics_reach_only_clients_that_ask_for_them() -> None:
    target = resolve_target("wordle")
    with running_server(app_from_environment(target.env_class, env_name="wordle")) as url:
        plain = frames(url, None)
        asked = frames(url, {"x-envkit-features": "metrics"})
        metadata = httpx.get(url + "/metadata", trust_env=False).json()
    # An OpenEnv client (no features header) gets exactly OpenEnv's frames: no envkit fields at all.
    for text in plain[:2]:
        assert set(json.loads(text)["data"]) <= {"observation", "reward", "done", "metadata"}
        assert "metrics" not in text
    reset, step, call = (json.loads(text)["data"] for text in asked)
    assert reset["metrics"] == {"won": 0, "guesses": 0, "invalid_guesses": 0}
    assert step["metrics"] == {"won": 0, "guesses": 0, "invalid_guesses": 1}   # xqzzy is not a word
    assert call["tool"] == "guess" and call["metrics"] == {"won": 0, "guesses": 1, "invalid_guesses": 1}
    assert "text" not in reset   # features are independent: metrics without text
    # Apart from the metrics, the frames are the same as the plain ones.
    for plain_text, asked_text in zip(plain, asked, strict=True):
        without = {key: value for key, value in json.loads(asked_text)["data"].items() if key != "metrics"}
        assert without == json.loads(plain_text)["data"]
    assert metrics_from_metadata(metadata) == tuple(WORDLE_METRICS)


def test_env_client_exposes_metrics_after_reset_step_and_tool_call() -> None:
    target = resolve_target("catch")
    with running_server(app_from_environment(target.env_class, env_name="catch")) as url:
        with EnvClient(url).sync() as env:
            assert env.reset(ball_column=2, seed=1).metrics == {"caught": 0, "moves": 0}
            assert env.step({"action_id": 0}).metrics == {"caught": 0, "moves": 1}
            result = env.call("move", direction="right")
            assert result.metrics == {"caught": 0, "moves": 2}
            for _ in range(7):
                result = env.call("stay")
            assert result.done and result.metrics == {"caught": 1, "moves": 2, "miss_distance": 0}


def test_an_environment_without_metrics_sends_none_even_when_asked(counter_url: str) -> None:
    features = {"x-envkit-features": "text,metrics"}
    with connect(websocket_url(counter_url), proxy=None, additional_headers=features) as sock:
        sock.send(json.dumps({"type": "reset"}))
        reply = json.loads(sock.recv(timeout=10))["data"]
    assert "text" in reply and "metrics" not in reply


def test_echo_metrics_and_an_endless_episode_holds_constant_memory() -> None:
    """Echo's episodes never end, so its metrics must not keep every message: 20,000 more steps add no memory."""
    target = resolve_target("echo")
    env, EchoAction = target.env_class(), target.action_cls
    env.reset(message="hello")
    env.step(EchoAction(message="hi"))
    assert env.episode_metrics() == {"echoed": 0, "characters": 2}
    env.echo("hello")
    assert env.episode_metrics() == {"echoed": 1, "characters": 7}
    env.echo("something else")
    assert env.episode_metrics() == {"echoed": 1, "characters": 21}   # once echoed, it stays echoed
    env.reset()
    assert env.episode_metrics() == {"echoed": 0, "characters": 0}

    messages = [f"message {index}" for index in range(20_200)]   # made before measuring: only the env's own memory counts
    tracemalloc.start()
    try:
        for message in messages[:200]:
            env.echo(message)
        before, _ = tracemalloc.get_traced_memory()
        for message in messages[200:]:
            env.echo(message)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 4096, f"{after - before} bytes more after 20,000 steps"
    assert env.episode_metrics()["characters"] == sum(len(message) for message in messages)
