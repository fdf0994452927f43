"""Serving the environments of a run inside the trainer's process, when no `--env-url` is given.

Each environment gets a real server (uvicorn on 127.0.0.1, a free port, in a thread) and the
trainer talks to it over WebSocket sessions exactly as it would to a remote one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from ..app.targets import app_from_environment, resolve_target
from ..errors import ConfigurationError
from ..transport.uvicorn_server import running_server

__all__ = ["serve_envs"]


@contextmanager
def serve_envs(targets: Sequence[str], sessions: int) -> Iterator[dict[str, str]]:
    """Serve each target (bundled name, env folder or module:Class); yields {env name: url}.

    `sessions` is how many episodes run at once (one generation batch); each server admits that many.
    """
    resolved = [resolve_target(target) for target in targets]
    names = [target.name for target in resolved]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigurationError(f"--env {', '.join(repeated)} given twice; name each environment once")
    for target in resolved:
        if sessions > 1 and not target.env_class.SUPPORTS_CONCURRENT_SESSIONS:
            raise ConfigurationError(
                f"{target.name} serves one session at a time (SUPPORTS_CONCURRENT_SESSIONS is False), but each "
                f"generation batch plays {sessions} episodes at once, one session each; if its instances share no "
                "state, set SUPPORTS_CONCURRENT_SESSIONS = True on the class")
    with ExitStack() as stack:
        urls = {}
        for target in resolved:
            app = app_from_environment(target.env_class, env_name=target.name, max_concurrent_envs=max(sessions, 1))
            urls[target.name] = stack.enter_context(running_server(app))
        yield urls
