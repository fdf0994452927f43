"""Echo: the minimal envkit environment. It echoes a message back; the reward grows with its length."""

from .environment import EchoEnvironment
from .models import EchoAction, EchoObservation

__all__ = ["EchoAction", "EchoEnvironment", "EchoObservation"]
