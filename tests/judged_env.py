"""An envkit environment scored by a rubric with an LLM judge in it (a test fixture): reply to a prompt; the
reward is 0.2 for brevity plus 0.8 for the judge's score, asked at `$JUDGE_URL` (an OpenAI-compatible `/v1`)."""

from __future__ import annotations

import os
from typing import Any

from envkit import Action, Environment, Observation, State, tool
from envkit.rubrics import JudgeEndpoint, LLMJudge, Rubric, WeightedSum, judge_metrics, rubric_metrics, score_async


class ReplyAction(Action):
    text: str


class ReplyObservation(Observation):
    prompt: str = ""
    reward_components: dict[str, float] = {}


class Brevity(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if len(action.text) <= 40 else 0.0


def reply_rubric(url: str) -> WeightedSum:
    judge = LLMJudge("Rate the reply from 0 to 10: {action}", JudgeEndpoint(url, "judge", timeout_s=2, retries=1),
                     scale=10)
    return WeightedSum([Brevity(), judge], [0.2, 0.8], names=["brevity", "judge"])


class JudgedReplies(Environment[ReplyAction, ReplyObservation, State]):
    """Three replies per episode, each judged."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    METRICS = rubric_metrics(reply_rubric("http://unused")) + judge_metrics()

    def __init__(self) -> None:
        self.rubric = reply_rubric(os.environ["JUDGE_URL"])
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> ReplyObservation:
        self.rubric.reset()
        self._state = State(episode_id=episode_id, step_count=0)
        return ReplyObservation(prompt="say something")

    def step(self, action: ReplyAction) -> ReplyObservation:
        raise RuntimeError("JudgedReplies steps asynchronously")

    async def step_async(self, action: ReplyAction) -> ReplyObservation:
        self._state.step_count += 1
        observation = ReplyObservation(prompt="again", done=self._state.step_count >= 3)
        return await score_async(self.rubric, action, observation)

    @tool
    async def reply(self, text: str) -> ReplyObservation:
        """Reply to the prompt.

        Args:
            text: the reply
        """
        return await self.step_async(ReplyAction(text=text))

    def episode_metrics(self) -> dict[str, float]:
        from envkit.rubrics import components, judge_usage

        return {**components(self.rubric), **judge_usage(self.rubric)}

    @property
    def state(self) -> State:
        return self._state
