"""envkit's rubrics: trees whose named leaves are reward components, trajectory rubrics scored at the end with
their discounting, and the LLM judge asking a real OpenAI-compatible server on 127.0.0.1 (`judge_server.py`, a
scripted one: the judge's model is a stand-in, its HTTP is real) from many sessions of a served environment."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from envkit import EnvClient, create_app
from envkit.rubrics import (ExponentialDiscountingTrajectoryRubric, Gate, Rubric, Sequential, WeightedSum,
                            component_names, components, score, step_rewards)
from envkit.testing import running_server
from judge_server import judge_app
from judged_env import JudgedReplies, ReplyAction, ReplyObservation


class Fixed(Rubric):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, action: Any, observation: Any) -> float:
        return self.value


class Reached(ExponentialDiscountingTrajectoryRubric):
    def score_trajectory(self, trajectory: list[tuple[Any, Any]]) -> float:
        return 2.0


def test_named_leaves_are_components() -> None:
    rubric = WeightedSum([Fixed(0.5), Gate(Fixed(0.9), threshold=1.0), Sequential(Fixed(0.0), Fixed(1.0))],
                         [1.0, 1.0, 1.0], names=["closeness", "exact", "chain"])
    observation = score(rubric, None, ReplyObservation())
    assert observation.reward == 0.5
    assert component_names(rubric) == ["closeness", "exact_rubric", "chain_rubric_0", "chain_rubric_1"]
    assert observation.reward_components == {"closeness": 0.5, "exact_rubric": 0.9, "chain_rubric_0": 0.0}
    rubric.reset()
    assert components(rubric) == {}


def test_trajectory_rubric_scores_at_the_end_with_discounting() -> None:
    rubric = Reached(gamma=0.5, intermediate_reward=0.1)
    rewards = [rubric(None, ReplyObservation(done=step == 2)) for step in range(3)]
    assert rewards == [0.1, 0.1, 2.0]
    assert step_rewards(rubric) == {"rubric": [0.5, 1.0, 2.0]}
    final = score(rubric, None, ReplyObservation(done=True))
    assert final.metadata["step_rewards"]["rubric"] == [0.25, 0.5, 1.0, 2.0]


def play(url: str, replies: list[str]) -> list[dict[str, Any]]:
    with EnvClient(url).sync() as env:
        env.reset()
        results = []
        for text in replies:
            result = env.step(ReplyAction(text=text))
            results.append({"reward": result.reward, **result.observation})
        return results


@pytest.fixture
def judge_url() -> Any:
    calls: list[str] = []
    with running_server(judge_app(calls)) as url:
        yield url + "/v1", calls


def test_judge_scores_sessions_at_once_caches_and_counts(judge_url: tuple[str, list[str]],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    url, calls = judge_url
    monkeypatch.setenv("JUDGE_URL", url)
    app = create_app(JudgedReplies, ReplyAction, ReplyObservation, max_concurrent_envs=8)
    with running_server(app) as served, ThreadPoolExecutor(6) as pool:
        games = list(pool.map(lambda index: play(served, ["so kind", "rude" + "!" * 50, "refuse"]), range(6)))
    kind, rude, refused = games[0]
    assert kind["reward"] == pytest.approx(0.2 + 0.8 * 0.9)
    assert kind["reward_components"] == {"brevity": 1.0, "judge": 0.9}
    assert rude["reward"] == pytest.approx(0.8 * 0.1) and rude["reward_components"]["brevity"] == 0.0
    assert refused["reward"] == pytest.approx(0.2) and refused["reward_components"]["judge"] == 0.0
    scored = [[(step["reward"], step["reward_components"]) for step in game] for game in games]
    assert all(game == scored[0] for game in scored[1:])
    assert sorted(calls) == sorted(set(calls)) and len(calls) == 3   # one call per distinct prompt, all sessions
    usages = [game[-1]["metadata"]["judge_usage"] for game in games]
    assert sum(usage["judge_calls"] for usage in usages) == 3
    assert sum(usage["judge_tokens"] for usage in usages) > 0
    assert all(usage["judge_unparsable"] == 1 and usage["judge_failures"] == 0 for usage in usages)


def test_a_dead_judge_costs_the_component_not_the_episode(judge_url: tuple[str, list[str]],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    judge = running_server(judge_app(calls))
    monkeypatch.setenv("JUDGE_URL", judge.__enter__() + "/v1")
    app = create_app(JudgedReplies, ReplyAction, ReplyObservation, max_concurrent_envs=2)
    with running_server(app) as served, EnvClient(served).sync() as env:
        env.reset()
        first = env.step(ReplyAction(text="so kind, before"))
        judge.__exit__(None, None, None)   # the judge's server goes away mid-episode
        second = env.step(ReplyAction(text="so kind, after"))
        third = env.step(ReplyAction(text="still here"))
    assert first.observation["reward_components"] == {"brevity": 1.0, "judge": 0.9}
    assert second.observation["reward_components"] == {"brevity": 1.0}   # no judge component: it never answered
    assert second.reward == pytest.approx(0.2)
    assert third.done and third.observation["metadata"]["judge_usage"]["judge_failures"] == 2
    assert third.observation["metadata"]["judge_usage"]["judge_calls"] == 1 + 2 * 2   # a try and a retry each


def test_judge_calls_of_one_prompt_in_flight_are_shared(judge_url: tuple[str, list[str]]) -> None:
    from envkit.rubrics import JudgeEndpoint, LLMJudge

    url, calls = judge_url
    endpoint = JudgeEndpoint(url, "judge")

    async def judge_many() -> list[float]:
        judges = [LLMJudge("{action}", endpoint, scale=10) for _ in range(5)]
        return await asyncio.gather(*(judge(ReplyAction(text="kind words"), None) for judge in judges))

    assert asyncio.run(judge_many()) == [0.9] * 5 and len(calls) == 1


def test_an_async_tool_of_a_threaded_environment_is_judged(judge_url: tuple[str, list[str]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`reply` is an `async def` tool of an environment that is not RUN_INLINE: it runs on the server's loop, where
    its judge's client lives, and its observation brings the reward and the components with it."""
    url, _ = judge_url
    monkeypatch.setenv("JUDGE_URL", url)
    app = create_app(JudgedReplies, ReplyAction, ReplyObservation, max_concurrent_envs=2)
    with running_server(app) as served, EnvClient(served).sync() as env:
        env.reset()
        result = env.call("reply", text="so kind")
        metrics = result.metrics
    assert result.reward == pytest.approx(0.2 + 0.8 * 0.9)
    assert result.observation["reward_components"] == {"brevity": 1.0, "judge": 0.9}
    assert metrics is not None and metrics["judge"] == 0.9 and metrics["judge_calls"] == 1
