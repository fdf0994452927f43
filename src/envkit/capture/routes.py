"""The proxy's HTTP routes: one per dialect (`dialect.Dialect`: OpenAI's `POST /v1/chat/completions` and
`POST /v1/responses`, Anthropic's `POST /v1/messages`, Google's `generateContent`), `GET /v1/models`, and
`GET /v1/capture/trace` (the caller's own session as a `TrainingTrace`).

Every route needs a session's key (`Authorization: Bearer KEY`, `x-api-key` or `x-goog-api-key`); a missing,
unknown or closed key is answered 401. Errors come in the dialect's own shape, one line each, never a 500 for what
a caller sent; a call over the session's budget is answered 429 (`x-should-retry: false` where the SDK reads it).
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import threading
import time
import uuid
from typing import Any, Awaitable, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .batching import Batcher
from .anthropic import MESSAGES
from .google import GENERATE, STREAM_GENERATE
from .openai_responses import RESPONSES
from .chat import ChatRequest, RequestError, message_key, parse_completion, tools_key
from .continuation import Renderer, build_prompt
from .dialect import Dialect
from .engine import Engine, EngineError, GenerationRequest, Sampling
from .openai_chat import CHAT, openai_error
from .records import Call
from .session import BudgetExhausted, CaptureSession

__all__ = ["CaptureRoutes", "MAX_REQUEST_BYTES"]

#: The largest request body served by default (an agent's whole history, tool outputs included).
MAX_REQUEST_BYTES = 16 * 2**20
#: Bodies larger than this are rendered and tokenised off the event loop.
OFFLOAD_BYTES = 64 * 2**10
#: The wire formats served, each on its own path.
DIALECTS: tuple[Dialect, ...] = (CHAT, MESSAGES, RESPONSES, GENERATE, STREAM_GENERATE)
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")




def _key_of(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("x-api-key") or request.headers.get("x-goog-api-key")


class CaptureRoutes:
    """The sessions, keyed by API key, and the ASGI app that serves them from `engine`."""

    def __init__(self, engine: Engine, *, batch_window_s: float = 0.0, max_batch: int = 64,
                 max_request_bytes: int = MAX_REQUEST_BYTES, max_context: int | None = None) -> None:
        if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes < 1:
            raise ValueError(f"max_request_bytes must be a positive integer, got {max_request_bytes!r}")
        self.engine = engine
        self.max_request_bytes = max_request_bytes
        #: Prompt plus completion tokens, at most (None: the engine's `max_context`).
        self.max_context = max_context
        self.renderer = Renderer(engine.tokenizer, engine.chat_template_kwargs)
        self.batcher = Batcher(engine, window_s=batch_window_s, max_batch=max_batch)
        self._sessions: dict[str, CaptureSession] = {}
        self._lock = threading.Lock()
        self.app = Starlette(routes=[*(Route(dialect.path, self.endpoint(dialect), methods=["POST"])
                                       for dialect in DIALECTS),
                                     Route("/v1/models", self.models, methods=["GET"]),
                                     Route("/v1/capture/trace", self.own_trace, methods=["GET"])])

    def add(self, session: CaptureSession) -> None:
        with self._lock:
            self._sessions[session.api_key] = session

    def remove(self, session: CaptureSession) -> None:
        with self._lock:
            self._sessions.pop(session.api_key, None)

    def _session(self, request: Request) -> CaptureSession | None:
        key = _key_of(request)
        with self._lock:
            session = self._sessions.get(key) if key else None
        return session if session is not None and not session.closed else None

    @staticmethod
    def _unauthorised() -> JSONResponse:
        return openai_error(401, "missing or unknown API key: send the session's key as `Authorization: Bearer "
                                 "KEY` (OPENAI_API_KEY)", "invalid_api_key")

    async def models(self, request: Request) -> Response:
        if self._session(request) is None:
            return self._unauthorised()
        return JSONResponse({"object": "list", "data": [{"id": self.engine.model_name, "object": "model",
                                                         "created": 0, "owned_by": "envkit"}]})

    async def own_trace(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return self._unauthorised()
        return JSONResponse(session.trace())

    def endpoint(self, dialect: Dialect) -> Callable[[Request], Awaitable[Response]]:
        """The route that serves `dialect`: the key, the body, the request checked, a call of the budget, the call,
        the record, the answer; each refusal in the dialect's own error shape."""

        async def serve(request: Request) -> Response:
            session = self._session(request)
            if session is None:
                return dialect.error(401, "missing or unknown API key: send the session's key as `Authorization: "
                                          "Bearer KEY` or `x-api-key: KEY`", "invalid_api_key")
            try:
                raw = await self._body(request)
                chat = dialect.read(_parse(raw))
                session.reserve()
            except RequestError as error:
                return dialect.error(error.status, str(error), error.code)
            except BudgetExhausted as error:
                return dialect.error(429, str(error), "call_budget_exhausted")
            try:
                call = await self._call(session, chat, offload=len(raw) > OFFLOAD_BYTES)
            except (RequestError, EngineError) as error:
                session.release()
                if isinstance(error, RequestError):
                    return dialect.error(error.status, str(error), error.code)
                return dialect.error(502, str(error), "engine_error")
            except BaseException:
                session.release()
                raise
            session.record(call)
            return dialect.answer(call, chat)

        return serve

    async def _body(self, request: Request) -> bytes:
        """The request's body, read no further than `max_request_bytes` (`RequestError` 413 past it)."""
        limit = self.max_request_bytes
        declared = request.headers.get("content-length", "")
        too_big = RequestError(f"the request body is larger than {limit} bytes (max_request_bytes); send a shorter "
                               "conversation", status=413, code="request_too_large")
        if declared.isdigit() and int(declared) > limit:
            raise too_big
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)

    @property
    def context(self) -> int | None:
        return self.max_context if self.max_context is not None else self.engine.max_context

    def _sampling(self, session: CaptureSession, chat: ChatRequest, prompt_tokens: int) -> Sampling:
        limits = [session.sampling.max_tokens]
        if chat.max_tokens is not None:
            limits.append(chat.max_tokens)
        if self.context is not None:
            room = self.context - prompt_tokens
            if room < 1:
                raise RequestError(f"the conversation is {prompt_tokens} tokens and the model's context "
                                   f"{self.context}: no room to answer; start a shorter one",
                                   code="context_length_exceeded")
            limits.append(room)
        policy = session.sampling
        return Sampling(temperature=policy.temperature, top_p=policy.top_p, max_tokens=min(limits), seed=policy.seed)

    async def _call(self, session: CaptureSession, chat: ChatRequest, *, offload: bool = False) -> Call:
        """Render, tokenise, generate, record: a large request is rendered and tokenised in a worker thread, so the
        event loop serves other sessions meanwhile."""
        work = functools.partial(build_prompt, self.renderer, chat, session.records, max_tokens=self.context)
        prompt = await asyncio.to_thread(work) if offload else work()
        sampling = self._sampling(session, chat, len(prompt.ids))
        generation = await self.batcher.submit(GenerationRequest(prompt.ids, sampling))
        if len(generation.logprobs) != len(generation.completion_ids):
            raise EngineError(f"the engine returned {len(generation.logprobs)} log-probabilities for "
                              f"{len(generation.completion_ids)} sampled tokens")
        message = parse_completion(self.renderer.decode(generation.completion_ids), parse_tools=chat.parse_tools)
        finish = "tool_calls" if message.get("tool_calls") else generation.finish_reason
        node_id = session.new_node_id()
        response = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                    "model": self.engine.model_name,
                    "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                    "usage": {"prompt_tokens": len(prompt.ids), "completion_tokens": len(generation.completion_ids),
                              "total_tokens": len(prompt.ids) + len(generation.completion_ids)}}
        return Call(node_id=node_id, parent_id=prompt.parent.node_id if prompt.parent else None,
                    root_id=prompt.parent.root_id if prompt.parent else node_id, messages=chat.messages,
                    tools=chat.tools, message_keys=[message_key(message) for message in chat.messages],
                    tools_key=tools_key(chat.tools), reply_key=message_key(message), prompt_ids=prompt.ids,
                    completion_ids=generation.completion_ids, logprobs=generation.logprobs,
                    finish_reason=generation.finish_reason, response=response, sampling=sampling.as_dict(),
                    requested_sampling=chat.requested_sampling, new_prompt_tokens=prompt.new_tokens,
                    root_reason=prompt.root_reason, prompt_text=prompt.text)


def _parse(raw: bytes) -> Any:
    """The JSON in `raw` (`RequestError` when it is not JSON, or holds a lone UTF-16 surrogate that no text can)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as error:   # RecursionError: arrays or objects nested too deep
        reason = " ".join(str(error).split())[:200]
        raise RequestError(f"the request body is not valid JSON ({reason}); send a JSON object",
                           code="invalid_json") from None
    if SURROGATE_ESCAPE.search(raw):   # a \ud800-style escape: well-formed JSON, no valid text unless paired
        try:
            json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise RequestError("the request holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape without its pair)"
                               "; send valid Unicode text", code="invalid_text") from None
    return body
