"""`envkit validate`: tell an env author exactly what their env folder or running server gets wrong.

    report = validate_folder(Path("envs/echo"))        # files, manifest, import, tools, tasks, Dockerfile
    report = validate_class("my_module:MyEnvironment")  # import, tools, tasks, limits
    report = asyncio.run(validate_url("http://127.0.0.1:8000"))   # health, schema, tools, episode, concurrency, ORS
    print(report.table()); sys.exit(0 if report.ok else 1)

Each check ends `ok`, `warn` (works, but a consumer may trip over it) or `fail` (with the fix).
"""

from __future__ import annotations

import asyncio
import re
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..app.settings import VARIABLES, ServerSettings
from ..app.targets import app_from_environment, bundled_envs, import_attribute, is_file_target, resolve_target
from ..client.ors_client import OrsServer, is_ors_server
from ..errors import (AuthenticationError, CapacityError, ClientError, ConfigurationError, EnvError, EnvkitError,
                      SessionLostError)
from ..protocol import key_headers
from ..protocol import ErrorCode
from ..tools import tool_specs
from .dockerfile import image_env, parse_dockerfile, space_dockerfile_problems
from .sandbox_image import image_sandbox

__all__ = ["Check", "Report", "validate_folder", "validate_class", "validate_url", "check_ors", "example_from_schema",
           "read_front_matter", "is_refusal", "SPACE_FILES"]

Status = Literal["ok", "warn", "fail"]
#: Files every env folder needs to become a Space.
SPACE_FILES = ("README.md", "Dockerfile", "pyproject.toml")


@dataclass
class Check:
    """The outcome of one check: its name, `ok`/`warn`/`fail`, and what was found (or how to fix it)."""

    name: str
    status: Status
    detail: str


@dataclass
class Report:
    """Every check run against one target; `ok` when none failed."""

    target: str
    checks: list[Check] = field(default_factory=list)
    #: The checks ran against a server: an error the server's own machine caused is said to be the server's.
    served: bool = False

    @property
    def ok(self) -> bool:
        return all(check.status != "fail" for check in self.checks)

    def add(self, name: str, problems: list[str], passed: str, *, warn: bool = False) -> bool:
        """Record `name` as passed (with `passed` as detail) or as failed/warned with its problems."""
        if problems:
            fault = server_fault(" ".join(problems)) if self.served else None
            if fault is not None:
                self.checks.append(Check(name, "fail", f"the server's fault, not the environment's code or examples: "
                                                       f"{fault}; {'; '.join(problems)}"))
                return False
            self.checks.append(Check(name, "warn" if warn else "fail", "; ".join(problems)))
            return False
        self.checks.append(Check(name, "ok", passed))
        return True

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "ok": self.ok, "checks": [asdict(check) for check in self.checks]}

    def table(self) -> str:
        """The checks as an aligned text table, with a summary line."""
        width = max([len(check.name) for check in self.checks] + [5])
        lines = [f"{'CHECK'.ljust(width)}  RESULT  DETAIL"]
        lines += [f"{check.name.ljust(width)}  {check.status.upper().ljust(6)}  {check.detail}" for check in self.checks]
        failed = sum(check.status == "fail" for check in self.checks)
        warned = sum(check.status == "warn" for check in self.checks)
        verdict = "valid" if self.ok else "NOT valid"
        lines.append(f"{self.target}: {verdict} ({len(self.checks)} checks, {failed} failed, {warned} warnings)")
        return "\n".join(lines)


# -- folders -------------------------------------------------------------------------------------


def read_front_matter(readme: Path) -> dict[str, Any]:
    """The YAML front matter of a README (the Space card), or raise `ConfigurationError` saying what is wrong."""
    import yaml

    text = readme.read_text()
    if not text.startswith("---"):
        raise ConfigurationError(f"{readme} has no YAML front matter; start it with a `---` block holding "
                                 "`sdk: docker`, `app_port` and `tags`")
    _, block, *rest = text.split("---", 2)
    if not rest:
        raise ConfigurationError(f"{readme}: the front matter is not closed by a second `---` line")
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError as error:
        raise ConfigurationError(f"{readme}: the front matter is not valid YAML ({error})") from None
    if not isinstance(data, dict):
        raise ConfigurationError(f"{readme}: the front matter must be a YAML mapping")
    return data


def _front_matter_problems(card: dict[str, Any]) -> list[str]:
    problems = []
    if card.get("sdk") != "docker":
        problems.append(f"sdk is {card.get('sdk')!r}; envkit Spaces need `sdk: docker`")
    if not isinstance(card.get("app_port"), int):
        problems.append("app_port is missing or not a number; add `app_port: 8000` (the port the server listens on)")
    if not card.get("title"):
        problems.append("no title; add `title: ...`")
    tags = card.get("tags")
    if not isinstance(tags, list) or "envkit" not in tags:
        problems.append("tags lack `envkit`; add `tags: [envkit, openenv]` so people can find the Space")
    return problems


def _manifest_problems(pyproject: Path) -> tuple[dict[str, Any], list[str]]:
    try:
        data = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as error:
        return {}, [f"{pyproject}: invalid TOML ({error})"]
    problems = []
    table = data.get("tool", {}).get("envkit")
    if not isinstance(table, dict):
        return {}, [f'{pyproject} has no [tool.envkit] table; add name = "..." and '
                    f'environment = "package.module:EnvironmentClass"']
    for key in ("name", "environment"):
        if not isinstance(table.get(key), str) or not table[key]:
            problems.append(f"[tool.envkit] has no {key} = \"...\"")
    project = data.get("project", {})
    if not project.get("name"):
        problems.append("[project] has no name; `pip install .` needs one")
    names = [re.match(r"\s*([A-Za-z0-9_.-]*)", str(item)).group(1).lower() for item in project.get("dependencies", [])]
    if "envkit" not in names:
        problems.append("[project] dependencies lack envkit; add \"envkit\" so the env installs with what it imports")
    return table, problems


def validate_folder(folder: Path) -> Report:
    """Check an env folder against what a Space, `envkit serve` and the trainer need."""
    report = Report(str(folder))
    if not folder.is_dir():
        report.add("folder", [f"{folder} is not a folder"], "")
        return report
    missing = [name for name in SPACE_FILES if not (folder / name).is_file()]
    report.add("space files", [f"missing {', '.join(missing)} (`envkit new` writes all of them)"] if missing else [],
               ", ".join(SPACE_FILES))

    app_port = None
    if (folder / "README.md").is_file():
        try:
            card = read_front_matter(folder / "README.md")
            problems = _front_matter_problems(card)
            app_port = card.get("app_port") if isinstance(card.get("app_port"), int) else None
        except ConfigurationError as error:
            problems = [str(error)]
        report.add("readme front matter", problems, f"sdk: docker, app_port: {app_port}")

    dockerfile = folder / "Dockerfile"
    if (folder / "pyproject.toml").is_file():
        manifest, problems = _manifest_problems(folder / "pyproject.toml")
        if report.add("manifest", problems, f"[tool.envkit] name = {manifest.get('name')!r}, "
                                            f"environment = {manifest.get('environment')!r}"):
            image_settings = image_env(parse_dockerfile(dockerfile.read_text())) if dockerfile.is_file() else {}
            _check_code(report, folder, manifest, image_settings)

    if dockerfile.is_file():
        report.add("dockerfile", space_dockerfile_problems(dockerfile, app_port),
                   "non-root, HEALTHCHECK /health, installs wheels/, runs envkit serve")
        problems, backend = image_sandbox(folder, parse_dockerfile(dockerfile.read_text()))
        report.add("sandbox", problems, backend)
    return report


def validate_tasks(folder: Path) -> Report:
    """Check a folder of Harbor tasks: every task reads, has its oracle's solution, and its image builds; then the
    environment's tools and splits, as for any environment."""
    from ..harbor import HarborTaskError, find_tasks, task_image
    from ..sandbox import SandboxUnavailableError

    report = Report(str(folder))
    target = _check_import(report, str(folder.resolve()), str(folder))
    if target is None:
        return report
    tasks = [task for split in find_tasks(folder).values() for task in split]
    report.add("solutions", [f"task {task.name} has no solution/solve.sh: `envkit eval --policy oracle` cannot play it"
                             for task in tasks if not (task.solution_dir / "solve.sh").is_file()],
               f"{len(tasks)} task(s), each with solution/solve.sh", warn=True)
    named = [problem for task in tasks if (problem := _harbor_name_problem(task.path))]
    report.add("task names", named, "every [task].name is as harbor takes it (org/name) or left out", warn=True)
    failed = 0
    for task in tasks:   # a row per failed build: each says the step, its words and the network setting in full
        try:
            task_image(task)
        except (HarborTaskError, SandboxUnavailableError) as error:
            failed += not report.add(f"image {task.name}", [str(error)], "")
    if not failed:
        report.add("images", [], f"{len(tasks)} image(s) built from environment/ (or found built)")
    _check_environment(report, target, {})
    return report


#: The package names harbor 0.25 takes in a task.toml's [task].name (its constants' ORG_NAME_PATTERN), ".." aside.
_HARBOR_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*")


def _harbor_name_problem(task: Path) -> str | None:
    """Why harbor would refuse the task's [task].name, which envkit itself does not need; None when it would not."""
    package = tomllib.loads((task / "task.toml").read_text()).get("task")
    name = package.get("name") if isinstance(package, dict) else None
    if name is None or (isinstance(name, str) and _HARBOR_NAME.fullmatch(name) and ".." not in name):
        return None
    return (f"{task.name}/task.toml: [task].name {name!r} is not in harbor's 'org/name' form (letters, digits, '.', "
            "'_' and '-' each side of one '/'), so `harbor run` refuses the task; name it e.g. "
            f"'my-org/{task.name}'")


def validate_class(spec: str) -> Report:
    """Check an environment class given as `module:Class`: that it imports, its tools, tasks and limits."""
    report = Report(spec)
    target = _check_import(report, spec, spec)
    if target is not None:
        _check_environment(report, target, {})
    return report


def _check_import(report: Report, spec: str, environment: str) -> Any:
    """The `EnvTarget` of `spec` (a folder or `module:Class`), recorded as the "import" check; None if it fails."""
    try:
        target = resolve_target(spec)
    except EnvkitError as error:
        report.add("import", [str(error)], "")
        return None
    except Exception as error:  # the env's own module raised while importing
        report.add("import", [f"importing {environment} raised {type(error).__name__}: {error}"], "")
        return None
    report.add("import", [], f"{target.env_class.__qualname__} ({target.action_cls.__name__} → "
                             f"{target.observation_cls.__name__})")
    return target


def _check_code(report: Report, folder: Path, manifest: dict[str, Any], image_settings: dict[str, str]) -> None:
    """Import the environment and its server module, build the app, and check the tools."""
    target = _check_import(report, str(folder.resolve()), manifest["environment"])
    if target is None:
        return
    server_module = manifest["environment"].split(".")[0] + ".server"
    if (folder / server_module.replace(".", "/")).with_suffix(".py").is_file():
        try:
            import_attribute(f"{server_module}:app")
            report.add("server app", [], f"{server_module}:app imports")
        except Exception as error:
            report.add("server app", [f"{server_module}:app: {type(error).__name__}: {error}"], "")
    _check_environment(report, target, image_settings)


def _check_environment(report: Report, target: Any, image_settings: dict[str, str]) -> None:
    """The class's tools, its task splits, and the app it builds (with the Dockerfile's limits)."""
    try:
        specs = tool_specs(target.env_class)
    except EnvkitError as error:
        report.add("tools", [str(error)], "")
        return
    if not specs:
        report.add("tools", ["no @tool methods; trainers bind an env's tools, so mark the moves an agent may make "
                             "with @tool"], "", warn=True)
    else:
        empty = [f"argument `{argument}` of tool `{name}` has an empty description under Args:"
                 for name, spec in specs.items() for argument, schema in spec.parameters["properties"].items()
                 if not schema.get("description")]
        report.add("tools", empty, f"{len(specs)} tool(s), every argument typed and described: {', '.join(specs)}")
    _check_tasks(report, target.env_class)
    _check_limits(report, target, image_settings)


def _check_tasks(report: Report, env_class: Any) -> None:
    """Warn when there is no `test` split to evaluate on (or a split is empty); say the splits' sizes."""
    try:
        splits = {split: len(env_class.tasks(split)) for split in env_class.splits()}
    except Exception as error:  # the class's own tasks() raised
        report.add("tasks", [f"{env_class.__qualname__}.tasks() raised {type(error).__name__}: {error}"], "")
        return
    problems = [f"split {split!r} has no tasks" for split, count in splits.items() if not count]
    if "test" not in splits:
        problems.append("no 'test' split: `envkit eval` plays an env's test tasks and ORS clients build their "
                        'dataset from splits; declare TASKS = {"train": [...], "test": [...]} (each task the '
                        "keyword arguments of one reset)")
    counts = ", ".join(f"{split} ({count})" for split, count in splits.items())
    wrong = _task_prompt_problem(env_class)
    if wrong is not None:
        report.add("tasks", [wrong], "")
        return
    report.add("tasks", problems, f"splits: {counts}", warn=True)


def _task_prompt_problem(env_class: Any) -> str | None:
    """What is wrong with `task_prompt` of each split's first task, called on the class as every server calls it."""
    for split in env_class.splits():
        tasks = env_class.tasks(split)
        if not tasks:
            continue
        try:
            prompt = env_class.task_prompt(dict(tasks[0]))
        except Exception as error:
            return (f"{env_class.__qualname__}.task_prompt(task 0 of {split!r}) raised {type(error).__name__}: "
                    f"{error}; it is called on the class, before a session opens, so it may read the task and class "
                    "attributes only")
        if prompt is not None and not isinstance(prompt, str):
            return (f"{env_class.__qualname__}.task_prompt returned {type(prompt).__name__}; return a str, or None "
                    "when the first observation says it all")
    return None


def _check_limits(report: Report, target: Any, image_settings: dict[str, str]) -> None:
    """Build the app with the limits the Dockerfile's ENV sets, as the container would at start-up."""
    try:
        settings = ServerSettings.from_environment(image_settings,
                                                   concurrent=target.env_class.SUPPORTS_CONCURRENT_SESSIONS)
        app = app_from_environment(target.env_class, env_name=target.name, settings=settings)
    except ValueError as error:  # ConfigurationError included
        source = " (with the Dockerfile's ENV)" if set(image_settings) & set(VARIABLES) else ""
        report.add("server limits", [f"{error}{source}"], "")
        return
    pool = app.state.envkit_pool
    report.add("server limits", [], f"up to {pool.max_sessions} session(s), idle timeout {pool.idle_timeout_s}s")


# -- servers -------------------------------------------------------------------------------------


def example_from_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A value that fits a JSON schema: its example, first enum value or default, else a simple value in range."""
    defs = {**(defs or {}), **schema.get("$defs", {})}
    if "$ref" in schema:
        return example_from_schema(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    for key in ("examples", "enum"):
        if schema.get(key):
            return schema[key][0]
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = [branch for branch in schema.get(key, []) if branch.get("type") != "null"]
        if branches:
            return example_from_schema(branches[0], defs)
    kind = schema.get("type", "object")
    kind = next((one for one in kind if one != "null"), "string") if isinstance(kind, list) else kind
    if kind in ("integer", "number"):
        value = 1  # fits more ranges of counts, guesses and ids than 0 does
        if "exclusiveMinimum" in schema or "minimum" in schema:
            value = max(value, schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1))
        if "exclusiveMaximum" in schema or "maximum" in schema:
            value = min(value, schema.get("maximum", schema.get("exclusiveMaximum", 0) - 1))
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "string":
        return "hello"[: schema.get("maxLength", 5)].ljust(schema.get("minLength", 0), "a")
    if kind == "array":
        return [example_from_schema(schema.get("items", {}), defs) for _ in range(schema.get("minItems", 0))]
    properties = schema.get("properties", {})
    return {name: example_from_schema(properties[name], defs) for name in schema.get("required", [])
            if name in properties}


async def validate_url(url: str, *, timeout: float = 10.0) -> Report:
    """Check a running server: health, schema, tool listing, a reset and a step, a tool call, two sessions at once,
    and `/mcp` in OpenEnv's dialect and as standard MCP.

    Raises `AuthenticationError` when the server refuses the key (`$ENVKIT_API_KEY`) or its absence.
    """
    from ..client import EnvClient

    report = Report(url, served=True)
    client = EnvClient(url, connect_timeout=timeout, message_timeout=timeout)
    health: dict[str, Any] | None = None
    try:
        health = await client.health()
    except ClientError as error:
        failure = error
    if ((health is None or health.get("status") != "healthy") and url.startswith(("http://", "https://"))
            and await asyncio.to_thread(is_ors_server, url, timeout)):
        await asyncio.to_thread(check_ors, report, url, timeout)   # a server of the Open Reward Standard only
        return report
    if health is None:
        report.add("health", [f"{failure}; is the server running at this address?"], "")
        return report
    try:
        await client.metadata()   # /health is open to all; this says at once whether the key is accepted
    except AuthenticationError:
        raise
    except ClientError:
        pass
    max_sessions = health.get("max_sessions")
    report.add("health", [] if health.get("status") == "healthy" else [f"status is {health.get('status')!r}"],
               f"healthy, {health.get('active_sessions')} of {max_sessions} sessions open")

    schema = await _get_json(client.http_url + "/schema", timeout, client.headers)
    lacking = [part for part in ("action", "observation") if not isinstance(schema.get(part), dict)]
    report.add("schema", [f"{client.http_url}/schema lacks {', '.join(lacking)} (or could not be read)"] if lacking
               else [], f"action fields: {', '.join(schema.get('action', {}).get('properties', {}))}")

    tools: list[dict[str, Any]] = []
    try:
        tools = await client.tools()
        problems = [f"tool {tool.get('function', {}).get('name')!r}: {problem}" for tool in tools
                    for problem in _tool_listing_problems(tool)]
        if not tools:
            report.add("tools", ["the server lists no tools; trainers bind an env's tools"], "", warn=True)
        else:
            report.add("tools", problems, f"{len(tools)} tool(s): "
                                          f"{', '.join(tool['function']['name'] for tool in tools)}")
    except ClientError as error:
        report.add("tools", [str(error)], "")

    action = example_from_schema(schema["action"]) if isinstance(schema.get("action"), dict) else {}
    await _check_episode(report, client, action, schema.get("action") if isinstance(schema.get("action"), dict) else {})
    if tools and not _tool_listing_problems(tools[0]):
        await _check_tool_call(report, EnvClient(url, connect_timeout=timeout, message_timeout=timeout), tools[0])
    await _check_two_sessions(report, url, timeout, max_sessions)
    metadata = await _get_json(client.http_url + "/metadata", timeout)
    await _check_mcp(report, client.http_url, timeout, [tool for tool in tools if not _tool_listing_problems(tool)])
    if (metadata.get("ors") or {}).get("served"):
        await asyncio.to_thread(check_ors, report, client.http_url, timeout)
    return report


# -- Open Reward Standard ------------------------------------------------------------------------


def check_ors(report: Report, url: str, timeout: float = 10.0) -> None:
    """The ORS routes as the openreward SDK uses them: catalogue, tools, one session (prompt, a tool call, delete),
    and that refusals come back in the ORS shape. Blocking (HTTP); every check is named `ors ...`."""
    report.served = True
    try:
        server = OrsServer(url, timeout=timeout)
        splits = {split: server.num_tasks(split) for split in server.splits()}
        tools = server.tools()
    except EnvkitError as error:
        report.add("ors catalogue", [str(error)], "")
        return
    try:
        problems = [] if splits else ["no splits: ORS clients (TRL's OpenRewardSpec) build their dataset from "
                                      "tasks; list some in the environment's TASKS"]
        problems += [f"split {split!r} has no tasks" for split, count in splits.items() if not count]
        counts = ", ".join(f"{split} ({count} tasks)" for split, count in splits.items())
        report.add("ors catalogue", problems, f"{server.env_name}: splits {counts}", warn=True)
        listed = [{"function": tool} for tool in tools]
        problems = [f"tool {tool['name']!r}: {problem}" for tool, entry in zip(tools, listed)
                    for problem in _tool_listing_problems(entry)]
        report.add("ors tools", problems or ([] if tools else ["no tools"]),
                   f"{len(tools)} tool(s): {', '.join(tool['name'] for tool in tools)}")
        if not tools:
            return
        split = next((name for name, count in splits.items() if count), None)
        _check_ors_session(report, server, split, tools[0])
        _check_ors_refusals(report, server, split, splits.get(split or "", 0))
    finally:
        server.close()


def _check_ors_session(report: Report, server: OrsServer, split: str | None, tool: dict[str, Any]) -> None:
    """One session: task 0 of `split`, or (no tasks) an empty task spec; its prompt, a tool call, delete."""
    arguments = example_from_schema(tool.get("parameters") or {})
    task = f"task 0 of {split!r}" if split else "an empty task spec"
    try:
        session = server.open(split=split, index=0) if split else server.open(task_spec={})
    except EnvkitError as error:
        report.add("ors session", [f"opening {task}: {error}"], "")
        return
    try:
        report.add("ors session", [] if session.prompt.strip() else ["the prompt is empty"],
                   f"{task}, prompt {session.prompt.strip()[:50]!r}")
        try:
            result = session.call(tool["name"], arguments)
            report.add("ors call", [], f"{tool['name']}({arguments}) → {result.text[:50]!r}, reward {result.reward}, "
                                       f"finished {result.done}")
        except EnvError as error:
            report.add("ors call", [_refusal_note(f"{tool['name']}({arguments}): {error}", error.message,
                                                  tool.get("parameters") or {})], "",
                       warn=error.code == "INPUT_VALIDATION" or is_refusal(error.message))
    finally:
        session.close()
    try:
        session.call(tool["name"], arguments)
        report.add("ors delete", ["a call on a deleted session was answered; it should get 410 (or 404)"], "")
    except SessionLostError:
        report.add("ors delete", [], "a call on the deleted session answers 410/404")
    except EnvkitError as error:
        report.add("ors delete", [f"a call on a deleted session: {error}; expected 410 (or 404)"], "")


def _check_ors_refusals(report: Report, server: OrsServer, split: str | None, count: int) -> None:
    problems = []
    try:
        server.open(split=split or "no-such-split", index=count).close()
        problems.append(f"task {count} of {split!r} (one past the end) was opened; expected a 4xx refusal")
    except EnvError as error:
        if not 400 <= int(error.details.get("status", 0)) < 500:
            problems.append(f"an index past the end got {error}; expected a 4xx refusal")
    except EnvkitError as error:
        problems.append(f"an index past the end: {error}")
    try:
        session = server.open(split=split, index=0) if split else server.open(task_spec={})
    except EnvkitError:   # the session check says why; an unknown tool needs an open session to be asked about
        report.add("ors refusals", problems, "a bad task index is refused in the ORS shape (no session opened "
                                             "to ask about an unknown tool: see ors session)")
        return
    try:
        session.call("no_such_tool_here", {})
        problems.append("an unknown tool was answered with ok: true")
    except EnvError as error:
        if error.code != "NOT_FOUND":
            problems.append(f"an unknown tool got reason {error.code.lower()!r}; the SDK expects 'not_found'")
    except EnvkitError as error:
        problems.append(f"an unknown tool: {error}")
    finally:
        session.close()
    report.add("ors refusals", problems, "a bad task index and an unknown tool are refused in the ORS shape")


async def _get_json(url: str, timeout: float, headers: dict[str, str] | None = None) -> dict[str, Any]:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as http:
            response = await http.get(url, headers=key_headers() if headers is None else headers)
        document = response.json() if response.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def _tool_listing_problems(tool: dict[str, Any]) -> list[str]:
    function = tool.get("function") or {}
    problems = [] if function.get("description") else ["no description"]
    properties = (function.get("parameters") or {}).get("properties") or {}
    problems += [f"argument `{name}` is not described" for name, schema in properties.items()
                 if not schema.get("description")]
    return problems


async def _check_episode(report: Report, client: Any, action: dict[str, Any], action_schema: dict[str, Any]) -> None:
    try:
        await client.connect()
        first = await client.reset(seed=0)
    except ClientError as error:
        report.add("reset", [str(error)], "")
        await client.close()
        return
    report.add("reset", [], f"observation fields: {', '.join(first.observation)}, reward {first.reward}")
    try:
        result = await client.step(action)
        report.add("step", [], f"action {action} → reward {result.reward}, done {result.done}")
    except ClientError as error:
        message = error.message if isinstance(error, EnvError) else ""
        hint = "" if is_refusal(message) or server_fault(message) else f"; {_example_hint(action_schema)}"
        report.add("step", [_refusal_note(f"action {action}: {error}", message, action_schema) + hint], "",
                   warn=_refused_input(error))
    finally:
        await client.close()


def _refused_input(error: ClientError) -> bool:
    """The env refused the made-up input: the round trip works, the input was just not a legal one.

    Either the arguments did not fit the schema (`VALIDATION_ERROR`) or the environment raised `ValueError`,
    which is how an environment refuses a move; any other exception is a bug in the environment."""
    return isinstance(error, EnvError) and (error.code == ErrorCode.VALIDATION_ERROR
                                            or error.code == ErrorCode.EXECUTION_ERROR and is_refusal(error.message))


#: How every surface words an environment's `ValueError`: `ValueError: ...` (/ws, /mcp), `tool raised ValueError: ...`
#: (ORS).
_REFUSAL = re.compile(r"(?:^|\braised )ValueError: ")


#: Errors a server's machine causes, not the environment's code or a check's made-up input, with what is missing.
_SERVER_FAULTS = (
    (re.compile(r"\bSandboxUnavailableError\b|no sandbox backend here"),
     "it cannot open a sandbox: its machine has no sandbox backend the environment can use"),
    (re.compile(r"no Docker engine answers|the docker sandbox needs the docker command|\bImageBuildError\b"),
     "it has no Docker engine, or cannot build the task's image, where the environment needs one"),
    (re.compile(r"\b(?:ModuleNotFoundError|ImportError)\b"),
     "its environment imports a module the server's image does not have (add it to the dependencies)"),
)


def server_fault(message: str) -> str | None:
    """What the server's own machine lacks, when `message` reports an error it caused; None otherwise."""
    return next((lacks for pattern, lacks in _SERVER_FAULTS if pattern.search(message)), None)


def is_refusal(message: str) -> bool:
    """Whether an error message reports the environment's `ValueError` (a refused move, not a bug)."""
    return bool(_REFUSAL.search(message))


def _refusal_note(detail: str, message: str, schema: dict[str, Any]) -> str:
    """`detail`, with how to have a legal input sent when the environment refused the one made from `schema`."""
    if not is_refusal(message):
        return detail
    return f"{detail}; the environment refused it (a ValueError is a refusal, not a bug); {_example_hint(schema)}"


def _example_hint(schema: dict[str, Any]) -> str:
    """What to do about a refused made-up input: give its arguments examples, unless they have some."""
    properties = schema.get("properties") or {}
    if any("examples" in one for one in properties.values()) or "examples" in schema:
        return "it was made from the examples given, so a legal move depends on the episode: nothing to fix"
    name = next(iter(schema.get("required") or properties), "value")
    kind = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}.get(
        str((properties.get(name) or {}).get("type")), "str")
    allowed = (properties.get(name) or {}).get("enum")
    if allowed:   # every value is legal to the schema: which one is legal now depends on the episode
        kind = f"Literal[{', '.join(repr(value) for value in allowed)}]"
        return (f"{allowed[0]!r} was the first of {name}'s allowed values; to have one legal at the start sent, "
                f"give it an example: `{name}: Annotated[{kind}, Field(examples=[...])]` on a tool, `{name}: "
                f"{kind} = Field(examples=[...])` on an Action")
    return (f"to have a legal one sent, give it an example: `{name}: Annotated[{kind}, Field(examples=[...])]` on a "
            f"tool, `{name}: {kind} = Field(examples=[...])` on an Action")


async def _check_tool_call(report: Report, client: Any, tool: dict[str, Any]) -> None:
    function = tool["function"]
    arguments = example_from_schema(function.get("parameters") or {})
    try:
        async with client:
            await client.reset(seed=0)
            result = await client.call(function["name"], **arguments)
        report.add("tool call", [], f"{function['name']}({arguments}) → {result.text[:60]!r}")
    except ClientError as error:
        message = error.message if isinstance(error, EnvError) else ""
        report.add("tool call", [_refusal_note(f"{function['name']}({arguments}): {error}", message,
                                               function.get("parameters") or {})], "",
                   warn=_refused_input(error))


async def _check_two_sessions(report: Report, url: str, timeout: float, max_sessions: int | None) -> None:
    from ..client import EnvClient

    first = EnvClient(url, connect_timeout=timeout, message_timeout=timeout)
    second = EnvClient(url, connect_timeout=timeout, message_timeout=timeout)
    try:
        await _connect_once_free(first, timeout)
        try:
            await second.connect()
        except CapacityError as error:
            if max_sessions == 1:
                report.add("two sessions", [], "the server holds one session; the second got CapacityError")
            else:
                report.add("two sessions", [f"second session refused although /health allows {max_sessions}: "
                                            f"{error}"], "")
            return
        await asyncio.gather(first.reset(seed=1), second.reset(seed=2))
        await asyncio.gather(first.state(), second.state())
        report.add("two sessions", [], "two sessions open, reset and queried at once")
    except ClientError as error:
        report.add("two sessions", [str(error)], "")
    finally:
        await asyncio.gather(first.close(), second.close())


async def _connect_once_free(client: Any, within_s: float) -> None:
    """Connect, retrying while the server is still closing the sessions of the checks before (any server)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            await client.connect()
            return
        except CapacityError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


class _McpProblem(Exception):
    """A check of `/mcp` that failed, with what was wrong."""


class _McpRefusal(_McpProblem):
    """The environment refused the made-up tool call: the surface works; a warning, as on the other surfaces."""


async def _check_mcp(report: Report, http_url: str, timeout: float, tools: list[dict[str, Any]]) -> None:
    """`/mcp` in both dialects: OpenEnv's (what `openenv validate` and MCPToolClient need) and standard MCP."""
    import httpx

    names = sorted(tool["function"]["name"] for tool in tools)
    async with httpx.AsyncClient(timeout=timeout, trust_env=False, headers=key_headers()) as http:
        rpc = _JsonRpc(http, http_url + "/mcp", timeout)
        for name, check in (("mcp (openenv)", _check_mcp_openenv), ("mcp (standard)", _check_mcp_standard)):
            try:
                report.add(name, [], await check(rpc, names, tools))
            except _McpProblem as problem:
                report.add(name, [str(problem)], "", warn=isinstance(problem, _McpRefusal))
            except httpx.HTTPError as error:
                report.add(name, [f"POST {http_url}/mcp failed: {type(error).__name__}: {error}"], "")


class _JsonRpc:
    """Posts JSON-RPC requests to `/mcp`, retrying while the server is still closing earlier checks' sessions."""

    def __init__(self, http: Any, url: str, timeout: float) -> None:
        self.http, self.url, self.timeout, self.next_id = http, url, timeout, 0

    async def post(self, body: Any, headers: dict[str, str] | None = None) -> dict[str, Any]:
        response = await self.http.post(self.url, json=body, headers=headers or {})
        try:
            reply = response.json()
        except ValueError:
            reply = None
        if response.status_code != 200 or not isinstance(reply, dict) or reply.get("jsonrpc") != "2.0":
            raise _McpProblem(f"POST /mcp answered HTTP {response.status_code} without a JSON-RPC 2.0 body "
                              f"({response.text[:80]!r}); OpenEnv's validator and clients need 200 and JSON-RPC")
        return reply

    async def call(self, method: str, params: dict[str, Any], *, retry_capacity: bool = False) -> Any:
        deadline = time.monotonic() + self.timeout
        while True:
            self.next_id += 1
            reply = await self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
            error = reply.get("error")
            if error and retry_capacity and error.get("code") == -32000 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                continue
            if error:
                raise _McpProblem(f"{method}: JSON-RPC error {error.get('code')}: {error.get('message')}")
            return reply.get("result")


async def _check_mcp_openenv(rpc: _JsonRpc, names: list[str], tools: list[dict[str, Any]]) -> str:
    empty = await rpc.post({})
    if "error" not in empty:
        raise _McpProblem("POST /mcp with {} should answer a JSON-RPC error (it is not a request)")
    session_id = ((await rpc.call("openenv/session/create", {}, retry_capacity=True)) or {}).get("session_id")
    if not isinstance(session_id, str):
        raise _McpProblem("openenv/session/create returned no session_id")
    try:
        listed = sorted(tool.get("name") for tool in (await rpc.call("tools/list", {"session_id": session_id}))
                        .get("tools", []))
    finally:
        await rpc.call("openenv/session/close", {"session_id": session_id})
    if listed != names:
        raise _McpProblem(f"tools/list names {listed}, but /tools lists {names}")
    rpc.next_id += 1
    after = await rpc.post({"jsonrpc": "2.0", "id": rpc.next_id, "method": "tools/list",
                            "params": {"session_id": session_id}})
    if "error" not in after:
        raise _McpProblem("a closed session still answers tools/list; it should be gone")
    return f"session create, tools/list ({len(listed)} tools), close; the closed session is gone"


async def _check_mcp_standard(rpc: _JsonRpc, names: list[str], tools: list[dict[str, Any]]) -> str:
    initialized = await rpc.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                                "clientInfo": {"name": "envkit-validate", "version": "1"}})
    if not isinstance(initialized, dict) or "tools" not in initialized.get("capabilities", {}):
        raise _McpProblem("initialize did not offer the tools capability")
    listed = {tool.get("name"): tool for tool in (await rpc.call("tools/list", {})).get("tools", [])}
    missing = sorted({"reset", "close", *names} - set(listed))
    if missing:
        raise _McpProblem(f"tools/list lacks {', '.join(missing)}")
    reset = await rpc.call("tools/call", {"name": "reset", "arguments": {}}, retry_capacity=True)
    episode_id = (reset.get("structuredContent") or {}).get("episode_id")
    if reset.get("isError") or not episode_id:
        raise _McpProblem(f"the reset tool returned no episode_id: {reset.get('content')}")
    detail = "initialize, tools/list, reset"
    try:
        if tools:
            function = tools[0]["function"]
            arguments = example_from_schema(function.get("parameters") or {})
            result = await rpc.call("tools/call", {"name": function["name"],
                                                   "arguments": {**arguments, "episode_id": episode_id}})
            text = (result.get("content") or [{}])[0].get("text", "")
            if result.get("isError"):
                refused = f"{function['name']}({arguments}): {text[:80]}"
                if is_refusal(text):
                    raise _McpRefusal(_refusal_note(refused, text, function.get("parameters") or {}))
                raise _McpProblem(f"{refused} (the environment raised; a ValueError would be a refusal)")
            detail += f", {function['name']}({arguments}) → {text[:40]!r}"
    finally:
        await rpc.call("tools/call", {"name": "close", "arguments": {"episode_id": episode_id}})
    return detail + ", close"


def validate(target: str) -> Report:
    """Validate a URL (`http(s)://`, `ws(s)://`), an env folder, a bundled env by name, or `module:Class`.

    Raises `ConfigurationError` for a name that is none of these."""
    if target.startswith(("http://", "https://", "ws://", "wss://")):
        return asyncio.run(validate_url(target))
    folder = Path(target)
    if is_file_target(target):
        return validate_class(target)
    if folder.exists() or "/" in target or target.startswith("."):
        from ..harbor import is_task_collection

        return validate_tasks(folder) if is_task_collection(folder) else validate_folder(folder)
    if ":" in target:
        return validate_class(target)
    bundled = bundled_envs()
    if target not in bundled:
        resolve_target(target)   # raises the error that names the bundled envs (and a close one)
    return validate_folder(bundled[target])
