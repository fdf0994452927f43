"""A typed client for {{cookiecutter.title}}: observations arrive as `{{cookiecutter.class_prefix}}Observation`."""

from __future__ import annotations

from typing import Any

from envkit import EnvClient

from .models import {{cookiecutter.class_prefix}}Observation


class {{cookiecutter.class_prefix}}Client(EnvClient):
    """`EnvClient` whose results carry `{{cookiecutter.class_prefix}}Observation` objects instead of plain dicts.

    Example:
        from {{cookiecutter.env_name}} import {{cookiecutter.class_prefix}}Action, {{cookiecutter.class_prefix}}Client

        with {{cookiecutter.class_prefix}}Client("http://127.0.0.1:{{cookiecutter.app_port}}").sync() as env:
            env.reset(seed=1)
            result = env.step({{cookiecutter.class_prefix}}Action(guess=50))
            print(result.observation.message, result.reward)
    """

    def __init__(self, base_url: str, **options: Any) -> None:
        options.setdefault("observation_cls", {{cookiecutter.class_prefix}}Observation)
        super().__init__(base_url, **options)
