"""Docker: `EnvClient.from_docker_image`, the top-level Dockerfile, and the env Dockerfiles' shared shape.

No Docker engine runs here, so `from_docker_image` is tested against a stand-in for the Docker SDK
whose "containers" are real `envkit serve` subprocesses on 127.0.0.1; the Dockerfiles' commands
are replayed on this machine (see dockerfile_replay.py) and their shape is checked.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from docker.errors import ImageNotFound, NotFound
from dockerfile_replay import Replay

from envkit import EnvClient
from envkit.client.docker import ContainerError
from envkit.publish.dockerfile import image_env, parse_dockerfile, space_dockerfile_problems, start_command
from envkit.publish.scaffold import template_dir
from envkit.app.targets import bundled_envs
from envkit.testing import ServedProcess, free_port

REPO = Path(__file__).resolve().parents[1]

# -- a stand-in for the Docker SDK ---------------------------------------------------------------


class StandInContainer:
    """Behaves like `docker.models.containers.Container` for what envkit uses; serves with a real subprocess."""

    def __init__(self, image: str, environment: dict[str, str]) -> None:
        self.image = image
        self.environment = environment
        self.served: ServedProcess | None = None
        self.status = "running"
        self.stopped = self.removed = False
        ports: dict[str, list[dict[str, str]]] = {}
        if image == "envkit-echo":
            self.served = ServedProcess("echo", env=environment).start()
            ports = {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": self.served.url.rsplit(":", 1)[1]}]}
        elif image == "crashes-at-start":
            self.status = "exited"
        elif image == "never-healthy":
            ports = {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(free_port())}]}
        self.attrs = {"NetworkSettings": {"Ports": ports}}

    def reload(self) -> None:
        if self.served is not None and self.served.process is not None and self.served.process.poll() is not None:
            self.status = "exited"

    def logs(self, tail: int) -> bytes:
        if self.image == "crashes-at-start":
            return b"Traceback (most recent call last):\nModuleNotFoundError: No module named 'my_env'\n"
        return "".join(self.served.output[-tail:] if self.served else []).encode()

    def stop(self, timeout: int) -> None:
        if self.removed:
            raise NotFound("no such container")
        if self.served is not None:
            self.served.terminate()
        self.status, self.stopped = "exited", True

    def remove(self, force: bool) -> None:
        if self.removed:
            raise NotFound("no such container")
        self.removed = True


class StandInDocker:
    """Behaves like `docker.DockerClient` for `containers.run`; records each call."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.started: list[StandInContainer] = []
        self.containers = self

    def run(self, image: str, **options: Any) -> StandInContainer:
        self.runs.append({"image": image, **options})
        if image not in ("envkit-echo", "crashes-at-start", "never-healthy"):
            raise ImageNotFound(f"No such image: {image}")
        container = StandInContainer(image, options["environment"])
        self.started.append(container)
        return container


@pytest.fixture
def docker_sdk() -> StandInDocker:
    return StandInDocker()


# -- from_docker_image ---------------------------------------------------------------------------


def test_from_docker_image_serves_an_episode_and_stops_the_container_on_close(docker_sdk: StandInDocker) -> None:
    client = EnvClient.from_docker_image("envkit-echo", docker_client=docker_sdk,
                                         env_vars={"MAX_CONCURRENT_ENVS": "3"}, message_timeout=30)
    (run,) = docker_sdk.runs
    assert run["detach"] is True and run["ports"] == {"8000/tcp": ("127.0.0.1", None)}
    assert run["environment"] == {"MAX_CONCURRENT_ENVS": "3"}
    assert client.message_timeout == 30 and client.http_url.startswith("http://127.0.0.1:")
    with client.sync() as env:
        env.reset()
        assert env.step({"message": "hello"}).reward == pytest.approx(0.5)
        assert env.health()["max_sessions"] == 3
    (container,) = docker_sdk.started
    assert container.stopped and container.removed
    client.sync().close()  # closing again is harmless


def test_a_typed_client_class_gets_its_own_instance(docker_sdk: StandInDocker) -> None:
    class EchoClient(EnvClient):
        pass

    client = EchoClient.from_docker_image("envkit-echo", docker_client=docker_sdk)
    assert type(client) is EchoClient
    client.sync().close()
    assert docker_sdk.started[0].removed


def test_an_error_inside_the_block_still_stops_the_container(docker_sdk: StandInDocker) -> None:
    with pytest.raises(ZeroDivisionError):
        with EnvClient.from_docker_image("envkit-echo", docker_client=docker_sdk).sync() as env:
            env.reset()
            1 / 0
    assert docker_sdk.started[0].stopped and docker_sdk.started[0].removed


def test_bad_client_options_stop_the_container(docker_sdk: StandInDocker) -> None:
    with pytest.raises(TypeError):
        EnvClient.from_docker_image("envkit-echo", docker_client=docker_sdk, no_such_option=1)
    assert docker_sdk.started[0].removed


def test_a_container_that_exits_reports_its_log_and_is_removed(docker_sdk: StandInDocker) -> None:
    with pytest.raises(ContainerError) as caught:
        EnvClient.from_docker_image("crashes-at-start", docker_client=docker_sdk)
    assert "the container exited before serving" in str(caught.value)
    assert "No module named 'my_env'" in caught.value.logs and "No module named 'my_env'" in str(caught.value)
    assert docker_sdk.started[0].removed


def test_a_container_that_never_answers_health_is_removed(docker_sdk: StandInDocker) -> None:
    with pytest.raises(ContainerError, match=r"not healthy in time \(ConnectError"):
        EnvClient.from_docker_image("never-healthy", docker_client=docker_sdk, startup_timeout=1.0)
    assert docker_sdk.started[0].removed


def test_an_unknown_image_says_how_to_build_it(docker_sdk: StandInDocker) -> None:
    with pytest.raises(ContainerError, match=r"image 'my-env' not found; build it first, e\.g\. `docker build -t my-env"):
        EnvClient.from_docker_image("my-env", docker_client=docker_sdk)


def test_no_docker_engine_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Docker SDK, pointed at a socket nobody listens on."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    with pytest.raises(ContainerError, match="is the Docker engine running and DOCKER_HOST right"):
        EnvClient.from_docker_image("envkit-echo")


# -- the top-level Dockerfile --------------------------------------------------------------------


def test_top_level_dockerfile_shape() -> None:
    instructions = parse_dockerfile((REPO / "Dockerfile").read_text())
    users = [instruction.value for instruction in instructions if instruction.keyword == "USER"]
    assert users == ["envkit"]
    assert any("/health" in instruction.value for instruction in instructions if instruction.keyword == "HEALTHCHECK")
    assert "envkit serve" in " ".join(start_command(instructions))
    assert image_env(instructions)["PORT"] == "8000"
    assert "MAX_CONCURRENT_ENVS" not in image_env(instructions)  # the env's own default applies unless set
    for instruction in instructions:
        if instruction.keyword == "COPY":
            for source in instruction.value.split()[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: no such path in the repository"


def test_top_level_dockerfile_serves_echo_by_default_and_honours_max_concurrent_envs() -> None:
    replay = Replay(REPO / "Dockerfile", REPO, Path(sys.executable).parent, MAX_CONCURRENT_ENVS="3")
    with replay.started() as url:
        assert httpx.get(url + "/health").json()["max_sessions"] == 3
        assert httpx.get(url + "/metadata").json()["name"] == "echo"
        assert replay.healthcheck(url) == 0
    assert replay.healthcheck(url) != 0  # the check fails once the server is gone


def test_top_level_dockerfile_passes_its_arguments_to_envkit_serve() -> None:
    replay = Replay(REPO / "Dockerfile", REPO, Path(sys.executable).parent)
    with replay.started("catch", "--session-timeout", "7") as url:
        metadata = httpx.get(url + "/metadata").json()
    assert metadata["name"] == "catch" and metadata["session_timeout_s"] == 7


# -- the env Dockerfiles -------------------------------------------------------------------------

ENV_DOCKERFILES = {name: folder / "Dockerfile" for name, folder in bundled_envs().items()}


@pytest.mark.parametrize("name", sorted(ENV_DOCKERFILES))
def test_bundled_env_dockerfiles_have_the_space_shape(name: str) -> None:
    assert space_dockerfile_problems(ENV_DOCKERFILES[name], 8000) == []


def test_env_dockerfiles_share_the_template_steps() -> None:
    """Every env's Dockerfile takes the template's steps; only the comment at the top names the env."""
    def steps(path: Path) -> list[tuple[str, str]]:
        return [(instruction.keyword, instruction.value) for instruction in parse_dockerfile(path.read_text())]

    template = template_dir() / "{{cookiecutter.env_name}}" / "Dockerfile"
    expected = [(keyword, value.replace("{{cookiecutter.app_port}}", "8000")) for keyword, value in steps(template)]
    for name, dockerfile in ENV_DOCKERFILES.items():
        assert steps(dockerfile) == expected, name


def test_dockerfile_parsing() -> None:
    instructions = parse_dockerfile(
        "# comment\nFROM python:3.11-slim\nENV A=1 B=\"two words\"\nENV LEGACY some value\n"
        "RUN pip install \\\n    # a comment inside\n    wheels/*.whl .\n"
        "ENTRYPOINT [\"envkit\", \"serve\"]\nCMD echo --port 1\n")
    assert [instruction.keyword for instruction in instructions] == ["FROM", "ENV", "ENV", "RUN", "ENTRYPOINT", "CMD"]
    assert instructions[3].value == "pip install wheels/*.whl ." and instructions[3].line == 5
    assert image_env(instructions) == {"A": "1", "B": "two words", "LEGACY": "some value"}
    assert start_command(instructions) == ["envkit", "serve", "/bin/sh", "-c", "echo --port 1"]
    assert start_command(instructions, ["wordle"]) == ["envkit", "serve", "wordle"]  # as `docker run IMAGE wordle`
