"""Wordle's action, observation and state, field for field as OpenEnv's TextArena environment has them.

OpenEnv clients read `prompt`, `messages`, `current_player_id`, `legal_players` and `info`; the
fields after those are envkit's additions.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from envkit import Action, Observation, State

__all__ = ["WordleAction", "WordleMessage", "WordleObservation", "WordleState"]


class WordleAction(Action):
    """A player message containing the guess in square brackets, e.g. `"[crane]"`."""

    message: str = Field(description='The player\'s message; the guess is the first "[word]" in it')


class WordleMessage(BaseModel):
    """One message the player has been shown."""

    sender_id: int = Field(description="-1 for the game")
    content: str
    category: str = Field(description='"MESSAGE": the whole rendered game text travels as one message')


class WordleObservation(Observation):
    """The game as the player sees it; `messages[0].content` holds the whole transcript so far."""

    prompt: str = Field(default="", description='The game text while no guess has counted yet, then "Wordle-v0"')
    messages: list[WordleMessage] = Field(default_factory=list, description="The transcript, as one message")
    current_player_id: int = Field(default=0, description="Always 0: Wordle has one player")
    legal_players: list[int] = Field(default_factory=list, description="[0]")
    info: dict[str, Any] = Field(default_factory=dict, description='"reward_signals" after each step')
    feedback: str = Field(default="", description="The text this reset or step added to the transcript")
    guesses_left: int = Field(default=6, ge=0, description="Valid guesses the player may still make")
    reward_components: dict[str, float] = Field(default_factory=dict,
                                                description="Parts a trainer can weigh into its own reward")
    outcome: str = Field(default="", description="Once the game is over: won or lost, why, and the secret word")

    def as_text(self) -> str:
        """What a model reads: the new text only (the whole prompt after a reset, the reply to the guess after a
        step), then how the game ended once it has. TextArena's "1 guesses left" reads "1 guess left" here."""
        text = self.feedback.replace("You have 1 guesses left.", "You have 1 guess left.")
        return f"{text}\n[GAME] {self.outcome}" if self.outcome else text


class WordleState(State):
    """The episode's state, shaped like OpenEnv's TextArena state.

    `raw_state["game_state"]` carries the secret word (`secret_word`, as TextArena's does) only once the
    game is over, so that no client, an evaluation or a public server's, can read the answer mid-game.
    """

    env_id: str = "Wordle-v0"
    num_players: int = 1
    max_turns: int | None = None
    turn: int = 0
    last_reward: float = 0.0
    last_info: dict[str, Any] = Field(default_factory=dict)
    raw_state: dict[str, Any] = Field(default_factory=dict)
    reward_components: dict[str, float] = Field(default_factory=dict)
