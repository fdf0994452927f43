"""Every wire format the proxy speaks, through its vendor's own SDK, with tool calls and streaming: the same
exact ids, loss mask and continuation, and traces that OpenEnv 0.10.0's `TrainingTrace` reads.

The engine is scripted (`InstantEngine`): a tool call, then text holding the end-of-turn marker's text, then
plain text; what is tested is each dialect's reading and answering, and the chain it keeps.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterator

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types

from capture_model import InstantEngine, tiny_echo
from sandbox_helpers import require
from envkit.agents import reference_command, run_agent
from envkit.capture import CaptureProxy, CaptureSession, write_traces
from envkit.sandbox import SandboxLimits, open_sandbox
from test_capture_trace import validated

pytestmark = pytest.mark.timeout(600)

TOOL_CALL = '<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>'
REPLIES = (TOOL_CALL, "Found a.txt <|im_end|> there.", "All done.")
SHELL_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


@pytest.fixture()
def proxy() -> Iterator[CaptureProxy]:
    with CaptureProxy(InstantEngine(tiny_echo().tokenizer, *REPLIES)) as proxy:
        yield proxy


def root_of(proxy: CaptureProxy) -> str:
    assert proxy.url is not None
    return proxy.url.removesuffix("/v1")


def assert_one_chain(session: CaptureSession, calls: int) -> None:
    """Each call continues the one before: its prompt starts with the previous prompt and completion ids."""
    records = session.records
    assert len(records) == calls and session.roots == 1
    for before, after in zip(records, records[1:]):
        assert after.parent_id == before.node_id, after.root_reason
        assert after.prompt_ids[: len(before.prompt_ids) + len(before.completion_ids)] == [
            *before.prompt_ids, *before.completion_ids]


def test_anthropic_messages(proxy: CaptureProxy, openenv_python: str, tmp_path: Path) -> None:
    session = proxy.open_session(max_calls=3)
    client = anthropic.Anthropic(base_url=root_of(proxy), api_key=session.api_key, max_retries=0)
    tools = [{"name": "shell", "description": "Run a command.", "input_schema": SHELL_SCHEMA}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "List the files."}]
    first = client.messages.create(model="tiny", max_tokens=64, system="Be brief.", messages=messages, tools=tools)
    assert first.stop_reason == "tool_use"
    use = next(block for block in first.content if block.type == "tool_use")
    assert use.name == "shell" and use.input == {"command": "ls"}
    messages += [{"role": "assistant", "content": [block.model_dump() for block in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "a.txt"}]}]
    with client.messages.stream(model="tiny", max_tokens=64, system="Be brief.", messages=messages,
                                tools=tools) as stream:
        streamed = "".join(stream.text_stream)
        second = stream.get_final_message()
    assert streamed == "Found a.txt <|im_end|> there." == second.content[0].text
    assert second.stop_reason == "end_turn"
    messages += [{"role": "assistant", "content": [block.model_dump() for block in second.content]},
                 {"role": "user", "content": "Thanks."}]
    third = client.messages.create(model="tiny", max_tokens=64, system="Be brief.", messages=messages, tools=tools)
    assert third.content[0].text == "All done." and third.usage.output_tokens == len(session.records[2].completion_ids)
    assert_one_chain(session, 3)
    with pytest.raises(anthropic.RateLimitError):     # the budget is spent: 429, not retried
        client.messages.create(model="tiny", max_tokens=8, messages=[{"role": "user", "content": "more"}])
    with pytest.raises(anthropic.BadRequestError, match="tool_result"):
        client.messages.create(model="tiny", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": 5}]}])
    path = write_traces(tmp_path / "traces.jsonl", [session.trace(reward=1.0)])
    [result] = validated(openenv_python, path)
    assert result["ok"] and result["trainable"] == [len(call.completion_ids) for call in session.records]


def test_openai_responses(proxy: CaptureProxy, openenv_python: str, tmp_path: Path) -> None:
    session = proxy.open_session(max_calls=3)
    client = openai.OpenAI(base_url=proxy.url, api_key=session.api_key, max_retries=0,
                           http_client=httpx.Client(trust_env=False))
    tools: list[Any] = [{"type": "function", "name": "shell", "description": "Run a command.",
                         "parameters": SHELL_SCHEMA}]
    items: list[Any] = [{"role": "user", "content": "List the files."}]
    first = client.responses.create(model="tiny", instructions="Be brief.", input=items, tools=tools)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "shell" and call.arguments == '{"command": "ls"}' and first.status == "completed"
    items += [item.model_dump(exclude_none=True) for item in first.output]
    items.append({"type": "function_call_output", "call_id": call.call_id, "output": "a.txt"})
    deltas, second = [], None
    for event in client.responses.create(model="tiny", instructions="Be brief.", input=items, tools=tools,
                                         stream=True):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            second = event.response
    assert second is not None and "".join(deltas) == "Found a.txt <|im_end|> there." == second.output_text
    items += [item.model_dump(exclude_none=True) for item in second.output]
    items.append({"role": "user", "content": "Thanks."})
    third = client.responses.create(model="tiny", instructions="Be brief.", input=items, tools=tools)
    assert third.output_text == "All done." and third.usage is not None
    assert third.usage.output_tokens == len(session.records[2].completion_ids)
    assert_one_chain(session, 3)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="tiny", input="more", previous_response_id=third.id)
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="tiny", input="more")
    path = write_traces(tmp_path / "traces.jsonl", [session.trace(reward=1.0)])
    [result] = validated(openenv_python, path)
    assert result["ok"] and result["trainable"] == [len(call.completion_ids) for call in session.records]


def test_google_generate_content(proxy: CaptureProxy, openenv_python: str, tmp_path: Path) -> None:
    session = proxy.open_session(max_calls=3)
    client = genai.Client(api_key=session.api_key, http_options=types.HttpOptions(
        base_url=root_of(proxy), api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)))
    shell = types.FunctionDeclaration(name="shell", description="Run a command.", parameters_json_schema=SHELL_SCHEMA)
    config = types.GenerateContentConfig(
        system_instruction="Be brief.", tools=[types.Tool(function_declarations=[shell])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    contents: list[Any] = [types.Content(role="user", parts=[types.Part(text="List the files.")])]
    first = client.models.generate_content(model="tiny", contents=contents, config=config)
    assert first.function_calls and first.function_calls[0].name == "shell"
    assert first.function_calls[0].args == {"command": "ls"}
    assert first.candidates and first.candidates[0].content
    contents += [first.candidates[0].content, types.Content(role="user", parts=[
        types.Part.from_function_response(name="shell", response={"output": "a.txt"})])]
    chunks = list(client.models.generate_content_stream(model="tiny", contents=contents, config=config))
    assert "".join(chunk.text or "" for chunk in chunks) == "Found a.txt <|im_end|> there."
    assert chunks[-1].candidates and chunks[-1].candidates[0].content
    contents += [chunks[-1].candidates[0].content, types.Content(role="user", parts=[types.Part(text="Thanks.")])]
    third = client.models.generate_content(model="tiny", contents=contents, config=config)
    assert third.text == "All done." and third.usage_metadata is not None
    assert third.usage_metadata.candidates_token_count == len(session.records[2].completion_ids)
    assert_one_chain(session, 3)
    with pytest.raises(genai.errors.ClientError) as refused:
        client.models.generate_content(model="tiny", contents="more", config=config)
    assert refused.value.code == 429
    path = write_traces(tmp_path / "traces.jsonl", [session.trace(reward=1.0)])
    [result] = validated(openenv_python, path)
    assert result["ok"] and result["trainable"] == [len(call.completion_ids) for call in session.records]


def test_the_reference_agent_speaks_anthropic_in_a_sandbox() -> None:
    """The bundled agent with `--api anthropic`, in a bubblewrap sandbox, through the relay to the proxy's unix
    socket in the channel folder: it runs the shell call it gets, sends the result back, and its chain holds."""
    require("local")
    folder = tempfile.TemporaryDirectory()   # in /tmp: the sandbox's own uid must pass through to the socket
    channel = Path(folder.name)
    engine = InstantEngine(tiny_echo().tokenizer, '<tool_call>\n{"name": "shell", "arguments": {"command": '
                                                  '"echo hi > note.txt && cat note.txt"}}\n</tool_call>', "Done.")
    with CaptureProxy(engine, port=None, unix_socket=channel / "proxy.sock") as proxy, open_sandbox(
            "local", limits=SandboxLimits(wall_s=60, cpu_s=30), channel_dir=str(channel)) as sandbox:
        session = proxy.open_session(max_calls=4)
        result = run_agent(sandbox, reference_command("Leave a note.") + " --api anthropic", session=session,
                           timeout_s=60)
        assert result.exit_code == 0, result.stderr
        assert "done after 2 turns: Done." in result.stdout
        assert sandbox.run(["cat", "note.txt"]).stdout.strip() == "hi"
    folder.cleanup()
    assert_one_chain(session, 2)
    assert session.records[1].messages[-1] == {"role": "tool", "tool_call_id": session.records[1].messages[-2][
        "tool_calls"][0]["id"], "content": "hi\n[exit code 0]"}
