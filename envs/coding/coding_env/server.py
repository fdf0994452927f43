"""The coding server app, for `uvicorn coding_env.server:app` and the Space's Dockerfile.

`MAX_CONCURRENT_ENVS` and `SESSION_TIMEOUT_S` in the process environment set the limits; `ENVKIT_SANDBOX`
(local or docker) the sandbox backend.
"""

from envkit.app.targets import app_from_environment

from .environment import CodingEnvironment

app = app_from_environment(CodingEnvironment, env_name="coding")
