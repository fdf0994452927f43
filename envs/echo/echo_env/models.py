"""Echo's action and observation, field for field as OpenEnv's echo environment has them."""

from envkit import Action, Observation
from pydantic import Field


class EchoAction(Action):
    """A message to echo back."""

    message: str = Field(description="The message to echo")


class EchoObservation(Observation):
    """The echoed message and its length."""

    echoed_message: str = Field(default="", description="The message, echoed back")
    message_length: int = Field(default=0, ge=0, description="Length of the echoed message")

    def as_text(self) -> str:
        return self.echoed_message
