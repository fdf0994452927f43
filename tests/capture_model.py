"""The tiny model the capture tests talk to: built once per test run on the echo environment, as `envkit train`
builds it (offline, in seconds), saved to a temporary folder (`OpenAIEngine` loads its tokenizer from there),
removed at exit."""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envkit import create_app
from envkit.app.targets import resolve_target
from envkit.testing import running_server

#: The tiny model answers without a thinking block (`envkit.play.tiny.CHAT_TEMPLATE_KWARGS`).
TEMPLATE_KWARGS = {"enable_thinking": False}


@dataclass(frozen=True)
class TinyEcho:
    model: Any
    tokenizer: Any
    folder: Path
    #: The echo tools, as the warm-up showed them to the model.
    tools: list[dict[str, Any]]
    #: The first user message of a warm-up episode: the model answers it with a tool call most of the time.
    task: str


@functools.lru_cache(maxsize=1)
def tiny_echo() -> TinyEcho:
    import torch

    from envkit.play.binding import bind
    from envkit.play.tasks import env_rows, task_prompt
    from envkit.play.tiny import TinyModelSpec, _tool_schemas, build_tiny_model

    torch.set_num_threads(1)
    target = resolve_target("echo")
    folder = Path(tempfile.mkdtemp(prefix="envkit-capture-model-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    app = create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=4)
    with running_server(app) as url:
        cls = bind(url, name="echo")
        rows = env_rows({"echo": task_prompt("echo", cls.metadata)}, 16, 0)
        model, tokenizer, _ = build_tiny_model({"echo": cls}, rows, TinyModelSpec(), save_to=folder)
        environment = cls()
        tools = _tool_schemas(environment)
        task = rows[0]["prompt"][-1]["content"] + environment.reset(**rows[0])
        environment._close()
    return TinyEcho(model=model, tokenizer=tokenizer, folder=folder, tools=tools, task=task)
