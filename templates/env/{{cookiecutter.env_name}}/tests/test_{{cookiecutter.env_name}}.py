"""Tests for {{cookiecutter.title}}: the rules on the class itself, then a real server on 127.0.0.1 and the typed client."""

import os

import pytest
from envkit.testing import running_server

from {{cookiecutter.env_name}} import {{cookiecutter.class_prefix}}Action, {{cookiecutter.class_prefix}}Client, {{cookiecutter.class_prefix}}Environment, {{cookiecutter.class_prefix}}Observation
from {{cookiecutter.env_name}}.environment import MAX_GUESSES
from {{cookiecutter.env_name}}.policies import TOOL_PLAYERS
from {{cookiecutter.env_name}}.server import app


def find_secret(env: {{cookiecutter.class_prefix}}Environment, seed: int) -> tuple[int, {{cookiecutter.class_prefix}}Observation]:
    """Binary search: 7 guesses always suffice for 1..100."""
    env.reset(seed=seed)
    low, high = 1, 100
    while True:
        middle = (low + high) // 2
        observation = env.step({{cookiecutter.class_prefix}}Action(guess=middle))
        if observation.done:
            return middle, observation
        low, high = (middle + 1, high) if "higher" in observation.message else (low, middle - 1)


def test_binary_search_wins_with_reward_one() -> None:
    env = {{cookiecutter.class_prefix}}Environment()
    secret, last = find_secret(env, seed=7)
    assert last.reward == 1.0 and last.done and str(secret) in last.message
    assert env.state.won and env.state.step_count <= MAX_GUESSES


def test_running_out_of_guesses_ends_with_reward_zero_and_reveals_the_secret() -> None:
    secret, _ = find_secret({{cookiecutter.class_prefix}}Environment(), seed=3)
    env = {{cookiecutter.class_prefix}}Environment()
    env.reset(seed=3)  # same seed, same secret
    wrong = secret % 100 + 1
    for _ in range(MAX_GUESSES):
        observation = env.step({{cookiecutter.class_prefix}}Action(guess=wrong))
    assert observation.done and observation.reward == 0.0 and str(secret) in observation.message
    with pytest.raises(ValueError, match="reset"):
        env.step({{cookiecutter.class_prefix}}Action(guess=wrong))


def test_guesses_outside_the_range_are_rejected() -> None:
    with pytest.raises(ValueError):
        {{cookiecutter.class_prefix}}Action(guess=0)


def test_served_episode_with_the_typed_client_and_the_tool() -> None:
    with running_server(app) as url, {{cookiecutter.class_prefix}}Client(url).sync() as env:
        first = env.reset(seed=11)
        assert isinstance(first.observation, {{cookiecutter.class_prefix}}Observation)
        assert first.observation.guesses_left == MAX_GUESSES
        result = env.step({{cookiecutter.class_prefix}}Action(guess=50))
        assert result.observation.guesses_left == MAX_GUESSES - 1
        called = env.call("guess", number=25)
        assert called.observation.guesses_left == MAX_GUESSES - 2
        assert env.state()["step_count"] == 2
        tools = {listing["function"]["name"]: listing["function"] for listing in env.tools()}
        assert tools["guess"]["parameters"]["properties"]["number"]["description"]


def test_the_solver_wins_every_test_task_within_the_episode_length() -> None:
    env = {{cookiecutter.class_prefix}}Environment()
    for index, task in enumerate({{cookiecutter.class_prefix}}Environment.tasks("test")):
        observation, act = env.reset(**task), TOOL_PLAYERS["solver"](index)
        while not observation.done:
            _, arguments = act(observation.model_dump(), task)
            observation = env.guess(**arguments)
        assert observation.reward == 1.0 and env.state.step_count <= {{cookiecutter.class_prefix}}Environment.EPISODE_LENGTH


def test_app_takes_its_session_limit_from_the_environment_variable() -> None:
    assert app.state.envkit_pool.max_sessions == int(os.environ.get("MAX_CONCURRENT_ENVS") or 64)
