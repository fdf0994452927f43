"""OpenEnv 0.10's Harbor client runs rollouts on `envkit serve DIR` of Harbor tasks: `HarborEnv.capabilities()` and
`HarborEnv.run_rollout(...)`, from OpenEnv's own venv (tests/openenv_peer/harbor_rollout.py), its result validated
by OpenEnv's own `HarborRolloutResult`, made strict.

Real parts: the envkit server in a subprocess, the reference agent in the task's container on the project's Docker
engine, the task's tests, the capture proxy on the container's channel. The engine: vLLM is not installed here, so
it is the capture tests' `completions_server.py`, real HTTP on 127.0.0.1 answering in vLLM 0.31's shape (prompt
and sampled token ids, `token_id:N` log-probabilities, `/v1/models`), its tokens sampled by the tiny model through
transformers.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from capture_model import tiny_echo
from completions_server import completions_app
from harbor_helpers import CHECK_HELLO, make_task, no_warm_pool, require_engine, task_containers

from envkit.capture import TransformersEngine
from envkit.harbor import harbor_environment
from envkit.testing import ServedProcess, running_server

PEER = Path(__file__).resolve().parent / "openenv_peer" / "harbor_rollout.py"
REWARD_JSON = "/logs/verifier/reward.json"

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, Any]]:
    """The completions server over the tiny model: its base URL and app (which keeps the requests it saw)."""
    tiny = tiny_echo()
    app = completions_app(TransformersEngine(tiny.model, tiny.tokenizer, model_name=str(tiny.folder)))
    with running_server(app) as root:
        yield root + "/v1", app


def test_openenv_harbor_client_runs_a_rollout(openenv_python: str, engine: tuple[str, Any], tmp_path: Path) -> None:
    require_engine()
    llm_url, app = engine
    make_task(tmp_path / "tasks" / "hello", solve="echo hello > /app/hello.txt", test=CHECK_HELLO)
    with ServedProcess(str(tmp_path / "tasks"), env={"ENVKIT_SANDBOX_WARM": "0"}, startup_timeout=60) as served:
        done = subprocess.run([openenv_python, str(PEER), served.url, llm_url], capture_output=True, text=True,
                              timeout=800)
        assert done.returncode == 0, done.stderr[-4000:] + "".join(served.output)[-2000:]
        left = _settled(served.process.pid)
    lines = {key: value for line in done.stdout.splitlines() if line.startswith("{")
             for key, value in json.loads(line).items()}

    capabilities = lines["capabilities"]
    assert [harness["name"] for harness in capabilities["harnesses"]] == ["reference"]
    assert {sandbox["name"]: sandbox["available"] for sandbox in capabilities["sandboxes"]} == {"docker": True,
                                                                                                "local": False}
    assert capabilities["datasets"] == [{"name": "test", "num_tasks": 1}]

    result = lines["rollout"]
    assert result["ok"] and result["error"] is None, result
    assert lines["all_fields_in_order"] and lines["trainable"] and (result["rollout_type"], result["capture_level"]) == ("train", "tokens")
    assert (result["task_name"], result["dataset"], result["harness"], result["sandbox"]) == \
        ("hello", "test", "reference", "docker")
    assert result["task_id"] == str((tmp_path / "tasks" / "hello").resolve())
    assert set(result["rewards"]) == {"reward"} and result["reward"] == result["rewards"]["reward"] in (0.0, 1.0)
    assert result["reward_key"] == "reward" and result["session_id"]
    turns = result["turns"]
    assert 1 <= result["n_turns"] == len(turns) <= 3   # agent_step_limit=3
    for index, turn in enumerate(turns):
        prompt, completion = turn["prompt_token_ids"], turn["completion_token_ids"]
        assert turn["turn"] == index and prompt and completion and turn["trainable"]
        assert len(turn["per_token_logps"]) == len(completion) and all(value <= 0 for value in turn["per_token_logps"])
        assert turn["loss_mask"] == [0] * len(prompt) + [1] * len(completion)
        assert turn["sampling_params"]["temperature"] == 1.0 and turn["request_messages"][0]["role"] == "system"
    seen = [body["prompt"] for body in app.state.seen]
    assert seen[-len(turns):] == [turn["prompt_token_ids"] for turn in turns]   # the engine's own ids, as sent
    assert result["n_trainable_tokens"] == sum(len(turn["completion_token_ids"]) for turn in turns)
    assert result["multi_turn"] == (result["n_turns"] > result["n_roots"]) and result["n_roots"] >= 1
    assert set(result["phase_timings"]) == {"probe", "sandbox_start", "agent", "verify"} and result["wall_s"] > 0
    assert left == []   # the rollout's container is gone once its result is back

    refused = lines["refused"]
    assert refused["opencode"] == {"ok": False, "harness": "opencode", "sandbox": "docker",
                                   "error": "unknown harness 'opencode'; this server runs: reference (envkit's "
                                            "bundled agent)"}
    assert not refused["e2b"]["ok"] and "sandbox 'e2b' is not available" in refused["e2b"]["error"]
    assert not refused["local"]["ok"] and "use sandbox='docker'" in refused["local"]["error"]
    assert not refused["no_split"]["ok"] and "unknown split 'nope'; this server's splits are 'test'" in \
        refused["no_split"]["error"]
    assert not refused["no_task"]["ok"] and "task_index 99 is out of range" in refused["no_task"]["error"]
    assert not refused["no_engine"]["ok"] and refused["no_engine"]["error"].startswith("no engine: give llm_url")
    assert refused["cold"]["error"] == "training sampling requires a finite positive temperature"
    assert refused["nucleus"]["error"] == "training sampling requires top_p=1.0"
    assert "invalid_args" in refused["unknown_argument"] and "nope" in refused["unknown_argument"]
    assert "invalid_args" in refused["wrong_type"] and "task_index" in refused["wrong_type"]
    assert refused["unknown_tool"].startswith("tool 'nope' failed: Unknown tool: 'nope'") and \
        refused["unknown_tool"].endswith("(tool_not_found)")
    assert refused["tasks"] == [{"index": 0, "task_id": "hello", "task_name": "hello", "dataset": "test",
                                 "instruction": "Write hello to /app/hello.txt."}]


def _settled(server_pid: int, timeout_s: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (found := task_containers(server_pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return found


def test_the_headline_reward_is_picked_as_openenv_picks_it(engine: tuple[str, Any], tmp_path: Path,
                                                          no_warm_pool: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process (no OpenEnv): a task whose tests write two reward.json keys, neither named `reward`; the engine
    is the server's (ENVKIT_HARBOR_LLM_URL) where the call names none."""
    require_engine()
    llm_url, _ = engine
    monkeypatch.setenv("ENVKIT_HARBOR_LLM_URL", llm_url)
    make_task(tmp_path / "two", solve="true", test=f"echo '{{\"a\": 1, \"b\": 0.5}}' > {REWARD_JSON}")
    env = harbor_environment(tmp_path / "two")()
    try:
        def run(**arguments: Any) -> dict[str, Any]:
            return json.loads(env.run_rollout(**{"llm_url": llm_url, "agent_step_limit": 1, **arguments}))

        assert json.loads(env.capabilities())["llm"] == {"url": llm_url, "model": ""}
        ambiguous = run(llm_url="")   # the server's engine
        assert not ambiguous["ok"] and ambiguous["rewards"] == {"a": 1.0, "b": 0.5} and ambiguous["reward"] is None
        assert ambiguous["error"].startswith("task produced several rewards ['a', 'b'] and none is named 'reward'")
        picked = run(reward_key="c, b,a", keep_sandbox=True)
        assert picked["ok"] and (picked["reward"], picked["reward_key"]) == (0.5, "b"), picked
        assert picked["param_fixes"] == ["keep_sandbox: the task's container stays until this session's next "
                                         "rollout or its end"]
        assert len(task_containers(os.getpid())) == 1   # kept, until the session ends
        missing = run(reward_key="c")
        assert not missing["ok"] and missing["error"] == "reward_key 'c' not in ['a', 'b']"
        assert task_containers(os.getpid()) == []
        assert run(agent_step_limit=-1)["error"] == ("agent_step_limit and agent_timeout_sec must be 0 (the "
                                                     "default) or positive")
    finally:
        env.close()
