"""Reward information beyond the game's own reward.

`reward_components` breaks a game into parts a trainer can weigh into its own reward (win, speed,
greens, yellows, invalid moves). `RewardSignals` computes the `info["reward_signals"]` that
OpenEnv's TextArena server attaches to every Wordle step, by the same reading of the game text, so
code written against that server finds the same numbers here.
"""

from __future__ import annotations

import re

from .game import GREEN, NUM_GUESSES, WORD_LENGTH, YELLOW, WordleGame, partial_score

__all__ = ["reward_components", "RewardSignals"]

_BRACKETED_GUESS = re.compile(r"\[[A-Za-z]{5}\]")
#: What OpenEnv records when a message holds no recognisable guess.
_NO_GUESS = "[dunno]"


def reward_components(game: WordleGame) -> dict[str, float]:
    """The parts of a game's outcome, each a float.

    - `win`: 1 if the secret was guessed, else 0.
    - `speed`: on a win, `(6 - guesses) / 5`: 1 for a first-guess win, 0 for a sixth-guess win.
    - `greens`, `yellows`: the last valid guess's greens and yellows, each divided by 5.
    - `partial`: `(greens + 0.5 * yellows) / 5` of the last valid guess (TextArena's loss reward).
    - `invalid_moves`: invalid moves made this game (warned or game-ending).
    - `played`: the game's reward when it ended by a win or on the sixth guess; 0 while it runs and when
      it ended on a second invalid guess in a row. What `envkit train` trains on by default: the game's
      own reward pays such a game the partial credit of its last valid guess (TextArena's rule) while a
      game the model leaves unfinished scores 0, so training on it teaches a small model to end its games
      by repeating a guess.

    And the three rewards of TRL's Wordle guide (GRPO on Qwen3-1.7B-Wordle-SFT), ready to weigh as they are:

    - `guide_win`: on a win `1 + 0.5 * (1 - guesses / 6)`, else 0.
    - `guide_partial`: when not won, `0.1 *` the most greens any valid guess got; 0 on a win.
    - `guide_invalid`: `-0.1 *` the invalid moves made.
    """
    feedback = game.last_feedback() or ()
    won = game.won
    best_greens = max((marks.count(GREEN) for _, marks in game.guesses), default=0)
    return {
        "win": float(won),
        "speed": (NUM_GUESSES - len(game.guesses)) / (NUM_GUESSES - 1) if won else 0.0,
        "greens": feedback.count(GREEN) / WORD_LENGTH,
        "yellows": feedback.count(YELLOW) / WORD_LENGTH,
        "partial": partial_score(feedback or None),
        "invalid_moves": float(game.invalid_moves),
        "played": (game.reward or 0.0) if game.done and not game.ended_by_invalid_move else 0.0,
        "guide_win": 1.0 + 0.5 * (1.0 - len(game.guesses) / NUM_GUESSES) if won else 0.0,
        "guide_partial": 0.0 if won else 0.1 * best_greens,
        "guide_invalid": -0.1 * game.invalid_moves,
    }


def normalized_guess(message: str) -> str:
    """The guess OpenEnv reads from a raw message: the first `[abcde]`, else its first five letters."""
    match = _BRACKETED_GUESS.search(message)
    if match:
        return match.group(0).lower()
    letters = re.sub(r"[^a-z]", "", message.lower())
    return f"[{letters[:5]}]" if len(letters) >= WORD_LENGTH else _NO_GUESS


def feedback_counts(transcript: str) -> tuple[int, int]:
    """(greens, yellows) of the latest feedback row in the rendered transcript; (0, 0) before any."""
    text = transcript.strip()
    if "Feedback:" not in text:
        return 0, 0
    lines = [line.strip() for line in text.split("Feedback:", 1)[1].strip().split("\n") if line.strip()]
    if len(lines) < 2:
        return 0, 0
    for line in reversed(lines):
        row = line.replace(" ", "")
        if row and all(mark in "GYX" for mark in row):
            return row.count(GREEN), row.count(YELLOW)
    return 0, 0


class RewardSignals:
    """OpenEnv's per-step Wordle signals: `wordle.greens`, `.yellows`, `.repetitions`, `.correct`."""

    def __init__(self) -> None:
        self._guess_counts: dict[str, int] = {}

    def compute(self, message: str, transcript: str, reward: float) -> dict[str, float]:
        """The signals after a step with `message` that left `transcript` and `reward`."""
        guess = normalized_guess(message)
        guess = "" if guess == _NO_GUESS else guess
        previous = self._guess_counts.get(guess, 0) if guess else 0
        if guess:
            self._guess_counts[guess] = previous + 1
        greens, yellows = feedback_counts(transcript)
        return {
            "wordle.greens": greens / WORD_LENGTH,
            "wordle.yellows": yellows / WORD_LENGTH,
            "wordle.repetitions": 1.0 - previous,
            "wordle.correct": reward,
        }
