"""Wordle over a real server: envkit's client, OpenEnv's exact TextArena frames, tools, bad input, `envkit serve`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from websockets.sync.client import connect
from wordle_env import WordleObservation
from wordle_env.game import prompt_text
from wordle_env.policies import Solver

from envkit import EnvClient, EnvError
from envkit.client import websocket_url
from envkit.testing import ServedProcess

PROMPT_TEXT = "\n[GAME] " + prompt_text()


def ask(sock: Any, frame: dict) -> dict:
    sock.send(json.dumps(frame))
    return json.loads(sock.recv(timeout=10))


def test_solver_wins_an_episode_through_envkit_client(wordle_url: str) -> None:
    with EnvClient(wordle_url, observation_cls=WordleObservation).sync() as env:
        result = env.reset(seed=5)
        assert isinstance(result.observation, WordleObservation) and (result.reward, result.done) == (0.0, False)
        solver, moves = Solver(), 0
        while not result.done and moves < 6:
            result = env.step({"message": solver.act(result.observation)})
            moves += 1
        assert result.done and result.reward == 1.0 and result.observation.reward_components["win"] == 1.0
        state = env.state()
        assert state["raw_state"]["game_state"]["secret_word"] == "month" and state["step_count"] == moves


def test_solver_plays_from_plain_wire_dicts(wordle_url: str) -> None:
    with EnvClient(wordle_url).sync() as env:
        result = env.reset(word="abbey")
        while not result.done:
            result = env.step({"message": Solver().act(result.observation)})
        assert result.reward == 1.0 and result.observation["prompt"] == "Wordle-v0"


def test_guess_tool_over_the_wire(wordle_url: str) -> None:
    with EnvClient(wordle_url).sync() as env:
        (listing,) = env.tools()
        assert listing["function"]["name"] == "guess"
        assert listing["function"]["parameters"]["required"] == ["guess"]
        env.reset(word="speed")
        first = env.call("guess", guess="[erase]")
        assert first.text == ("\n[GAME] [erase]\n[GAME] You submitted [erase].\nFeedback:\nE R A S E\nY X X Y Y\n"
                              "You have 5 guesses left.")
        assert (first.reward, first.done) == (0.0, False)
        won = env.call("guess", guess="speed")
        assert (won.text, won.reward, won.done) == (
            "\n[GAME] [speed]\n[GAME] You won! Congratulations! You guessed the word correctly! Reward: 1.", 1.0, True)
        assert won.observation["feedback"] == "\n[GAME] [speed]"
        with pytest.raises(EnvError, match="the game is over") as over:
            env.call("guess", guess="[crane]")
        assert over.value.code == "EXECUTION_ERROR"
        with pytest.raises(EnvError) as missing:
            env.call("guess")
        assert missing.value.code == "VALIDATION_ERROR"
        assert env.reset(seed=1).done is False


def test_openenv_textarena_client_frames(wordle_url: str) -> None:
    """The exact JSON OpenEnv's TextArenaEnv client sends, and the fields its parser reads."""
    with connect(websocket_url(wordle_url), proxy=None) as sock:
        reset = ask(sock, {"type": "reset", "data": {"seed": 12}})
        assert reset["type"] == "observation" and {"observation", "reward", "done"} <= set(reset["data"])
        observation = reset["data"]["observation"]
        assert (reset["data"]["reward"], reset["data"]["done"]) == (0.0, False)
        assert observation["prompt"] == PROMPT_TEXT.strip()
        assert observation["messages"] == [{"sender_id": -1, "content": PROMPT_TEXT, "category": "MESSAGE"}]
        assert (observation["current_player_id"], observation["legal_players"], observation["info"]) == (0, [0], {})
        assert observation["metadata"]["env_id"] == "Wordle-v0"

        step = ask(sock, {"type": "step", "data": {"message": "[crane]"}})["data"]
        content = step["observation"]["messages"][0]["content"]
        assert content == PROMPT_TEXT + ("\n[GAME] [crane]\n[GAME] You submitted [crane].\nFeedback:\nC R A N E\n"
                                         "X X Y X G\nYou have 5 guesses left.")   # seed 12: table
        assert step["observation"]["prompt"] == "Wordle-v0" and (step["reward"], step["done"]) == (0.0, False)
        assert step["observation"]["info"]["reward_signals"] == {
            "wordle.greens": 0.2, "wordle.yellows": 0.2, "wordle.repetitions": 1.0, "wordle.correct": 0.0}

        win = ask(sock, {"type": "step", "data": {"message": "[table]"}})["data"]
        assert (win["reward"], win["done"]) == (1.0, True)
        assert win["observation"]["messages"][0]["content"] == content + "\n[GAME] [table]"

        state = ask(sock, {"type": "state"})["data"]
        assert {key: state[key] for key in ("step_count", "env_id", "num_players", "max_turns", "turn",
                                            "last_reward")} == {
            "step_count": 2, "env_id": "Wordle-v0", "num_players": 1, "max_turns": None, "turn": 2, "last_reward": 1.0}
        assert isinstance(state["episode_id"], str) and state["last_info"]["reward_signals"]["wordle.correct"] == 1.0
        assert state["raw_state"]["game_state"]["secret_word"] == "table"

        again = ask(sock, {"type": "reset", "data": {"seed": 12}})["data"]
        assert again["observation"]["messages"][0]["content"] == PROMPT_TEXT
        assert "secret_word" not in ask(sock, {"type": "state"})["data"]["raw_state"]["game_state"]  # a new game


def test_bad_input_gets_clear_errors_and_the_session_carries_on(wordle_url: str) -> None:
    with connect(websocket_url(wordle_url), proxy=None) as sock:
        refused = ask(sock, {"type": "reset", "data": {"word": "xyzzy"}})
        assert refused["type"] == "error" and refused["data"]["code"] == "EXECUTION_ERROR"
        assert "word='xyzzy' cannot be the secret" in refused["data"]["message"]
        assert ask(sock, {"type": "reset", "data": {"seed": "one"}})["data"]["code"] == "VALIDATION_ERROR"
        unknown = ask(sock, {"type": "reset", "data": {"seed": 5, "prompt": "Play Wordle like an expert."}})["data"]
        assert unknown["code"] == "VALIDATION_ERROR" and "takes no argument 'prompt'" in unknown["message"]
        assert ask(sock, {"type": "reset", "data": {"word": "speed"}})["type"] == "observation"
        wrong = ask(sock, {"type": "step", "data": {"guess": "[crane]"}})
        assert wrong["data"]["code"] == "VALIDATION_ERROR" and "message" in wrong["data"]["message"]
        assert ask(sock, {"type": "step", "data": {"message": "[speed]"}})["data"]["done"] is True
        over = ask(sock, {"type": "step", "data": {"message": "[crane]"}})
        assert over["data"]["code"] == "EXECUTION_ERROR" and "reset the environment" in over["data"]["message"]
        assert ask(sock, {"type": "reset", "data": {}})["data"]["done"] is False


def test_sessions_play_separate_games(wordle_url: str) -> None:
    with EnvClient(wordle_url).sync() as first, EnvClient(wordle_url).sync() as second:
        first.reset(word="speed")
        second.reset(word="crane")
        assert second.step({"message": "[crane]"}).reward == 1.0
        assert first.step({"message": "[crane]"}).done is False
        assert first.step({"message": "[speed]"}).reward == 1.0
        assert first.state()["raw_state"]["game_state"]["secret_word"] == "speed"
        assert second.state()["raw_state"]["game_state"]["secret_word"] == "crane"


def test_envkit_serve_wordle() -> None:
    with ServedProcess("wordle") as served, EnvClient(served.url).sync() as env:
        assert env.metadata()["name"] == "wordle" and env.metadata()["tools"] == ["guess"]
        assert env.health()["max_sessions"] == 64
        env.reset(word="geese")
        assert env.call("guess", guess="[geese]").reward == 1.0


def test_a_client_cannot_read_the_secret_mid_game(wordle_url: str) -> None:
    with EnvClient(wordle_url).sync() as env:
        env.reset(word="month")
        env.call("guess", guess="[crane]")
        assert "month" not in json.dumps(env.state())
        won = env.call("guess", guess="[month]")
        assert won.done and "You won!" in won.text
        assert env.state()["raw_state"]["game_state"]["secret_word"] == "month"
