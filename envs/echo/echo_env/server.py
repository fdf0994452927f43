"""The echo server app, for `uvicorn echo_env.server:app` and the Space's Dockerfile.

`MAX_CONCURRENT_ENVS` and `SESSION_TIMEOUT_S` in the process environment set the limits.
"""

from envkit.app.targets import app_from_environment

from .environment import EchoEnvironment

app = app_from_environment(EchoEnvironment, env_name="echo")
