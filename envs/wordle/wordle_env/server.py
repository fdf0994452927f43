"""The Wordle server app, for `uvicorn wordle_env.server:app` and the Space's Dockerfile.

`MAX_CONCURRENT_ENVS` and `SESSION_TIMEOUT_S` in the process environment set the limits.
"""

from envkit.app.targets import app_from_environment

from .environment import WordleEnvironment

app = app_from_environment(WordleEnvironment, env_name="wordle")
