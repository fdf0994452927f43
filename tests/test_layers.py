"""The package's layers: no import circles in `src/envkit` or the bundled environments (`envs/`), each layer imports
only itself and the layers below, and a package another uses (`PUBLISHED`) is used through its `__init__`'s
`__all__` only.

Every import counts: at module level, inside functions and under `TYPE_CHECKING` (a circle a type checker sees
is still a circle a reader has to untangle). The graph is read from the source with `ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"
ENVS = Path(__file__).resolve().parents[1] / "envs"

#: The environment contract and the wire protocol: what everything else is written against.
CONTRACT = ("environment", "tools", "episode_metrics", "protocol", "errors", "model_codec", "transcripts", "version",
            "owner")

#: Each layer and the layers it may import (besides itself), lowest first.
ALLOWED: dict[str, set[str]] = {
    "contract": set(),
    "core": {"contract"},
    "surfaces": {"contract", "core"},
    "rubrics": {"contract"},
    "openenv_envs": {"contract", "rubrics"},
    "app": {"contract", "core", "surfaces", "harbor", "openenv_envs"},
    "transport": {"contract", "core", "surfaces", "app"},
    "scale": {"contract", "core", "surfaces", "app", "transport"},
    "client": {"contract"},
    "sandbox": {"contract", "core"},
    "harbor": {"contract", "core", "sandbox", "capture", "agents"},
    "capture": set(),
    "agents": {"contract", "sandbox", "capture"},
    "play": {"contract", "client", "app", "transport", "sandbox"},
    "train": {"contract", "client", "app", "play", "capture", "agents"},
    "evaluate": {"contract", "client", "app", "play"},
    "bench": {"contract", "client"},
    "publish": {"contract", "client", "app", "harbor", "sandbox"},
    "cli": {"contract", "core", "client", "app", "transport", "scale", "play", "train", "evaluate", "bench",
            "publish", "sandbox"},
    "api": {"contract", "client", "app", "transport"},  # `envkit` itself and `envkit.testing`
}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_statements(path: Path, root: Path) -> list[tuple[str, list[str]]]:
    """Each import of the file at `path`: the absolute dotted module, and the names taken from it (none for
    `import x.y`)."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1] + [node.module or ""]).strip(".") if node.level \
                else node.module or ""
            found.append((base, [alias.name for alias in node.names]))
    return found


def imports_of(path: Path, root: Path) -> set[str]:
    """The modules (and names, which may be modules) that the file at `path` imports, as absolute dotted names."""
    found: set[str] = set()
    for base, names in import_statements(path, root):
        found.add(base)
        found.update(f"{base}.{name}" for name in names)
    return found


def import_graph(root: Path, top: str) -> dict[str, set[str]]:
    """Module -> the modules of the same top package it imports."""
    files = {module_name(path, root): path for path in (root / top).rglob("*.py")}
    return {name: {other for other in imports_of(path, root) if other in files and other != name}
            for name, path in files.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = [stack.pop()]
            while group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "testing":
        return "api"
    return "contract" if parts[1] in CONTRACT else parts[1]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, imported in sorted(graph.items()):
        mine = layer(module)
        wrong.extend(f"{module} ({mine}) imports {other} ({layer(other)})" for other in sorted(imported)
                     if layer(other) != mine and layer(other) not in ALLOWED[mine])
    return wrong


def surface(module: str) -> str | None:
    """The surface a module belongs to (`ws`, `mcp`, `ors`, ...: a module or package directly under `surfaces/`)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "surfaces" else None


def surface_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one surface into another: what surfaces share lives in `core/`."""
    return [f"{module} imports {other}" for module, imported in sorted(graph.items()) for other in sorted(imported)
            if surface(module) is not None and surface(other) is not None and surface(module) != surface(other)]


def test_envkit_has_no_import_circles() -> None:
    assert circles(import_graph(SOURCE, "envkit")) == []


def env_packages(envs: Path) -> list[tuple[Path, str]]:
    """Each bundled environment's package (`envs/NAME/PACKAGE/__init__.py`), as (its root, its name)."""
    return [(init.parents[1], init.parent.name) for init in sorted(envs.glob("*/*/__init__.py"))
            if init.parent.name != "tests"]


def env_circles(envs: Path) -> list[list[str]]:
    return [group for root, package in env_packages(envs) for group in circles(import_graph(root, package))]


def test_the_bundled_environments_have_no_import_circles() -> None:
    assert len(env_packages(ENVS)) >= 4
    assert env_circles(ENVS) == []


#: Packages other layers use through the names their `__init__` exports in `__all__`, and nothing else.
PUBLISHED = ("sandbox", "capture", "agents", "harbor")


def exported(root: Path, package: str) -> set[str]:
    """The names in `envkit/<package>/__init__.py`'s `__all__`."""
    tree = ast.parse((root / "envkit" / package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "__all__" for target in node.targets):
            return {element.value for element in node.value.elts}  # type: ignore[attr-defined]
    return set()


def private_imports(root: Path, others: list[tuple[Path, str]] = []) -> list[str]:
    """Imports that take from a `PUBLISHED` package, from outside it, a module of its own or a name its `__all__`
    lacks: in `envkit` (under `root`) and in the packages `others` ((root, name) pairs, e.g. the bundled
    environments)."""
    published = {package: exported(root, package) for package in PUBLISHED if (root / "envkit" / package).is_dir()}
    trees = [(root, "envkit"), *others]
    wrong = []
    for tree_root, top in trees:
        for path in sorted((tree_root / top).rglob("*.py")):
            name = module_name(path, tree_root)
            for base, names in import_statements(path, tree_root):
                parts = base.split(".")
                if parts[0] != "envkit" or len(parts) < 2 or parts[1] not in published:
                    continue
                if name == f"envkit.{parts[1]}" or name.startswith(f"envkit.{parts[1]}."):
                    continue   # the package's own modules
                if len(parts) > 2:
                    wrong.append(f"{name} imports {base}")
                else:
                    wrong.extend(f"{name} imports {base}.{taken}" for taken in names
                                 if taken not in published[parts[1]])
    return wrong


def test_layers_use_each_others_exported_names_only() -> None:
    assert private_imports(SOURCE, env_packages(ENVS)) == []


def test_a_planted_private_import_and_a_planted_circle_in_an_environment_are_found(tmp_path: Path) -> None:
    """The checks on a small tree: a name `__all__` lacks, a module of a published package and a function-level
    import of one are found across packages (not inside the package itself), and a circle in a bundled
    environment's package."""
    root = planted_tree(tmp_path / "src", {
        "__init__.py": "", "sandbox/__init__.py": "from .base import CHANNEL, Sandbox\n__all__ = ['Sandbox']\n",
        "sandbox/base.py": "", "sandbox/docker.py": "from .base import CHANNEL\nfrom . import Sandbox\n",
        "agents/__init__.py": "__all__ = []\n",
        "agents/run.py": "from ..sandbox import CHANNEL, Sandbox\ndef late():\n    from envkit.sandbox.docker import x\n",
    })
    envs = tmp_path / "envs"
    for name, text in {"demo/demo_env/__init__.py": "", "demo/demo_env/problems.py": "from .catalog import x\n",
                       "demo/demo_env/catalog.py": "from .problems import y\n", "demo/tests/__init__.py": ""}.items():
        (envs / name).parent.mkdir(parents=True, exist_ok=True)
        (envs / name).write_text(text)
    (envs / "demo" / "demo_env" / "environment.py").write_text("from envkit.sandbox.base import CHANNEL\n")
    assert private_imports(root, env_packages(envs)) == [
        "envkit.agents.run imports envkit.sandbox.CHANNEL", "envkit.agents.run imports envkit.sandbox.docker",
        "demo_env.environment imports envkit.sandbox.base"]
    assert env_circles(envs) == [["demo_env.catalog", "demo_env.problems"]]


def test_every_module_belongs_to_a_known_layer() -> None:
    unknown = sorted({layer(module) for module in import_graph(SOURCE, "envkit")} - set(ALLOWED))
    assert unknown == [], f"new top-level folders need a place in ALLOWED: {unknown}"


def test_each_layer_imports_only_the_layers_below_it() -> None:
    assert layer_violations(import_graph(SOURCE, "envkit")) == []


def test_surfaces_share_code_through_core_not_through_each_other() -> None:
    assert surface_crossings(import_graph(SOURCE, "envkit")) == []


#: What the fast paths rely on: uvicorn's protocols and server state, websockets' sans-I/O parser and frames.
INTERNALS = ("uvicorn.protocols", "uvicorn.server", "websockets.protocol", "websockets.frames", "websockets.streams")


def fast_path_leaks(root: Path) -> list[str]:
    """Modules outside `transport/` that import what the fast paths rely on, and modules outside `transport/fast/`
    that import one of its modules rather than its seam (`envkit.transport.fast` itself)."""
    behind = {module_name(path, root) for path in (root / "envkit" / "transport" / "fast").rglob("*.py")}
    behind.discard("envkit.transport.fast")
    leaks = []
    for path in sorted((root / "envkit").rglob("*.py")):
        name = module_name(path, root)
        found: list[str] = []
        for other in sorted(imports_of(path, root)):   # a module sorts before the names imported from it
            if any(other.startswith(f"{seen}.") for seen in found):
                continue
            if (other.startswith(INTERNALS) and not name.startswith("envkit.transport")) or (
                    other in behind and not name.startswith("envkit.transport.fast")):
                found.append(other)
        leaks.extend(f"{name} imports {other}" for other in found)
    return leaks


def test_the_fast_paths_stay_behind_their_seam() -> None:
    assert fast_path_leaks(SOURCE) == []


def test_a_planted_fast_path_leak_is_found(tmp_path: Path) -> None:
    root = planted_tree(tmp_path, {
        "__init__.py": "", "core/__init__.py": "", "core/eager.py": "from uvicorn.protocols.utils import x\n",
        "transport/__init__.py": "", "transport/server.py": "from .fast import protocol_classes\n",
        "transport/fast/__init__.py": "from .inline import InlineWebSocket\n", "transport/fast/inline.py": "",
        "surfaces/__init__.py": "", "surfaces/ws.py": "from ..transport.fast.inline import InlineWebSocket\n",
    })
    assert fast_path_leaks(root) == ["envkit.core.eager imports uvicorn.protocols.utils",
                                     "envkit.surfaces.ws imports envkit.transport.fast.inline"]


def test_train_and_evaluate_share_code_through_play_not_through_each_other() -> None:
    assert "evaluate" not in ALLOWED["train"] and "train" not in ALLOWED["evaluate"]
    graph = import_graph(SOURCE, "envkit")
    crossing = [(module, other) for module, imported in graph.items() for other in imported
                if {layer(module), layer(other)} == {"train", "evaluate"}]
    assert crossing == []


def test_the_top_of_the_package_holds_about_a_dozen_modules() -> None:
    assert len(list((SOURCE / "envkit").glob("*.py"))) <= 12


def planted_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "envkit" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_planted_circle_is_found(tmp_path: Path) -> None:
    """The checks on a small tree: a circle through a function-level and a `TYPE_CHECKING` import is found."""
    root = planted_tree(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "core/__init__.py": "",
        "core/sessions.py": "from ..errors import *\nfrom .metrics import Counter\n",
        "core/metrics.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sessions import Pool\n",
        "client/__init__.py": "def connect():\n    from ..core import sessions\n",
    })
    graph = import_graph(root, "envkit")
    assert circles(graph) == [["envkit.core.metrics", "envkit.core.sessions"]]
    assert layer_violations(graph) == ["envkit.client (client) imports envkit.core (core)",
                                       "envkit.client (client) imports envkit.core.sessions (core)"]


def test_a_planted_surface_crossing_is_found(tmp_path: Path) -> None:
    """The surface check on a small tree: a surface importing another (module or package) is found; a surface's own
    modules and `core/` are not."""
    root = planted_tree(tmp_path, {
        "__init__.py": "", "core/__init__.py": "", "core/served_env.py": "", "surfaces/__init__.py": "",
        "surfaces/ws.py": "from ..core.served_env import ServedEnv\n",
        "surfaces/ors.py": "from .ws import SessionHandler\n",
        "surfaces/mcp/__init__.py": "from .endpoint import McpEndpoint\n",
        "surfaces/mcp/endpoint.py": "def late():\n    from ..ws import INLINE_FRAMES\n",
    })
    assert surface_crossings(import_graph(root, "envkit")) == [
        "envkit.surfaces.mcp.endpoint imports envkit.surfaces.ws", "envkit.surfaces.ors imports envkit.surfaces.ws"]


@pytest.mark.parametrize(("text", "expected"), [
    ("from .. import errors\n", {"envkit", "envkit.errors"}),   # the package itself is imported first
    ("import envkit.errors\n", {"envkit.errors"}),
    ("from ..errors import X\n", {"envkit.errors"}),
    ("def late():\n    from envkit.errors import X\n", {"envkit.errors"}),
])
def test_every_import_form_is_read(tmp_path: Path, text: str, expected: set[str]) -> None:
    root = planted_tree(tmp_path, {"__init__.py": "", "errors.py": "", "core/__init__.py": "", "core/pool.py": text})
    assert import_graph(root, "envkit")["envkit.core.pool"] == expected
