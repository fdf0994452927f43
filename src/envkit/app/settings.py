"""A server's settings, typed and checked in one place, and the environment variables they may come from.

    settings = ServerSettings(max_concurrent_envs=64, session_timeout_s=60)
    app = create_app(MyEnv, MyAction, MyObservation, settings=settings)   # or the same fields as keywords

`create_app`, `envkit serve`, its `--workers` and its Ray replicas all take one `ServerSettings`; a setting that
cannot work raises `ConfigurationError` in one line naming it. `ServerSettings.from_environment` fills in what a
caller left out from the environment variables below; nothing else in the server reads the environment, but for
`ENVKIT_FAST_PATHS` (`fast_paths_wanted`), which the transport asks once per process.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..protocol import API_KEY_ENV

__all__ = ["ServerSettings", "CONCURRENT_SESSIONS", "DEFAULT_MAX_MESSAGE_BYTES", "FAST_PATHS_ENV", "VARIABLES", "FAST_PATHS",
           "fast_paths_wanted"]

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
#: Sessions at once by default for an environment that supports concurrent sessions (`from_environment`).
CONCURRENT_SESSIONS = 64
#: Turns the transport's fast paths off (`0`), or names those to use (`envkit.transport.fast`).
FAST_PATHS_ENV = "ENVKIT_FAST_PATHS"
#: The transport's fast paths, by the names `ENVKIT_FAST_PATHS` takes.
FAST_PATHS = ("inline", "frames", "at_once")
#: The environment variables settings are read from, and the field each one sets.
VARIABLES = {"MAX_CONCURRENT_ENVS": "max_concurrent_envs", "SESSION_TIMEOUT_S": "session_timeout_s",
               API_KEY_ENV: "api_keys", "FORWARDED_ALLOW_IPS": "forwarded_allow_ips"}


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    """What a server allows its sessions and its clients.

    Attributes:
        max_concurrent_envs: sessions open at once; above 1 needs the environment's `SUPPORTS_CONCURRENT_SESSIONS`.
        session_timeout_s: close sessions idle this long (None: never).
        max_message_bytes: larger client frames get a `MESSAGE_TOO_BIG` error.
        max_workers: threads for synchronous environment code (None: min(32, sessions)).
        capacity_wait_s: a connection that finds every slot taken waits this long for one that a closing session
            gives back before it is refused (0: refuse at once).
        ping_interval_s: the server pings a client after this many seconds (None: never); a client that does not
            answer within `ping_timeout_s` is gone and its session ends, freeing the slot.
        ping_timeout_s: seconds to wait for the pong.
        api_keys: keys required on every route but `/health` (`X-API-Key` or `Authorization: Bearer`); empty: none.
        allowed_origins: origins whose browser pages may connect besides the server's own (`*`: any).
        allowed_hosts: `Host` names served (DNS-rebinding protection); None: loopback names when the server binds to
            a loopback address, any otherwise.
        forwarded_allow_ips: proxies (IPs, networks, `private`, `*`) whose `X-Forwarded-For` names the client.
        max_sessions_per_client: sessions one client address may hold at once (None: no limit).
    """

    max_concurrent_envs: int = 1
    session_timeout_s: float | None = 300.0
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    max_workers: int | None = None
    capacity_wait_s: float = 1.0
    ping_interval_s: float | None = 20.0
    ping_timeout_s: float = 20.0
    api_keys: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] | None = None
    forwarded_allow_ips: tuple[str, ...] = ()
    max_sessions_per_client: int | None = None

    def __post_init__(self) -> None:
        _at_least("max_concurrent_envs", self.max_concurrent_envs, 1, int)
        _positive("session_timeout_s", self.session_timeout_s, optional=True)
        _at_least("max_message_bytes", self.max_message_bytes, 1, int)
        _at_least("max_workers", self.max_workers, 1, int, optional=True)
        _at_least("capacity_wait_s", self.capacity_wait_s, 0, float)
        _positive("ping_interval_s", self.ping_interval_s, optional=True)
        _positive("ping_timeout_s", self.ping_timeout_s)
        _at_least("max_sessions_per_client", self.max_sessions_per_client, 1, int, optional=True)
        for name in ("api_keys", "allowed_origins", "allowed_hosts", "forwarded_allow_ips"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _strings(name, value))

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))

    @classmethod
    def of(cls, settings: ServerSettings | None = None, **changes: Any) -> ServerSettings:
        """`settings` (default: the defaults) with `changes`; an unknown name is a `ConfigurationError` naming it."""
        unknown = sorted(set(changes) - set(cls.fields()))
        if unknown:
            raise ConfigurationError(f"unknown server setting {', '.join(unknown)}; the settings are "
                                     f"{', '.join(cls.fields())}")
        return dataclasses.replace(settings or cls(), **changes)

    @classmethod
    def default(cls) -> ServerSettings:
        """The defaults, with the key in `$ENVKIT_API_KEY` required when it is set (`create_app`'s default)."""
        key = os.environ.get(API_KEY_ENV, "").strip()
        return cls(api_keys=(key,) if key else ())

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, *, concurrent: bool = False,
                         api_key_variable: str | None = None, **given: Any) -> ServerSettings:
        """Settings with `given` (a caller's, e.g. command-line flags) first, then the environment variables
        `MAX_CONCURRENT_ENVS`, `SESSION_TIMEOUT_S`, `ENVKIT_API_KEY` and `FORWARDED_ALLOW_IPS` (on a Hugging Face
        Space, `SPACE_ID` set, `private` when unset), then the defaults. `concurrent`: the environment supports
        concurrent sessions, so `CONCURRENT_SESSIONS` of them by default rather than 1; `api_key_variable`: the variable that must hold
        the API key, in place of `ENVKIT_API_KEY`."""
        environ = os.environ if environ is None else environ
        found: dict[str, Any] = {"max_concurrent_envs": CONCURRENT_SESSIONS if concurrent else 1}
        for variable, name in VARIABLES.items():
            raw = environ.get(api_key_variable if api_key_variable and name == "api_keys" else variable, "").strip()
            if raw:
                found[name] = _parse_variable(variable, name, raw)
        if api_key_variable and "api_keys" not in found:
            raise ConfigurationError(f"the environment variable {api_key_variable} is not set or empty; export the "
                                     "API key there first")
        if "forwarded_allow_ips" not in found and environ.get("SPACE_ID"):
            found["forwarded_allow_ips"] = ("private",)
        return cls.of(**{**found, **given})

    def describe(self) -> dict[str, Any]:
        """The settings as JSON-ready values (the API keys themselves left out)."""
        values = dataclasses.asdict(self)
        values["api_keys"] = len(self.api_keys)
        return values


def fast_paths_wanted(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The fast paths `ENVKIT_FAST_PATHS` asks for: all of them when it is unset or 1, none for 0 (or false, no,
    off), else those it names, separated by commas; an unknown name is a `ConfigurationError` naming it."""
    value = (os.environ if environ is None else environ).get(FAST_PATHS_ENV, "1").strip().lower()
    if value in ("", "1", "true", "yes", "on"):
        return frozenset(FAST_PATHS)
    if value in ("0", "false", "no", "off"):
        return frozenset()
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    unknown = sorted(names - set(FAST_PATHS))
    if unknown:
        raise ConfigurationError(f"{FAST_PATHS_ENV}={value!r} names no fast path {', '.join(unknown)}; use 0, 1 or "
                                 f"names among {', '.join(FAST_PATHS)}")
    return names


def _parse_variable(variable: str, name: str, raw: str) -> Any:
    if name in ("api_keys",):
        return (raw,)
    if name == "forwarded_allow_ips":
        return tuple(spec.strip() for spec in raw.split(",") if spec.strip())
    try:
        return int(raw) if name == "max_concurrent_envs" else float(raw)
    except ValueError:
        raise ConfigurationError(f"environment variable {variable}={raw!r} is not a number") from None


def _number(name: str, value: Any, kind: type) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise ConfigurationError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}")


def _at_least(name: str, value: Any, low: float, kind: type, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    _number(name, value, kind)
    if value < low:
        raise ConfigurationError(f"{name} must be at least {low}{' or None' if optional else ''}, got {value}")


def _positive(name: str, value: Any, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    _number(name, value, float)
    if value <= 0:
        raise ConfigurationError(f"{name} must be positive{' or None' if optional else ''}, got {value}")


def _strings(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{name} must be a list of strings, got {value!r}")
    items = tuple(value)
    if not all(isinstance(item, str) for item in items):
        raise ConfigurationError(f"{name} must be a list of strings, got {value!r}")
    return tuple(item.strip() for item in items if item.strip())
