"""The `/web` page: play a served environment in a browser, and replay episode transcripts.

The page is plain HTML, CSS and JavaScript from `static/`, served by the app itself: no build
step and nothing fetched from elsewhere, so it works offline (a Hugging Face Space included).
It is a client like any other: it reads `/metadata`, `/schema` and `/tools`, plays over `/ws`
(asking for the text rendering with `/ws?features=text`, since browsers cannot set handshake
headers), and reads what only it needs from two JSON routes here:

    GET /web/tasks           {"reset": JSON schema of reset's arguments, "splits": {"train": 105, ...}}
    GET /web/tasks/{split}   {"split": "train", "tasks": [{...reset arguments...}, ...]}

`GET /` redirects to `/web`, so a server's (and a Space's) root opens the page. Replays run in the
browser alone: transcript files are read locally and never uploaded.
"""

from __future__ import annotations

import inspect
import logging
import typing
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from ..environment import Environment, UnknownSplitError
from ..errors import ToolDefinitionError
from ..tools import json_schema_for, parse_google_docstring
from ..ws_handler import reset_method

__all__ = ["WEB_PATH", "mount_web", "reset_schema"]

logger = logging.getLogger("envkit.server")

WEB_PATH = "/web"
STATIC_DIR = Path(__file__).resolve().parent / "static"
#: The page runs only its own scripts and talks only to its own server; rendered text can never become markup.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def mount_web(app: FastAPI, env_class: type[Environment]) -> None:
    """Serve the page at `/web` (its files under `/web/static`), its JSON routes, and `/` → `/web`."""
    app.include_router(_router(env_class))
    app.mount(f"{WEB_PATH}/static", StaticFiles(directory=STATIC_DIR), name="web-static")


def reset_schema(env_class: type[Environment]) -> dict[str, Any]:
    """A JSON schema of the keyword arguments `reset` takes, from its type hints and docstring.

    An argument whose type has no JSON schema is described as any JSON value; `**kwargs` makes the
    schema open (`additionalProperties: true`).
    """
    method = reset_method(env_class)
    try:
        hints = typing.get_type_hints(method)
    except Exception:
        hints = {}
    described = parse_google_docstring(method.__doc__).args
    properties: dict[str, Any] = {}
    required: list[str] = []
    open_ended = False
    for param in list(inspect.signature(method).parameters.values())[1:]:
        if param.kind is param.VAR_KEYWORD:
            open_ended = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        try:
            schema = json_schema_for(hints[param.name], f"{env_class.__name__}.reset({param.name})") \
                if param.name in hints else {}
        except ToolDefinitionError:
            schema = {}
        if param.name in described:
            schema["description"] = described[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif param.default is not None:
            schema["default"] = param.default
        properties[param.name] = schema
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": open_ended}


def _router(env_class: type[Environment]) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    index = STATIC_DIR / "index.html"

    @router.get("/")
    async def root(request: Request) -> RedirectResponse:
        """The server's root opens the page."""
        return RedirectResponse(f"{request.scope.get('root_path', '')}{WEB_PATH}", status_code=307)

    @router.get(WEB_PATH)
    async def page() -> FileResponse:
        """The page: play the environment, replay transcripts."""
        return FileResponse(index, media_type="text/html", headers=_PAGE_HEADERS)

    @router.get(f"{WEB_PATH}/tasks")
    async def splits() -> Response:
        """What a reset takes, and how many tasks each split holds."""
        try:
            counts = {split: len(env_class.tasks(split)) for split in env_class.splits()}
        except Exception as error:
            return _environment_failed("splits() or tasks()", error)
        return JSONResponse({"reset": reset_schema(env_class), "splits": counts})

    @router.get(f"{WEB_PATH}/tasks/{{split}}")
    async def tasks(split: str) -> Response:
        """The tasks of one split, each the reset arguments of one episode."""
        try:
            return JSONResponse({"split": split, "tasks": jsonable_encoder(list(env_class.tasks(split)))})
        except UnknownSplitError as error:
            return JSONResponse({"detail": str(error)}, status_code=404)
        except Exception as error:
            return _environment_failed(f"tasks({split!r})", error)

    return router


def _environment_failed(call: str, error: Exception) -> JSONResponse:
    logger.error("the environment's %s raised", call, exc_info=error)
    return JSONResponse({"detail": f"the environment's {call} raised {type(error).__name__}: {error}"}, status_code=500)
