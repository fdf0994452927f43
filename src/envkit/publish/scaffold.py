"""`envkit new`: render the cookiecutter template in `templates/env` into a Space-ready env folder.

    from envkit.publish.scaffold import render_env
    folder = render_env("my_env", Path("."))      # ./my_env, ready for `pip install -e ./my_env`

The name becomes the Python package, the `[tool.envkit]` name and the prefix of the class names
(`my_env` → `MyEnvEnvironment`), so it must be a lowercase identifier that imports unambiguously.
"""

from __future__ import annotations

import importlib.util
import keyword
import re
import shutil
import sys
import tempfile
from pathlib import Path

from ..errors import ConfigurationError
from ..version import __version__

__all__ = ["EnvNameError", "check_env_name", "template_dir", "render_env"]

_PACKAGE_DIR = Path(__file__).resolve().parents[1]   # src/envkit
#: Where the template lives: inside an installed wheel, or at the root of a source checkout.
TEMPLATE_ROOTS = (_PACKAGE_DIR / "templates", _PACKAGE_DIR.parents[1] / "templates")
TEMPLATE_NAME = "env"
_LOWER_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")
#: Names an env's package cannot take: the env's tests folder, and the folders
#: `envkit push` leaves out of a Space (the package would be left out with them).
_RESERVED = frozenset({"test", "tests", "build", "dist", "wheels", "venv"})


class EnvNameError(ConfigurationError):
    """The env name cannot become a package name, or its folder already exists."""


def check_env_name(name: str) -> None:
    """Raise `EnvNameError` saying what is wrong with `name` as an env name, and what to use instead."""
    if not name:
        raise EnvNameError("the env name is empty; give one like `my_env` (lowercase letters, digits and _)")
    suggestion = re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_")
    if suggestion and suggestion[0].isdigit():
        suggestion = "env_" + suggestion
    hint = f"; try `{suggestion}`" if suggestion and _LOWER_IDENTIFIER.match(suggestion) else ""
    other = f"pick another name, e.g. `{name}_env`"
    if not name.isidentifier():
        raise EnvNameError(f"{name!r} is not a Python identifier, and the env name becomes its package name: "
                           f"use lowercase letters, digits and _ and start with a letter{hint}")
    if not _LOWER_IDENTIFIER.match(name):
        raise EnvNameError(f"{name!r} must be lowercase and start with a letter (it becomes a package name){hint}")
    if keyword.iskeyword(name) or keyword.issoftkeyword(name):
        raise EnvNameError(f"{name!r} is a Python keyword and cannot be imported as a package; {other}")
    if name in sys.stdlib_module_names or name == "envkit":
        raise EnvNameError(f"{name!r} is already a module name (standard library or envkit), so `import {name}` "
                           f"would be ambiguous; {other}")
    if name in _RESERVED:
        raise EnvNameError(f"{name!r} names a folder an env keeps beside its package (tests) or one `envkit push` "
                           f"leaves out (build, dist, wheels, venv); {other}")
    from ..app.targets import bundled_envs

    bundled = bundled_envs()
    if name in bundled:
        raise EnvNameError(f"{name!r} is the name of a bundled env ({', '.join(bundled)}): `envkit serve {name}` would "
                           f"serve your ./{name} folder from where it lives and envkit's own {name} everywhere else, "
                           f"and the two would share a name on the Hub; pick another name, e.g. `my_{name}`")
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.origin not in (None, "namespace"):
        raise EnvNameError(f"{name!r} is the name of an installed module ({spec.origin}), so `import {name}` would be "
                           f"ambiguous; {other}")


def template_dir() -> Path:
    """The folder holding `cookiecutter.json` of the env template."""
    for root in TEMPLATE_ROOTS:
        if (root / TEMPLATE_NAME / "cookiecutter.json").is_file():
            return root / TEMPLATE_NAME
    raise ConfigurationError(f"the envkit template is missing (looked in {', '.join(map(str, TEMPLATE_ROOTS))}); "
                             "reinstall envkit")


def render_env(name: str, output_dir: Path) -> Path:
    """Render the env template as `output_dir/name` and return that folder.

    Raises `EnvNameError` for a bad name or an existing folder; on any failure nothing is left behind.
    """
    from cookiecutter.generate import generate_context, generate_files
    from cookiecutter.prompt import prompt_for_config

    check_env_name(name)
    target = output_dir / name
    if target.exists() or target.is_symlink():
        raise EnvNameError(f"{target} already exists; choose another name or --output-dir (nothing was changed)")
    if output_dir.exists() and not output_dir.is_dir():
        raise EnvNameError(f"--output-dir {output_dir} is a file, not a folder")
    template = template_dir()
    created = [parent for parent in (output_dir, *output_dir.parents) if not parent.exists()]
    output_dir.mkdir(parents=True, exist_ok=True)
    try:
        # Render into a scratch folder beside the target, then move it into place in one step.
        with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=output_dir) as scratch:
            context = generate_context(context_file=str(template / "cookiecutter.json"),
                                       extra_context={"env_name": name, "envkit_version": __version__})
            context["cookiecutter"] = prompt_for_config(context, no_input=True)
            rendered = Path(generate_files(repo_dir=str(template), context=context, output_dir=scratch))
            rendered.rename(target)
    except BaseException:
        if created:
            shutil.rmtree(created[-1], ignore_errors=True)
        raise
    return target
