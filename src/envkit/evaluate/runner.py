"""One evaluation: pick the games, serve or reach the environments, play every player, tabulate, keep transcripts.

    from envkit.evaluate import EvalSettings, evaluate
    result = evaluate(EvalSettings(env=["wordle"], policies=["solver"], games=30))
    print(render_table(result.rows))

Everything that can be checked cheaply (flags, environments, splits, game counts, model folders)
is checked before a server starts or a model loads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..app.targets import resolve_target
from ..client import EnvClient
from ..client.ors_client import OrsServer
from ..environment import Environment, UnknownSplitError
from ..episode_metrics import metrics_from_metadata
from ..errors import ConfigurationError, EnvkitError
from ..play.binding import ServedEnvironment, bind, free_sessions
from ..play.games import dataset_games, play_and_score, split_games
from ..play.loop import Game
from ..play.models import TINY, chat_template_kwargs, load_play_settings, model_defaults
from ..play.table import Row
from ..play.tasks import task_prompt
from ..transcripts import Transcript

__all__ = ["EvalSettings", "Evaluation", "evaluate", "POLICY_ITERATIONS"]

#: Tool-calling rounds a scripted policy may take: enough to finish any bundled game (they stop when it ends).
POLICY_ITERATIONS = 100


@dataclass
class EvalSettings:
    """What `envkit eval` was asked to do (flags by the same names)."""

    env: list[str] = field(default_factory=list)
    env_url: list[str] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    policies: list[str] = field(default_factory=list)
    openai_url: str | None = None
    games: int | None = 30
    split: str = "test"
    dataset: str | None = None
    temperature: float = 0.0
    max_completion_length: int | None = None
    max_tool_calling_iterations: int | None = None
    enable_thinking: bool | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    seed: int = 0

    def check(self) -> None:
        """Raise `ConfigurationError` for flags that cannot work together."""
        if self.openai_url and not self.models:
            raise ConfigurationError("--openai-url needs --model NAME: the model name the chat server serves")
        if not self.models and not self.policies:
            raise ConfigurationError("say who plays: --model PATH|HUB_ID|tiny, --openai-url URL --model NAME, "
                                     "or --policy solver|random")
        if not self.env and not self.env_url:
            raise ConfigurationError("name an environment with --env (e.g. --env wordle) or a server with --env-url")
        if self.env_url and self.env and len(self.env) != len(self.env_url):
            raise ConfigurationError(f"{len(self.env)} --env names for {len(self.env_url)} --env-url servers: give one "
                                     "name per server, in the same order")
        if self.games is not None and self.games < 1:
            raise ConfigurationError(f"--games must be a positive integer, got {self.games}")
        for name in ("max_completion_length", "max_tool_calling_iterations"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigurationError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
        if self.temperature < 0:
            raise ConfigurationError(f"--temperature must be 0 (greedy) or more, got {self.temperature}")

    def budget(self, model: str, episode_length: int | None = None, episode_tokens: int | None = None
               ) -> tuple[int, int]:
        """(max_completion_length, max_tool_calling_iterations) for a model: as given; else as the model was trained
        (a folder `envkit train` saved); else `envkit train`'s defaults for it and these episodes."""
        defaults = {**model_defaults(model == TINY and not self.openai_url, episode_length, episode_tokens),
                    **self._trained(model)}
        return (self.max_completion_length or int(defaults["max_completion_length"]),
                self.max_tool_calling_iterations or int(defaults["max_tool_calling_iterations"]))

    def chat_kwargs(self, model: str) -> dict[str, Any]:
        """The chat template arguments, as `envkit train` passes them for this model (or passed them, for a folder
        it saved), with the flags given here on top."""
        trained = dict(self._trained(model).get("chat_template_kwargs") or {})
        return chat_template_kwargs(model == TINY, self.enable_thinking, {**trained, **self.chat_template_kwargs})

    def _trained(self, model: str) -> dict[str, Any]:
        """The play settings saved with a model folder (also when a chat server serves it by that path)."""
        return load_play_settings(model)


@dataclass
class Evaluation:
    """The rows of the table and a transcript per game played."""

    rows: list[Row]
    transcripts: list[Transcript]
    seconds: float = 0.0


@dataclass
class _Env:
    """An environment of the run: its name, its class when resolvable here, and how to reach or serve it."""

    name: str
    env_class: type[Environment] | None
    target: str | None = None
    url: str | None = None
    #: The task splits the server publishes, when there is no class here to read them from.
    served: ServedTasks | None = None


class ServedTasks:
    """The task splits a running envkit server publishes (its Open Reward Standard routes), read once."""

    def __init__(self, name: str, url: str) -> None:
        self.__name__, self.url = name, url
        self._splits: list[str] | None = None

    def splits(self) -> list[str]:
        if self._splits is None:
            try:
                with _ors_server(self.url) as server:
                    self._splits = server.splits()
            except EnvkitError as error:
                raise ConfigurationError(f"{self.__name__}: cannot read the task splits {self.url} publishes ({error});"
                                         " name the environment with --env beside --env-url, or give --dataset") from None
        return self._splits

    def tasks(self, split: str) -> list[dict[str, Any]]:
        if split not in self.splits():
            raise UnknownSplitError(split)
        with _ors_server(self.url) as server:
            return server.tasks(split)


@contextmanager
def _ors_server(url: str) -> Iterator[OrsServer]:
    server = OrsServer(url, timeout=30.0)
    try:
        yield server
    finally:
        server.close()


def evaluate(settings: EvalSettings, say: Callable[[str], None] = print) -> Evaluation:
    """Run the evaluation `settings` describe; `say` gets progress notes."""
    started = time.perf_counter()
    settings.check()
    envs = _environments(settings)
    counted = _games(settings, envs, {env.name: "" for env in envs})  # checks splits and counts before serving
    for name in settings.policies:  # an unknown player is a usage error, before anything is served
        from ..play.policy_player import policy_names

        for env in envs:
            if env.env_class is not None and name not in policy_names(env.env_class):
                raise ConfigurationError(f"--policy {name}: {env.name} has no such scripted player; its players: "
                                         f"{', '.join(policy_names(env.env_class))}")
    if not settings.openai_url:
        from ..play.model_check import check_model

        for model in settings.models:
            check_model(model)
    with ExitStack() as stack:
        if any(env.url is None for env in envs):
            from ..play.embedded import serve_envs

            sessions = max(sum(1 for game in counted if game.env == env.name) for env in envs)
            served = stack.enter_context(serve_envs([str(env.target) for env in envs], sessions))
            for env, url in zip(envs, served.values(), strict=True):
                env.url = url
                say(f"serving {env.name} on {url} (in this process)")
        urls = {env.name: str(env.url) for env in envs}
        local_model = bool(settings.models) and not settings.openai_url
        known = {env.name: env.env_class.task_prompt for env in envs if env.env_class is not None}
        classes = {name: bind(url, name=name, check_schemas=local_model, task_prompt=known.get(name))
                   for name, url in urls.items()}
        prompts = {name: task_prompt(name, cls.metadata) for name, cls in classes.items()}
        games = _games(settings, envs, prompts)
        slots = _slots(urls, games)
        metrics = {env.name: tuple(env.env_class.METRICS) if env.env_class is not None
                   else metrics_from_metadata(classes[env.name].metadata) for env in envs}
        listings = {name: EnvClient(url).sync().tools() for name, url in urls.items()}
        rows: list[Row] = []
        transcripts: list[Transcript] = []
        for player, iterations in _players(settings, envs, classes, listings, prompts, say):
            say(f"playing {_games_count(len(games))} with {player.label}{_at_a_time(slots, games)}")
            try:
                played_rows, played = play_and_score(player, games, classes, metrics,
                                                     max_tool_calling_iterations=iterations, slots=slots,
                                                     ready=lambda turn: _wait_for_room(urls, turn), say=say)
            finally:
                closer = getattr(player, "close", None)
                if closer is not None:
                    closer()
            rows.extend(played_rows)
            transcripts.extend(played)
    return Evaluation(rows, transcripts, time.perf_counter() - started)


def _environments(settings: EvalSettings) -> list[_Env]:
    """The environments by name: classes resolved here from --env; servers from --env-url (paired in order)."""
    if not settings.env:
        named = [(_server_name(url), url) for url in settings.env_url]
        return [_Env(name, None, url=url, served=ServedTasks(name, url)) for name, url in named]
    found = []
    for index, target in enumerate(settings.env):
        resolved = resolve_target(target)
        url = settings.env_url[index] if settings.env_url else None
        found.append(_Env(resolved.name, resolved.env_class, target, url))
    names = [env.name for env in found]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigurationError(f"--env {', '.join(repeated)} given twice; name each environment once")
    return found


def _server_name(url: str) -> str:
    return str(EnvClient(url).sync().metadata().get("name") or url)


def _games(settings: EvalSettings, envs: list[_Env], prompts: Mapping[str, str]) -> list[Game]:
    if settings.dataset:
        return dataset_games(settings.dataset, prompts, settings.games)
    games: list[Game] = []
    for env in envs:
        games.extend(split_games(env.name, env.env_class, settings.split, settings.games, prompts[env.name],
                                 env.served))
    return games


def _games_count(count: int) -> str:
    return f"{count} game" if count == 1 else f"{count} games"


def _slots(urls: Mapping[str, str], games: Sequence[Game]) -> dict[str, int]:
    """How many games of each environment play at once: its server's free sessions, up to its games; refuses a
    server with none free."""
    from ..errors import CapacityError

    slots = {}
    for name, url in urls.items():
        wanted = sum(1 for game in games if game.env == name)
        if not wanted:
            continue
        free = free_sessions(url, wanted)
        if free < 1:
            raise CapacityError(url, f"{name} has no free session (all its --max-concurrent-envs are held); try "
                                     "again when a session ends, or start the server with more")
        slots[name] = min(free, wanted)
    return slots


def _at_a_time(slots: Mapping[str, int], games: Sequence[Game]) -> str:
    """", N at a time (NAME has N free sessions)" where a server holds fewer sessions than its games."""
    short = [f"{name} has {count} free sessions" for name, count in slots.items()
             if count < sum(1 for game in games if game.env == name)]
    return f", {min(slots.values())} at a time ({'; '.join(short)})" if short else ""


def _wait_for_room(urls: Mapping[str, str], turn: Sequence[Game]) -> None:
    """Wait (briefly) until each server has room for this turn's games: the turn before gives its sessions back as
    their environments close."""
    for name, url in urls.items():
        wanted = sum(1 for game in turn if game.env == name)
        if wanted:
            free_sessions(url, wanted)


def _players(settings: EvalSettings, envs: list[_Env], classes: Mapping[str, type[ServedEnvironment]],
             listings: Mapping[str, Any], prompts: Mapping[str, str], say: Callable[[str], None]) -> Any:
    """Each player in turn (a model is loaded only when its turn comes), with its tool-calling round limit."""
    from ..play.policy_player import PolicyPlayer

    for name in settings.policies:
        yield (PolicyPlayer(name, {env.name: env.env_class for env in envs}, listings, settings.seed),
               settings.max_tool_calling_iterations or POLICY_ITERATIONS)
    lengths = [length for cls in classes.values() if isinstance(length := cls.metadata.get("episode_length"), int)]
    episode_length = max(lengths) if lengths else None
    for model in settings.models:
        length, iterations = settings.budget(model, episode_length)
        if settings.openai_url:
            from .openai_player import OpenAIPlayer

            yield (OpenAIPlayer(settings.openai_url, model, listings, max_tokens=length,
                                temperature=settings.temperature, chat_template_kwargs=settings.chat_kwargs(model)),
                   iterations)
            continue
        from ..play.model_player import ModelPlayer
        from ..play.models import load_model

        players = {env.name: env.env_class for env in envs if env.env_class is not None}
        loaded, tokenizer, episode_tokens = load_model(model, classes, prompts, settings.seed, say, players)
        if episode_tokens is not None:  # the tiny model: its budget fits its warm-up episodes, as in training
            length, iterations = settings.budget(model, episode_length, episode_tokens)
        yield (ModelPlayer(model, loaded, tokenizer, max_completion_length=length,
                           chat_template_kwargs=settings.chat_kwargs(model), temperature=settings.temperature),
               iterations)
