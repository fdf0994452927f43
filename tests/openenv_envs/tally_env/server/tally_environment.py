"""A tally kept through MCP tools, written against OpenEnv 0.10's `MCPEnvironment` (a test fixture)."""

from uuid import uuid4

from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Observation, State


class TallyEnvironment(MCPEnvironment):
    """Add numbers to a tally; the tally's target is set by the seed."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("tally")
        self._tally = 0
        self._state = State(episode_id=str(uuid4()), step_count=0)

        @mcp.tool
        def add(amount: int) -> int:
            """Add an amount to the tally and return the new tally.

            Args:
                amount: how much to add
            """
            self._tally += amount
            return self._tally

        @mcp.tool
        def read() -> int:
            """The tally so far."""
            return self._tally

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Observation:
        self._tally = (seed or 0) % 10
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        return Observation(done=False, reward=0.0, metadata={"tally": self._tally})

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Observation:
        return Observation(done=False, reward=0.0, metadata={"error": f"unknown action {type(action).__name__}"})

    def step(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        return super().step(action, timeout_s=timeout_s, **kwargs)

    async def step_async(self, action, timeout_s=None, **kwargs):
        self._state.step_count += 1
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)

    @property
    def state(self) -> State:
        return self._state
