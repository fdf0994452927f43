"""The {{cookiecutter.title}} server app, for `uvicorn {{cookiecutter.env_name}}.server:app`.

`envkit serve .` (the Dockerfile's command) builds the same app from `[tool.envkit]` in pyproject.toml.
The concurrency limit comes from `MAX_CONCURRENT_ENVS` (default 64 sessions at once) and the idle
timeout from `SESSION_TIMEOUT_S` (default 300 s).
"""

from envkit.app.targets import app_from_environment

from .environment import {{cookiecutter.class_prefix}}Environment

app = app_from_environment({{cookiecutter.class_prefix}}Environment, env_name="{{cookiecutter.env_name}}")
