"""`envkit push`: the staged Space folder, the upload calls, and proof that the staged folder stands on its own.

No Hugging Face Hub is reachable here, so uploads go to a stand-in for the Hub API served on
127.0.0.1 (`HF_ENDPOINT` points `huggingface_hub` at it): it answers whoami, repo creation, the
pre-upload query and the commit as the Hub does, and keeps what it was sent.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterator

import pytest
from dockerfile_replay import Replay
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from envkit import EnvClient
from envkit.publish.space import STAGED_MARKER
from envkit.publish.scaffold import render_env
from envkit.app.targets import bundled_envs
from envkit.testing import running_server

REPO = Path(__file__).resolve().parents[1]
TOKEN = "hf_standin_secret_0123456789"
ECHO_FILES = ["Dockerfile", "README.md", "echo_env/__init__.py", "echo_env/environment.py", "echo_env/models.py",
              "echo_env/policies.py", "echo_env/server.py", "pyproject.toml"]


def envkit(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envkit.cli", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


def hub_env(tmp_path: Path, endpoint: str, token: str | None = TOKEN) -> dict[str, str]:
    """A process environment whose Hugging Face settings point at `endpoint` and hold `token` only."""
    import os

    env = {key: value for key, value in os.environ.items() if not key.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1")
    if token is not None:
        env["HF_TOKEN"] = token
    return env


@pytest.fixture
def echo_copy(tmp_path: Path) -> Path:
    """envs/echo copied, with the clutter a working folder collects (none of it may be staged)."""
    folder = tmp_path / "echo"
    shutil.copytree(bundled_envs()["echo"], folder, ignore=shutil.ignore_patterns("__pycache__", "build", "tests"))
    (folder / ".env").write_text(f"HF_TOKEN={TOKEN}\n")
    for clutter in ("echo_env/__pycache__/models.cpython-311.pyc", ".venv/bin/python", "build/old/file",
                    "dist/echo-0.1.whl", "wheels/stale.whl", ".git/HEAD", "envkit_echo.egg-info/PKG-INFO"):
        (folder / clutter).parent.mkdir(parents=True, exist_ok=True)
        (folder / clutter).write_text("clutter")
    return folder


def staged_files(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())


def assert_valid_wheel(path: Path) -> list[str]:
    """The wheel's RECORD lists every file with its right hash; returns the file names."""
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        (record_name,) = [name for name in names if name.endswith(".dist-info/RECORD")]
        rows = list(csv.reader(io.StringIO(archive.read(record_name).decode())))
        assert sorted(row[0] for row in rows) == sorted(names)
        for name, digest, _ in rows:
            if name != record_name:
                expected = base64.urlsafe_b64encode(hashlib.sha256(archive.read(name)).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={expected}", name
    return names


# -- staging -------------------------------------------------------------------------------------


def test_dry_run_stages_the_env_and_an_envkit_wheel_without_network(echo_copy: Path, tmp_path: Path) -> None:
    """HF_ENDPOINT points at a closed port: any request to a Hub would fail the run."""
    done = envkit("push", str(echo_copy), "--dry-run", env=hub_env(tmp_path, "http://127.0.0.1:9"))
    assert done.returncode == 0, done.stderr
    stage = echo_copy / "build" / "space"
    assert staged_files(stage) == sorted([*ECHO_FILES, STAGED_MARKER, "wheels/envkit-0.1.0-py3-none-any.whl"])
    for name in ECHO_FILES:
        assert (stage / name).read_bytes() == (echo_copy / name).read_bytes()
    names = assert_valid_wheel(stage / "wheels" / "envkit-0.1.0-py3-none-any.whl")
    assert {"envkit/__init__.py", "envkit/cli/main.py", "envkit/bundled_envs/echo/pyproject.toml",
            "envkit-0.1.0.dist-info/entry_points.txt"} <= set(names)
    assert f"Staged echo in {stage} (dry run: nothing uploaded)." in done.stdout
    assert "Would create Space <your user>/echo (docker SDK, public) if missing and upload:" in done.stdout
    for name in [*ECHO_FILES, "wheels/envkit-0.1.0-py3-none-any.whl"]:
        assert f"  {name} " in done.stdout
    assert STAGED_MARKER not in done.stdout
    assert TOKEN not in done.stdout + done.stderr
    assert not any(TOKEN.encode() in path.read_bytes() for path in stage.rglob("*") if path.is_file())


def test_push_says_which_sandbox_the_image_will_use(tmp_path: Path) -> None:
    """The coding env opens sandboxes: a Space runs them on the landlock backend, and push says so; the echo env opens
    none, and push says nothing of them."""
    coding = tmp_path / "coding"
    shutil.copytree(REPO / "envs" / "coding", coding, ignore=shutil.ignore_patterns("build", "__pycache__"))
    done = envkit("push", str(coding), "--dry-run", env=hub_env(tmp_path, "http://127.0.0.1:9"))
    assert done.returncode == 0, done.stderr
    assert "Sandboxes in the image: landlock (Landlock ABI 6 or later from the host's kernel" in done.stdout
    done = envkit("push", str(REPO / "envs" / "echo"), "--dry-run", "--stage-dir", str(tmp_path / "echo"))
    assert done.returncode == 0 and "Sandboxes" not in done.stdout, done.stderr


def test_dry_run_replaces_its_own_staging_but_not_a_foreign_folder(echo_copy: Path, tmp_path: Path) -> None:
    stage = tmp_path / "space"
    assert envkit("push", str(echo_copy), "--dry-run", "--stage-dir", str(stage)).returncode == 0
    (stage / "leftover.txt").write_text("from an earlier staging")
    assert envkit("push", str(echo_copy), "--dry-run", "--stage-dir", str(stage)).returncode == 0
    assert not (stage / "leftover.txt").exists()

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    done = envkit("push", str(echo_copy), "--dry-run", "--stage-dir", str(foreign))
    assert done.returncode == 1
    assert "exists and was not written by `envkit push`" in done.stderr
    assert staged_files(foreign) == ["keep.txt"]


def test_a_stage_dir_inside_the_env_is_refused(echo_copy: Path) -> None:
    done = envkit("push", str(echo_copy), "--dry-run", "--stage-dir", str(echo_copy / "space"))
    assert done.returncode == 1
    assert "lies inside the env folder and would be copied into itself" in done.stderr
    assert not (echo_copy / "space").exists()


def test_an_env_that_fails_validation_is_not_staged(echo_copy: Path) -> None:
    dockerfile = echo_copy / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("USER envkit\n", ""))
    done = envkit("push", str(echo_copy), "--dry-run")
    assert done.returncode == 1
    assert "dockerfile           FAIL    the server would run as root" in done.stderr
    assert "is not ready to publish; fix the failed checks above" in done.stderr
    assert not (echo_copy / "build" / "space").exists()


@pytest.mark.parametrize("args, message", [
    (["--repo-id", "no-slash"], "must look like user/name"),
    (["--repo-id", "a/b/c"], "must look like user/name"),
    (["--repo-id", "alice/"], "must look like user/name"),
    (["--bogus"], "No such option '--bogus'"),
])
def test_bad_options_are_usage_errors(echo_copy: Path, args: list[str], message: str) -> None:
    done = envkit("push", str(echo_copy), "--dry-run", *args)
    assert done.returncode == 2 and message in done.stderr


def test_a_folder_that_is_not_an_env_is_a_usage_error(tmp_path: Path) -> None:
    done = envkit("push", str(tmp_path), "--dry-run")
    assert done.returncode == 2 and "is not an env folder (no pyproject.toml)" in done.stderr
    done = envkit("push", str(tmp_path / "missing"), "--dry-run")
    assert done.returncode == 2 and "does not exist" in done.stderr


@pytest.mark.parametrize("folder", ["examples/harbor_tasks", "examples/harbor_tasks/count-inbox"])
def test_a_harbor_task_folder_is_refused_in_one_line_saying_it_needs_an_engine(folder: str) -> None:
    done = envkit("push", str(Path(__file__).resolve().parents[1] / folder), "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "holds Harbor tasks, which a Space cannot serve" in done.stderr and "needs a Docker engine" in done.stderr
    assert "Traceback" not in done.stderr


def test_push_without_a_token_says_how_to_log_in(echo_copy: Path, tmp_path: Path) -> None:
    done = envkit("push", str(echo_copy), env=hub_env(tmp_path, "http://127.0.0.1:9", token=None))
    assert done.returncode == 1
    assert "no Hugging Face token; set HF_TOKEN or run `hf auth login`" in done.stderr
    assert "Uploading" not in done.stdout and "wheels/" not in done.stdout


# -- uploading to a stand-in for the Hub API -----------------------------------------------------


class StandInHub:
    """The Hub API endpoints `huggingface_hub` calls to create a Space and upload a folder."""

    def __init__(self, refuse_creation: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.authorizations: set[str | None] = set()
        self.created: list[dict[str, Any]] = []
        self.commits: list[dict[str, bytes]] = []
        self.validated: list[dict[str, str]] = []
        self.secrets: list[dict[str, str]] = []
        self.app = FastAPI()
        self.app.add_api_route("/{path:path}", self.handle, methods=["GET", "POST"])
        self.refuse_creation = refuse_creation

    async def handle(self, path: str, request: Request) -> Any:
        self.calls.append((request.method, path))
        self.authorizations.add(request.headers.get("authorization"))
        base = str(request.base_url).rstrip("/")
        body = await request.body()
        if path == "api/whoami-v2":
            return {"name": "alice", "type": "user"}
        if path == "api/repos/create":
            if self.refuse_creation:
                return JSONResponse({"error": "You don't have the rights to create a Space under this namespace"},
                                    status_code=403)
            self.created.append(json.loads(body))
            repo = f"{self.created[-1]['organization']}/{self.created[-1]['name']}"
            return {"url": f"{base}/spaces/{repo}", "name": repo}
        if path.endswith("/secrets"):
            self.secrets.append(json.loads(body))
            return {}
        if path == "api/validate-yaml":  # the Hub checks a README's front matter before the commit
            self.validated.append(json.loads(body))
            return {"errors": [], "warnings": []}
        if path.endswith("/preupload/main"):
            return {"files": [{"path": item["path"], "uploadMode": "regular", "shouldIgnore": False}
                              for item in json.loads(body)["files"]]}
        if path.endswith("/commit/main"):
            lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
            self.commits.append({line["value"]["path"]: base64.b64decode(line["value"]["content"])
                                 for line in lines if line["key"] == "file"})
            repo = path.split("/")[2] + "/" + path.split("/")[3]
            return {"commitUrl": f"{base}/spaces/{repo}/commit/{'0' * 40}", "commitOid": "0" * 40}
        return JSONResponse({"error": f"the stand-in Hub has no {request.method} /{path}"}, status_code=404)


@pytest.fixture
def hub() -> Iterator[tuple[StandInHub, str]]:
    stand_in = StandInHub()
    with running_server(stand_in.app) as url:
        yield stand_in, url


def test_push_creates_the_space_and_uploads_the_staged_files(echo_copy: Path, tmp_path: Path,
                                                             hub: tuple[StandInHub, str]) -> None:
    stand_in, url = hub
    done = envkit("push", str(echo_copy), "--private", env=hub_env(tmp_path, url))
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(stand_in.calls) == [("GET", "api/whoami-v2"), ("POST", "api/repos/create"),
                                      ("POST", "api/spaces/alice/echo/commit/main"),
                                      ("POST", "api/spaces/alice/echo/preupload/main"), ("POST", "api/validate-yaml")]
    assert stand_in.validated == [{"content": (echo_copy / "README.md").read_text(), "repoType": "space"}]
    assert stand_in.authorizations == {f"Bearer {TOKEN}"}
    assert stand_in.created == [{"name": "echo", "organization": "alice", "visibility": "private", "type": "space",
                                 "sdk": "docker"}]
    (uploaded,) = stand_in.commits
    assert envkit("push", str(echo_copy), "--dry-run").returncode == 0
    stage = echo_copy / "build" / "space"
    assert sorted(uploaded) == [name for name in staged_files(stage) if name != STAGED_MARKER]
    for name, content in uploaded.items():
        assert content == (stage / name).read_bytes(), name
    assert f"Pushed: {url}/spaces/alice/echo" in done.stdout
    assert TOKEN not in done.stdout + done.stderr


def test_push_to_a_named_public_space(echo_copy: Path, tmp_path: Path, hub: tuple[StandInHub, str]) -> None:
    stand_in, url = hub
    done = envkit("push", str(echo_copy), "--repo-id", "team/echo-demo", env=hub_env(tmp_path, url))
    assert done.returncode == 0, done.stderr
    assert ("GET", "api/whoami-v2") not in stand_in.calls
    assert stand_in.created[0]["organization"] == "team" and stand_in.created[0]["name"] == "echo-demo"
    assert stand_in.created[0]["visibility"] == "public"


def test_push_sets_the_api_key_as_a_space_secret_before_uploading(echo_copy: Path, tmp_path: Path,
                                                                  hub: tuple[StandInHub, str]) -> None:
    """The stand-in Hub records the secret; the key is sent to it alone and printed nowhere."""
    stand_in, url = hub
    key = "space-key-5d1e0b"
    done = envkit("push", str(echo_copy), "--api-key-env", "MY_SPACE_KEY",
                  env={**hub_env(tmp_path, url), "MY_SPACE_KEY": key})
    assert done.returncode == 0, done.stderr
    assert [{"key": secret["key"], "value": secret["value"]} for secret in stand_in.secrets] == [
        {"key": "ENVKIT_API_KEY", "value": key}]
    methods = [call for call in stand_in.calls if call[1].endswith(("/secrets", "/commit/main"))]
    assert methods == [("POST", "api/spaces/alice/echo/secrets"), ("POST", "api/spaces/alice/echo/commit/main")]
    assert key not in done.stdout + done.stderr and "warning" not in done.stderr
    assert "X-API-Key" in done.stdout


def test_push_warns_when_it_publishes_a_public_space_without_a_key(echo_copy: Path, tmp_path: Path,
                                                                   hub: tuple[StandInHub, str]) -> None:
    stand_in, url = hub
    done = envkit("push", str(echo_copy), env=hub_env(tmp_path, url))
    assert done.returncode == 0, done.stderr
    assert "warning: this publishes a public Space without an API key" in done.stderr
    assert stand_in.secrets == []
    private = envkit("push", str(echo_copy), "--private", env=hub_env(tmp_path, url))
    assert private.returncode == 0 and "warning" not in private.stderr
    unset = envkit("push", str(echo_copy), "--api-key-env", "NO_SUCH_KEY_VARIABLE", env=hub_env(tmp_path, url))
    assert unset.returncode == 2 and "NO_SUCH_KEY_VARIABLE is not set or empty" in unset.stderr


def test_a_refusal_from_the_hub_is_reported_without_the_token(echo_copy: Path, tmp_path: Path) -> None:
    stand_in = StandInHub(refuse_creation=True)
    with running_server(stand_in.app) as url:
        done = envkit("push", str(echo_copy), "--repo-id", "bob/echo", env=hub_env(tmp_path, url))
    assert done.returncode == 1
    assert "the Hugging Face Hub refused creating or uploading to bob/echo" in done.stderr
    assert "403" in done.stderr and "rights to create a Space" in done.stderr
    assert stand_in.commits == [] and "Uploading" not in done.stdout
    assert TOKEN not in done.stdout + done.stderr


def test_an_unreachable_hub_is_reported(echo_copy: Path, tmp_path: Path) -> None:
    """HF_ENDPOINT points at a closed port on 127.0.0.1."""
    done = envkit("push", str(echo_copy), env=hub_env(tmp_path, "http://127.0.0.1:9"))
    assert done.returncode == 1
    assert "cannot reach the Hugging Face Hub at http://127.0.0.1:9 while asking the Hub whose token this is" in done.stderr
    assert "check the network or HF_ENDPOINT" in done.stderr and TOKEN not in done.stdout + done.stderr
    assert done.stdout == ""   # no "Uploading ..." nor a file list before the Hub has answered


# -- the staged folder stands on its own ---------------------------------------------------------


def test_the_staged_space_installs_and_serves_from_its_own_files(tmp_path: Path) -> None:
    """Replay the staged Dockerfile in a fresh venv that cannot see the project checkout.

    The venv has no system site-packages (envkit is installed there from the checkout); pip takes
    envkit from the staged wheel and third-party packages from the package index, as the Space's
    build does. Then the Dockerfile's start and health-check commands run from that venv, an
    episode is played against the server, and the installed envkit repacks itself into a wheel
    identical in content to the staged one (the path `envkit push` takes outside a checkout).
    """
    env_folder = render_env("space_check_env", tmp_path / "src")
    staged = tmp_path / "staged"
    assert envkit("push", str(env_folder), "--dry-run", "--stage-dir", str(staged)).returncode == 0
    space = tmp_path / "space"  # what the Space's build sees: the staged files alone
    shutil.copytree(staged, space, ignore=shutil.ignore_patterns(STAGED_MARKER))
    shutil.rmtree(tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    replay = Replay(space / "Dockerfile", space, venv / "bin", VIRTUAL_ENV=str(venv))
    replay.install()

    python = str(venv / "bin" / "python")
    located = subprocess.run([python, "-c", "import envkit, space_check_env; print(envkit.__file__); "
                                            "print(space_check_env.__file__)"],
                             capture_output=True, text=True, env=replay.env, cwd=tmp_path, timeout=60)
    assert located.returncode == 0, located.stderr
    for line in located.stdout.split():
        assert line.startswith(str(venv / "lib")), line

    with replay.started() as url:
        assert replay.healthcheck(url) == 0
        with EnvClient(url).sync() as env:
            env.reset(seed=5)
            result = env.step({"guess": 50})
            assert result.observation["guesses_left"] == 6
            assert env.call("guess", number=25).observation["guesses_left"] == 5

    repack = subprocess.run([python, "-c", "import sys; from pathlib import Path; from envkit.publish.space import "
                                           "build_envkit_wheel; print(build_envkit_wheel(Path(sys.argv[1])))",
                             str(tmp_path / "repacked")], capture_output=True, text=True, env=replay.env,
                            cwd=tmp_path, timeout=60)
    assert repack.returncode == 0, repack.stderr
    repacked = Path(repack.stdout.strip())
    original = space / "wheels" / "envkit-0.1.0-py3-none-any.whl"
    assert repacked.name == original.name
    assert sorted(assert_valid_wheel(repacked)) == sorted(assert_valid_wheel(original))
    with zipfile.ZipFile(repacked) as new, zipfile.ZipFile(original) as old:
        for name in old.namelist():
            if not name.endswith("RECORD"):
                assert new.read(name) == old.read(name), name
