"""The Catch server app, for `uvicorn catch_env.server:app` and the Space's Dockerfile.

`MAX_CONCURRENT_ENVS` and `SESSION_TIMEOUT_S` in the process environment set the limits.
"""

from envkit.app.targets import app_from_environment

from .environment import CatchEnvironment

app = app_from_environment(CatchEnvironment, env_name="catch")
