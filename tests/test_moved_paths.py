"""The import paths modules had before the layered layout keep working, and say where the module is now."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from envkit.moved import MOVED


def fresh_import(name: str) -> tuple[object, list[str]]:
    """Import `name` as a first import would, and the warnings it gave."""
    for loaded in [module for module in sys.modules if module == name or module.startswith(name + ".")]:
        if loaded in MOVED or any(loaded.startswith(old + ".") for old in MOVED):
            del sys.modules[loaded]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, [str(warning.message) for warning in caught if warning.category is DeprecationWarning]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_loads_the_module_at_its_new_path(old: str) -> None:
    try:
        importlib.import_module(MOVED[old])
    except ModuleNotFoundError as missing:   # an extra's library (ray) is not installed here
        if (missing.name or "envkit").startswith("envkit"):
            raise
        pytest.skip(f"{MOVED[old]} needs {missing.name}, which is not installed here")
    module, said = fresh_import(old)
    assert module is importlib.import_module(MOVED[old])
    assert f"{old} moved to {MOVED[old]}; import it from there" in said


def test_a_submodule_of_a_moved_package_is_the_same_module_under_both_paths() -> None:
    from envkit.surfaces.mcp.endpoint import McpEndpoint

    module, said = fresh_import("envkit.mcp.endpoint")
    assert module.McpEndpoint is McpEndpoint
    assert "envkit.mcp.endpoint moved to envkit.surfaces.mcp.endpoint; import it from there" in said


@pytest.mark.parametrize(("package", "name", "holder"), [
    ("envkit.app", "MAX_FRAME_BYTES", "envkit.app.asgi"),
    ("envkit.client", "SyncEnvClient", None),
    ("envkit.publish", "stage_space", "envkit.publish.space"),
])
def test_names_of_modules_that_became_packages_are_still_found(package: str, name: str, holder: str | None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(importlib.import_module(package), name)
    said = [str(warning.message) for warning in caught]
    assert value is getattr(importlib.import_module(holder or package), name)
    assert said == ([f"{package}.{name} moved to {holder}.{name}; import it from there"] if holder else [])


def test_a_name_that_never_existed_is_still_an_error() -> None:
    import envkit.publish

    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        envkit.publish.no_such_name  # noqa: B018
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("envkit.no_such_module")
