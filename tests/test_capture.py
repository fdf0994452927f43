"""The capture proxy with the tiny model behind it, on 127.0.0.1, through the real `openai` SDK.

Every call's prompt and completion ids, log-probabilities and loss mask are recorded; a call that extends the
previous exchange reuses the sampled ids exactly; a rewritten history starts a new root; each key reaches its own
session only; the budget, constrained decoding and bad requests are refused in one line, and the proxy carries on.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator

import httpx
import openai
import pytest

from capture_model import TEMPLATE_KWARGS, TinyEcho, tiny_echo
from envkit.capture import CaptureProxy, CaptureSession, Sampling, TransformersEngine
from envkit.capture.chat import RequestError, message_key, parse_completion, read_request, tools_key
from envkit.capture.continuation import Renderer, build_prompt
from envkit.capture.records import Call

pytestmark = pytest.mark.timeout(600)

#: Low enough that the tiny model calls a tool most of the time, high enough to sample (seeded: reproducible).
TOOL_SAMPLING = Sampling(temperature=0.3, max_tokens=64, seed=0)


@pytest.fixture(scope="module")
def tiny() -> TinyEcho:
    return tiny_echo()


@pytest.fixture(scope="module")
def proxy(tiny: TinyEcho) -> Iterator[CaptureProxy]:
    with CaptureProxy(TransformersEngine(tiny.model, tiny.tokenizer, chat_template_kwargs=TEMPLATE_KWARGS)) as proxy:
        yield proxy


def client_for(proxy: CaptureProxy, session: CaptureSession, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url, api_key=session.api_key, http_client=httpx.Client(trust_env=False),
                         **options)


def tool_episode(client: openai.OpenAI, tiny: TinyEcho, turns: int) -> list[dict[str, Any]]:
    """An agent's loop: ask, run each tool call it gets (the tool echoes its message), ask again; `turns` calls.
    Returns the conversation, the last answer included."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": tiny.task}]
    for _ in range(turns):
        answer = client.chat.completions.create(model="tiny", messages=messages, tools=tiny.tools)
        message = answer.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or ():
            arguments = json.loads(call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(arguments.get("message"))})
        if not message.tool_calls:
            messages.append({"role": "user", "content": "Go on."})
    return messages


def recomputed_logprobs(tiny: TinyEcho, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    """The model's log-probability of each completion id after the prompt, at `temperature`, one unpadded pass."""
    import torch

    with torch.no_grad():
        logits = tiny.model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1: -1] / temperature
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def test_a_json_answer_is_recorded_with_exact_ids_logprobs_and_mask(proxy: CaptureProxy, tiny: TinyEcho) -> None:
    session = proxy.open_session(max_calls=4, sampling=Sampling(temperature=0.8, max_tokens=48, seed=3))
    client = client_for(proxy, session)
    assert [model.id for model in client.models.list()] == [proxy.engine.model_name]
    answer = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": tiny.task}],
                                            tools=tiny.tools, temperature=0.0, max_tokens=500)
    turn = session.trace()["turns"][0]
    prompt, completion = turn["prompt_token_ids"], turn["completion_token_ids"]
    renderer = Renderer(tiny.tokenizer, TEMPLATE_KWARGS)
    assert prompt == renderer.tokenize(renderer.render([{"role": "user", "content": tiny.task}], tiny.tools,
                                                       generation=True))
    assert answer.usage.prompt_tokens == len(prompt) and answer.usage.completion_tokens == len(completion)
    assert 0 < len(completion) <= 48                        # the session's cap, not the agent's 500
    assert turn["loss_mask"] == [0] * len(prompt) + [1] * len(completion)
    assert turn["metadata"]["sampling"]["temperature"] == 0.8 and turn["metadata"]["requested_sampling"] == {
        "temperature": 0.0}                                 # the session's policy applies; the request is noted
    expected = recomputed_logprobs(tiny, prompt, completion, 0.8)
    assert turn["per_token_logps"] == pytest.approx(expected, abs=1e-4)
    recorded, got = turn["response"]["choices"][0]["message"], answer.choices[0].message
    assert recorded["content"] == got.content
    assert recorded.get("tool_calls", []) == [call.model_dump() for call in got.tool_calls or ()]


def test_a_streamed_answer_matches_the_record(proxy: CaptureProxy, tiny: TinyEcho) -> None:
    session = proxy.open_session(max_calls=2, sampling=TOOL_SAMPLING)
    chunks = list(client_for(proxy, session).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": tiny.task}], tools=tiny.tools, stream=True,
        stream_options={"include_usage": True}))
    content = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    calls = [call for chunk in chunks if chunk.choices for call in chunk.choices[0].delta.tool_calls or ()]
    finish = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    recorded = session.records[0].response["choices"][0]
    assert content == (recorded["message"]["content"] or "")
    assert [(call.function.name, call.function.arguments) for call in calls] == [
        (call["function"]["name"], call["function"]["arguments"]) for call in recorded["message"].get("tool_calls", [])]
    assert finish == [recorded["finish_reason"]]
    assert chunks[-1].usage.completion_tokens == len(session.records[0].completion_ids)


def test_tool_calls_round_trip_and_continuation_keeps_the_sampled_ids(proxy: CaptureProxy, tiny: TinyEcho) -> None:
    """Three calls of a tool-using agent: each prompt is the previous prompt + the previous completion, id for id,
    + the new messages. Re-tokenising the same conversation gives other ids here (Qwen3's template drops an
    earlier turn's empty thinking block): a proxy that re-tokenised its history would fail the first check."""
    session = proxy.open_session(max_calls=3, sampling=TOOL_SAMPLING)
    messages = tool_episode(client_for(proxy, session), tiny, turns=3)
    calls = session.records
    assert any(message.get("tool_calls") for message in messages)
    tool_names = {tool["function"]["name"] for tool in tiny.tools}
    assert all(call["function"]["name"] in tool_names and isinstance(json.loads(call["function"]["arguments"]), dict)
               for message in messages for call in message.get("tool_calls", ()))
    assert session.calls == 3 and session.roots == 1
    renderer = Renderer(tiny.tokenizer, TEMPLATE_KWARGS)
    for previous, call in zip(calls, calls[1:]):
        assert call.parent_id == previous.node_id and call.root_id == calls[0].node_id
        reused = previous.prompt_ids + previous.completion_ids
        assert call.prompt_ids[: len(reused)] == reused
        assert call.new_prompt_tokens == len(call.prompt_ids) - len(reused)
        retokenised = renderer.tokenize(renderer.render(call.messages, call.tools, generation=True))
        assert retokenised != call.prompt_ids


def test_a_rewritten_history_starts_a_new_root(proxy: CaptureProxy, tiny: TinyEcho) -> None:
    session = proxy.open_session(max_calls=5, sampling=TOOL_SAMPLING)
    client = client_for(proxy, session)
    messages = tool_episode(client, tiny, turns=2)
    assert session.roots == 1
    rewritten = [{"role": "user", "content": tiny.task + " Be brief."}, *messages[1:]]   # the history edited
    client.chat.completions.create(model="tiny", messages=rewritten, tools=tiny.tools)
    assert session.roots == 2
    last = session.records[-1]
    assert last.parent_id is None and last.root_id == last.node_id
    compacted = [messages[0], {"role": "user", "content": "Summary: one echo so far. Go on."}]   # a compaction
    client.chat.completions.create(model="tiny", messages=compacted, tools=tiny.tools)
    assert session.roots == 3
    retried = session.records[1]      # the second call of the chain, asked again: a sibling, not a new root
    client.chat.completions.create(model="tiny", messages=retried.messages, tools=tiny.tools)
    assert session.roots == 3 and session.records[-1].parent_id == retried.parent_id


def test_each_key_reaches_its_own_session_only(proxy: CaptureProxy, tiny: TinyEcho) -> None:
    first, second = (proxy.open_session(max_calls=2, sampling=TOOL_SAMPLING) for _ in range(2))
    client_for(proxy, first).chat.completions.create(model="tiny", messages=[{"role": "user", "content": tiny.task}])
    assert (first.calls, second.calls) == (1, 0)
    with httpx.Client(base_url=proxy.url, trust_env=False) as http:
        own = http.get("/capture/trace", headers={"Authorization": f"Bearer {second.api_key}"}).json()
        assert own["turns"] == []                               # B's key reads B's record: none of A's calls
        mine = http.get("/capture/trace", headers={"Authorization": f"Bearer {first.api_key}"}).json()
        assert [turn["node_id"] for turn in mine["turns"]] == [first.records[0].node_id]
        for headers in ({}, {"Authorization": "Bearer not-a-key"}, {"Authorization": first.api_key}):
            for method, path in (("GET", "/models"), ("GET", "/capture/trace"), ("POST", "/chat/completions")):
                refused = http.request(method, path, headers=headers, json={"messages": [{"role": "user",
                                                                                           "content": "hi"}]})
                assert refused.status_code == 401, (method, path, headers)
                assert refused.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client_for(proxy, first, max_retries=0).with_options(api_key="wrong").models.list()
    first.close()
    with pytest.raises(openai.AuthenticationError):                  # a closed session's key is refused
        client_for(proxy, first, max_retries=0).models.list()
    assert first.calls == 1 and len(first.trace()["turns"]) == 1     # its record is kept
    assert second.calls == 0


def test_over_budget_calls_are_refused_once_and_the_record_kept(proxy: CaptureProxy, tiny: TinyEcho) -> None:
    session = proxy.open_session(max_calls=2, sampling=TOOL_SAMPLING)
    client = client_for(proxy, session)   # the SDK's default retries: the refusal tells it not to retry
    tool_episode(client, tiny, turns=2)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": tiny.task}])
    error = refused.value.body
    assert error["code"] == "call_budget_exhausted" and "2 model calls" in error["message"]
    assert "\n" not in error["message"]
    assert session.refused == 1                      # asked once: not retried
    assert session.calls == 2 and len(session.trace()["turns"]) == 2


@pytest.mark.parametrize("fields", [
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
    {"guided_json": {"type": "object"}}, {"guided_regex": "[a-z]+"}, {"guided_choice": ["yes", "no"]},
    {"structured_outputs": {"choice": ["yes", "no"]}}, {"logit_bias": {"12": 5}},
    {"tool_choice": "required"}, {"tool_choice": {"type": "function", "function": {"name": "echo"}}},
])
def test_constrained_decoding_is_refused_in_one_line(proxy: CaptureProxy, tiny: TinyEcho,
                                                     fields: dict[str, Any]) -> None:
    session = proxy.open_session(max_calls=1)
    body = {"model": "tiny", "messages": [{"role": "user", "content": tiny.task}], "tools": tiny.tools, **fields}
    with httpx.Client(base_url=proxy.url, trust_env=False) as http:
        refused = http.post("/chat/completions", json=body, headers={"Authorization": f"Bearer {session.api_key}"})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "constrained_decoding" and next(iter(fields)) in error["message"]
    assert "\n" not in error["message"]
    assert session.calls == 0                       # nothing was spent: the one call of the budget is still there
    client_for(proxy, session).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
    assert session.calls == 1


@pytest.mark.parametrize(("body", "words"), [
    (b'{"messages": [', "not valid JSON"), (b"[1, 2]", "JSON object"), (b'{"messages": []}', "non-empty"),
    (b'{"messages": [{"role": "robot", "content": "hi"}]}', "messages[0]"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "n": 2}', "n=1"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}', "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}', "tools"),
])
def test_bad_requests_get_one_line_and_the_proxy_carries_on(proxy: CaptureProxy, body: bytes, words: str) -> None:
    session = proxy.open_session(max_calls=1)
    headers = {"Authorization": f"Bearer {session.api_key}", "content-type": "application/json"}
    with httpx.Client(base_url=proxy.url, trust_env=False) as http:
        refused = http.post("/chat/completions", content=body, headers=headers)
        assert refused.status_code == 400 and words in refused.json()["error"]["message"]
        assert "\n" not in refused.json()["error"]["message"] and "Traceback" not in refused.text
        fine = http.post("/chat/completions", headers=headers,
                         json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert fine.status_code == 200 and session.calls == 1


def test_a_conversation_longer_than_the_context_is_refused_in_one_line(tiny: TinyEcho) -> None:
    engine = TransformersEngine(tiny.model, tiny.tokenizer, chat_template_kwargs=TEMPLATE_KWARGS)
    renderer = Renderer(tiny.tokenizer, TEMPLATE_KWARGS)
    short = len(renderer.tokenize(renderer.render([{"role": "user", "content": "hi"}], None, generation=True)))
    engine.max_context = short + 2      # room for 2 tokens after a short question, none after the task with tools
    with CaptureProxy(engine) as proxy:
        session = proxy.open_session(max_calls=1)
        client = client_for(proxy, session, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": tiny.task}],
                                           tools=tiny.tools)
        assert refused.value.body["code"] == "context_length_exceeded"
        assert f"context {short + 2}:" in refused.value.body["message"]
        assert session.calls == 0
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}])
        assert session.calls == 1 and len(session.records[0].completion_ids) <= 2      # the room left, at most


def test_unix_socket_listeners(tiny: TinyEcho, tmp_path: Any) -> None:
    first, second = tmp_path / "proxy.sock", tmp_path / "more" / "proxy.sock"
    second.parent.mkdir()
    engine = TransformersEngine(tiny.model, tiny.tokenizer, chat_template_kwargs=TEMPLATE_KWARGS)
    with CaptureProxy(engine, unix_socket=str(first), port=None) as proxy:
        assert proxy.url is None
        proxy.add_listener(second)
        session = proxy.open_session(max_calls=2, sampling=TOOL_SAMPLING)
        for path in (first, second):
            transport = httpx.HTTPTransport(uds=str(path))
            http = httpx.Client(transport=transport, base_url="http://proxy/v1", trust_env=False)
            client = openai.OpenAI(base_url="http://proxy/v1", api_key=session.api_key, http_client=http)
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": tiny.task}])
            http.close()
        assert session.calls == 2
        proxy.remove_listener(second)
        assert not second.exists() and first.exists()
        with pytest.raises(ValueError, match="longer than the 107 bytes"):
            proxy.add_listener(tmp_path / ("x" * 120) / "proxy.sock")
        (tmp_path / "file").write_text("")
        with pytest.raises(FileExistsError, match="not a socket"):
            proxy.add_listener(tmp_path / "file")
    assert not first.exists()


def test_concurrent_sessions_share_engine_batches(proxy: CaptureProxy, tiny: TinyEcho) -> None:
    """Eight agents at once: their calls are generated in shared batches, and each session records its own."""
    sessions = [proxy.open_session(max_calls=2, sampling=TOOL_SAMPLING) for _ in range(8)]
    before = len(proxy.routes.batcher.batch_sizes)
    threads = [threading.Thread(target=tool_episode, args=(client_for(proxy, session), tiny, 2))
               for session in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(session.calls == 2 and session.roots == 1 for session in sessions)
    assert max(proxy.routes.batcher.batch_sizes[before:]) > 1
    keys = {call.node_id for session in sessions for call in session.records}
    assert len(keys) == 16


def test_a_user_turn_after_earlier_reasoning_starts_a_root_and_says_why(tiny: TinyEcho) -> None:
    """Qwen3's template drops the reasoning of turns before the last user message: once a user message follows,
    an earlier turn that reasoned renders otherwise than its ids say. The proxy does not guess: a new root, with
    its reason. Tool results keep the chain (they move no user turn)."""
    renderer = Renderer(tiny.tokenizer, TEMPLATE_KWARGS)
    eos = tiny.tokenizer.eos_token_id
    calls: list[Call] = []

    def answer(messages: list[dict[str, Any]], text: str) -> dict[str, Any]:
        prompt = build_prompt(renderer, read_request({"messages": messages}), calls)
        completion = renderer.tokenize(text) + [eos]
        reply = parse_completion(renderer.decode(completion))
        node = f"n{len(calls)}"
        calls.append(Call(node_id=node, parent_id=prompt.parent.node_id if prompt.parent else None,
                          root_id=prompt.parent.root_id if prompt.parent else node, messages=messages, tools=None,
                          message_keys=[message_key(message) for message in messages], tools_key=tools_key(None),
                          reply_key=message_key(reply), prompt_ids=prompt.ids, completion_ids=completion,
                          logprobs=[-1.0] * len(completion), finish_reason="stop", response={}, sampling={},
                          root_reason=prompt.root_reason, prompt_text=prompt.text))
        return reply

    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
    messages += [answer(messages, "Let me think.</think>\n\nhello"), {"role": "tool", "content": "ok"}]
    messages += [answer(messages, "done"), {"role": "user", "content": "And?"}]
    answer(messages, "end")
    assert [call.parent_id for call in calls] == [None, "n0", None]
    assert calls[2].root_reason is not None and "renders the history" in calls[2].root_reason


def test_messages_match_as_turns_not_as_bytes() -> None:
    """What a client may change in a message it sends back and still continue its chain, and what it may not."""
    sent = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": '{"message": "a", "n": 1}'}}]}
    echoed = {"role": "assistant", "content": "", "refusal": None, "tool_calls": [
        {"id": "call_other", "type": "function", "function": {"name": "echo", "arguments": '{"n":1,"message":"a"}'}}]}
    assert message_key(sent) == message_key(echoed)
    edited = {**echoed, "tool_calls": [{"function": {"name": "echo", "arguments": '{"message": "b", "n": 1}'}}]}
    assert message_key(sent) != message_key(edited)
    assert message_key({"role": "user", "content": [{"type": "text", "text": "hi"}]}) == message_key(
        {"role": "user", "content": "hi "})


def test_reading_requests_and_completions() -> None:
    """The request checks and the tool-call parser on their own."""
    chat = read_request({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9,
                         "max_completion_tokens": 7, "temperature": 0.1, "response_format": {"type": "text"},
                         "tool_choice": "auto"})
    assert chat.max_tokens == 7 and chat.requested_sampling == {"temperature": 0.1}
    with pytest.raises(RequestError, match="stream"):
        read_request({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"})
    text = 'Let me see.\n<tool_call>\n{"name": "echo", "arguments": {"message": "a"}}\n</tool_call>' \
           '<tool_call>{"name": "echo", "arguments": {}}</tool_call><tool_call>{not json}</tool_call>'
    message = parse_completion(text)
    assert message["content"] == "Let me see.\n<tool_call>{not json}</tool_call>"
    assert [(call["function"]["name"], json.loads(call["function"]["arguments"])) for call in message["tool_calls"]] \
        == [("echo", {"message": "a"}), ("echo", {})]
    assert parse_completion('<tool_call>{"name": "echo", "arguments": {}}</tool_call>')["content"] is None
    assert parse_completion("thinking</think>\n\nDone.") == {"role": "assistant", "reasoning_content": "thinking",
                                                              "content": "Done."}
    assert "tool_calls" not in parse_completion(text, parse_tools=False)
