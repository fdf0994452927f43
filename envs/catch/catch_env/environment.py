"""The Catch environment: OpenSpiel's `catch` behind envkit's contract, with tools for LLM agents."""

from __future__ import annotations

import operator
import random
import uuid
from typing import Any, Literal

from envkit import Environment, Metric, tool

from .game import COLUMNS, LEFT, PLAYER_ID, RIGHT, STAY, TERMINAL_PLAYER_ID, CatchGame
from .models import CatchAction, CatchObservation, CatchState, GamePhase

__all__ = ["CatchEnvironment"]


class CatchEnvironment(Environment[CatchAction, CatchObservation, CatchState]):
    """OpenSpiel's Catch: move the paddle under the falling ball; +1 for a catch, -1 for a miss.

    `reset(seed=...)` reproduces a game (later unseeded resets continue that seed's sequence);
    `reset(ball_column=...)` pins the start column, for evaluation sets.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    RUN_INLINE = True
    #: Every start column with 20 seeds for training (100 tasks) and 6 other seeds for testing (30 tasks).
    TASKS = {
        "train": tuple({"ball_column": column, "seed": seed} for seed in range(20) for column in range(COLUMNS)),
        "test": tuple({"ball_column": column, "seed": seed} for seed in range(1000, 1006) for column in range(COLUMNS)),
    }
    METRICS = (
        Metric("caught", "caught", "count", success=True, description="the ball landed on the paddle"),
        Metric("miss_distance", "columns off", "mean",
               description="columns between paddle and ball when the game ended (0 on a catch)"),
        Metric("moves", "paddle moves", "mean", description="left or right moves made (stays not counted)"),
    )

    def __init__(self) -> None:
        self._rng = random.Random()
        self._game: CatchGame | None = None
        self._episode_id: str | None = None
        self._seed: int | None = None
        self._actions: list[int] = []

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              ball_column: int | None = None) -> CatchObservation:
        """Start a new game and return its first observation.

        Args:
            seed: Seeds the start column; the same seed gives the same game.
            episode_id: A name for the episode; a random one when absent.
            ball_column: Start the ball in this column (0 to 4) instead of a random one.
        """
        if seed is not None:
            seed = _whole_number(seed, "seed", "a whole number")
        if episode_id is not None and not isinstance(episode_id, str):
            raise ValueError(f"episode_id must be a string, got {episode_id!r}")
        pinned = None
        if ball_column is not None:  # checked before the draw, so a refused reset changes nothing
            pinned = CatchGame(_whole_number(ball_column, "ball_column", f"a column from 0 to {COLUMNS - 1}"))
        rng = self._rng if seed is None else random.Random(seed)
        drawn = rng.randrange(COLUMNS)  # drawn even when pinned, so pinning leaves later games unchanged
        self._rng = rng
        self._game = pinned or CatchGame(drawn)
        self._episode_id = episode_id or uuid.uuid4().hex
        self._seed = seed
        self._actions = []
        return self._observation("initial")

    def step(self, action: CatchAction) -> CatchObservation:
        """Move the paddle as `action.action_id` says (0 left, 1 stay, 2 right); the ball falls one row."""
        if not isinstance(action, CatchAction):
            raise TypeError(f"step() takes a CatchAction, e.g. CatchAction(action_id=1); got {type(action).__name__}")
        if self._game is None:
            raise ValueError("no game to play yet: call reset() first")
        self._game.apply(action.action_id)
        self._actions.append(action.action_id)
        return self._observation("terminal" if self._game.done else "playing")

    @property
    def state(self) -> CatchState:
        game = self._game
        if game is None:
            return CatchState()
        return CatchState(episode_id=self._episode_id, step_count=len(self._actions), seed=self._seed,
                          start_column=game.ball_column, ball_row=game.ball_row, ball_column=game.ball_column,
                          paddle_column=game.paddle_column, actions=list(self._actions), done=game.done,
                          episode_return=game.reward)

    def episode_metrics(self) -> dict[str, float]:
        """Caught (1 or 0), how far the paddle was from the ball at the end, and how often it moved."""
        game = self._game
        metrics: dict[str, float] = {"caught": 0, "moves": sum(action != STAY for action in self._actions)}
        if game is not None:
            metrics["caught"] = int(game.caught)
            if game.done:
                metrics["miss_distance"] = abs(game.paddle_column - game.ball_column)
        return metrics

    @tool
    def move(self, direction: Literal["left", "right"]) -> CatchObservation:
        """Move the paddle one column left or right; then the ball falls one row.

        Args:
            direction: Which way to move the paddle, "left" or "right".

        Returns:
            The board after the move.
        """
        if direction not in ("left", "right"):
            raise ValueError(f'direction must be "left" or "right", got {direction!r}; call stay() to keep the paddle still')
        return self.step(CatchAction(action_id=LEFT if direction == "left" else RIGHT))

    @tool
    def stay(self) -> CatchObservation:
        """Keep the paddle where it is; the ball falls one row.

        Returns:
            The board after the move.
        """
        return self.step(CatchAction(action_id=STAY))

    def _observation(self, phase: GamePhase) -> CatchObservation:
        game = self._game
        assert game is not None
        return CatchObservation(
            info_state=game.tensor(), legal_actions=game.legal_actions, game_phase=phase,
            current_player_id=TERMINAL_PLAYER_ID if game.done else PLAYER_ID,
            ball_row=game.ball_row, ball_column=game.ball_column, paddle_column=game.paddle_column,
            done=game.done, reward=None if phase == "initial" else game.reward)


def _whole_number(value: Any, name: str, expected: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be {expected}, got {value!r}") from None
