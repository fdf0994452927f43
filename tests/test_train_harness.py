"""`envkit.train.harness.AgentSessionFactory` under TRL 1.16's own `HarnessRolloutWorker` code, on CPU.

The factory must pickle (the worker runs in a child process) and meet the worker's contract. The collection test
runs TRL's harness rollout loop (`harness_worker_probe.py`, in a venv with openenv 0.10 beside TRL) against
`vllm serve` of the tiny model on vLLM's CPU build: each rollout an agent (the reference one) in NoteTask's
sandbox, its calls captured through `OpenAIEngine`. It runs where vLLM is installed (`.ci/run`'s `.venv-vllm`);
skipped, with the reason, elsewhere. TRL's trainer side
(AsyncGRPOTrainer: a `tree_fa3` CUDA kernel, weights over NCCL) needs a GPU and is not run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS_DIR, chat_server_process, subprocess_env, third_party_python
from envkit.testing import free_port
from envkit.train.harness import AgentSessionFactory, AgentSessions

NO_VLLM = importlib.util.find_spec("vllm") is None


def test_the_factory_pickles_and_makes_sessions_factories() -> None:
    factory = AgentSessionFactory(env="test_train_agent:NoteTask", llm_url="http://127.0.0.1:9/v1", model="m",
                                  max_calls=4)
    again = pickle.loads(pickle.dumps(factory))
    assert again == factory
    sessions = again(sampling={"temperature": 0.7, "top_p": 1.0})
    assert isinstance(sessions, AgentSessions) and callable(sessions.create)
    assert sessions.setup.temperature == 0.7 and sessions.setup.max_calls == 4
    assert sessions.env_class.__name__ == "NoteTask"


@pytest.mark.skipif(NO_VLLM, reason="vllm missing here (.ci/run's .venv-vllm has it)")
@pytest.mark.timeout(900)
def test_trls_harness_worker_collects_agent_rollouts_from_vllm_serve(tmp_path: Path) -> None:
    from envkit.app.targets import app_from_environment, resolve_target
    from envkit.play.binding import bind
    from envkit.play.tasks import env_rows, task_prompt
    from envkit.play.tiny import GPU_SPEC, build_tiny_model
    from envkit.testing import running_server

    target = resolve_target("echo")
    with running_server(app_from_environment(target.env_class, env_name="echo", max_concurrent_envs=4)) as url:
        cls = bind(url, name="echo")
        rows = env_rows({"echo": task_prompt("echo", cls.metadata)}, 8, 0)
        build_tiny_model({"echo": cls}, rows, GPU_SPEC, save_to=tmp_path / "model")
        cls._close_all()
    python = third_party_python("openenv-trl", "openenv==0.10.0", "openenv", "ENVKIT_OPENENV_TRL_PYTHON",
                                sees_runner=True)
    port = free_port()
    offline = {"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "VLLM_CPU_CI_ENV": "1",
               "VLLM_CPU_KVCACHE_SPACE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
               str(tmp_path / "model"), "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
               "--return-tokens-as-token-ids", "--logprobs-mode", "processed_logprobs"]
    with chat_server_process(command, port, tmp_path / "vllm-serve.log", start_timeout=300,
                             env={**os.environ, **offline}) as root:
        probe = [python, str(TESTS_DIR / "harness_worker_probe.py"), root + "/v1", str(tmp_path / "model"),
                 "test_train_agent:NoteTask", "2"]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=600, env=subprocess_env(**offline),
                              cwd=TESTS_DIR)
    assert done.returncode == 0, done.stderr[-4000:]
    rollouts = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rollouts) == 2, done.stderr[-4000:]
    for rollout in rollouts:   # scored by NoteTask's verifier, trained on the captured tokens
        assert rollout["reward"] in (0.0, 1.0) and rollout["turns"] >= 1
        assert rollout["sequences"] >= 1 and all(count > 0 for count in rollout["trained"])
