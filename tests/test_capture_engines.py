"""`OpenAIEngine`: the capture proxy in front of an external OpenAI-compatible server that takes and returns token
ids. vLLM is not installed in this venv, so the server is `completions_server.py`: real HTTP on 127.0.0.1, in the
shape vLLM 0.31 answers in, its tokens from the tiny model. What is checked: the proxy's prompt ids travel to the
server as they are, continuation holds across calls, the trace carries the server's ids and log-probabilities,
and a server that leaves out what a trace needs fails the call in one line (502) while the proxy carries on.
"""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import openai
import pytest

from capture_model import TEMPLATE_KWARGS, TinyEcho, tiny_echo
from completions_server import completions_app
from envkit.capture import CaptureProxy, OpenAIEngine, Sampling, TransformersEngine
from envkit.testing import running_server

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
