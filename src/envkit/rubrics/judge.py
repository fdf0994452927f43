"""`LLMJudge`: a rubric that asks an OpenAI-compatible chat endpoint for a score.

    judge = LLMJudge("Rate 0 to 10 how polite this reply is: {action}\\nAnswer with the number.",
                     JudgeEndpoint("http://127.0.0.1:8000/v1", "Qwen/Qwen3-0.6B", api_key_env="JUDGE_API_KEY"),
                     scale=10)

Every judge of one endpoint in a process shares one client: the calls of all sessions go out at once over
its pooled connections (at most `max_concurrency` in flight, which a vLLM server batches), identical
prompts in flight are asked once, and answers are cached on the prompt. Each call has a timeout and
`retries` more tries. An answer with no number in it (a refusal) scores `default_score` and counts as
unparsable; an endpoint that fails every try scores `default_score`, counts as a failure and leaves the
judge's component out of the step (`last_score` None): the episode loses that component, the run goes on.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


from ..episode_metrics import Metric
from .base import Rubric

__all__ = ["LLMJudge", "JudgeEndpoint", "JudgeUsage", "judge_usage", "judge_metrics"]

logger = logging.getLogger("envkit.judge")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_CACHE_SIZE = 4096


@dataclass(frozen=True)
class JudgeEndpoint:
    """Where a judge asks: an OpenAI-compatible base URL (ending in `/v1`), the model, and the name of the
    environment variable holding the API key (none for a local server)."""

    url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 30.0
    retries: int = 2
    max_concurrency: int = 32
    max_tokens: int = 16


@dataclass
class JudgeUsage:
    """What one episode's judging cost: calls sent (retries included), tokens, and answers not scored."""

    calls: int = 0
    tokens: int = 0
    unparsable: int = 0
    failures: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {"judge_calls": self.calls, "judge_tokens": self.tokens, "judge_unparsable": self.unparsable,
                "judge_failures": self.failures}


@dataclass(frozen=True)
class _Answer:
    text: str | None   # None: every try failed
    calls: int
    tokens: int


class _JudgeClient:
    """One endpoint's pooled client on one event loop: concurrency bound, in-flight sharing, answer cache."""

    def __init__(self, endpoint: JudgeEndpoint) -> None:
        import httpx   # loaded when a judge first asks: serving an environment without one never needs it

        self.endpoint = endpoint
        key = os.environ.get(endpoint.api_key_env, "") if endpoint.api_key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.http = httpx.AsyncClient(base_url=endpoint.url.rstrip("/"), headers=headers, trust_env=False,
                                      timeout=endpoint.timeout_s,
                                      limits=httpx.Limits(max_connections=endpoint.max_concurrency))
        self.slots = asyncio.Semaphore(endpoint.max_concurrency)
        self.cache: OrderedDict[str, str] = OrderedDict()
        self.pending: dict[str, asyncio.Future[_Answer]] = {}

    async def ask(self, prompt: str) -> tuple[_Answer, bool]:
        """The answer to `prompt`, and whether it cost a call of this caller's (False: cached or shared)."""
        if prompt in self.cache:
            self.cache.move_to_end(prompt)
            return _Answer(self.cache[prompt], 0, 0), False
        if prompt in self.pending:
            answer = await asyncio.shield(self.pending[prompt])
            return _Answer(answer.text, 0, 0), False
        future: asyncio.Future[_Answer] = asyncio.get_running_loop().create_future()
        self.pending[prompt] = future
        try:
            answer = await self._send(prompt)
            future.set_result(answer)
        finally:
            del self.pending[prompt]
            if not future.done():
                future.set_result(_Answer(None, 0, 0))
        if answer.text is not None:
            self.cache[prompt] = answer.text
            if len(self.cache) > _CACHE_SIZE:
                self.cache.popitem(last=False)
        return answer, True

    async def _send(self, prompt: str) -> _Answer:
        import httpx

        body = {"model": self.endpoint.model, "messages": [{"role": "user", "content": prompt}],
                "max_tokens": self.endpoint.max_tokens, "temperature": 0.0}
        calls = tokens = 0
        for attempt in range(self.endpoint.retries + 1):
            calls += 1
            try:
                async with self.slots:
                    response = await self.http.post("/chat/completions", json=body)
                response.raise_for_status()
                data = response.json()
                tokens += int((data.get("usage") or {}).get("total_tokens") or 0)
                return _Answer(str(data["choices"][0]["message"].get("content") or ""), calls, tokens)
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as error:
                logger.warning("judge call to %s failed (try %d of %d): %s", self.endpoint.url, attempt + 1,
                               self.endpoint.retries + 1, error)
                if attempt < self.endpoint.retries:
                    await asyncio.sleep(0.1 * 2 ** attempt)
        return _Answer(None, calls, tokens)


_CLIENTS: dict[tuple[JudgeEndpoint, int], _JudgeClient] = {}


def _client(endpoint: JudgeEndpoint) -> _JudgeClient:
    """The shared client of `endpoint` on the running loop."""
    key = (endpoint, id(asyncio.get_running_loop()))
    client = _CLIENTS.get(key)
    if client is None:
        client = _CLIENTS[key] = _JudgeClient(endpoint)
    return client


class LLMJudge(Rubric):
    """Scores a step (or, inside a trajectory rubric, an episode) by asking a model.

    `template` is formatted with `action` and `observation` (their text); the first number in the answer,
    divided by `scale`, is the score. `usage` counts this episode's calls, tokens and unscored answers.
    """

    def __init__(self, template: str, endpoint: JudgeEndpoint, *, scale: float = 1.0,
                 default_score: float = 0.0) -> None:
        super().__init__()
        self.template, self.endpoint = template, endpoint
        self.scale, self.default_score = scale, default_score
        self.usage = JudgeUsage()
        self._failed = False

    def render(self, action: Any, observation: Any) -> str:
        """The prompt for one step."""
        return self.template.format(action=_text(action), observation=_text(observation))

    async def forward(self, action: Any, observation: Any) -> float:
        answer, sent = await _client(self.endpoint).ask(self.render(action, observation))
        if sent:
            self.usage.calls += answer.calls
            self.usage.tokens += answer.tokens
        self._failed = answer.text is None
        if answer.text is None:
            self.usage.failures += 1
            return self.default_score
        match = _NUMBER.search(answer.text)
        if match is None:
            self.usage.unparsable += 1
            return self.default_score
        return float(match.group()) / self.scale

    def _record(self, score: float) -> float:
        score = super()._record(score)
        if self._failed:   # the endpoint never answered: no component this step
            object.__setattr__(self, "last_score", None)
        return score

    def reset(self) -> None:
        super().reset()
        self.usage = JudgeUsage()


def _text(value: Any) -> str:
    if hasattr(value, "as_text"):
        return value.as_text()
    if hasattr(value, "model_dump"):
        fields = value.model_dump(exclude={"metadata", "reward", "done"})
        return str(next(iter(fields.values()))) if len(fields) == 1 else str(fields)
    return str(value)


def judge_usage(rubric: Any) -> dict[str, float]:
    """The summed usage of every `LLMJudge` in `rubric`'s tree (nothing when it has none)."""
    judges = [part for part in [rubric, *(part for _, part in rubric.named_rubrics())] if isinstance(part, LLMJudge)]
    if not judges:
        return {}
    total = JudgeUsage()
    for judge in judges:
        for name in ("calls", "tokens", "unparsable", "failures"):
            setattr(total, name, getattr(total, name) + getattr(judge.usage, name))
    return total.as_metrics()


def judge_metrics() -> tuple[Metric, ...]:
    """The evaluation columns of `judge_usage`: totals over episodes."""
    return (Metric("judge_calls", "judge calls", "sum", description="calls sent to the judge, retries included"),
            Metric("judge_tokens", "judge tokens", "sum", description="tokens the judge's endpoint reported"),
            Metric("judge_unparsable", "judge unparsable", "sum", description="answers with no score in them"),
            Metric("judge_failures", "judge failures", "sum", description="judgements the endpoint never answered"))
