"""Loop-owning agents in sandboxes: `run_agent`'s relay and the bundled `reference` agent, on each backend here.

The model server is `scripted_model.ScriptedModel`, a real HTTP server on a unix socket in the sandbox's channel
folder answering scripted replies: envkit.capture's proxy takes its place in training (same socket, same key per
session); no model runs in these tests.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sandbox_helpers import AGENT_BACKENDS, back_to, leftovers, require
from scripted_model import ScriptedModel, text_reply, tool_reply

from envkit.agents import reference_command, run_agent
from envkit.app.targets import resolve_target
from envkit.sandbox import RunResult, Sandbox, SandboxError, SandboxLimits, close_pools, open_sandbox

LIMITS = SandboxLimits(wall_s=60, cpu_s=30)
KEY = "sk-session-1"


@dataclass
class Session:
    """What run_agent reads of a capture session: its key."""

    api_key: str


@pytest.fixture(params=AGENT_BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    require(request.param)
    yield request.param
    close_pools()


@pytest.fixture
def channel() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        yield folder


def scripted(channel: str, *replies: dict) -> ScriptedModel:
    return ScriptedModel(f"{channel}/proxy.sock", KEY, list(replies))


def box(backend: str, channel: str) -> Sandbox:
    return open_sandbox(backend, limits=LIMITS, channel_dir=channel)


def test_the_reference_agent_runs_tool_calls_until_the_model_stops(backend: str, channel: str) -> None:
    replies = [tool_reply("printf 'def add(a, b):\\n    return a + b\\n' > solution.py", "ls"),
               tool_reply("python3 -c 'import solution; print(solution.add(2, 3))'"),
               text_reply("Done: solution.py adds."), text_reply("never asked for")]
    with scripted(channel, *replies) as model, box(backend, channel) as sandbox:
        result = run_agent(sandbox, reference_command("Write add(a, b) in solution.py.", max_turns=5),
                           session=Session(KEY), timeout_s=60)
        assert result.ok, result
        assert sandbox.read_file("solution.py") == b"def add(a, b):\n    return a + b\n"
    assert result.stdout.endswith("done after 3 turns: Done: solution.py adds.\n"), result.stdout
    assert len(model.requests) == 3 and model.refused == []
    first, last = model.requests[0], model.requests[-1]
    assert first["messages"][1] == {"role": "user", "content": "Write add(a, b) in solution.py."}
    assert first["tools"][0]["function"]["name"] == "shell"
    tool_messages = [message for message in last["messages"] if message["role"] == "tool"]
    assert [message["tool_call_id"] for message in tool_messages] == \
        [call["id"] for reply in replies[:2] for call in reply["tool_calls"]]
    assert tool_messages[-1]["content"] == "5\n[exit code 0]"
    assert last["messages"][:len(first["messages"])] == first["messages"]     # the history only grows


def test_the_reference_agent_reads_tool_calls_written_in_text(backend: str, channel: str) -> None:
    """Qwen/Hermes templates sample `<tool_call>{json}</tool_call>` as text; the agent runs those too and keeps the
    model's text as it was sampled."""
    written = 'Let me look.\n<tool_call>\n{"name": "shell", "arguments": {"command": "echo hi > note.txt; cat note.txt"}}\n</tool_call>'
    with scripted(channel, text_reply(written), text_reply("All done.")) as model, box(backend, channel) as sandbox:
        result = run_agent(sandbox, reference_command("Leave a note."), api_key=KEY, timeout_s=60)
        assert sandbox.read_file("note.txt") == b"hi\n"
    assert result.ok and "done after 2 turns" in result.stdout, result
    messages = model.requests[1]["messages"]
    assert messages[2] == {"role": "assistant", "content": written}
    assert messages[3] == {"role": "user", "content": "hi\n[exit code 0]"}


def test_the_reference_agent_stops_at_its_turn_limit_and_at_a_spent_budget(backend: str, channel: str) -> None:
    with scripted(channel, *[tool_reply("true")] * 3) as model, box(backend, channel) as sandbox:
        limited = run_agent(sandbox, reference_command("Loop.", max_turns=2), api_key=KEY, timeout_s=60)
        spent = run_agent(sandbox, reference_command("Loop.", max_turns=9), api_key=KEY, timeout_s=60)
    assert limited.ok and limited.stdout.endswith("stopped after 2 turns (the turn limit)\n"), limited
    assert spent.ok and "stopped at turn 2: the model server refused the call (HTTP 429" in spent.stdout, spent
    assert len(model.requests) == 4


def test_malformed_calls_are_answered_and_the_loop_goes_on(backend: str, channel: str) -> None:
    """A call of another tool, arguments that are not JSON or have no command: the model reads why, and goes on."""
    bad_json = {"role": "assistant", "tool_calls": [{"id": "call_bad", "type": "function",
                                                     "function": {"name": "shell", "arguments": "{not json"}}]}
    replies = [tool_reply("ls", tool="python"), bad_json, text_reply("<tool_call>{\"name\": \"shell\"}</tool_call>"),
               text_reply("Stopping.")]
    with scripted(channel, *replies) as model, box(backend, channel) as sandbox:
        result = run_agent(sandbox, reference_command("Try things."), api_key=KEY, timeout_s=60)
    assert result.ok and "done after 4 turns" in result.stdout, result
    answers = [message["content"] for message in model.requests[-1]["messages"][3::2]]
    assert len(answers) == 3 and all(answer.startswith("refused: call the shell tool") for answer in answers), answers


def test_a_wrong_key_reaches_nothing(backend: str, channel: str) -> None:
    with scripted(channel, text_reply("hi")) as model, box(backend, channel) as sandbox:
        result = run_agent(sandbox, reference_command("Hello."), api_key="sk-someone-else", timeout_s=60)
    assert result.exit_code == 1 and "refused the call (HTTP 401" in result.stdout, result
    assert model.requests == [] and model.refused == ["sk-someone-else"]


def test_an_unmodified_client_sees_only_the_openai_variables(backend: str, channel: str) -> None:
    """Any agent reads OPENAI_BASE_URL and OPENAI_API_KEY; JSON and server-sent events both pass the relay."""
    client = ("import json, os, urllib.request\n"
              "base, key = os.environ['OPENAI_BASE_URL'], os.environ['OPENAI_API_KEY']\n"
              "print(base, os.environ['OPENAI_API_BASE'], os.environ['EXTRA'])\n"
              "models = urllib.request.Request(base + '/models', headers={'Authorization': 'Bearer ' + key})\n"
              "print(json.load(urllib.request.urlopen(models))['data'][0]['id'])\n"
              "body = json.dumps({'model': 'm', 'stream': True, 'messages': [{'role': 'user', 'content': 'x'}]})\n"
              "chat = urllib.request.Request(base + '/chat/completions', data=body.encode(),\n"
              "    headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
              "print(urllib.request.urlopen(chat).read().decode().split('\\n')[0][:30])\n")
    with scripted(channel, text_reply("streamed")) as model, box(backend, channel) as sandbox:
        sandbox.write_file("client.py", client)
        result = run_agent(sandbox, "python3 client.py", api_key=KEY, timeout_s=60, env={"EXTRA": "yes"})
    assert result.ok, result
    assert result.stdout.splitlines() == ["http://127.0.0.1:8080/v1 http://127.0.0.1:8080/v1 yes", "scripted",
                                          'data: {"id": "chatcmpl-1", "ob']
    assert model.requests[0]["stream"] is True


def test_the_relay_ends_with_the_agent_and_at_its_timeout(backend: str, channel: str) -> None:
    listing = ("python3 -c \"import os; print(sum('/tmp/envkit/forward.py' in open(f'/proc/{p}/cmdline').read()"
               ".split(chr(0)) for p in os.listdir('/proc') if p.isdigit()), 'relays')\"")
    before = leftovers()
    with scripted(channel) as model, box(backend, channel) as sandbox:
        during = run_agent(sandbox, listing, api_key=KEY, timeout_s=60)
        after = sandbox.run(listing)
        slow = run_agent(sandbox, "sleep 60", api_key=KEY, timeout_s=1)
        again = run_agent(sandbox, "echo port free again", api_key=KEY, timeout_s=60)
    assert during.stdout == "1 relays\n", during
    assert after.stdout == "0 relays\n", after
    assert (slow.timed_out, slow.exit_code, slow.ok) == (True, None, False) and slow.duration_s < 10
    assert again.ok and again.stdout == "port free again\n", again
    assert model.requests == []
    assert back_to(before), (before, leftovers())


def test_bad_calls_are_refused_in_one_line(backend: str, channel: str) -> None:
    with box(backend, channel) as sandbox:
        with pytest.raises(SandboxError, match=r"no socket at .*proxy.sock: start the server that listens there"):
            run_agent(sandbox, "true", api_key=KEY, timeout_s=5)
        with scripted(channel):
            for arguments, said in (({"api_key": KEY, "session": Session(KEY)}, "the model server's session or"),
                                    ({}, "the model server's session or"), ({"api_key": ""}, "non-empty string"),
                                    ({"api_key": KEY, "command": " "}, "non-empty shell command line"),
                                    ({"api_key": KEY, "env": {"N": 1}}, "env holds names and values that are"),
                                    ({"api_key": KEY, "env": {"A=B": "x"}}, "a name without '='"),
                                    ({"api_key": KEY, "command": "echo " + "x" * 140_000}, "the command line is"),
                                    ({"api_key": KEY, "env": {"T": "é" * 70_000}}, "env is .* put long text")):
                with pytest.raises(ValueError, match=said) as raised:
                    run_agent(sandbox, arguments.pop("command", "true"), timeout_s=5, **arguments)
                assert "\n" not in str(raised.value)
    with open_sandbox(backend, limits=LIMITS) as plain, pytest.raises(ValueError, match="has no channel folder"):
        run_agent(plain, "true", api_key=KEY, timeout_s=5)


def test_a_missing_socket_inside_is_said_by_the_relay(backend: str, channel: str) -> None:
    """A server that stopped after the sandbox was admitted: the relay says so and the agent does not start."""
    with box(backend, channel) as sandbox:
        with scripted(channel):
            sandbox.admit(f"{channel}/proxy.sock")
        from envkit.agents.run import INSIDE, install
        install(sandbox)
        result = sandbox.run(["python3", f"{INSIDE}/forward.py", "8080", "/run/envkit/proxy.sock", "{}", "--", "true"])
    assert result.exit_code == 1 and "no model server socket at /run/envkit/proxy.sock" in result.stderr, result


def test_an_agents_result_keeps_the_end_of_its_output_as_plain_data(backend: str, channel: str) -> None:
    """What run_agent returns of a chatty agent: the last TAIL_CHARS characters of each stream, `truncated` set, and
    nothing but JSON-able fields."""
    from envkit.agents.run import TAIL_CHARS

    chatty = "python3 -c \"import sys; print('x' * 20000); print('err' * 5000, file=sys.stderr); print('end')\""
    with box(backend, channel) as sandbox, scripted(channel):
        result = run_agent(sandbox, chatty, api_key=KEY, timeout_s=30)
    assert isinstance(result, RunResult) and result.ok and result.truncated
    assert len(result.stdout) == TAIL_CHARS and result.stdout.endswith("x\nend\n")
    assert len(result.stderr) == TAIL_CHARS and result.stderr.endswith("err\n")
    assert json.loads(json.dumps(result.__dict__)) == result.__dict__


def test_the_reference_agent_solves_a_coding_task_and_the_env_grades_it(backend: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled coding env, as training drives it: sandbox with a channel, instruction, agent, reward."""
    monkeypatch.setenv("ENVKIT_SANDBOX", backend)
    env = resolve_target("coding").env_class()
    try:
        env.reset(task_id="train/rotate_left_2")
        sandbox = env.agent_sandbox()
        instruction = env.agent_instruction()
        assert "solution.py" in instruction and "def " in instruction
        assert sandbox.read_file("solution.py").decode() in instruction
        solution = sandbox.read_file("solution.py").decode()
        body = f"{solution.rstrip()}\n    return items[2:] + items[:2]\n"
        with ScriptedModel(f"{sandbox.channel_dir}/proxy.sock", KEY,
                           [tool_reply(f"cat > solution.py <<'END'\n{body}END"), text_reply("Done.")]) as model:
            result = run_agent(sandbox, reference_command(instruction), api_key=KEY, timeout_s=60)
        assert result.ok, result
        assert model.requests[0]["messages"][1]["content"] == instruction
        assert env.finish_episode() == 1.0, sandbox.read_file("solution.py")
        assert env.finish_episode() == 1.0 and env.state.done
        channel = sandbox.channel_dir
    finally:
        env.close()
    assert not os.path.exists(channel)


def test_the_coding_env_refuses_an_agent_sandbox_after_tool_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    require("local")
    monkeypatch.setenv("ENVKIT_SANDBOX", "local")
    env = resolve_target("coding").env_class()
    try:
        env.reset(task_id="train/rotate_left_2")
        env.run_command("ls")
        with pytest.raises(ValueError, match="has run tool calls.*right after reset"):
            env.agent_sandbox()
        env.reset(task_id="train/rotate_left_2")
        assert env.agent_sandbox() is env.agent_sandbox()
        with pytest.raises(ValueError, match="already has the channel folder .*reset\\(\\) first"):
            env.agent_sandbox(channel_dir=tempfile.gettempdir())
        assert env.finish_episode() == 0.0
        with tempfile.TemporaryDirectory() as folder:          # the caller's folder: it stays theirs
            env.reset(task_id="train/rotate_left_2")
            assert env.agent_sandbox(channel_dir=folder).channel_dir == os.path.realpath(folder)
            assert env.agent_sandbox() is env.agent_sandbox(channel_dir=folder)
            env.close()
            assert os.path.isdir(folder)
    finally:
        env.close()
