"""The rules of Catch, exactly as OpenSpiel's `catch` game plays them, with no envkit in sight.

A ball starts in a random column of the top row of a 10 x 5 board; the paddle starts in the
middle of the bottom row. Every action moves the paddle (0 left, 1 stay, 2 right, clamped at the
walls) and then the ball falls one row. After 9 actions the ball reaches the bottom row and the
game ends: +1 if the paddle is under it, -1 if not; every earlier step pays 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = [
    "ROWS", "COLUMNS", "PADDLE_START_COLUMN", "LEFT", "STAY", "RIGHT", "ACTIONS", "ACTION_NAMES", "EPISODE_LENGTH",
    "PLAYER_ID", "TERMINAL_PLAYER_ID", "Positions", "CatchGame", "board_rows", "decode_tensor",
]

ROWS = 10
COLUMNS = 5
PADDLE_START_COLUMN = COLUMNS // 2
LEFT, STAY, RIGHT = 0, 1, 2
ACTIONS = (LEFT, STAY, RIGHT)
#: OpenSpiel's names for the actions (`state.action_to_string`).
ACTION_NAMES = {LEFT: "LEFT", STAY: "STAY", RIGHT: "RIGHT"}
#: Actions in one game: the ball needs this many steps to fall from the top row to the bottom one.
EPISODE_LENGTH = ROWS - 1
#: The only player; OpenSpiel reports -4 (its terminal player id) once the game is over.
PLAYER_ID = 0
TERMINAL_PLAYER_ID = -4


@dataclass(frozen=True)
class Positions:
    """Where the ball and the paddle are (rows and columns count from 0, top left)."""

    ball_row: int
    ball_column: int
    paddle_column: int


@dataclass
class CatchGame:
    """One game of Catch from its start column; `apply` plays one action."""

    ball_column: int
    ball_row: int = 0
    paddle_column: int = PADDLE_START_COLUMN

    def __post_init__(self) -> None:
        if not 0 <= self.ball_column < COLUMNS:
            raise ValueError(f"ball_column {self.ball_column} is off the board; use a column from 0 (left) to {COLUMNS - 1} (right)")

    @property
    def done(self) -> bool:
        """Whether the ball has reached the bottom row."""
        return self.ball_row == ROWS - 1

    @property
    def caught(self) -> bool:
        """Whether the game ended with the paddle under the ball."""
        return self.done and self.paddle_column == self.ball_column

    @property
    def reward(self) -> float:
        """0 while the ball falls; +1 (caught) or -1 (missed) once it reaches the bottom row."""
        if not self.done:
            return 0.0
        return 1.0 if self.caught else -1.0

    @property
    def legal_actions(self) -> list[int]:
        """Every action while the ball falls; none once the game is over."""
        return [] if self.done else list(ACTIONS)

    @property
    def positions(self) -> Positions:
        return Positions(self.ball_row, self.ball_column, self.paddle_column)

    def apply(self, action: int) -> None:
        """Move the paddle (clamped at the walls), then let the ball fall one row."""
        if self.done:
            raise ValueError("Game over: the ball has already landed, so this game takes no more moves; reset to play again")
        if action not in ACTIONS:
            raise ValueError(f"action {action!r} is not a Catch action; use 0 (left), 1 (stay) or 2 (right)")
        self.paddle_column = min(max(self.paddle_column + action - STAY, 0), COLUMNS - 1)
        self.ball_row += 1

    def tensor(self) -> list[float]:
        """OpenSpiel's observation tensor: 50 floats, row by row, 1.0 at the ball and at the paddle."""
        values = [0.0] * (ROWS * COLUMNS)
        values[self.ball_row * COLUMNS + self.ball_column] = 1.0
        values[(ROWS - 1) * COLUMNS + self.paddle_column] = 1.0
        return values

    def board(self) -> str:
        """OpenSpiel's observation string: a line per row, `o` the ball, `x` the paddle."""
        return "".join(row + "\n" for row in board_rows(self.positions))


def board_rows(positions: Positions) -> list[str]:
    """The board as one string per row: `.` empty, `o` the ball, `x` the paddle (drawn over a caught ball)."""
    cells = [["."] * COLUMNS for _ in range(ROWS)]
    cells[positions.ball_row][positions.ball_column] = "o"
    cells[ROWS - 1][positions.paddle_column] = "x"
    return ["".join(row) for row in cells]


def decode_tensor(info_state: Sequence[float]) -> Positions:
    """Ball and paddle positions from a 50-float observation tensor of a game still in play.

    Raises `ValueError` for a tensor of the wrong size, or one whose ball is already in the bottom
    row (there the tensor cannot tell the ball from the paddle).
    """
    if len(info_state) != ROWS * COLUMNS:
        raise ValueError(f"a Catch observation has {ROWS * COLUMNS} floats ({ROWS} rows x {COLUMNS} columns), "
                         f"got {len(info_state)}")
    ones = [index for index, value in enumerate(info_state) if value == 1.0]
    above = [index for index in ones if index < (ROWS - 1) * COLUMNS]
    bottom = [index - (ROWS - 1) * COLUMNS for index in ones if index >= (ROWS - 1) * COLUMNS]
    if len(above) != 1 or len(bottom) != 1:
        raise ValueError("the observation shows no falling ball above a paddle (the game is over, or this is not a "
                         "Catch observation); positions can only be read while the ball falls")
    ball_row, ball_column = divmod(above[0], COLUMNS)
    return Positions(ball_row, ball_column, bottom[0])
