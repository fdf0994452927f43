"""Docker without an engine: the error when none answers, the Dockerfiles' shape and parsing.

The images themselves are built and run on a real engine in test_docker_images.py and
test_docker_containers.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from envkit import EnvClient
from envkit.client.docker import ContainerError
from envkit.publish.dockerfile import image_env, parse_dockerfile, space_dockerfile_problems, start_command
from envkit.publish.scaffold import template_dir
from envkit.app.targets import bundled_envs

REPO = Path(__file__).resolve().parents[1]

# -- from_docker_image without an engine ------------------------------------------------------------


def test_no_docker_engine_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real Docker SDK, pointed at a socket nobody listens on."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    with pytest.raises(ContainerError, match="is the Docker engine running and DOCKER_HOST right") as caught:
        EnvClient.from_docker_image("envkit-echo")
    assert "\n" not in str(caught.value)


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
