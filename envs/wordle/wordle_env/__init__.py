"""Wordle: TextArena's `Wordle-v0` rules, text and rewards, with OpenEnv's TextArena wire format, offline."""

from .environment import ENV_ID, WordleEnvironment
from .game import GameOverError, WordleGame, score_guess
from .models import WordleAction, WordleMessage, WordleObservation, WordleState

__all__ = [
    "ENV_ID", "GameOverError", "WordleAction", "WordleEnvironment", "WordleGame", "WordleMessage",
    "WordleObservation", "WordleState", "score_guess",
]
