"""`envkit push`: stage an env folder as a self-contained Hugging Face Space, and upload it.

The staged folder is the env's own files plus `wheels/envkit-<version>-py3-none-any.whl`, built at
push time, because envkit is not on PyPI: the Space's Dockerfile installs envkit from that wheel
and the env from `.`, taking only third-party packages (fastapi, ...) from the package index.

    staged = stage_space(Path("my_env"), Path("my_env/build/space"))
    space = create_space(staged.name, "alice/my_env", token=huggingface_hub.get_token())  # network, token checked
    url = upload_space(staged, space)

The wheel comes from the envkit source tree when envkit runs from one (an editable install or a
checkout, built with hatchling), and otherwise is repacked from the installed distribution's files.
The Hugging Face token is read by `huggingface_hub`, passed to it alone, and never written anywhere.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import re
import shutil
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..app.targets import read_manifest
from ..errors import ConfigurationError, EnvkitError
from ..protocol import API_KEY_ENV

__all__ = ["PublishError", "StagedSpace", "HubSpace", "not_publishable", "build_envkit_wheel", "stage_space",
           "create_space", "upload_space", "check_repo_id", "STAGED_MARKER"]

#: Left in a staged folder so a later staging may replace it; never uploaded.
STAGED_MARKER = ".envkit-staged"
#: Never copied into a Space: caches, build outputs, virtual environments, VCS data and local secrets.
EXCLUDED_NAMES = frozenset({"__pycache__", ".git", ".hg", ".venv", "venv", "build", "dist", "wheels", ".pytest_cache",
                            ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints", ".env", ".netrc", ".DS_Store",
                            STAGED_MARKER})
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
_SOURCE_ROOT = Path(__file__).resolve().parents[3]


class PublishError(EnvkitError):
    """Staging or uploading a Space failed; the message says why and what to do."""


@dataclass
class StagedSpace:
    """A staged Space folder: its path, the env's name, and the files it holds (relative paths)."""

    folder: Path
    name: str
    files: list[str]

    def listing(self) -> list[tuple[str, int]]:
        """(relative path, size in bytes) of every file that would be uploaded."""
        return [(name, (self.folder / name).stat().st_size) for name in self.files]


# -- the envkit wheel ----------------------------------------------------------------------------


def not_publishable(directory: Path) -> str | None:
    """Why `directory` cannot become a Space, in one line; None for an env folder (its pyproject.toml)."""
    if (directory / "pyproject.toml").is_file():
        return None
    from ..harbor import is_task_collection

    if is_task_collection(directory):
        return (f"{directory} holds Harbor tasks, which a Space cannot serve: each session runs in a task container, "
                "so where it is served needs a Docker engine (a Space has none); serve it with `envkit serve "
                f"{directory}` on a machine with one (DOCKER_HOST), and publish the task folders as they are")
    return f"{directory} is not an env folder (no pyproject.toml); pass the folder `envkit new` made"


def build_envkit_wheel(directory: Path) -> Path:
    """Write a wheel of the running envkit into `directory` and return its path.

    From the source tree when envkit runs from one (built by hatchling, as `pip wheel` would),
    else repacked from the installed distribution's recorded files.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if _is_source_tree(_SOURCE_ROOT):
        from hatchling.builders.wheel import WheelBuilder

        (built,) = WheelBuilder(str(_SOURCE_ROOT)).build(directory=str(directory), versions=["standard"])
        return Path(built)
    return repack_distribution(importlib.metadata.distribution("envkit"), directory)


def _is_source_tree(root: Path) -> bool:
    pyproject = root / "pyproject.toml"
    if not (pyproject.is_file() and (root / "src" / "envkit" / "__init__.py").is_file()):
        return False
    return tomllib.loads(pyproject.read_text()).get("project", {}).get("name") == "envkit"


def repack_distribution(dist: importlib.metadata.Distribution, directory: Path) -> Path:
    """Rebuild the wheel an installed, pure-Python distribution came from, from the files its RECORD lists."""
    files = [path for path in dist.files or [] if _belongs_in_wheel(path)]
    info = next((path.parent.name for path in files if path.name == "METADATA"), None)
    if info is None or not any(path.name == "WHEEL" for path in files):
        raise PublishError(f"{dist.metadata['Name']} {dist.version} is installed without wheel metadata (an "
                           "editable or legacy install without its source tree); reinstall it from a wheel or run "
                           "envkit from its source checkout")
    name = dist.metadata["Name"].replace("-", "_")
    wheel = directory / f"{name}-{dist.version}-py3-none-any.whl"
    record: list[tuple[str, str, str]] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            data = Path(dist.locate_file(path)).read_bytes()
            archive.writestr(path.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append((path.as_posix(), f"sha256={digest}", str(len(data))))
        record.append((f"{info}/RECORD", "", ""))
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(record)
        archive.writestr(f"{info}/RECORD", text.getvalue())
    return wheel


def _belongs_in_wheel(path: importlib.metadata.PackagePath) -> bool:
    """Installed files that are not part of the wheel: byte code, scripts pip wrote, and pip's own records."""
    parts = path.parts
    if ".." in parts or "__pycache__" in parts or path.suffix == ".pyc":
        return False
    return not (parts[0].endswith(".dist-info") and path.name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"))


# -- staging -------------------------------------------------------------------------------------


def stage_space(env_dir: Path, stage_dir: Path) -> StagedSpace:
    """Copy `env_dir` into `stage_dir` with a freshly built envkit wheel in `wheels/`.

    `stage_dir` must be absent, empty, or an earlier staging (which is replaced).
    """
    manifest = read_manifest(env_dir)
    env_dir, stage_dir = env_dir.resolve(), stage_dir.resolve()
    if stage_dir == env_dir or (env_dir in stage_dir.parents and not _is_excluded(stage_dir.relative_to(env_dir))):
        raise PublishError(f"the stage folder {stage_dir} lies inside the env folder and would be copied into "
                           "itself; use a folder under build/ or outside the env")
    if stage_dir.exists():
        if not stage_dir.is_dir() or (any(stage_dir.iterdir()) and not (stage_dir / STAGED_MARKER).exists()):
            raise PublishError(f"{stage_dir} exists and was not written by `envkit push`; remove it or pass another "
                               "--stage-dir (nothing was changed)")
        shutil.rmtree(stage_dir)
    shutil.copytree(env_dir, stage_dir, ignore=lambda folder, names: [name for name in names
                                                                       if _is_excluded(Path(name))])
    (stage_dir / STAGED_MARKER).write_text("written by `envkit push`; replaced by the next staging\n")
    build_envkit_wheel(stage_dir / "wheels")
    files = sorted(path.relative_to(stage_dir).as_posix() for path in stage_dir.rglob("*")
                   if path.is_file() and path.name != STAGED_MARKER)
    return StagedSpace(stage_dir, str(manifest.get("name", env_dir.name)), files)


def _is_excluded(relative: Path) -> bool:
    return any(part in EXCLUDED_NAMES or part.endswith(EXCLUDED_SUFFIXES) for part in relative.parts)


# -- upload --------------------------------------------------------------------------------------


def check_repo_id(repo_id: str) -> str:
    """Return `repo_id` if it has the `user/name` shape the Hub accepts, else raise `ConfigurationError`."""
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*", repo_id) or ".." in repo_id:
        raise ConfigurationError(f"repo id {repo_id!r} must look like user/name (letters, digits, '-', '_', '.')")
    return repo_id


@dataclass
class HubSpace:
    """A Space on the Hub that exists and that the token may write to: what `create_space` returns."""

    api: Any
    repo_id: str

    @property
    def url(self) -> str:
        return f"{self.api.endpoint.rstrip('/')}/spaces/{self.repo_id}"


def create_space(name: str, repo_id: str | None, *, private: bool = False, token: str | None = None,
                 api_key: str | None = None) -> HubSpace:
    """Create the Space (docker SDK) if missing; the first call that needs the network and the token.

    `repo_id` None means `<user>/<name>` for the token's user. The token defaults to huggingface_hub's
    own lookup (HF_TOKEN, then the login cache). `api_key`: set as the Space secret `ENVKIT_API_KEY`
    (before any upload, so the Space never runs without it), which makes `envkit serve` in the Space
    require it; the key is sent to the Hub alone. Raises `PublishError` when the Hub cannot be reached
    or refuses.
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    with _hub_errors(api, "asking the Hub whose token this is") as doing:
        if repo_id is None:
            repo_id = f"{api.whoami()['name']}/{name}"
        doing[0] = f"creating or uploading to {repo_id}"
        api.create_repo(repo_id, repo_type="space", space_sdk="docker", private=private, exist_ok=True)
        if api_key:
            doing[0] = f"setting the secret {API_KEY_ENV} of {repo_id}"
            api.add_space_secret(repo_id, API_KEY_ENV, api_key,
                                 description="API key envkit serve requires (X-API-Key or Authorization: Bearer)")
    return HubSpace(api, repo_id)


def upload_space(staged: StagedSpace, space: HubSpace | str | None, *, private: bool = False,
                 token: str | None = None, api_key: str | None = None) -> str:
    """Upload the staged folder to `space` (from `create_space`, or a repo id / None, created first with
    `private`, `token` and `api_key`); returns the Space's URL."""
    if not isinstance(space, HubSpace):
        space = create_space(staged.name, space, private=private, token=token, api_key=api_key)
    with _hub_errors(space.api, f"creating or uploading to {space.repo_id}"):
        space.api.upload_folder(repo_id=space.repo_id, repo_type="space", folder_path=str(staged.folder),
                                ignore_patterns=[STAGED_MARKER], commit_message=f"envkit push: {staged.name}")
    return space.url


@contextmanager
def _hub_errors(api: Any, doing: str) -> Iterator[list[str]]:
    """Turn the Hub's refusals and network failures into one `PublishError` saying what was being done."""
    import httpx
    from huggingface_hub.errors import HfHubHTTPError

    step = [doing]
    try:
        yield step
    except HfHubHTTPError as error:
        raise PublishError(f"the Hugging Face Hub refused {step[0]}: {error}") from None
    except (httpx.HTTPError, OSError) as error:
        raise PublishError(f"cannot reach the Hugging Face Hub at {api.endpoint} while {step[0]} "
                           f"({type(error).__name__}: {error}); check the network or HF_ENDPOINT") from None
