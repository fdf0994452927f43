"""mini-swe-agent (PyPI, 2.4.6), a third-party agent that owns its loop, run unmodified inside a docker sandbox.

Its image is python:3.11-slim with mini-swe-agent installed from wheels downloaded on the host (`pip download`; the
build itself has no network). Its model calls go through `run_agent`'s relay to `scripted_model.ScriptedModel` on
the channel's unix socket (scripted replies: no model runs here), through litellm's `openai/` provider, in both of
its modes: OpenAI tool calls (`mini.yaml`) and commands written in the reply's text (`mini_textbased.yaml`). The
local backend cannot run it: its sandboxes see the host's /usr, where mini-swe-agent is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_engine import build_image
from sandbox_helpers import require
from scripted_model import ScriptedModel, text_reply, tool_reply

from envkit.agents import run_agent
from envkit.sandbox import SandboxLimits, open_sandbox

VERSION = "2.4.6"
KEY = "sk-mini"
TASK = "Write add(a, b) in solution.py."
WRITE = "printf 'def add(a, b):\\n    return a + b\\n' > solution.py && cat solution.py"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: What mini-swe-agent reads from its environment: no first-run questions, no cost table (no price for a local
#: model; litellm would fetch its table from the network).
SETTINGS = {"MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
COMMAND = f"mini -y --exit-immediately -m openai/scripted -t '{TASK}' -o /work/trajectory.json"


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    require("docker")
    with tempfile.TemporaryDirectory() as context:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", f"mini-swe-agent=={VERSION}", "-d",
                        f"{context}/wheels"], check=True, capture_output=True, timeout=900)
        Path(context, "Dockerfile").write_text(
            "FROM python:3.11-slim\nCOPY wheels /wheels\n"
            f"RUN pip install --no-index --find-links /wheels mini-swe-agent=={VERSION}\n")
        yield build_image("mini-swe-agent", Path(context))


@pytest.mark.parametrize("mode", ["tool calls", "text"])
def test_mini_swe_agent_solves_a_task_through_the_relay(image: str, mode: str) -> None:
    if mode == "tool calls":
        replies, command = [tool_reply(WRITE, tool="bash"), tool_reply(SUBMIT, tool="bash")], COMMAND
    else:
        replies = [text_reply(f"I write it.\n\n```mswea_bash_command\n{WRITE}\n```"),
                   text_reply(f"Done.\n\n```mswea_bash_command\n{SUBMIT}\n```")]
        command = f"{COMMAND} -c mini_textbased.yaml --model-class litellm_textbased"
    with tempfile.TemporaryDirectory() as channel, \
            ScriptedModel(f"{channel}/proxy.sock", KEY, replies) as model, \
            open_sandbox("docker", image=image, channel_dir=channel,
                         limits=SandboxLimits(wall_s=300, cpu_s=200, memory_mb=1024)) as sandbox:
        result = run_agent(sandbox, command, api_key=KEY, timeout_s=280, env=SETTINGS)
        assert result.ok, result
        assert sandbox.read_file("solution.py") == b"def add(a, b):\n    return a + b\n"
        trajectory = json.loads(sandbox.read_file("trajectory.json"))
    assert trajectory["info"]["exit_status"] == "Submitted", trajectory["info"]
    assert len(model.requests) == 2 and model.refused == []
    first, second = model.requests
    assert TASK in first["messages"][1]["content"]
    if mode == "tool calls":
        assert [tool["function"]["name"] for tool in first["tools"]] == ["bash"]
        answer = second["messages"][-1]
        assert answer["role"] == "tool" and answer["tool_call_id"] == replies[0]["tool_calls"][0]["id"]
    else:
        assert "tools" not in first
        assert second["messages"][2]["content"] == replies[0]["content"]
    assert "def add(a, b):" in json.dumps(second["messages"][-1])
