"""Games written against OpenEnv 0.10's `Environment` and rubrics (test fixtures): a guessing game scored by a
`WeightedSum` with a `Gate`, a walk scored at its end by an `ExponentialDiscountingTrajectoryRubric`, and a reply
scored by OpenEnv's `LLMJudge` through an OpenAI-compatible endpoint (`$JUDGE_URL`)."""

import os
import random
from uuid import uuid4

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.rubrics import ExponentialDiscountingTrajectoryRubric, Gate, LLMJudge, Rubric, WeightedSum


class GuessAction(Action):
    guess: int


class GuessObservation(Observation):
    hint: str = ""
    guesses: int = 0


class Closeness(Rubric):
    def forward(self, action, observation) -> float:
        return max(0.0, 1.0 - abs(action.guess - observation.metadata["secret"]) / 10)


class Exact(Rubric):
    def forward(self, action, observation) -> float:
        return float(action.guess == observation.metadata["secret"])


class Brevity(Rubric):
    def forward(self, action, observation) -> float:
        return 1.0 / observation.guesses


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    """Guess a number from 0 to 9 in at most 4 guesses."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__(rubric=WeightedSum([Closeness(), Gate(Exact(), 1.0), Brevity()], [0.5, 0.4, 0.1]))
        self._secret, self._state = 0, State()

    def reset(self, seed=None, episode_id=None, **kwargs) -> GuessObservation:
        self._reset_rubric()
        self._secret = random.Random(seed).randrange(10)
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return GuessObservation(hint="guess 0 to 9")

    def step(self, action: GuessAction, timeout_s=None, **kwargs) -> GuessObservation:
        self._state.step_count += 1
        hint = "right" if action.guess == self._secret else ("higher" if action.guess < self._secret else "lower")
        observation = GuessObservation(hint=hint, guesses=self._state.step_count,
                                       done=hint == "right" or self._state.step_count >= 4,
                                       metadata={"secret": self._secret})
        observation.reward = self._apply_rubric(action, observation)
        observation.metadata = {}
        return observation

    @property
    def state(self) -> State:
        return self._state


class MoveAction(Action):
    direction: int


class WalkObservation(Observation):
    position: int = 0


class ReachedGoal(ExponentialDiscountingTrajectoryRubric):
    def score_trajectory(self, trajectory) -> float:
        return float(trajectory[-1][1].position >= 3)


class WalkEnvironment(Environment[MoveAction, WalkObservation, State]):
    """Walk a line from 0 to 3 in at most 6 moves; scored once, at the end, with gamma 0.9."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__(rubric=ReachedGoal(gamma=0.9))
        self._state, self._position = State(), 0

    def reset(self, episode_id=None) -> WalkObservation:   # takes no seed: servers must not pass one
        self._reset_rubric()
        self._position = 0
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return WalkObservation()

    def step(self, action: MoveAction, timeout_s=None, **kwargs) -> WalkObservation:
        self._state.step_count += 1
        self._position += 1 if action.direction > 0 else -1
        observation = WalkObservation(position=self._position,
                                      done=self._position >= 3 or self._state.step_count >= 6)
        observation.reward = self._apply_rubric(action, observation)
        return observation

    @property
    def state(self) -> State:
        return self._state


class ReplyAction(Action):
    text: str


class ReplyObservation(Observation):
    prompt: str = ""


class JudgedEnvironment(Environment[ReplyAction, ReplyObservation, State]):
    """Reply to a prompt; an LLM judge at `$JUDGE_URL` scores each reply."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        from openenv.core.llm_client import OpenAIClient

        client = OpenAIClient(os.environ["JUDGE_URL"], None, model="judge", api_key="none")
        super().__init__(rubric=LLMJudge("Score this reply: {action}", client))
        self._state = State()

    def reset(self, seed=None, episode_id=None, **kwargs) -> ReplyObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return ReplyObservation(prompt="say something kind")

    def step(self, action: ReplyAction, timeout_s=None, **kwargs) -> ReplyObservation:
        raise RuntimeError("JudgedEnvironment steps asynchronously")

    async def step_async(self, action: ReplyAction, timeout_s=None, **kwargs) -> ReplyObservation:
        self._state.step_count += 1
        observation = ReplyObservation(prompt="again", done=self._state.step_count >= 2)
        observation.reward = await self._apply_rubric_async(action, observation)
        return observation

    @property
    def state(self) -> State:
        return self._state
