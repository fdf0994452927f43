"""The typed messages of {{cookiecutter.title}}: what the agent sends, what it sees, what the trainer may inspect."""

from envkit import Action, Observation, State
from pydantic import ConfigDict, Field

LOW, HIGH = 1, 100


class {{cookiecutter.class_prefix}}Action(Action):
    """One guess of the secret number."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"guess": 50}]})

    guess: int = Field(ge=LOW, le=HIGH, description=f"The guess, between {LOW} and {HIGH}")


class {{cookiecutter.class_prefix}}Observation(Observation):
    """The answer to the last guess, in words, and how many guesses remain."""

    message: str = Field(default="", description="What happened, for the agent to read")
    guesses_left: int = Field(default=0, ge=0, description="Guesses remaining in this episode")

    def as_text(self) -> str:
        return self.message


class {{cookiecutter.class_prefix}}State(State):
    """The episode's progress (the secret stays hidden, even from the state)."""

    guesses_left: int = Field(default=0, ge=0, description="Guesses remaining in this episode")
    won: bool = Field(default=False, description="Whether the secret was found")
