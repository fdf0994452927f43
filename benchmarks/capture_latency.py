"""The capture proxy's cost: latency it adds to a model call, and rollouts per second with concurrent sessions.

    python benchmarks/capture_latency.py            # about 3 minutes on 2 cores
    python benchmarks/capture_latency.py --quick    # fewer calls and levels

The engine is `TransformersEngine` over the tiny model built on the echo environment (as `envkit train --model
tiny` builds it), on CPU, one thread. Added latency: the same call made directly (`engine.generate` of one
request) and through the proxy (the `openai` SDK over 127.0.0.1: HTTP, the checks, rendering and tokenising the
conversation, the batch window, decoding and parsing the answer), alternated call by call, each pair sampling the
same tokens (same prompt, same seed); reported as p50 and p99 of each and of the pairs' differences, with the
default batch window (5 ms) and none. Rollouts per second: N sessions at once, each an agent of 3 calls (tool
results sent back, so calls 2 and 3 continue the chain; a reply with no tool call gets "Go on."), the calls
batched across sessions; a chain broken there is counted with its cause (`root_reason`: a user turn after an
earlier turn that reasoned). Results go to
`benchmarks/results/capture_latency.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "capture_latency.json"


def tiny_model() -> tuple[Any, Any, list[dict[str, Any]], str]:
    from envkit import create_app
    from envkit.app.targets import resolve_target
    from envkit.play.binding import bind
    from envkit.play.tasks import env_rows, task_prompt
    from envkit.play.tiny import TinyModelSpec, _tool_schemas, build_tiny_model
    from envkit.testing import running_server

    target = resolve_target("echo")
    with running_server(create_app(target.env_class, target.action_cls, target.observation_cls)) as url:
        cls = bind(url, name="echo")
        rows = env_rows({"echo": task_prompt("echo", cls.metadata)}, 16, 0)
        model, tokenizer, _ = build_tiny_model({"echo": cls}, rows, TinyModelSpec())
        environment = cls()
        task = rows[0]["prompt"][-1]["content"] + environment.reset(**rows[0])
        tools = _tool_schemas(environment)
        environment._close()
    return model, tokenizer, tools, task


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def figures(values: list[float]) -> dict[str, float]:
    return {"p50_ms": round(1000 * percentile(values, 0.5), 3), "p99_ms": round(1000 * percentile(values, 0.99), 3)}


def client(proxy: Any, session: Any) -> Any:
    import httpx
    import openai

    return openai.OpenAI(base_url=proxy.url, api_key=session.api_key, max_retries=0,
                         http_client=httpx.Client(trust_env=False))


def added_latency(engine: Any, tools: list[dict[str, Any]], task: str, calls: int, window_s: float) -> dict[str, Any]:
    from envkit.capture import CaptureProxy, GenerationRequest, Sampling
    from envkit.capture.chat import read_request
    from envkit.capture.continuation import Renderer, build_prompt

    messages = [{"role": "user", "content": task}]
    prompt = build_prompt(Renderer(engine.tokenizer, engine.chat_template_kwargs),
                          read_request({"messages": messages, "tools": tools}), []).ids
    direct, proxied, tokens = [], [], []
    with CaptureProxy(engine, batch_window_s=window_s) as proxy:
        for index in range(calls + 5):   # the first 5 pairs warm up
            sampling = Sampling(temperature=1.0, max_tokens=32, seed=index)
            started = time.perf_counter()
            [generation] = asyncio.run(engine.generate([GenerationRequest(prompt, sampling)]))
            alone = time.perf_counter() - started
            session = proxy.open_session(max_calls=1, sampling=sampling)
            with client(proxy, session) as sdk:
                started = time.perf_counter()
                sdk.chat.completions.create(model="tiny", messages=messages, tools=tools)
                through = time.perf_counter() - started
            assert session.records[0].completion_ids == generation.completion_ids   # the same work both ways
            session.close()
            if index >= 5:
                direct.append(alone)
                proxied.append(through)
                tokens.append(len(generation.completion_ids))
    return {"batch_window_ms": 1000 * window_s, "calls": calls, "direct": figures(direct), "proxy": figures(proxied),
            "added": figures([b - a for a, b in zip(direct, proxied)]),
            "mean_completion_tokens": round(statistics.mean(tokens), 1)}


def agent(proxy: Any, session: Any, tools: list[dict[str, Any]], task: str, turns: int) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
    with client(proxy, session) as sdk:
        for _ in range(turns):
            message = sdk.chat.completions.create(model="tiny", messages=messages, tools=tools).choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            messages += [{"role": "tool", "tool_call_id": call.id, "content": "ok"}
                         for call in message.tool_calls or ()]
            if not message.tool_calls:
                messages.append({"role": "user", "content": "Go on."})


def rollouts_per_second(engine: Any, tools: list[dict[str, Any]], task: str, sessions: int, rounds: int
                        ) -> dict[str, Any]:
    from envkit.capture import CaptureProxy, Sampling

    with CaptureProxy(engine) as proxy:
        opened, started = [], time.perf_counter()
        for _ in range(rounds):
            batch = [proxy.open_session(max_calls=3, sampling=Sampling(temperature=1.0, max_tokens=32))
                     for _ in range(sessions)]
            threads = [threading.Thread(target=agent, args=(proxy, session, tools, task, 3)) for session in batch]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            opened += batch
        elapsed = time.perf_counter() - started
        sizes = proxy.routes.batcher.batch_sizes
    assert all(session.calls == 3 for session in opened)
    return {"sessions": sessions, "rollouts": len(opened), "rollouts_per_s": round(len(opened) / elapsed, 2),
            "calls_per_s": round(3 * len(opened) / elapsed, 2), "mean_batch": round(statistics.mean(sizes), 2),
            "chains_kept": sum(session.roots == 1 for session in opened),
            "roots_by_template": sum(call.root_reason is not None for session in opened for call in session.records)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and levels")
    options = parser.parse_args()

    import torch

    from envkit.capture import TransformersEngine

    torch.set_num_threads(1)
    model, tokenizer, tools, task = tiny_model()
    engine = TransformersEngine(model, tokenizer, model_name="tiny", chat_template_kwargs={"enable_thinking": False})
    calls = 40 if options.quick else 200
    latency = [added_latency(engine, tools, task, calls, window) for window in (0.005, 0.0)]
    levels = (1, 8) if options.quick else (1, 4, 16, 64)
    throughput = [rollouts_per_second(engine, tools, task, n, max(1, 64 // n) if not options.quick else 1)
                  for n in levels]
    result = {"machine": f"{torch.get_num_threads()} torch thread(s)", "latency": latency, "throughput": throughput}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print("| batch window | direct p50 / p99 (ms) | through the proxy p50 / p99 (ms) | added p50 / p99 (ms) |")
    print("| --- | --- | --- | --- |")
    for row in latency:
        print(f"| {row['batch_window_ms']:.0f} ms | {row['direct']['p50_ms']:.1f} / {row['direct']['p99_ms']:.1f} | "
              f"{row['proxy']['p50_ms']:.1f} / {row['proxy']['p99_ms']:.1f} | "
              f"{row['added']['p50_ms']:.1f} / {row['added']['p99_ms']:.1f} |")
    print("\n| sessions at once | rollouts/s | calls/s | mean batch | chains kept whole | roots the template made |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in throughput:
        print(f"| {row['sessions']} | {row['rollouts_per_s']} | {row['calls_per_s']} | {row['mean_batch']} | "
              f"{row['chains_kept']}/{row['rollouts']} | {row['roots_by_template']} |")


if __name__ == "__main__":
    main()
