"""The project's images, built and run on a real Docker engine (scripts/docker_engine.sh; skipped without one).

The top-level image serves the bundled env it is given, takes its settings from the container's environment and
serves an env folder mounted read-only; each bundled env's Space image and a fresh `envkit new` env's serve an
episode through `EnvClient.from_docker_image`, and closing the client removes the container.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from docker.errors import NotFound
from docker_engine import docker_engine, envkit_cli, own_containers, root_image, staged_env_image  # noqa: F401

from envkit import EnvClient
from envkit.app.targets import bundled_envs
from envkit.client.docker import start_container
from envkit.publish.scaffold import render_env


def health_check_exit_code(container: Any) -> int:
    """Run the image's own HEALTHCHECK command inside the container now (Docker's first check waits 30 s)."""
    test = container.attrs["Config"]["Healthcheck"]["Test"]
    command = ["sh", "-c", test[1]] if test[0] == "CMD-SHELL" else test[1:]
    return container.exec_run(command).exit_code


def assert_removed(docker_engine: Any, container_id: str) -> None:
    with pytest.raises(NotFound):
        docker_engine.containers.get(container_id)


@pytest.fixture(scope="module")
def new_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An env made by `envkit new`, as a user would."""
    output = tmp_path_factory.mktemp("new")
    done = envkit_cli("new", "docker_check_env", "--output-dir", str(output))
    assert done.returncode == 0, done.stderr
    return output / "docker_check_env"


# -- the top-level image ---------------------------------------------------------------------------


def test_root_image_serves_echo_with_settings_from_the_environment_and_validates(docker_engine: Any,
                                                                                 root_image: str) -> None:
    running = start_container(root_image, docker_client=docker_engine,
                              env_vars={"MAX_CONCURRENT_ENVS": "3", "SESSION_TIMEOUT_S": "7"})
    try:
        health = httpx.get(running.url + "/health", trust_env=False).json()
        assert health["status"] == "healthy" and health["max_sessions"] == 3
        metadata = httpx.get(running.url + "/metadata", trust_env=False).json()
        assert metadata["name"] == "echo" and metadata["session_timeout_s"] == 7
        validated = envkit_cli("validate", running.url)
        assert validated.returncode == 0, validated.stdout + validated.stderr
        assert health_check_exit_code(running.container) == 0
        running.container.reload()
        assert running.container.attrs["Config"]["User"] == "envkit"
    finally:
        running.stop()
    assert_removed(docker_engine, running.container.id)


@pytest.mark.parametrize("name", sorted(bundled_envs()))
def test_root_image_serves_the_bundled_env_named_by_its_argument(docker_engine: Any, root_image: str,
                                                                 name: str) -> None:
    running = start_container(root_image, docker_client=docker_engine, run_options={"command": [name]})
    try:
        assert httpx.get(running.url + "/metadata", trust_env=False).json()["name"] == name
        with EnvClient(running.url).sync() as env:
            env.reset()
            assert env.state() is not None
    finally:
        running.stop()


def test_root_image_serves_an_env_folder_mounted_read_only(docker_engine: Any, root_image: str,
                                                           new_env: Path) -> None:
    with EnvClient.from_docker_image(root_image, docker_client=docker_engine, run_options={
            "command": ["/env", "--session-timeout", "60"],
            "volumes": {str(new_env): {"bind": "/env", "mode": "ro"}}}).sync() as env:
        (container,) = own_containers(docker_engine, root_image)
        assert [(mount["Destination"], mount["RW"]) for mount in container.attrs["Mounts"]] == [("/env", False)]
        metadata = httpx.get(env.client.http_url + "/metadata", trust_env=False).json()
        assert metadata["name"] == "docker_check_env" and metadata["session_timeout_s"] == 60
        env.reset(seed=5)
        assert env.step({"guess": 50}).observation["guesses_left"] == 6


# -- env images as their Spaces build them ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(bundled_envs()))
def test_each_bundled_env_image_builds_serves_and_validates(docker_engine: Any, tmp_path: Path, name: str) -> None:
    """Every bundled env's Space image validates in a plain container, the coding env's tools included: its
    sandboxes run on the landlock backend there (bubblewrap needs namespaces that Docker's default profile and a
    Space refuse, and no engine is reachable), so its tool calls run commands."""
    folder = tmp_path / name   # stage from a copy: `push --dry-run` writes into the env folder's build/
    shutil.copytree(bundled_envs()[name], folder, ignore=shutil.ignore_patterns("build", "__pycache__"))
    image = staged_env_image(name, folder, tmp_path / "space")
    client = EnvClient.from_docker_image(image, docker_client=docker_engine)
    (container,) = own_containers(docker_engine, image)
    with client.sync() as env:
        assert httpx.get(env.client.http_url + "/metadata", trust_env=False).json()["name"] == name
        validated = envkit_cli("validate", env.client.http_url)
        assert validated.returncode == 0, validated.stdout + validated.stderr
        env.reset()
        assert env.state() is not None
    assert_removed(docker_engine, container.id)


def test_a_new_env_through_push_build_and_from_docker_image(docker_engine: Any, tmp_path: Path,
                                                            new_env: Path) -> None:
    folder = tmp_path / new_env.name
    shutil.copytree(new_env, folder)
    image = staged_env_image("docker-check-env", folder, tmp_path / "space")
    client = EnvClient.from_docker_image(image, docker_client=docker_engine)
    (container,) = own_containers(docker_engine, image)
    container.reload()
    assert container.attrs["HostConfig"]["PortBindings"]["8000/tcp"][0]["HostIp"] == "127.0.0.1"
    with client.sync() as env:
        env.reset(seed=5)
        assert env.step({"guess": 50}).observation["guesses_left"] == 6
        assert env.call("guess", number=25).observation["guesses_left"] == 5
        assert health_check_exit_code(container) == 0
    assert_removed(docker_engine, container.id)
