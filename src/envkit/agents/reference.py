"""envkit's `reference` agent: a small coding agent that owns its loop. It runs inside a sandbox.

    python3 reference.py INSTRUCTION [--max-turns N] [--model NAME] [--command-timeout S] [--api anthropic]

It talks the OpenAI chat-completions wire format to `$OPENAI_BASE_URL` with `$OPENAI_API_KEY` (with `--api anthropic`,
Anthropic's Messages API at `$ANTHROPIC_BASE_URL`, else beside the OpenAI URL, tool_use answered with tool_result
blocks), offers the model one
tool, `shell` (a command line run by /bin/sh in the current folder), and runs the commands the model asks for. The
model's calls count as tool calls when they come as OpenAI `tool_calls`, or as `<tool_call>{"name": ..., "arguments":
...}</tool_call>` in the text (the form Qwen and Hermes chat templates sample); a text call's output goes back as a
user message, since the history must keep the model's own text as it was sampled. The agent stops when the model
answers without a tool call, after `--max-turns` model calls, or when the server refuses a call (a spent call budget
ends an episode too). Standard library only (urllib): sandboxes have a bare Python, without the `openai` package.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

SYSTEM = ("You are a coding agent in a Linux sandbox with no network. Use the shell tool to look around, write files "
          "and run them in your work folder. When the task is done, answer with a short summary and no tool call.")
SHELL_TOOL = {"type": "function", "function": {
    "name": "shell",
    "description": "Run a shell command line in the work folder; returns its exit code and output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "the command line"}},
                   "required": ["command"]}}}
ANTHROPIC_SHELL_TOOL = {"name": "shell", "description": SHELL_TOOL["function"]["description"],
                        "input_schema": SHELL_TOOL["function"]["parameters"]}
#: The most tokens asked for a reply on the Messages API, which needs a number (the server's own cap may be lower).
MAX_TOKENS = 4096
TEXT_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
#: Characters of a command's output the model reads back (its start and its end when longer).
SHOWN_CHARS = 4000
#: Seconds one model call may take.
CALL_TIMEOUT_S = 600


class ServerRefused(Exception):
    """The model server answered with an error (a spent budget, a bad key) or could not be reached."""


def post(path, body, headers):
    """POST `body` as JSON to the model server's `path`; the answer's JSON."""
    base = os.environ.get("ANTHROPIC_BASE_URL") if path == "/messages" else None
    url = f"{base.rstrip('/')}/v1{path}" if base else os.environ["OPENAI_BASE_URL"].rstrip("/") + path
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
            answer = response.read()
    except urllib.error.HTTPError as error:
        raise ServerRefused(f"HTTP {error.code}: {error.read(500).decode(errors='replace').strip()}") from None
    except (urllib.error.URLError, OSError) as error:
        raise ServerRefused(f"cannot reach {url}: {error}") from None
    try:
        return json.loads(answer)
    except ValueError:
        raise ServerRefused(f"the answer is not JSON: {answer[:200]!r}") from None


def api_key(*names):
    return next((os.environ[name] for name in names if os.environ.get(name)), "")


def chat(messages, model):
    """One chat-completions call; the first choice's message."""
    answer = post("/chat/completions", {"model": model, "messages": messages, "tools": [SHELL_TOOL]},
                  {"Authorization": f"Bearer {api_key('OPENAI_API_KEY')}"})
    try:
        message = answer["choices"][0]["message"]
        if not isinstance(message, dict):
            raise TypeError
    except (KeyError, IndexError, TypeError):
        raise ServerRefused(f"the answer is not a chat completion: {str(answer)[:200]}") from None
    return message


def messages_call(messages, model):
    """One Anthropic Messages call; the answer's content blocks."""
    answer = post("/messages", {"model": model, "max_tokens": MAX_TOKENS, "system": SYSTEM, "messages": messages,
                                "tools": [ANTHROPIC_SHELL_TOOL]},
                  {"x-api-key": api_key("ANTHROPIC_API_KEY", "OPENAI_API_KEY"), "anthropic-version": "2023-06-01"})
    content = answer.get("content") if isinstance(answer, dict) else None
    if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
        raise ServerRefused(f"the answer is not a Messages API message: {str(answer)[:200]}")
    return content


def shell(command, timeout_s):
    """Run `command` and say how it went, clipped to `SHOWN_CHARS`."""
    try:
        done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return f"[stopped after {timeout_s:g} s]"
    text = (done.stdout + done.stderr).decode(errors="replace")
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS // 2]}\n... {len(text) - SHOWN_CHARS} characters left out ...\n{text[-SHOWN_CHARS // 2:]}"
    return f"{text.rstrip()}\n[exit code {done.returncode}]".lstrip()


def command_of(arguments):
    """The command line of a `shell` call's arguments (a JSON string in OpenAI's format, a dict in text calls)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    command = arguments.get("command") if isinstance(arguments, dict) else None
    return command if isinstance(command, str) and command.strip() else None


def answer_call(name, arguments, timeout_s):
    command = command_of(arguments) if name == "shell" else None
    if command is None:
        return f'refused: call the shell tool with {{"command": "<a command line>"}}; got {name!r} {arguments!r}'
    print(f"$ {command}", flush=True)
    return shell(command, timeout_s)


def text_calls(content):
    """The `<tool_call>` objects written in a reply's text, as (name, arguments)."""
    calls = []
    for found in TEXT_CALL.findall(content or ""):
        try:
            call = json.loads(found)
        except ValueError:
            call = {}
        calls.append((call.get("name"), call.get("arguments")) if isinstance(call, dict) else (None, None))
    return calls


def turn(messages, reply, timeout_s):
    """Append the model's reply and the answers to its calls; False when it made none (the agent is done)."""
    messages.append({"role": "assistant", **{key: reply[key] for key in ("content", "tool_calls")
                                             if reply.get(key) is not None}})
    if reply.get("tool_calls"):
        for call in reply["tool_calls"]:
            output = answer_call(call["function"]["name"], call["function"].get("arguments"), timeout_s)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        return True
    calls = text_calls(reply.get("content"))
    if calls:
        outputs = [answer_call(name, arguments, timeout_s) for name, arguments in calls]
        messages.append({"role": "user", "content": "\n\n".join(outputs)})
        return True
    return False


def anthropic_turn(messages, content, timeout_s):
    """`turn` in Anthropic's Messages format: tool_use blocks answered with tool_result blocks."""
    messages.append({"role": "assistant", "content": content})
    uses = [block for block in content if block.get("type") == "tool_use"]
    if uses:
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": block.get("id"),
             "content": answer_call(block.get("name"), block.get("input"), timeout_s)} for block in uses]})
        return True
    calls = text_calls(text_of(content))
    if calls:
        messages.append({"role": "user", "content": "\n\n".join(answer_call(name, arguments, timeout_s)
                                                                 for name, arguments in calls)})
        return True
    return False


def text_of(content):
    return "".join(block.get("text", "") for block in content if block.get("type") == "text")


def main():
    parser = argparse.ArgumentParser(description="envkit's reference coding agent")
    parser.add_argument("instruction")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "envkit"))
    parser.add_argument("--command-timeout", type=float, default=30.0)
    parser.add_argument("--api", choices=["openai", "anthropic"], default="openai",
                        help="the wire format: OpenAI chat completions, or Anthropic's Messages API")
    options = parser.parse_args()
    anthropic = options.api == "anthropic"
    messages = [{"role": "user", "content": options.instruction}]
    if not anthropic:
        messages.insert(0, {"role": "system", "content": SYSTEM})
    for number in range(1, options.max_turns + 1):
        try:
            reply = messages_call(messages, options.model) if anthropic else chat(messages, options.model)
        except ServerRefused as error:
            print(f"stopped at turn {number}: the model server refused the call ({error})", flush=True)
            return 0 if number > 1 else 1
        if not (anthropic_turn if anthropic else turn)(messages, reply, options.command_timeout):
            text = text_of(reply) if anthropic else reply.get("content") or ""
            print(f"done after {number} turns: {text.strip()[:200]}", flush=True)
            return 0
    print(f"stopped after {options.max_turns} turns (the turn limit)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
