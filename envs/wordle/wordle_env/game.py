"""Wordle's rules and game text, as TextArena 0.7.4's `Wordle-v0` plays them, with no I/O.

A `WordleGame` takes raw player messages and keeps the transcript a language model reads: the
prompt, each message as received, and the game's replies, each line tagged `[GAME]` the way
TextArena's LLM observation wrapper renders them. Behaviour worth knowing:

- A message with no square bracket at all is bracketed whole (`crane` → `[crane]`); the guess is
  the first `[word]` in the message.
- Checks run in this order: a `[word]` present, five letters, not guessed before, in the dictionary.
- An invalid move gets a warning and no turn passes; a second invalid move in a row ends the game
  (a valid guess in between clears the count). Its reward is the partial score of the last guess.
- Feedback marks greens first, then yellows left to right, each consuming one letter of the secret.
- Win: reward 1. After six guesses without a win: reward `(greens + 0.5 * yellows) / 5` of the
  last guess. No reward is given before the game ends.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "GREEN", "YELLOW", "GREY", "WORD_LENGTH", "NUM_GUESSES", "GAME_ID", "PLAYER_ID",
    "GameOverError", "WordleGame", "score_guess", "partial_score", "prompt_text",
]

GREEN, YELLOW, GREY = "G", "Y", "X"
WORD_LENGTH = 5
NUM_GUESSES = 6
#: Sender ids as TextArena numbers them: the game itself, and the single player.
GAME_ID, PLAYER_ID = -1, 0
#: Invalid moves in a row that are forgiven with a warning.
ERROR_ALLOWANCE = 1
#: Role tags TextArena removes from a player's message before showing it (player's, then game's).
ROLE_TAGS = ("[Player]", "[GAME]")
_GUESS = re.compile(r"\[(\w+)\]")


class GameOverError(ValueError):
    """A move was made after the game ended."""


def score_guess(guess: str, secret: str) -> tuple[str, ...]:
    """The G/Y/X feedback for `guess` against `secret` (both lowercase, same length).

    Greens are assigned first; then, left to right, a letter present among the secret's letters not
    yet matched is yellow and uses up one such letter; every other letter is grey.
    """
    marks = [GREEN if g == s else "" for g, s in zip(guess, secret, strict=True)]
    unmatched = [s for s, mark in zip(secret, marks, strict=True) if not mark]
    for index, letter in enumerate(guess):
        if marks[index]:
            continue
        if letter in unmatched:
            unmatched.remove(letter)
            marks[index] = YELLOW
        else:
            marks[index] = GREY
    return tuple(marks)


def partial_score(feedback: tuple[str, ...] | None) -> float:
    """TextArena's completion score of one guess: `(greens + 0.5 * yellows) / 5`; 0 with no guess."""
    if not feedback:
        return 0.0
    return (feedback.count(GREEN) + 0.5 * feedback.count(YELLOW)) / len(feedback)


def prompt_text() -> str:
    """The instructions TextArena's Wordle gives the player when a game starts."""
    return (
        f"You are Playing Wordle.\nA secret {WORD_LENGTH}-letter word has been chosen. "
        f"You have {NUM_GUESSES} attempts to guess it.\n"
        "For each guess, wrap your word in square brackets (e.g., '[apple]').\n"
        "Feedback for each letter will be given as follows:\n"
        "  - G (green): correct letter in the correct position\n"
        "  - Y (yellow): letter exists in the word but in the wrong position\n"
        "  - X (wrong): letter is not in the word\n"
        "Enter your guess to begin.\n"
    )


@dataclass
class WordleGame:
    """One game of Wordle against `secret`; `is_word` decides which guesses are English words."""

    secret: str
    is_word: Callable[[str], bool]
    guesses: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    #: What the player has been shown, in order; TextArena sends every entry as the game (`GAME_ID`).
    transcript: list[str] = field(default_factory=list)
    #: Moves that passed (valid guesses, plus a game-ending invalid move); TextArena's `turn`.
    turn: int = 0
    consecutive_errors: int = 0
    invalid_moves: int = 0
    done: bool = False
    reward: float | None = None
    end_reason: str | None = None
    ended_by_invalid_move: bool = False

    def __post_init__(self) -> None:
        self.transcript.append(prompt_text())

    def render(self) -> str:
        """The whole transcript as TextArena's LLM observation wrapper renders it."""
        return "".join(f"\n[GAME] {text}" for text in self.transcript)

    @property
    def won(self) -> bool:
        return self.done and bool(self.guesses) and all(mark == GREEN for mark in self.guesses[-1][1])

    @property
    def guesses_left(self) -> int:
        return NUM_GUESSES - len(self.guesses)

    def last_feedback(self) -> tuple[str, ...] | None:
        return self.guesses[-1][1] if self.guesses else None

    def play(self, message: str) -> None:
        """Apply one player message; raises `GameOverError` once the game has ended."""
        if self.done:
            raise GameOverError("the game is over; reset the environment to start a new game")
        if "[" not in message and "]" not in message:
            message = f"[{message}]"
        shown = message
        for tag in ROLE_TAGS:
            shown = shown.replace(tag, "")
        self.transcript.append(shown)

        reason = self._invalid_reason(message)
        if reason is not None:
            self.invalid_moves += 1
            if self.consecutive_errors < ERROR_ALLOWANCE:
                self.consecutive_errors += 1
                self.transcript.append(f"You attempted an invalid move. Reason: {reason} Please resubmit a valid "
                                       "move and remember to follow the game rules to avoid penalties.")
                return
            self._finish(partial_score(self.last_feedback()), f"Invalid Move: {reason}")
            self.ended_by_invalid_move = True
        else:
            self._guess(_GUESS.search(message).group(1).lower())  # type: ignore[union-attr]
        self.consecutive_errors = 0
        self.turn += 1

    def _invalid_reason(self, message: str) -> str | None:
        match = _GUESS.search(message)
        if match is None:
            return "You tried submitting a word in the wrong format. Please make sure to use squared brackets."
        word = match.group(1).lower()
        if len(word) != WORD_LENGTH:
            return f"Your word must be exactly {WORD_LENGTH} letters."
        if any(word == previous for previous, _ in self.guesses):
            return f"You have already guessed '{word}' before. Please try a different word."
        if not self.is_word(word):
            return f"'{word}' is not an English word."
        return None

    def _guess(self, word: str) -> None:
        feedback = score_guess(word, self.secret)
        self.guesses.append((word, feedback))
        if all(mark == GREEN for mark in feedback):
            self._finish(1.0, "Congratulations! You guessed the word correctly!")
            return
        self.transcript.append(f"You submitted [{word}].\nFeedback:\n{' '.join(word.upper())}\n"
                               f"{' '.join(feedback)}\nYou have {self.guesses_left} guesses left.")
        if not self.guesses_left:
            score = partial_score(feedback)
            self._finish(score, "The turn limit has been reached. You didn't guess the word, but your best guess "
                                f"matched {round(score * 100)}% of the letters in the correct positions.\n"
                                f"The secret word was: **{self.secret}**.")

    def _finish(self, reward: float, reason: str) -> None:
        self.done, self.reward, self.end_reason = True, reward, reason
