"""The episode loop of `envkit eval`: TRL's tool-calling loop, played over the same bound environment class.

TRL's `GRPOTrainer` plays a batch of episodes this way, and so does this loop:

1. each episode's environment instance (the class `envkit.train.bind` generates) is reset with the
   task's arguments, and the text it returns is appended to the prompt's last user message;
2. the player answers every conversation at once (one batch of generation);
3. for each answer with tool calls, the calls run in order on that episode's instance: a result
   becomes a tool message `{"role": "tool", "name": ..., "content": str(result)}`, a call that
   raises becomes `{"error": "..."}` (a failed call), an unknown tool `Tool NAME not found.`;
4. the player answers the conversations that called tools; repeat from 3 at most
   `max_tool_calling_iterations` times.

Answers are chat messages as TRL's `parse_response` returns them
(`{"role": "assistant", "content": ..., "tool_calls": [{"type": "function", "function": {...}}]}`).
Tool calls of different episodes run in parallel (each episode has its own session); an episode's
own calls run one after another.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from .binding import Episode, ServedEnvironment, tool_names

__all__ = ["Game", "Conversation", "Player", "play", "start", "take_turns"]


@dataclass
class Game:
    """One game to play: its environment, the `reset` arguments, where it came from, and the prompt.

    `prompt` is the chat before the first observation (TRL's dataset `prompt` column).
    """

    env: str
    task: dict[str, Any]
    prompt: list[dict[str, Any]]
    split: str | None = None
    task_index: int | None = None


@dataclass
class Conversation:
    """One episode in play: the chat so far, the environment instance and its tools, and the failed calls.

    The tool calls themselves are recorded by the environment instance (`episode.turns`).
    """

    game: Game
    environment: ServedEnvironment
    messages: list[dict[str, Any]]
    tools: list[Any]
    tool_calls: int = 0
    failed_calls: int = 0
    #: Whatever the player keeps between its answers (token ids, for a local model).
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def episode(self) -> Episode:
        episode = self.environment.episode
        assert episode is not None, "the environment was reset when the conversation began"
        return episode


class Player(Protocol):
    """Who plays: a local model, a model behind an OpenAI-compatible server, or a scripted policy."""

    label: str

    def respond(self, conversations: Sequence[Conversation]) -> list[dict[str, Any] | None]:
        """The next assistant message of each conversation, or None when it has nothing more to say
        (a model whose episode budget is spent, a policy whose game is over)."""


def _bound_tools(environment: ServedEnvironment) -> list[Any]:
    """The instance's tool methods, in the order TRL lists them (sorted by name)."""
    return [getattr(environment, name) for name in tool_names(type(environment))]


def start(games: Sequence[Game], environments: Sequence[ServedEnvironment], pool: ThreadPoolExecutor
          ) -> list[Conversation]:
    """Reset each game's environment instance with the game's task (all at once, on `pool`) and build each
    conversation's first prompt."""

    def begin(game: Game, environment: ServedEnvironment) -> Conversation:
        observation = environment._start(game.task)
        prompt = copy.deepcopy(game.prompt)
        prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
        return Conversation(game, environment, prompt, _bound_tools(environment))

    return list(pool.map(begin, games, environments))


def _run_calls(conversation: Conversation, tool_calls: list[dict[str, Any]]) -> None:
    """Run one answer's tool calls in order and append the tool messages, as TRL does.

    A call that fails before it reaches the environment (unknown tool, arguments that are not an object)
    is recorded in `episode.turns` here; the environment instance records every other call itself.
    """
    tools = {tool.__name__: tool for tool in conversation.tools}
    episode = conversation.episode
    for call in tool_calls:
        conversation.tool_calls += 1
        function = call.get("function") or {}
        name = function.get("name", call.get("name", "unknown"))
        arguments = function.get("arguments")
        recorded = len(episode.turns)
        try:
            if call.get("type", "function") != "function":
                raise ValueError(f"Unsupported tool call type: {call.get('type')}")
            if name not in tools:
                raise ValueError(f"Tool {name} not found.")
            result: Any = tools[name](**arguments)
        except Exception as error:
            conversation.failed_calls += 1
            result = {"error": str(error)}
            if len(episode.turns) == recorded:
                episode.refused(name, arguments, str(error))
        conversation.messages.append({"role": "tool", "name": name, "content": str(result)})


def play(player: Player, games: Sequence[Game], classes: dict[str, type[ServedEnvironment]], *,
         max_tool_calling_iterations: int) -> list[Conversation]:
    """Play every game at once with `player`; returns the finished conversations, in the order of `games`.

    Sessions are closed at the end, also when the player fails.
    """
    if not games:
        return []
    environments = [classes[game.env]() for game in games]
    with ThreadPoolExecutor(max_workers=min(64, len(games)), thread_name_prefix="envkit-eval") as pool:
        try:
            conversations = start(games, environments, pool)
            take_turns(player, conversations, pool, max_tool_calling_iterations=max_tool_calling_iterations)
        finally:
            for environment in environments:
                environment._close()
    return conversations


def take_turns(player: Player, conversations: Sequence[Conversation], pool: ThreadPoolExecutor, *,
               max_tool_calling_iterations: int) -> float:
    """Play started conversations to their end: the player answers all of them at once, then the tool calls
    of every answer that made some run on `pool` (one task per conversation, its calls in order), at most
    `max_tool_calling_iterations` times. Returns the seconds spent waiting for the tool calls."""
    waiting = _answered(conversations, player.respond(conversations))
    iteration, waited = 0, 0.0
    while waiting and iteration < max_tool_calling_iterations:
        started = time.perf_counter()
        list(pool.map(lambda item: _run_calls(*item), waiting))
        waited += time.perf_counter() - started
        answered = [conversation for conversation, _ in waiting]
        waiting = _answered(answered, player.respond(answered))
        iteration += 1
    return waited


def _answered(conversations: Sequence[Conversation], answers: Sequence[dict[str, Any] | None]
              ) -> list[tuple[Conversation, list[dict[str, Any]]]]:
    """Append each answer; return the conversations whose answer called tools, with those calls."""
    waiting = []
    for conversation, answer in zip(conversations, answers, strict=True):
        if answer is None:
            continue
        conversation.messages.append(answer)
        calls = answer.get("tool_calls")
        if calls:
            waiting.append((conversation, list(calls)))
    return waiting
