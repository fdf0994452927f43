"""Bind a served environment to TRL: the class `GRPOTrainer(environment_factory=...)` instantiates.

    from envkit.train import environment_factory
    trainer = GRPOTrainer(model=..., environment_factory=environment_factory("http://127.0.0.1:8001"), ...)

TRL builds one instance per rollout slot, calls `reset(**row)` at the start of every episode and
offers every public method of the class to the model as a tool. The generated class has exactly
one method per served tool, typed and documented from the server's `GET /tools` listing, and
nothing else public:

- `reset(**row)` closes the previous episode's session, opens a fresh one, passes the dataset
  columns (all but `prompt` and `environment`, and none that is empty) to the environment's
  `reset`, and returns the first observation text.
- a tool method sends the call over the session, returns the environment's text, adds the reward
  to `self.episode`, and raises `ValueError("Game over.")` once the episode has ended.
- a session lost mid-episode (`SessionLostError`) ends that episode: it is marked lost, counted,
  logged, and never continued on another session. Reward functions score it as unscorable.

Reward functions receive the instances as `environments=` and read `environment.episode`.
"""

from __future__ import annotations

import inspect
import json
import logging
import re
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

from ..client import EnvClient
from ..environment import opening_text
from ..errors import AuthenticationError, CapacityError, EnvConnectionError, EnvError, SessionLostError
from ..transcripts import Turn
from .schema import RESERVED_NAMES, BindingError, check_name, check_tool_schema, docstring, type_hint

__all__ = ["Episode", "Tally", "ServedEnvironment", "bind", "make_class", "environment_factory", "tool_names"]

logger = logging.getLogger("envkit.train")

_TALLY_LOCK = threading.Lock()

#: Dataset columns that are TRL's, not the environment's.
NOT_FOR_ENV = frozenset({"prompt", "environment"})
#: Sets of dataset columns already logged as not reaching reset.
_DROPPED_COLUMNS: set[frozenset[str]] = set()


class _ServerDefault:
    """The default of an optional tool argument: left out of the call, so the environment applies its own."""

    def __repr__(self) -> str:
        return "<default>"


SERVER_DEFAULT = _ServerDefault()


@dataclass
class Episode:
    """One episode as the trainer saw it; reward functions read it from `environments[i].episode`.

    Attributes:
        env: name of the environment.
        row: the keyword arguments sent to the environment's `reset`.
        reward: sum of the rewards the environment returned.
        components: the reward components of the latest observation that reported some (its
            `reward_components` field, e.g. Wordle's win, partial, invalid_moves).
        tool_calls, tool_errors: calls made, and calls the environment refused (bad arguments, errors).
        done: the environment ended the episode.
        lost: why the session was lost mid-episode, or None. A lost episode is unscorable.
        texts: the observation texts, first (from `reset`) to last.
        env_seconds: time spent waiting for the environment.
        metrics: the environment's episode metrics after the latest move (`Environment.METRICS`; empty when it
            declares none).
        observation: the latest observation, as the server sent it.
        turns: every tool call of the episode, in order: arguments, the text the model read back (for a
            refused call, TRL's `{'error': ...}`), the reward it brought, and whether the episode was over.
    """

    env: str
    row: dict[str, Any]
    session_id: str | None = None
    reward: float = 0.0
    components: dict[str, float] = field(default_factory=dict)
    tool_calls: int = 0
    tool_errors: int = 0
    done: bool = False
    lost: str | None = None
    texts: list[str] = field(default_factory=list)
    env_seconds: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    observation: Any = None
    turns: list[Turn] = field(default_factory=list)

    def refused(self, tool: str, arguments: Any, error: str) -> None:
        """Record a call that failed: TRL shows the model `{'error': error}`."""
        self.turns.append(Turn(tool, arguments, str({"error": error}), 0.0, self.done, error))


@dataclass
class Tally:
    """Run-wide counts across every bound environment, for progress lines and the closing summary.

    `error_codes` counts the calls the environment refused, by wire code (`VALIDATION_ERROR` for
    arguments it could not accept, `EXECUTION_ERROR` for a tool that raised); `lost_reasons` says
    why each lost session ended. `env_seconds` is the time the trainer waited for the environments (calls
    that run at once count once), `reset_seconds` the part of it spent in resets.
    """

    episodes: int = 0
    finished: int = 0
    lost: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    env_seconds: float = 0.0
    reset_seconds: float = 0.0
    error_codes: dict[str, int] = field(default_factory=dict)
    lost_reasons: list[str] = field(default_factory=list)


class ServedEnvironment:
    """Base of the generated classes; one instance plays one episode at a time over its own session.

    Class attributes (data, which TRL does not offer as tools): `env_name`, `url`, `metadata` (the
    server's `/metadata`), `component_names` (the reward components the environment reports),
    `tally` (run-wide counts) and `reconnect_timeout`. Instance attribute: `episode`, the current or
    last `Episode`.
    """

    env_name: ClassVar[str] = ""
    url: ClassVar[str] = ""
    metadata: ClassVar[dict[str, Any]] = {}
    component_names: ClassVar[tuple[str, ...]] = ()
    tally: ClassVar[Tally]
    reconnect_timeout: ClassVar[float] = 0.0
    _client_options: ClassVar[dict[str, Any]]
    #: The environment class's `task_prompt` where it is known (`bind(task_prompt=...)`); its text precedes the
    #: first observation's.
    _task_prompt: ClassVar[Callable[[dict[str, Any]], str | None] | None] = None
    _instances: ClassVar[weakref.WeakSet[ServedEnvironment]]

    def __init__(self) -> None:
        self.episode: Episode | None = None
        self._client: Any = None
        #: Set by `envkit.train.rollouts`, which plays a batch's episodes together: `reset` keeps the row for `_start`,
        #: and the rollouts count the batch's wall-clock wait in the tally's `env_seconds` (not each call's).
        self._batched = False
        self._row: dict[str, Any] | None = None
        type(self)._instances.add(self)

    def reset(self, **row: Any) -> str | None:
        """Start a new episode on a fresh session and return its first observation as text.

        On an instance whose resets are deferred (`envkit.train.rollouts`), only keep the row and return None.
        """
        if self._batched:
            self._row = row
            return None
        return self._start(row)

    def _start(self, row: dict[str, Any]) -> str:
        """Start the episode of `row` (the dataset row TRL gives `reset`)."""
        self._row = None
        self._close()
        kwargs = self._reset_arguments(row)
        episode = self.episode = Episode(self.env_name, kwargs)
        started = time.perf_counter()
        result = self._open_and_reset(kwargs)
        waited = 0.0 if self._batched else time.perf_counter() - started
        episode.env_seconds += time.perf_counter() - started
        self._count(env_seconds=waited, reset_seconds=waited, episodes=1)
        assert self._client is not None
        episode.session_id = self._client.session_id
        text = result.text if result.text is not None else _render(result.observation)
        episode.texts.append(text)
        self._observed(result.observation, result.metrics)
        if result.done:
            self._finish()
        instruction = self._task_prompt(kwargs) if self._task_prompt is not None else None
        return _separated(row.get("prompt"), opening_text(instruction, text))

    def _reset_arguments(self, row: dict[str, Any]) -> dict[str, Any]:
        """The columns of a dataset row that `reset` takes: not `prompt` or `environment`, none that is empty, and,
        when the server names what its reset takes (`/metadata` `reset_arguments`), only those; a row's other
        columns (an ORS dataset's `task_index`, say) are dropped with one log line per set of names."""
        kwargs = {key: value for key, value in row.items() if key not in NOT_FOR_ENV and value is not None}
        takes = self.metadata.get("reset_arguments")
        if not isinstance(takes, list):
            return kwargs
        dropped = frozenset(kwargs) - set(takes)
        if dropped and dropped not in _DROPPED_COLUMNS:
            _DROPPED_COLUMNS.add(dropped)
            logger.info("%s: dataset columns %s do not reach reset, which takes %s", self.env_name,
                        ", ".join(sorted(dropped)), ", ".join(takes) or "no arguments")
        return {key: value for key, value in kwargs.items() if key not in dropped}

    def _open_and_reset(self, kwargs: dict[str, Any]) -> Any:
        """Reset on a new session. A server that cannot be reached is retried for `reconnect_timeout`
        seconds (it may be restarting); a connection that drops before answering is retried once."""
        deadline = time.monotonic() + self.reconnect_timeout
        dropped = 0
        while True:
            self._client = self._connect()
            try:
                return self._client.reset(**kwargs)
            except CapacityError as error:
                self._close()
                raise EnvConnectionError(error.url, f"{error.reason}. Each rollout of a generation batch holds a "
                                         "session; raise the server's --max-concurrent-envs or lower "
                                         "--num-generations / --batch-size") from None
            except AuthenticationError:
                self._close()
                raise
            except SessionLostError:
                self._close()
                dropped += 1
                if dropped == 2:
                    raise
            except EnvConnectionError:
                self._close()
                if time.monotonic() >= deadline:
                    raise
                logger.warning("%s: server at %s unreachable; retrying until it answers (up to %.0fs more)",
                               self.env_name, self.url, deadline - time.monotonic())
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def _connect(self) -> Any:
        """A client for one episode's session (`reset`, `call`, `close`, `session_id`)."""
        return EnvClient(self.url, **self._client_options).sync()

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        """One tool call over this episode's session; every refusal is a ValueError, which TRL shows the model."""
        episode, client = self.episode, self._client
        if episode is not None and episode.lost:
            self._refuse(tool, arguments, f"Episode lost ({episode.lost}); it cannot continue.")
        if episode is not None and episode.done:
            self._refuse(tool, arguments, "Game over.")
        if episode is None or client is None:
            raise ValueError("No episode is running; the trainer calls reset() first.")
        started = time.perf_counter()
        reward_before = episode.reward
        try:
            result = client.call(tool, **arguments)
        except SessionLostError as error:
            self._lose(error)
            self._refuse(tool, arguments, f"Episode lost: {error.reason}. It ends here and is not replayed.")
        except EnvError as error:
            episode.tool_errors += 1
            self._count(tool_errors=1, error_code=error.code)
            self._refuse(tool, arguments, error.message)
        finally:
            elapsed = time.perf_counter() - started
            episode.env_seconds += elapsed
            episode.tool_calls += 1
            self._count(env_seconds=0.0 if self._batched else elapsed, tool_calls=1)
        if result.reward is not None:
            episode.reward += float(result.reward)
        self._observed(result.observation, result.metrics)
        episode.texts.append(result.text)
        if result.done:
            self._finish()
        episode.turns.append(Turn(tool, arguments, result.text, episode.reward - reward_before, episode.done))
        return result.text

    def _refuse(self, tool: str, arguments: dict[str, Any], error: str) -> NoReturn:
        """Record a failed call and raise the ValueError TRL turns into `{'error': ...}` for the model."""
        assert self.episode is not None
        self.episode.refused(tool, arguments, error)
        raise ValueError(error) from None

    def _observed(self, observation: Any, metrics: dict[str, float] | None) -> None:
        """Keep the latest observation, metrics and `reward_components` the environment reported (its standing in
        the game so far)."""
        assert self.episode is not None
        if observation is not None:
            self.episode.observation = observation
        if metrics is not None:
            self.episode.metrics = dict(metrics)
        reported = reported_components(observation)
        if reported:
            self.episode.components = {name: float(value) for name, value in reported.items()
                                       if isinstance(value, (int, float)) and not isinstance(value, bool)}

    def _finish(self) -> None:
        assert self.episode is not None
        self.episode.done = True
        self._count(finished=1)
        self._close()

    def _lose(self, error: SessionLostError) -> None:
        assert self.episode is not None
        self.episode.lost = error.reason
        self._count(lost=1, lost_reason=error.reason)
        logger.warning("%s: episode lost mid-game after %d tool calls (%s); it counts as lost and is not scored",
                       self.env_name, self.episode.tool_calls, error)
        self._close()

    def _count(self, *, error_code: str | None = None, lost_reason: str | None = None, **amounts: float) -> None:
        """Add to the run-wide tally; the episodes of a batch may play on several threads at once."""
        tally = self.tally
        with _TALLY_LOCK:
            for name, amount in amounts.items():
                setattr(tally, name, getattr(tally, name) + amount)
            if error_code is not None:
                tally.error_codes[error_code] = tally.error_codes.get(error_code, 0) + 1
            if lost_reason is not None:
                tally.lost_reasons.append(lost_reason)

    def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception as error:  # a dead connection is closed already
                logger.debug("closing a session failed: %r", error)

    @classmethod
    def _close_all(cls) -> None:
        """Close every open session of every instance (end of training)."""
        for instance in list(cls._instances):
            instance._close()


def _render(observation: Any) -> str:
    """Text of an observation from a server that sends no text: its one field, or its fields as JSON."""
    if not isinstance(observation, dict):
        return str(observation)
    fields = {key: value for key, value in observation.items() if key != "metadata"}
    if len(fields) == 1:
        (value,) = fields.values()
        return value if isinstance(value, str) else json.dumps(value)
    return json.dumps(fields)


def _separated(prompt: Any, text: str) -> str:
    """TRL appends reset's text to the last user message as is; keep the two apart."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        content = prompt[-1].get("content")
        if isinstance(content, str) and content and not content[-1].isspace():
            return "\n\n" + text
    return text


def _tool_method(listed: dict[str, Any], env_name: str) -> Any:
    """A method with the tool's real signature, type hints and docstring, forwarding to `_call`."""
    name = listed.get("name", "")
    where = f"{env_name} tool {name!r}"
    check_name(name, where)
    if name in RESERVED_NAMES or name.startswith("_"):
        raise BindingError(f"{where}: TRL gives `{name}` its own meaning on an environment class; rename the tool")
    parameters = listed.get("parameters") or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    signature_parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    descriptions: dict[str, str] = {}
    for argument, schema in properties.items():
        check_name(argument, f"{where}, argument")
        annotations[argument] = type_hint(schema, f"{where}, argument {argument!r}")
        descriptions[argument] = schema.get("description", "")
        default = inspect.Parameter.empty if argument in required else SERVER_DEFAULT
        signature_parameters.append(inspect.Parameter(argument, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                      default=default, annotation=annotations[argument]))
    annotations["return"] = str
    signature = inspect.Signature(signature_parameters, return_annotation=str)
    returns = (listed.get("return") or {}).get("description")

    def method(self: ServedEnvironment, *args: Any, **kwargs: Any) -> str:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError as error:  # arguments the tool does not take: a failed call, as TRL counts it
            if self.episode is not None:
                self.episode.refused(name, kwargs or list(args), str(error))
            raise
        arguments = {key: value for key, value in bound.arguments.items()
                     if key != "self" and value is not SERVER_DEFAULT}
        return self._call(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = docstring(listed.get("description", ""), descriptions, returns)
    method.__signature__ = signature  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    return method


def _class_name(env_name: str) -> str:
    words = [word for word in re.split(r"[^0-9a-zA-Z]+", env_name) if word]
    name = "".join(word[:1].upper() + word[1:] for word in words)
    name = re.sub(r"(Environment|Env)$", "", name) or "Served"
    return (name if name[0].isalpha() else "Env" + name) + "Env"


def bind(url: str, *, name: str | None = None, tally: Tally | None = None, reconnect_timeout: float = 0.0,
         client_options: dict[str, Any] | None = None, check_schemas: bool = True,
         task_prompt: Callable[[dict[str, Any]], str | None] | None = None) -> type[ServedEnvironment]:
    """The TRL environment class for the environment served at `url`.

    Reads `/metadata` and `/tools`, builds one method per tool, and checks that each method's
    schema (as TRL builds it) equals the listing. Raises `BindingError` naming the tool otherwise,
    and `EnvConnectionError` when the server cannot be reached. One probe episode (a plain reset)
    tells which reward components the environment reports.

    Args:
        url: the server, `http://host:port` or `ws://host:port`.
        name: the environment's name in this run (default: the name the server gives in `/metadata`).
        tally: run-wide counters to add to (a fresh one by default), shared by several classes.
        reconnect_timeout: seconds `reset` keeps retrying a server that cannot be reached (it may be
            restarting) before raising `EnvConnectionError`; 0 fails at once.
        client_options: keyword arguments for each episode's `EnvClient` (timeouts, headers).
        check_schemas: check each method against the listing as TRL renders it (imports transformers); players
            that never render schemas (scripted policies) may skip it.
        task_prompt: the environment class's `task_prompt`, where it is known here: `reset` then returns the task's
            prompt before the first observation, as `envkit.opening_text` joins them.
    """
    probe = EnvClient(url, **(client_options or {})).sync()
    metadata = probe.metadata()
    listing = probe.tools()
    env_name = name or str(metadata.get("name") or "env")
    return make_class(ServedEnvironment, env_name, url, listing, metadata=metadata, tally=tally,
                      check_schemas=check_schemas,
                      component_names=tuple(_reported_components(url, client_options or {}, metadata)),
                      reconnect_timeout=reconnect_timeout, _client_options=dict(client_options or {}),
                      _task_prompt=staticmethod(task_prompt) if task_prompt is not None else None)


def make_class(base: type[ServedEnvironment], env_name: str, url: str, listing: Sequence[dict[str, Any]], *,
               tally: Tally | None = None, check_schemas: bool = True, **attributes: Any) -> type[ServedEnvironment]:
    """A subclass of `base` with one method per listed tool (function-calling entries) and `attributes`; each
    method is checked against its listing as TRL renders it unless `check_schemas` is False."""
    if not listing:
        raise BindingError(f"{env_name} at {url} lists no tools, so a model has nothing to call; "
                           "mark the environment's actions with @tool")
    namespace: dict[str, Any] = {
        "__doc__": f"{env_name} served at {url}: one method per tool, for TRL's environment_factory.",
        "__module__": base.__module__,
        "env_name": env_name,
        "url": url,
        "tally": tally if tally is not None else Tally(),
        "_client_options": {},
        "_instances": weakref.WeakSet(),
        **attributes,
    }
    methods = {}
    for entry in listing:
        listed = entry.get("function", entry)
        methods[listed.get("name")] = (_tool_method(listed, env_name), listed)
    namespace.update({name: method for name, (method, _) in methods.items()})
    cls = type(_class_name(env_name), (base,), namespace)
    if check_schemas:
        for name, (_, listed) in methods.items():
            check_tool_schema(getattr(cls, name), listed)
    return cls


def tool_names(cls: type[ServedEnvironment]) -> list[str]:
    """The tools of a bound class (or of a subclass of one), sorted (the order TRL lists them in)."""
    return sorted(name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")
                  and name not in RESERVED_NAMES)


def free_sessions(url: str, wanted: int, *, wait_s: float = 30.0) -> int:
    """How many more sessions the server at `url` admits, waiting up to `wait_s` while it has fewer than `wanted`
    free: sessions just closed (the probe of `bind` among them) give their slot back once their environment has
    closed, which for a container takes a moment."""
    deadline = time.monotonic() + wait_s
    while True:
        health = EnvClient(url).sync().health()
        free = int(health.get("max_sessions", wanted)) - int(health.get("active_sessions", 0))
        if free >= wanted or time.monotonic() >= deadline or not int(health.get("active_sessions", 0)):
            return free
        time.sleep(0.2)


def _reported_components(url: str, client_options: dict[str, Any], metadata: dict[str, Any]) -> list[str]:
    """Names of the reward components a fresh episode reports (`reward_components` in its observation), and those of
    its rubric (`rubric_components` in `/metadata`: its leaves score only once a move is made)."""
    with EnvClient(url, **client_options).sync() as probe:
        observation = probe.reset().observation
    reported = reported_components(observation) or {}
    published = metadata.get("rubric_components")
    return sorted({*reported, *(published if isinstance(published, list) else ())})


def reported_components(observation: Any) -> dict[str, Any] | None:
    """An observation's reward components: its `reward_components` field, or `metadata["reward_components"]`
    (where envkit reports a rubric's named leaves for environments whose models have no such field)."""
    if not isinstance(observation, dict):
        return None
    reported = observation.get("reward_components")
    if not isinstance(reported, dict) and isinstance(observation.get("metadata"), dict):
        reported = observation["metadata"].get("reward_components")
    return reported if isinstance(reported, dict) else None


def environment_factory(urls: str | Sequence[str] | Mapping[str, str], *, tally: Tally | None = None,
                        client_options: dict[str, Any] | None = None
                        ) -> type[ServedEnvironment] | dict[str, type[ServedEnvironment]]:
    """What to pass as `GRPOTrainer(environment_factory=...)` for one or several served environments.

    One URL gives one class. Several URLs (a list, or a mapping of names to URLs) give a dict of
    classes by environment name, which TRL routes by each dataset row's `environment` column.
    """
    if isinstance(urls, str):
        return bind(urls, tally=tally, client_options=client_options)
    shared = tally if tally is not None else Tally()
    if isinstance(urls, Mapping):
        return {name: bind(url, name=name, tally=shared, client_options=client_options) for name, url in urls.items()}
    classes: dict[str, type[ServedEnvironment]] = {}
    for url in urls:
        cls = bind(url, tally=shared, client_options=client_options)
        if cls.env_name in classes:
            raise BindingError(f"two servers serve {cls.env_name!r} ({classes[cls.env_name].url} and {url}); "
                               "pass a mapping {name: url} to tell them apart")
        classes[cls.env_name] = cls
    return classes
