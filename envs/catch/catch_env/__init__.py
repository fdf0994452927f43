"""Catch: OpenSpiel's `catch` game as an envkit environment, OpenEnv's OpenSpiel env on the wire."""

from .environment import CatchEnvironment
from .models import CatchAction, CatchObservation, CatchState

__all__ = ["CatchAction", "CatchEnvironment", "CatchObservation", "CatchState"]
