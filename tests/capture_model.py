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


@functools.lru_cache(maxsize=2)
def tiny_echo(for_vllm: bool = False) -> TinyEcho:
    """The tiny model; `for_vllm`: the one built for vLLM (`GPU_SPEC`: head size 64, which vLLM's CPU attention
    needs, warmed up on tools as vLLM's server renders them too)."""
    import torch

    from envkit.play.binding import bind
    from envkit.play.tasks import env_rows, task_prompt
    from envkit.play.tiny import GPU_SPEC, TinyModelSpec, _tool_schemas, build_tiny_model

    torch.set_num_threads(1)
    target = resolve_target("echo")
    folder = Path(tempfile.mkdtemp(prefix="envkit-capture-model-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    app = create_app(target.env_class, target.action_cls, target.observation_cls, max_concurrent_envs=4)
    with running_server(app) as url:
        cls = bind(url, name="echo")
        rows = env_rows({"echo": task_prompt("echo", cls.metadata)}, 16, 0)
        model, tokenizer, _ = build_tiny_model({"echo": cls}, rows, GPU_SPEC if for_vllm else TinyModelSpec(),
                                               save_to=folder)
        environment = cls()
        tools = _tool_schemas(environment)
        task = rows[0]["prompt"][-1]["content"] + environment.reset(**rows[0])
        environment._close()
    return TinyEcho(model=model, tokenizer=tokenizer, folder=folder, tools=tools, task=task)


class InstantEngine:
    """An engine that answers at once with its `replies` in turn (each then the end-of-turn token), each token's
    log-probability -0.5: the proxy's own cost shows whole. Scripted because the hop and the wire formats, not the
    model, are tested."""

    model_name = "instant"
    max_context: int | None = None
    chat_template_kwargs = TEMPLATE_KWARGS

    def __init__(self, tokenizer: Any, *replies: str) -> None:
        self.tokenizer = tokenizer
        self.replies = replies or ("Done.",)
        self.served = 0

    async def generate(self, requests: Any) -> list[Any]:
        from envkit.capture import Generation

        answers = []
        for _ in requests:
            text = self.replies[self.served % len(self.replies)]
            self.served += 1
            ids = [*self.tokenizer(text, add_special_tokens=False)["input_ids"], self.tokenizer.eos_token_id]
            answers.append(Generation(ids, [-0.5] * len(ids), "stop"))
        return answers
