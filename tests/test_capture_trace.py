"""Rollouts through the capture proxy written to traces.jsonl and read back, line by line, by OpenEnv 0.10.0's own
`TrainingTrace` model in OpenEnv's own venv (`tests/openenv_peer/validate_traces.py`).

The rollouts cover a tool-using chain, a rewritten history (two roots in one trace) and a completion cut off at
its token cap and then continued (the end-of-turn marker it never sampled becomes context). Corrupted copies of a
line (a prompt position trained, a log-probability missing, a field the schema does not have) are refused by the
same model: the check is OpenEnv's, not a formality.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from capture_model import TEMPLATE_KWARGS, TinyEcho, tiny_echo
from conftest import TESTS_DIR
from envkit.capture import CaptureProxy, Sampling, TransformersEngine, write_traces

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def proxy() -> Iterator[tuple[CaptureProxy, TinyEcho]]:
    tiny = tiny_echo()
    with CaptureProxy(TransformersEngine(tiny.model, tiny.tokenizer, chat_template_kwargs=TEMPLATE_KWARGS)) as proxy:
        yield proxy, tiny


def validated(openenv_python: str, path: Path) -> list[dict[str, Any]]:
    done = subprocess.run([openenv_python, str(TESTS_DIR / "openenv_peer" / "validate_traces.py"), str(path)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def chat(client: openai.OpenAI, tiny: TinyEcho, messages: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    answer = client.chat.completions.create(model="tiny", messages=messages, tools=tiny.tools, **options)
    return answer.choices[0].message.model_dump(exclude_none=True)


def test_traces_are_openenv_training_traces(proxy: tuple[CaptureProxy, TinyEcho], openenv_python: str,
                                            tmp_path: Path) -> None:
    server, tiny = proxy
    sessions = [server.open_session(max_calls=4, sampling=Sampling(temperature=0.3, max_tokens=64, seed=seed))
                for seed in range(3)]
    clients = [openai.OpenAI(base_url=server.url, api_key=session.api_key,
                             http_client=httpx.Client(trust_env=False)) for session in sessions]
    task = [{"role": "user", "content": tiny.task}]
    # A chain of three calls; the agent answers every reply with a tool result or a nudge.
    messages = list(task)
    for _ in range(3):
        reply = chat(clients[0], tiny, messages)
        messages += [reply, *({"role": "tool", "tool_call_id": call["id"], "content": "ok"}
                              for call in reply.get("tool_calls", ()))] if reply.get("tool_calls") else \
            [reply, {"role": "user", "content": "Go on."}]
    # A rewritten history: the second call edits the first message.
    reply = chat(clients[1], tiny, task)
    chat(clients[1], tiny, [{"role": "user", "content": "Echo twice."}, reply, {"role": "user", "content": "Go."}])
    # A completion cut off at 3 tokens, then continued.
    cut = chat(clients[2], tiny, task, max_tokens=3)
    chat(clients[2], tiny, [*task, cut, {"role": "user", "content": "Finish your call."}])

    assert [session.roots for session in sessions] == [1, 2, 1]
    first, second = sessions[2].records
    assert first.finish_reason == "length" and first.completion_ids[-1] != tiny.tokenizer.eos_token_id
    assert second.parent_id == first.node_id
    assert second.prompt_ids[: len(first.prompt_ids) + 3] == first.prompt_ids + first.completion_ids
    assert second.prompt_ids[len(first.prompt_ids) + 3] == tiny.tokenizer.eos_token_id   # context, never sampled

    path = write_traces(tmp_path / "traces.jsonl",
                        [session.trace(reward=float(index), task="echo") for index, session in enumerate(sessions)])
    results = validated(openenv_python, path)
    assert [(result["ok"], result["turns"]) for result in results] == [(True, 3), (True, 2), (True, 2)], results
    assert [result["trainable"] for result in results] == [
        [len(call.completion_ids) for call in session.records] for session in sessions]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert {turn["metadata"]["reward"] for turn in lines[1]["turns"]} == {1.0}
    assert [turn["metadata"]["parent_id"] is None for turn in lines[1]["turns"]] == [True, True]


def test_openenv_refuses_corrupted_traces(proxy: tuple[CaptureProxy, TinyEcho], openenv_python: str,
                                          tmp_path: Path) -> None:
    """A good line, then the same line with a prompt token trained, a log-probability dropped, and the reward as
    a top-level field: OpenEnv takes the first only."""
    server, tiny = proxy
    session = server.open_session(max_calls=1, sampling=Sampling(temperature=0.3, max_tokens=16, seed=0))
    openai.OpenAI(base_url=server.url, api_key=session.api_key, http_client=httpx.Client(trust_env=False)) \
        .chat.completions.create(model="tiny", messages=[{"role": "user", "content": tiny.task}])
    trained, dropped, top = (session.trace(reward=1.0) for _ in range(3))
    trained["turns"][0]["loss_mask"][0] = 1
    dropped["turns"][0]["per_token_logps"].pop()
    top["reward"] = 1.0
    path = write_traces(tmp_path / "traces.jsonl", [session.trace(reward=1.0), trained, dropped, top])
    results = validated(openenv_python, path)
    assert [result["ok"] for result in results] == [True, False, False, False], results
