"""Catch as a language model reads it: a small drawing of the board and one or two plain sentences."""

from __future__ import annotations

from .game import COLUMNS, ROWS, Positions, board_rows

__all__ = ["describe"]


def describe(positions: Positions, *, done: bool, reward: float | None) -> str:
    """The board drawn with `o` (ball) and `x` (paddle), then where they are and what happened.

    Rows and columns are counted from 1 in the text, as people count them.
    """
    return _drawing(positions) + "\n" + _sentences(positions, done, reward)


def _drawing(positions: Positions) -> str:
    return "\n".join(" ".join(row) for row in board_rows(positions))


def _sentences(positions: Positions, done: bool, reward: float | None) -> str:
    ball, paddle = positions.ball_column + 1, positions.paddle_column + 1
    if done:
        if reward is not None and reward > 0:
            return f"The ball landed on the paddle in column {paddle}: caught, reward +1. The game is over."
        return (f"The ball landed in column {ball} but the paddle is in column {paddle}: missed, reward -1. "
                "The game is over.")
    offset = ball - paddle
    if offset == 0:
        where = "directly above the paddle"
    else:
        side = "right" if offset > 0 else "left"
        where = f"{abs(offset)} column{'s' if abs(offset) > 1 else ''} to the {side} of the paddle"
    moves = ROWS - 1 - positions.ball_row
    return (f"Ball (o): row {positions.ball_row + 1} of {ROWS}, column {ball} of {COLUMNS}. "
            f"Paddle (x): column {paddle} of {COLUMNS}, bottom row.\n"
            f"The ball is {where}; it lands after {moves} more move{'s' if moves > 1 else ''}.")
