"""OpenEnv's Harbor Task API: the catalogue `openenv.harbor.client.HarborEnv` reads, for any environment with splits.

OpenEnv 0.10's `openenv harbor serve` answers these under its environment name `harbor_env`, and its client asks
for exactly these paths, so envkit serves them there whatever the environment's own name:

    GET  /harbor_env/splits       [{"name", "num_tasks"}, ...]
    POST /harbor_env/num_tasks    {"split"}                     → {"num_tasks": n}
    POST /harbor_env/task         {"split", "index"}            → {"task": TaskRef}
    POST /harbor_env/task_range   {"split", "start"?, "stop"?}  → {"tasks": [TaskRef, ...]}   (Python slice bounds)
    POST /harbor_env/tasks        {"split"}                     → {"tasks": [...], "env_name": "harbor_env"}

A TaskRef is OpenEnv's `HarborTaskRef`: `index`, `task_id`, `task_name`, `dataset` (the split), `instruction`.
`core/task_refs` makes each TaskRef from an envkit task (the reset arguments of one episode). The split `""` is the
first split, as OpenEnv's Harbor server has it. Nothing here opens a session or builds an environment.

Errors have FastAPI's shape, as OpenEnv's server answers them: a body that is not the request model's (not JSON, a
field missing or of the wrong type, an unknown field) is 422 `{"detail": [{"type", "loc", "msg", "input"}, ...]}`; an
unknown split or an index out of range is 400 `{"detail": "..."}` saying what the server has; a wrong method 405.
The body is read as JSON whatever its `Content-Type` (FastAPI would refuse one not sent as `application/json`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..core.http_exchange import BodyTooLarge, ClientGone, Exchange, ExchangeEndpoint
from ..core.served_env import ServedEnv
from ..core.task_refs import split_name, task_ref, task_refs
from ..environment import Environment, UnknownSplitError

__all__ = ["HarborTaskApi", "ENV_NAME"]

logger = logging.getLogger("envkit.server")

#: The environment name OpenEnv's Harbor server and client use in these paths.
ENV_NAME = "harbor_env"


class _Request(BaseModel):
    # OpenEnv's request models forbid unknown fields and coerce as pydantic's lax mode does ("1" is 1)
    model_config = ConfigDict(extra="forbid")


class SplitRequest(_Request):
    split: str


class TaskRequest(_Request):
    split: str
    index: int


class TaskRangeRequest(_Request):
    split: str
    start: int | None = None
    stop: int | None = None


class TaskApiError(Exception):
    """A request answered with `status` and FastAPI's `{"detail": ...}` body."""

    def __init__(self, status: int, detail: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(str(detail))
        self.status = status
        self.detail = detail
        self.headers = headers


class HarborTaskApi(ExchangeEndpoint):
    """Serves an environment's splits and tasks as OpenEnv's Harbor Task API."""

    def __init__(self, served: ServedEnv) -> None:
        self.env_class: type[Environment] = served.env_class
        self.max_body_bytes = served.max_message_bytes
        prefix = "/" + ENV_NAME
        self._routes = {prefix + "/splits": ("GET", None, self.splits),
                        prefix + "/num_tasks": ("POST", SplitRequest, self.num_tasks),
                        prefix + "/task": ("POST", TaskRequest, self.task),
                        prefix + "/task_range": ("POST", TaskRangeRequest, self.task_range),
                        prefix + "/tasks": ("POST", SplitRequest, self.tasks)}

    @staticmethod
    def serves(env_class: type[Environment]) -> bool:
        """Whether an environment has a catalogue to serve: at least one split."""
        return bool(env_class.splits())

    def paths(self) -> list[str]:
        """The paths this surface answers (`EnvkitApp.serve_directly`)."""
        return list(self._routes)

    async def answer(self, exchange: Exchange) -> None:
        method, model, endpoint = self._routes[exchange.path]
        try:
            if exchange.method != method:
                raise TaskApiError(405, "Method Not Allowed", (("allow", method),))
            request = None if model is None else await self._request(exchange, model)
            answer = endpoint(request)
        except TaskApiError as error:
            return await exchange.respond_json(error.status, {"detail": error.detail}, error.headers)
        except ClientGone:
            return
        except Exception as error:   # the environment's own catalogue code raised
            logger.exception("Task API %s failed", exchange.path)
            return await exchange.respond_json(500, {"detail": f"{type(error).__name__}: {error}"})
        await exchange.respond_json(200, answer)

    async def _request(self, exchange: Exchange, model: type[_Request]) -> Any:
        try:
            raw = await exchange.body(self.max_body_bytes)
        except BodyTooLarge as too_large:
            raise TaskApiError(413, f"{too_large}; send a smaller request") from None
        if not raw.strip():
            raise TaskApiError(422, [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}])
        try:
            body = json.loads(raw)
        except ValueError as error:   # FastAPI's item for a body that is not JSON
            raise TaskApiError(422, [{"type": "json_invalid", "loc": ["body", getattr(error, "pos", 0)],
                                      "msg": "JSON decode error", "input": {},
                                      "ctx": {"error": getattr(error, "msg", str(error))}}]) from None
        try:
            return model.model_validate(body, from_attributes=True)   # FastAPI's check: a non-object is its own type
        except ValidationError as error:
            items = error.errors(include_url=False, include_context=False)
            raise TaskApiError(422, [{**item, "loc": ["body", *item["loc"]]} for item in items]) from None

    # -- routes -----------------------------------------------------------------------------------

    def splits(self, _: None) -> list[dict[str, Any]]:
        return [{"name": split, "num_tasks": len(self.env_class.tasks(split))} for split in self.env_class.splits()]

    def num_tasks(self, request: SplitRequest) -> dict[str, Any]:
        return {"num_tasks": len(self._tasks(request.split)[1])}

    def task(self, request: TaskRequest) -> dict[str, Any]:
        split, tasks = self._tasks(request.split)
        try:
            task = self.env_class.task(split, request.index)
        except UnknownSplitError:
            raise TaskApiError(400, f"task index {request.index} is out of range: split {split!r} has {_count(tasks)}; "
                                    f"POST /{ENV_NAME}/num_tasks gives the count") from None
        return {"task": task_ref(self.env_class, split, request.index, task)}

    def task_range(self, request: TaskRangeRequest) -> dict[str, Any]:
        split, _ = self._tasks(request.split)
        return {"tasks": task_refs(self.env_class, split, request.start, request.stop)}

    def tasks(self, request: SplitRequest) -> dict[str, Any]:
        split, _ = self._tasks(request.split)
        return {"tasks": task_refs(self.env_class, split), "env_name": ENV_NAME}

    # -- helpers ----------------------------------------------------------------------------------

    def _tasks(self, split: str) -> tuple[str, Any]:
        """The split a request names ("" is the first) and its tasks; a 400 naming the splits there are."""
        name = split_name(self.env_class, split)
        try:
            return name, self.env_class.tasks(name)
        except UnknownSplitError:
            known = ", ".join(repr(s) for s in self.env_class.splits())
            raise TaskApiError(400, f"unknown split {split!r}; this server's splits are {known} (GET /{ENV_NAME}/"
                                    "splits lists them)") from None


def _count(tasks: Any) -> str:
    count = len(tasks)
    return f"{count} task{'s' if count > 1 else ''}, indices 0 to {count - 1}" if count else "no tasks"
