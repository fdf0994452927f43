"""Reference policies for Catch: the optimal one (always catches) and a uniformly random one.

Each policy maps an observation to an action id. The observation may be a `CatchObservation`,
the observation dict of a wire frame (an OpenEnv server's too), or the bare 50-float
`info_state`, so the same policies drive an environment in this process, over `EnvClient`, or
through OpenEnv's client. `TOOL_CALLS` turns an action id into the tool call an LLM agent makes.

    python -m catch_env.policies --games 500 --seed 0      # the figures in docs/environments.md
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .environment import CatchEnvironment
from .game import ACTIONS, LEFT, RIGHT, STAY, decode_tensor
from .models import CatchAction, CatchObservation

__all__ = ["Policy", "OptimalPolicy", "RandomPolicy", "TOOL_CALLS", "TOOL_PLAYERS", "Episode", "Summary", "play_episode", "evaluate"]

#: The tool call an LLM agent makes for each action id: (tool name, arguments).
TOOL_CALLS: dict[int, tuple[str, dict[str, str]]] = {
    LEFT: ("move", {"direction": "left"}),
    STAY: ("stay", {}),
    RIGHT: ("move", {"direction": "right"}),
}


class Policy(Protocol):
    """Anything that picks an action id for an observation of a game still in play."""

    def __call__(self, observation: CatchObservation | Mapping[str, Any] | Sequence[float]) -> int: ...


class OptimalPolicy:
    """Moves the paddle toward the ball's column, then stays under it: catches every ball.

    The ball starts at most two columns from the paddle and falls for nine steps, so the paddle
    always arrives in time.
    """

    def __call__(self, observation: CatchObservation | Mapping[str, Any] | Sequence[float]) -> int:
        positions = decode_tensor(_info_state(observation))
        if positions.ball_column < positions.paddle_column:
            return LEFT
        if positions.ball_column > positions.paddle_column:
            return RIGHT
        return STAY


class RandomPolicy:
    """Picks uniformly among the legal actions; `seed` makes its choices reproducible."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)

    def __call__(self, observation: CatchObservation | Mapping[str, Any] | Sequence[float]) -> int:
        decode_tensor(_info_state(observation))  # refuses observations of finished games, like OptimalPolicy
        return self.rng.choice(ACTIONS)


def _info_state(observation: CatchObservation | Mapping[str, Any] | Sequence[float]) -> Sequence[float]:
    if isinstance(observation, CatchObservation):
        return observation.info_state
    if isinstance(observation, Mapping):
        if "info_state" not in observation:
            raise ValueError("the observation has no info_state; pass a Catch observation or its 50-float info_state")
        return observation["info_state"]
    return observation


def _tool_player(policy: Policy) -> Any:
    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
        tool, arguments = TOOL_CALLS[policy(observation)]
        return tool, dict(arguments)

    return act


#: Scripted players for `envkit eval --policy NAME`: each takes a seed and returns a function from the latest
#: observation (its wire dict) and the task to the next tool call, `(tool, arguments)`.
TOOL_PLAYERS = {
    "solver": lambda seed: _tool_player(OptimalPolicy()),
    "random": lambda seed: _tool_player(RandomPolicy(seed)),
}


@dataclass(frozen=True)
class Episode:
    """One game a policy played: where the ball started, the actions taken and the final reward."""

    start_column: int
    actions: tuple[int, ...]
    reward: float

    @property
    def caught(self) -> bool:
        return self.reward > 0


@dataclass(frozen=True)
class Summary:
    """A policy's results over many seeded games."""

    games: int
    wins: int
    mean_reward: float

    @property
    def win_rate(self) -> float:
        return self.wins / self.games


def play_episode(policy: Policy, env: CatchEnvironment | None = None, **reset_kwargs: Any) -> Episode:
    """Play one game in `env` (a fresh `CatchEnvironment` by default) with `policy`.

    `reset_kwargs` go to `env.reset` (`seed=`, `ball_column=`).
    """
    env = env or CatchEnvironment()
    observation = env.reset(**reset_kwargs)
    start_column = env.state.start_column
    assert start_column is not None
    actions: list[int] = []
    while not observation.done:
        action = policy(observation)
        actions.append(action)
        observation = env.step(CatchAction(action_id=action))
    return Episode(start_column, tuple(actions), observation.reward or 0.0)


def evaluate(policy: Policy, games: int = 500, seed: int = 0) -> Summary:
    """Play `games` games seeded `seed`, `seed + 1`, ... and count the catches."""
    if games < 1:
        raise ValueError(f"games must be at least 1, got {games}")
    env = CatchEnvironment()
    episodes = [play_episode(policy, env, seed=seed + game) for game in range(games)]
    return Summary(games, sum(episode.caught for episode in episodes),
                   sum(episode.reward for episode in episodes) / games)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the optimal and the random policy's results over seeded games, as a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m catch_env.policies", description=main.__doc__)
    parser.add_argument("--games", type=int, default=500, help="games per policy (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first game; game i uses seed + i (default 0)")
    args = parser.parse_args(argv)
    if args.games < 1:
        parser.error(f"--games must be at least 1, got {args.games}")
    print("| policy | games | caught | win rate | mean reward |\n| --- | --- | --- | --- | --- |")
    for name, policy in (("optimal", OptimalPolicy()), ("random", RandomPolicy(seed=args.seed))):
        summary = evaluate(policy, args.games, args.seed)
        print(f"| {name} | {summary.games} | {summary.wins} | {summary.win_rate:.1%} | {summary.mean_reward:+.3f} |")


if __name__ == "__main__":
    main()
