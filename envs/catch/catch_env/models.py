"""Catch's action, observation and state, on the wire field for field as OpenEnv's OpenSpiel env has them.

OpenEnv's OpenSpiel client sends `{"action_id": 1, "game_name": "catch", "game_params": {}}` and
reads `info_state`, `legal_actions`, `game_phase`, `current_player_id`, `opponent_last_action`
and `metadata` from the observation. The ball and paddle positions are envkit's additions.
"""

from __future__ import annotations

from typing import Any, Literal

from envkit import Action, Observation, State
from pydantic import Field, field_validator

from .game import ACTIONS, COLUMNS, ROWS, Positions, decode_tensor
from .text import describe

#: The only game parameters this server plays, in the form OpenSpiel's `load_game("catch", ...)` takes them.
GAME_PARAMS: dict[str, int] = {"rows": ROWS, "columns": COLUMNS}
GamePhase = Literal["initial", "playing", "terminal"]


class CatchAction(Action):
    """One move of the paddle: OpenSpiel's action id, with the game name OpenEnv's client sends beside it."""

    action_id: int = Field(description="0 moves the paddle left, 1 keeps it still, 2 moves it right",
                           json_schema_extra={"enum": list(ACTIONS)})
    game_name: str = Field(default="catch", description='The game; this server plays only "catch"')
    game_params: dict[str, Any] = Field(default_factory=dict,
                                        description='OpenSpiel game parameters; only {"rows": 10, "columns": 5} or {}')

    @field_validator("action_id", mode="before")
    @classmethod
    def _known_action(cls, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"action_id must be the integer 0 (left), 1 (stay) or 2 (right), got {value!r}")
        if value not in ACTIONS:
            raise ValueError(f"action_id {value} is not a Catch action; use 0 (left), 1 (stay) or 2 (right)")
        return value

    @field_validator("game_name")
    @classmethod
    def _catch_only(cls, value: str) -> str:
        if value != "catch":
            raise ValueError(f'this server plays "catch", not {value!r}; send game_name "catch" or leave it out')
        return value

    @field_validator("game_params")
    @classmethod
    def _standard_board(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = {key: given for key, given in value.items() if GAME_PARAMS.get(key) != given}
        if unknown:
            raise ValueError(f"this server plays the standard {ROWS} x {COLUMNS} board only, so it cannot honour "
                             f"{unknown}; send game_params {{}} or {GAME_PARAMS}")
        return value


class CatchObservation(Observation):
    """The board as OpenSpiel's observation tensor, the legal actions and the phase of the game."""

    info_state: list[float] = Field(default_factory=list,
                                    description="50 floats, row by row from the top: 1.0 at the ball and the paddle")
    legal_actions: list[int] = Field(default_factory=list, description="[0, 1, 2] while the ball falls, [] at the end")
    game_phase: GamePhase = Field(default="playing", description="initial (after reset), playing, or terminal")
    current_player_id: int = Field(default=0, description="0 while playing; -4 (OpenSpiel's terminal player) at the end")
    opponent_last_action: int | None = Field(default=None, description="Always null: Catch has no opponent")
    ball_row: int | None = Field(default=None, description="Row of the ball, 0 (top) to 9 (bottom)")
    ball_column: int | None = Field(default=None, description="Column of the ball, 0 (left) to 4 (right)")
    paddle_column: int | None = Field(default=None, description="Column of the paddle on the bottom row, 0 to 4")

    def positions(self) -> Positions:
        """Ball and paddle positions, from the position fields or else from `info_state`."""
        if self.ball_row is None or self.ball_column is None or self.paddle_column is None:
            return decode_tensor(self.info_state)
        return Positions(self.ball_row, self.ball_column, self.paddle_column)

    def as_text(self) -> str:
        """A drawing of the board with the positions in words, for a language model."""
        return describe(self.positions(), done=self.done, reward=self.reward)


class CatchState(State):
    """The episode so far: OpenEnv's OpenSpiel state fields plus the positions and the actions played."""

    game_name: str = "catch"
    agent_player: int = 0
    num_players: int = 1
    game_params: dict[str, int] = Field(default_factory=lambda: dict(GAME_PARAMS))
    seed: int | None = Field(default=None, description="The seed given to reset, if any")
    start_column: int | None = Field(default=None, description="Column the ball started in")
    ball_row: int | None = None
    ball_column: int | None = None
    paddle_column: int | None = None
    actions: list[int] = Field(default_factory=list, description="Action ids played this episode, in order")
    done: bool = False
    episode_return: float = Field(default=0.0, description="Sum of rewards so far: 0, then +1 or -1 at the end")
