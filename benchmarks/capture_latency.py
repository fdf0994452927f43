"""The capture proxy's cost on kept-alive connections, against the right references.

    python benchmarks/capture_latency.py            # a few minutes on 2 cores
    python benchmarks/capture_latency.py --quick    # fewer calls and rollouts

1. The hop. An engine that answers at once (a scripted reply) behind the proxy, against a bare uvicorn + Starlette
   endpoint that parses the same JSON and answers a fixed chat completion, with the same kept-alive httpx client,
   calls alternated: over TCP, over a unix socket, and through the in-sandbox relay (`forward.py`, run as the
   sandbox runs it, in its own process) in front of each one's unix socket. p50 and p99 of each; the proxy's
   added latency is the difference of the p50s.
2. Against OpenEnv 0.10's capture proxy, each in its own process in front of the same scripted upstream (its own
   process too: vLLM's shape, `/v1/completions` from ids for envkit's `OpenAIEngine`, `/v1/chat/completions` with
   `prompt_token_ids`, `token_ids` and logprobs for OpenEnv's, the prompt rendered and tokenised as vLLM does).
   Added latency over calling the upstream directly (p50, p99), and rollouts per second with 1, 16 and 64
   sessions at once, each an agent of 3 calls (a tool result sent back after each reply).
3. Continuation, with `--traces RUN`: each call of a run's traces.jsonl (`envkit train --agent ...`) sent again
   with its reply and a tool result after it; the share that continues its chain.

The tokenizer is the tiny model's (built on the echo environment, as `envkit train` builds it). Results go to
`benchmarks/results/capture_latency.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "capture_latency.json"
OPENENV_PYTHON = ROOT / ".venv-openenv" / "bin" / "python"
REPLY = "Done."
TEMPLATE_KWARGS = {"enable_thinking": False}
FIXED = {"id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": "bare",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}


def tiny_tokenizer(folder: Path) -> Any:
    from envkit import create_app
    from envkit.app.targets import resolve_target
    from envkit.play.binding import bind
    from envkit.play.tasks import env_rows, task_prompt
    from envkit.play.tiny import TinyModelSpec, build_tiny_model
    from envkit.testing import running_server

    target = resolve_target("echo")
    with running_server(create_app(target.env_class, target.action_cls, target.observation_cls)) as url:
        cls = bind(url, name="echo")
        rows = env_rows({"echo": task_prompt("echo", cls.metadata)}, 16, 0)
        _, tokenizer, _ = build_tiny_model({"echo": cls}, rows, TinyModelSpec())
    tokenizer.save_pretrained(folder)
    return tokenizer


def figures(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    share = lambda p: ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]   # noqa: E731
    return {"p50_ms": round(1000 * share(0.5), 3), "p99_ms": round(1000 * share(0.99), 3)}


class Instant:
    """An engine that answers every request at once with `REPLY`."""

    model_name = "instant"
    max_context = None
    chat_template_kwargs = TEMPLATE_KWARGS

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids = [*tokenizer(REPLY, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]

    async def generate(self, requests: Any) -> list[Any]:
        from envkit.capture import Generation

        return [Generation(list(self.ids), [-0.5] * len(self.ids), "stop") for _ in requests]


def bare_app() -> Any:
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def answer(request: Any) -> Any:
        json.loads(await request.body())
        return JSONResponse(FIXED)

    return Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])


def serve_in_thread(app: Any, sockets: list[socket.socket]) -> Callable[[], None]:
    """`app` on `sockets`, uvicorn on a plain asyncio loop in a thread, as the proxy serves; returns a stopper."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(server.serve(sockets=sockets),), daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(10)

    return stop


def relay(socket_path: str) -> tuple[int, subprocess.Popen[bytes]]:
    """The in-sandbox relay (`forward.py`) on a free port in front of `socket_path`, in its own process."""
    from envkit.agents import forward

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-I", "-S", forward.__file__, str(port), socket_path, "{}", "--",
                                "sleep", "3600"], start_new_session=True)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return port, process
        except OSError:
            time.sleep(0.01)
    raise RuntimeError("the relay did not listen")


def hop(tokenizer: Any, calls: int) -> dict[str, Any]:
    import httpx

    from envkit.capture import CaptureProxy
    from envkit.capture.proxy import tcp_listener

    folder = Path(tempfile.mkdtemp(prefix="envkit-hop-"))
    bare_sock = folder / "bare.sock"
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(str(bare_sock))
    unix_listener.listen(64)
    tcp = tcp_listener(0)
    stop_bare = serve_in_thread(bare_app(), [tcp, unix_listener])
    body = {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "List the files in this folder."}]}
    results: dict[str, Any] = {}
    with CaptureProxy(Instant(tokenizer), unix_socket=folder / "proxy.sock") as proxy:
        session = proxy.open_session(max_calls=10 * calls + 100)
        relays = {name: relay(str(path)) for name, path in (("bare", bare_sock), ("proxy", folder / "proxy.sock"))}
        routes = {
            "tcp": {"bare": (f"http://127.0.0.1:{tcp.getsockname()[1]}/v1", None), "proxy": (proxy.url, None)},
            "unix": {"bare": ("http://local/v1", str(bare_sock)), "proxy": ("http://local/v1", str(proxy.unix_socket))},
            "relay": {name: (f"http://127.0.0.1:{port}/v1", None) for name, (port, _) in relays.items()}}
        for route, ends in routes.items():
            clients = {name: httpx.Client(base_url=url, trust_env=False, timeout=30,
                                          transport=httpx.HTTPTransport(uds=uds) if uds else None,
                                          headers={"Authorization": f"Bearer {session.api_key}"})
                       for name, (url, uds) in ends.items()}
            times: dict[str, list[float]] = {name: [] for name in clients}
            for index in range(calls + 20):
                for name, client in clients.items():
                    started = time.perf_counter()
                    answer = client.post("/chat/completions", json=body)
                    elapsed = time.perf_counter() - started
                    assert answer.status_code == 200, answer.text
                    if index >= 20:    # the first 20 warm up
                        times[name].append(elapsed)
            for client in clients.values():
                client.close()
            row = {name: figures(values) for name, values in times.items()}
            row["added_p50_ms"] = round(row["proxy"]["p50_ms"] - row["bare"]["p50_ms"], 3)
            results[route] = row
            print(f"hop {route:5}: bare {row['bare']['p50_ms']:.3f} / {row['bare']['p99_ms']:.3f} ms, proxy "
                  f"{row['proxy']['p50_ms']:.3f} / {row['proxy']['p99_ms']:.3f} ms (p50 / p99), added "
                  f"{row['added_p50_ms']:.3f} ms", flush=True)
        for _, process in relays.values():
            os.killpg(process.pid, 9)
            process.wait()
    stop_bare()
    return results


def upstream_app(tokenizer: Any) -> Any:
    """vLLM's shape, scripted: every call samples `REPLY` (log-probability -0.5 a token)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    ids = [*tokenizer(REPLY, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]

    async def completions(request: Any) -> Any:
        body = await request.json()
        return JSONResponse({"id": "cmpl-0", "object": "text_completion", "model": "tiny", "choices": [{
            "index": 0, "text": REPLY, "finish_reason": "stop", "prompt_token_ids": body["prompt"], "token_ids": ids,
            "logprobs": {"tokens": [f"token_id:{token}" for token in ids], "token_logprobs": [-0.5] * len(ids)}}]})

    async def chat(request: Any) -> Any:
        body = await request.json()
        prompt = tokenizer.apply_chat_template(body["messages"], tools=body.get("tools"), add_generation_prompt=True,
                                               tokenize=False, **TEMPLATE_KWARGS)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        return JSONResponse({
            "id": "chatcmpl-0", "object": "chat.completion", "created": 0, "model": "tiny",
            "prompt_token_ids": prompt_ids,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop",
                         "token_ids": ids, "logprobs": {"content": [
                             {"token": f"token_id:{token}", "logprob": -0.5, "bytes": None, "top_logprobs": []}
                             for token in ids]}}],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                      "total_tokens": len(prompt_ids) + len(ids)}})

    async def models(request: Any) -> Any:
        return JSONResponse({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]),
                             Route("/v1/chat/completions", chat, methods=["POST"]),
                             Route("/v1/models", models, methods=["GET"])])


def child(role: str, folder: str, upstream: str, sessions: int) -> None:
    """Run in a process of its own: the upstream, or envkit's proxy (printing its url and keys)."""
    from transformers import AutoTokenizer

    from envkit.capture.proxy import tcp_listener

    tokenizer = AutoTokenizer.from_pretrained(folder)
    if role == "upstream":
        listener = tcp_listener(0)
        serve_in_thread(upstream_app(tokenizer), [listener])
        print(json.dumps({"url": f"http://127.0.0.1:{listener.getsockname()[1]}"}), flush=True)
    else:
        from envkit.capture import CaptureProxy, OpenAIEngine, Sampling

        engine = OpenAIEngine(f"{upstream}/v1", "tiny", tokenizer=tokenizer, chat_template_kwargs=TEMPLATE_KWARGS)
        proxy = CaptureProxy(engine).start()
        keys = [proxy.open_session(max_calls=10_000, sampling=Sampling(max_tokens=16)).api_key
                for _ in range(sessions)]
        print(json.dumps({"url": proxy.url, "keys": keys}), flush=True)
    sys.stdin.read()


def start_child(role: str, folder: Path, upstream: str = "", sessions: int = 0) -> tuple[subprocess.Popen[str], Any]:
    process = subprocess.Popen([sys.executable, __file__, "--child", role, str(folder), upstream, str(sessions)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


def start_openenv(upstream: str, sessions: int) -> tuple[subprocess.Popen[str], Any]:
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([str(OPENENV_PYTHON), "-m", "openenv.core.harness.capture.server", "--llm-url",
                                upstream, "--model", "tiny", "--host", "127.0.0.1", "--port", str(port)],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            keys = [httpx.post(f"{url}/sessions", json={}, trust_env=False).json()["session_id"]
                    for _ in range(sessions)]
            return process, {"url": f"{url}/v1", "keys": keys}
        except (httpx.HTTPError, KeyError, ValueError):
            time.sleep(0.1)
    raise RuntimeError("OpenEnv's capture proxy did not start")


async def rollout(client: Any, url: str, key: str, calls: int, times: list[float]) -> None:
    """An agent of `calls` calls: each reply goes back with a tool result after it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "List the files in this folder."}]
    for _ in range(calls):
        started = time.perf_counter()
        answer = await client.post(f"{url}/chat/completions", json={"model": "tiny", "messages": messages,
                                                                     "max_tokens": 16},
                                   headers={"Authorization": f"Bearer {key}"})
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text[:300]
        messages += [answer.json()["choices"][0]["message"], {"role": "user", "content": "exit code 0: a.txt"}]


async def drive(url: str, keys: list[str], sessions: int, rounds: int) -> dict[str, Any]:
    import httpx

    times: list[float] = []
    # Idle connections are dropped before the servers' 5 s keep-alive ends, so none is reused as it closes.
    limits = httpx.Limits(max_connections=256, keepalive_expiry=4)
    async with httpx.AsyncClient(trust_env=False, timeout=120, limits=limits) as client:
        await asyncio.gather(*(rollout(client, url, key, 3, []) for key in keys[:sessions]))    # warm up
        started = time.perf_counter()
        for _ in range(rounds):
            await asyncio.gather(*(rollout(client, url, key, 3, times) for key in keys[:sessions]))
        elapsed = time.perf_counter() - started
    return {"rollouts_per_s": round(sessions * rounds / elapsed, 2), **figures(times)}


def against_openenv(folder: Path, quick: bool) -> dict[str, Any]:
    upstream_process, upstream = start_child("upstream", folder)
    processes = [upstream_process]
    results: dict[str, Any] = {}
    try:
        envkit_process, envkit = start_child("envkit", folder, upstream["url"], 64)
        openenv_process, openenv = start_openenv(upstream["url"], 64)
        processes += [envkit_process, openenv_process]
        direct = {"url": f"{upstream['url']}/v1", "keys": ["none"] * 64}
        for sessions in (1, 16, 64):
            rounds = max(1, (8 if quick else 40) // sessions) if sessions > 1 else (10 if quick else 60)
            row = {name: asyncio.run(drive(target["url"], target["keys"], sessions, rounds))
                   for name, target in (("upstream", direct), ("envkit", envkit), ("openenv", openenv))}
            for name in ("envkit", "openenv"):
                row[name]["added_p50_ms"] = round(row[name]["p50_ms"] - row["upstream"]["p50_ms"], 3)
                row[name]["added_p99_ms"] = round(row[name]["p99_ms"] - row["upstream"]["p99_ms"], 3)
            results[str(sessions)] = row
            print(f"{sessions:2} sessions: " + ", ".join(
                f"{name} {row[name]['rollouts_per_s']} rollouts/s, p50 {row[name]['p50_ms']} p99 "
                f"{row[name]['p99_ms']} ms" for name in row), flush=True)
    finally:
        for process in processes:
            process.stdin.close()    # type: ignore[union-attr]
            process.terminate()
            process.wait(10)
    return results


def continuation(run: Path) -> dict[str, Any]:
    """Each call of `run`'s traces sent again with its reply and a tool result: the share continuing its chain."""
    from transformers import AutoTokenizer

    from envkit.capture.chat import message_key, read_request, tools_key
    from envkit.capture.continuation import Renderer, build_prompt
    from envkit.capture.records import Call

    renderer = Renderer(AutoTokenizer.from_pretrained(run / "model"), TEMPLATE_KWARGS)
    kept = total = consecutive = consecutive_kept = 0
    for line in (run / "traces.jsonl").read_text().splitlines():
        turns = json.loads(line)["turns"]
        for before, after in zip(turns, turns[1:]):
            consecutive += 1
            head = before["prompt_token_ids"] + before["completion_token_ids"]
            consecutive_kept += after["prompt_token_ids"][: len(head)] == head
        for turn in turns:
            request, reply = turn["request"], turn["response"]["choices"][0]["message"]
            chat = read_request({"messages": request["messages"], "tools": request.get("tools")})
            call = Call(node_id="n", parent_id=None, root_id="n", messages=chat.messages, tools=chat.tools,
                        message_keys=[message_key(message) for message in chat.messages],
                        tools_key=tools_key(chat.tools), reply_key=message_key(reply),
                        prompt_ids=turn["prompt_token_ids"], completion_ids=turn["completion_token_ids"],
                        logprobs=turn["per_token_logps"], finish_reason="stop", response={}, sampling={},
                        prompt_text=renderer.render(chat.messages, chat.tools, generation=True))
            follow = read_request({"messages": [*request["messages"], reply, {"role": "tool", "content": "ok"}],
                                   "tools": request.get("tools")})
            total += 1
            kept += build_prompt(renderer, follow, [call]).parent is not None
    result = {"calls": total, "replayed_kept": kept, "consecutive_turns": consecutive,
              "consecutive_kept": consecutive_kept}
    print(f"continuation: {kept} of {total} replies sent back continue their chain; {consecutive_kept} of "
          f"{consecutive} consecutive turns in the run", flush=True)
    return result


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--traces", type=Path, help="a run folder of `envkit train --agent` (traces.jsonl, model/)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="envkit-capture-bench-"))
    tokenizer = tiny_tokenizer(folder)
    results: dict[str, Any] = {"hop": hop(tokenizer, 100 if args.quick else 1000)}
    if OPENENV_PYTHON.exists():
        results["openenv"] = against_openenv(folder, args.quick)
    else:
        print(f"OpenEnv's venv is not at {OPENENV_PYTHON} (tests/conftest.py makes it): that part is left out")
    if args.traces:
        results["continuation"] = continuation(args.traces)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results: {RESULTS}")


if __name__ == "__main__":
    main()
