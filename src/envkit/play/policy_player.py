"""`envkit eval --policy NAME`: scripted players as baselines, playing through the same loop as a model.

An environment package offers its players in `<package>.policies.TOOL_PLAYERS`, a single-file environment
(`my_env.py:MyEnvironment`) in `TOOL_PLAYERS` beside its class in that file: a mapping of names
("solver", "random", ...) to factories `seed -> act`, where `act(observation, task)` returns the next
tool call as `(tool, arguments)`, or None to stop. `random` exists for every environment: where the
package offers none, tools are called with random arguments drawn from their JSON schemas.
"""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..environment import Environment
from ..errors import ConfigurationError
from .loop import Conversation

__all__ = ["PolicyPlayer", "policy_names", "tool_players", "players_place", "sample_argument"]

#: The words a random string argument is made of.
WORDS = ("hello world the quick brown fox jumps over a lazy dog red green blue sun moon star tree river stone cloud "
         "light dark fast slow big small one two three yes no up down left right play game move step win").split()

Act = Callable[[Mapping[str, Any], Mapping[str, Any]], "tuple[str, dict[str, Any]] | None"]
Factory = Callable[[int], Act]


def tool_players(env_class: type[Environment] | None) -> dict[str, Factory]:
    """The scripted players offered beside an environment: `TOOL_PLAYERS` in the class's own module (a single-file
    `module:Class` environment), else in its package's `policies` module; empty when none."""
    if env_class is None:
        return {}
    own = getattr(sys.modules.get(env_class.__module__), "TOOL_PLAYERS", None)
    if isinstance(own, Mapping):
        return dict(own)
    package = env_class.__module__.rpartition(".")[0]
    if not package:
        return {}
    try:
        module = importlib.import_module(f"{package}.policies")
    except ModuleNotFoundError as error:
        if error.name == f"{package}.policies":
            return {}
        raise
    players = getattr(module, "TOOL_PLAYERS", None)
    return dict(players) if isinstance(players, Mapping) else {}


def players_place(env_class: type[Environment]) -> str:
    """Where the scripted players of `env_class` go: its package's `policies` module, or its own module."""
    package = env_class.__module__.rpartition(".")[0]
    return f"{package}/policies.py" if package else f"{env_class.__module__}.py, beside {env_class.__name__}"


def policy_names(env_class: type[Environment] | None) -> list[str]:
    """Every `--policy` name an environment can be played with."""
    return sorted({*tool_players(env_class), "random"})


def sample_argument(schema: dict[str, Any], rng: random.Random) -> Any:
    """A random value that satisfies one argument's JSON schema."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "anyOf" in schema:
        return sample_argument(rng.choice(schema["anyOf"]), rng)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = rng.choice([one for one in kind if one != "null"] or ["string"])
    if kind == "integer":
        low, high = int(schema.get("minimum", 0)), int(schema.get("maximum", 9))
        return rng.randint(low, max(low, high))
    if kind == "number":
        low, high = float(schema.get("minimum", 0.0)), float(schema.get("maximum", 1.0))
        return round(rng.uniform(low, max(low, high)), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [sample_argument(schema.get("items", {}), rng) for _ in range(rng.randint(1, 3))]
    if kind == "object":
        return {}
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))


def _random_arguments(seed: int, listing: Sequence[dict[str, Any]]) -> Act:
    rng = random.Random(seed)

    def act(observation: Mapping[str, Any], task: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        tool = rng.choice(listing)
        function = tool.get("function", tool)
        parameters = function.get("parameters") or {}
        required = set(parameters.get("required") or ())
        arguments = {name: sample_argument(schema, rng) for name, schema in (parameters.get("properties") or {}).items()
                     if name in required or rng.random() < 0.5}
        return function["name"], arguments

    return act


class PolicyPlayer:
    """Plays each game with its own instance of a scripted player (seeded `seed + game number`).

    The player reads the latest observation the server sent (`Episode.observation`) and answers with one
    tool call per turn; it stops when the game is over, the session is lost, or the policy returns None.
    """

    def __init__(self, name: str, env_classes: Mapping[str, type[Environment] | None],
                 listings: Mapping[str, Sequence[dict[str, Any]]], seed: int = 0) -> None:
        self.label = f"policy:{name}"
        self.factories: dict[str, Factory] = {}
        for env, env_class in env_classes.items():
            offered = tool_players(env_class)
            if name in offered:
                self.factories[env] = offered[name]
            elif name == "random":
                self.factories[env] = lambda game_seed, listing=listings[env]: _random_arguments(game_seed, listing)
            else:
                known = ", ".join(policy_names(env_class))
                raise ConfigurationError(f"--policy {name}: {env} has no such scripted player; its players: {known}")
        self.seed = seed
        self._started = 0

    def respond(self, conversations: Sequence[Conversation]) -> list[dict[str, Any] | None]:
        answers: list[dict[str, Any] | None] = []
        for conversation in conversations:
            episode = conversation.episode
            if episode.done or episode.lost:
                answers.append(None)
                continue
            act = conversation.state.get("act")
            if act is None:
                act = conversation.state["act"] = self.factories[conversation.game.env](self.seed + self._started)
                self._started += 1
            call = act(episode.observation or {}, conversation.game.task)
            if call is None:
                answers.append(None)
                continue
            tool, arguments = call
            answers.append({"role": "assistant", "content": "",
                            "tool_calls": [{"type": "function", "function": {"name": tool, "arguments": arguments}}]})
        return answers
