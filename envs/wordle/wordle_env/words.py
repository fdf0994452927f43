"""The shipped word lists: the secret words and the dictionary of valid guesses.

Both are plain text files in `wordle_env/data/`, one lowercase five-letter word a line, read once
per process. Nothing is downloaded at run time; the README says where each list comes from.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

__all__ = ["secret_words", "valid_words", "is_valid_guess", "split_indices"]

#: Every `TEST_EVERY`-th secret noun is held out for evaluation.
TEST_EVERY = 4


def _read(name: str) -> tuple[str, ...]:
    text = resources.files("wordle_env").joinpath("data").joinpath(name).read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


@cache
def secret_words() -> tuple[str, ...]:
    """The words a game draws its secret from, in the order seeds index them (140 Basic English nouns)."""
    return _read("secret_words.txt")


@cache
def valid_words() -> tuple[str, ...]:
    """Every word accepted as a guess, sorted (about 5,700 five-letter English words, the secrets among them)."""
    return tuple(sorted(set(_read("valid_words.txt")) | set(secret_words())))


@cache
def _valid_set() -> frozenset[str]:
    return frozenset(valid_words())


def is_valid_guess(word: str) -> bool:
    """Whether `word` (any case) is in the guess dictionary."""
    return word.lower() in _valid_set()


def split_indices() -> dict[str, tuple[int, ...]]:
    """Disjoint `train` and `test` splits of the secret nouns, as indices into `secret_words()`."""
    indices = range(len(secret_words()))
    return {"train": tuple(i for i in indices if i % TEST_EVERY),
            "test": tuple(i for i in indices if i % TEST_EVERY == 0)}
