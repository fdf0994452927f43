"""Coding: write a Python function in a sandbox; hidden tests (HumanEval for testing) decide the reward."""

from .environment import CodingEnvironment
from .models import CodingAction, CodingObservation, CodingState

__all__ = ["CodingAction", "CodingEnvironment", "CodingObservation", "CodingState"]
