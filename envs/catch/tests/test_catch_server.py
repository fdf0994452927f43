"""Catch over a real server: envkit's client, OpenEnv's exact frames, tools, bad input, `envkit serve catch`."""

from __future__ import annotations

import json

import pytest
from catch_env import CatchObservation
from catch_env.policies import OptimalPolicy
from websockets.sync.client import connect

from envkit import EnvClient, EnvError
from envkit.client import websocket_url
from envkit.testing import ServedProcess


def ask(sock, frame: dict) -> dict:
    sock.send(json.dumps(frame))
    return json.loads(sock.recv(timeout=10))


def test_optimal_episode_with_envkit_client(catch_url: str) -> None:
    with EnvClient(catch_url, observation_cls=CatchObservation).sync() as env:
        result = env.reset(seed=3)
        assert isinstance(result.observation, CatchObservation) and result.reward is None
        policy, rewards = OptimalPolicy(), []
        while not result.done:
            result = env.step({"action_id": policy(result.observation)})
            rewards.append(result.reward)
        assert rewards == [0.0] * 8 + [1.0]
        assert result.observation.game_phase == "terminal" and result.observation.legal_actions == []
        state = env.state()
        assert state["seed"] == 3 and state["step_count"] == 9 and state["episode_return"] == 1.0


def test_openenv_openspiel_client_frames(catch_url: str) -> None:
    """The exact JSON OpenEnv's OpenSpielEnv client sends, and the fields its parser reads."""
    with connect(websocket_url(catch_url), proxy=None) as sock:
        reset = ask(sock, {"type": "reset", "data": {}})
        assert reset["type"] == "observation" and set(reset["data"]) == {"observation", "reward", "done"}
        first = reset["data"]["observation"]
        assert (reset["data"]["reward"], reset["data"]["done"]) == (None, False)
        assert (first["legal_actions"], first["game_phase"], first["current_player_id"]) == ([0, 1, 2], "initial", 0)
        assert first["opponent_last_action"] is None and first["metadata"] == {}
        assert len(first["info_state"]) == 50 and sum(first["info_state"]) == 2.0
        assert all(isinstance(value, float) for value in first["info_state"])
        ball = first["info_state"].index(1.0)
        replies = [ask(sock, {"type": "step", "data": {"action_id": 1, "game_name": "catch", "game_params": {}}})
                   for _ in range(9)]
        assert [reply["data"]["reward"] for reply in replies] == [0.0] * 8 + [1.0 if ball == 2 else -1.0]
        assert [reply["data"]["observation"]["game_phase"] for reply in replies] == ["playing"] * 8 + ["terminal"]
        last = replies[-1]["data"]
        assert last["done"] is True and last["observation"]["current_player_id"] == -4
        assert last["observation"]["legal_actions"] == [] and last["observation"]["info_state"][45 + ball] == 1.0
        state = ask(sock, {"type": "state"})["data"]
        assert {key: state[key] for key in ("step_count", "game_name", "agent_player", "num_players", "game_params")} == {
            "step_count": 9, "game_name": "catch", "agent_player": 0, "num_players": 1,
            "game_params": {"rows": 10, "columns": 5}}
        assert isinstance(state["episode_id"], str)


def test_tool_calls_over_the_server(catch_url: str) -> None:
    with EnvClient(catch_url, observation_cls=CatchObservation).sync() as env:
        assert [tool["function"]["name"] for tool in env.tools()] == ["move", "stay"]
        env.reset(ball_column=0)
        moved = env.call("move", direction="left")
        assert moved.text.endswith("it lands after 8 more moves.") and ". x . . ." in moved.text
        assert (moved.reward, moved.done, moved.observation.paddle_column) == (0.0, False, 1)
        with pytest.raises(EnvError) as error:
            env.call("move", direction="up")
        assert error.value.code == "VALIDATION_ERROR" and "direction" in error.value.message
        with pytest.raises(EnvError) as error:
            env.call("move")
        assert error.value.code == "VALIDATION_ERROR" and "direction" in error.value.message
        for _ in range(7):
            env.call("move", direction="left")
        last = env.call("stay")
        assert (last.reward, last.done) == (1.0, True) and "caught, reward +1" in last.text
        with pytest.raises(EnvError) as error:
            env.call("stay")
        assert error.value.code == "EXECUTION_ERROR" and "Game over" in error.value.message


BAD_STEPS = [
    ({"action_id": 3}, "action_id 3 is not a Catch action; use 0 (left), 1 (stay) or 2 (right)"),
    ({"action_id": "left"}, "action_id must be the integer 0 (left), 1 (stay) or 2 (right), got 'left'"),
    ({"action_id": True}, "action_id must be the integer"),
    ({"action_id": None}, "action_id must be the integer"),
    ({}, "action_id: Field required"),
    ({"action_id": 1, "game_name": "chess"}, 'this server plays "catch"'),
    ({"action_id": 1, "game_params": {"columns": 7}}, "standard 10 x 5 board only"),
]


@pytest.mark.parametrize(("action", "message"), BAD_STEPS)
def test_bad_actions_get_a_validation_error_and_the_game_goes_on(catch_url: str, action: dict, message: str) -> None:
    with EnvClient(catch_url).sync() as env:
        env.reset(ball_column=2)
        with pytest.raises(EnvError) as error:
            env.step(action)
        assert error.value.code == "VALIDATION_ERROR" and message in error.value.message
        assert env.step({"action_id": 1}).observation["ball_row"] == 1


def test_step_after_the_end_and_bad_resets_are_refused(catch_url: str) -> None:
    with EnvClient(catch_url).sync() as env:
        env.reset(ball_column=2)
        for _ in range(9):
            result = env.step({"action_id": 1})
        assert result.done
        with pytest.raises(EnvError) as error:
            env.step({"action_id": 1})
        assert error.value.code == "EXECUTION_ERROR" and "Game over" in error.value.message and "reset" in error.value.message
        with pytest.raises(EnvError) as error:
            env.reset(ball_column=9)
        assert error.value.code == "EXECUTION_ERROR" and "ball_column 9 is off the board" in error.value.message
        with pytest.raises(EnvError) as error:
            env.reset(seed="lucky")
        assert error.value.code == "VALIDATION_ERROR" and "seed must be an integer" in error.value.message
        # A name reset does not take is refused (envkit train passes on only the names reset takes).
        with pytest.raises(EnvError) as error:
            env.reset(ball_column=4, prompt="Catch the ball.", seed=1)
        assert error.value.code == "VALIDATION_ERROR" and "takes no argument 'prompt'" in error.value.message
        result = env.reset(ball_column=4, seed=1)
        assert result.observation["ball_column"] == 4 and not result.done


def test_sessions_are_independent_and_seeds_reproduce_over_the_wire(catch_url: str) -> None:
    with EnvClient(catch_url).sync() as one, EnvClient(catch_url).sync() as two:
        starts = [(one.reset(seed=seed).observation["ball_column"], two.reset(seed=seed).observation["ball_column"])
                  for seed in range(20)]
        assert all(a == b for a, b in starts) and len({a for a, _ in starts}) > 1
        one.reset(ball_column=0)
        two.reset(ball_column=4)
        assert one.step({"action_id": 0}).observation["paddle_column"] == 1
        assert two.step({"action_id": 2}).observation["paddle_column"] == 3


def test_envkit_serve_catch() -> None:
    """`envkit serve catch` in a subprocess finds the bundled env by name and serves it."""
    with ServedProcess("catch") as served, EnvClient(served.url).sync() as env:
        assert env.metadata()["name"] == "catch"
        assert env.health()["max_sessions"] == 64
        result = env.reset(ball_column=3)
        while not result.done:
            result = env.step({"action_id": OptimalPolicy()(result.observation)})
        assert result.reward == 1.0
