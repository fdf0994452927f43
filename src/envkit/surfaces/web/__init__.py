"""The `/web` page: play a served environment in a browser, and replay episode transcripts.

The page is plain HTML, CSS and JavaScript from `static/`, served by the app itself: no build
step and nothing fetched from elsewhere, so it works offline (a Hugging Face Space included).
It is a client like any other: it reads `/metadata`, `/schema` and `/tools`, the splits and tasks
from the Open Reward Standard routes (`GET /splits`, `POST /tasks`), plays over `/ws` (asking for
the text rendering with `/ws?features=text`, since browsers cannot set handshake headers), and
reads the one thing no other route describes from its own JSON route:

    GET /web/reset-arguments   the JSON schema of the keyword arguments `reset` takes

`GET /` redirects to `/web`, so a server's (and a Space's) root opens the page. Replays run in the
browser alone: transcript files are read locally and never uploaded.
"""

from __future__ import annotations

import html
import inspect
import json
import typing
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from ...core.reset_arguments import reset_method
from ...environment import Environment
from ...errors import ToolDefinitionError
from ...tools import json_schema_for, parse_google_docstring, tool_specs

__all__ = ["WEB_PATH", "mount_web", "reset_schema"]

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


def mount_web(app: FastAPI, env_class: type[Environment], metadata: dict[str, Any]) -> dict[str, Any]:
    """Serve the page at `/web` (its files under `/web/static`), its JSON route, and `/` → `/web`;
    returns what `/metadata` says about the page. The page's HTML carries the environment's name and
    description (from `metadata`), its tools and task splits, so its first paint (a screenshot, a page whose
    scripts have not run) already shows what the environment is."""
    app.include_router(_router(env_class, page_html(metadata, env_class)))
    app.mount(f"{WEB_PATH}/static", StaticFiles(directory=STATIC_DIR), name="web-static")
    return {"served": True, "path": WEB_PATH}


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
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):   # no keyword reaches them
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
        elif param.default is not None and _is_json(param.default):
            schema["default"] = param.default
        properties[param.name] = schema
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": open_ended}


def page_html(metadata: dict[str, Any], env_class: type[Environment] | None = None) -> str:
    """`index.html` with the environment's name, description, tools and splits written in (as text, escaped)."""
    name = html.escape(str(metadata.get("name") or "environment"))
    description = html.escape(str(metadata.get("description") or ""))
    text = (STATIC_DIR / "index.html").read_text()
    summary = _summary_html(env_class) if env_class is not None else ""
    return (text.replace("__ENV_SUMMARY__", summary).replace("__ENV_DESCRIPTION__", description)
            .replace("__ENV_NAME__", name))


def _summary_html(env_class: type[Environment]) -> str:
    """The tools (signature and description) and task splits, shown until the play forms replace them."""
    lines = []
    specs = tool_specs(env_class)
    if specs:
        lines.append('<section class="card" id="summary-tools"><h2>Tools</h2><ul>')
        for spec in specs.values():
            arguments = ", ".join(spec.parameters["properties"])
            lines.append(f"<li><code>{html.escape(spec.name)}({html.escape(arguments)})</code> "
                         f"{html.escape(spec.description.splitlines()[0])}</li>")
        lines.append("</ul></section>")
    try:
        splits = ", ".join(f"{split} ({len(env_class.tasks(split))})" for split in env_class.splits())
    except Exception:   # a tasks() that raises is reported by /tasks and validate; the page just leaves it out
        splits = ""
    if splits:
        lines.append(f'<p class="muted" id="summary-splits">Task splits: {html.escape(splits)}</p>')
    return "\n      ".join(lines)


def _router(env_class: type[Environment], index: str) -> APIRouter:
    router = APIRouter(include_in_schema=False)
    schema = reset_schema(env_class)

    @router.get("/")
    async def root(request: Request) -> RedirectResponse:
        """The server's root opens the page."""
        return RedirectResponse(f"{request.scope.get('root_path', '')}{WEB_PATH}", status_code=307)

    @router.get(WEB_PATH)
    async def page() -> HTMLResponse:
        """The page: play the environment, replay transcripts."""
        return HTMLResponse(index, headers=_PAGE_HEADERS)

    @router.get(f"{WEB_PATH}/reset-arguments")
    async def reset_arguments() -> dict[str, Any]:
        """The JSON schema of the keyword arguments `reset` takes (the page's reset form)."""
        return schema

    return router



def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
