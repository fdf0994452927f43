"""OpenEnv's app for the tally fixture, in the layout of OpenEnv's own environment folders."""

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

try:
    from .tally_environment import TallyEnvironment
except ImportError:
    from server.tally_environment import TallyEnvironment

app = create_app(TallyEnvironment, CallToolAction, CallToolObservation, env_name="tally_env", max_concurrent_envs=8)
