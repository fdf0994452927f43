"""A scripted OpenAI-compatible chat server for the LLM judge's tests: `POST /v1/chat/completions` answers from
the prompt (a reply with "kind" in it scores 9 of 10, "rude" 1, "refuse" gets a refusal with no number in it) and
reports usage as OpenAI does; `calls` counts the requests it answered."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def judge_app(calls: list[str]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        calls.append(prompt)
        answer = ("I cannot grade that." if "refuse" in prompt else
                  "Score: 9" if "kind" in prompt else "Score: 1" if "rude" in prompt else "5")
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 2,
                 "total_tokens": len(prompt.split()) + 2}
        return JSONResponse({"id": "judge", "object": "chat.completion", "model": body["model"], "usage": usage,
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": answer}}]})

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
