"""Loop-owning agents in sandboxes: the agent runs inside a session's sandbox and reaches a model server on the host
(the capture proxy) through the sandbox's channel folder, and nothing else.

    from envkit.agents import run_agent, reference_command

    result = run_agent(sandbox, reference_command("Write solution.py ..."), session=session, timeout_s=300)

`reference_command` runs the bundled `reference` agent; any other agent's command line works the same way, given
the sandbox has what it needs (see docs/agents.md).
"""

from .episode import TASK_VARIABLE, AgentEnvironment, AgentEpisode
from .run import reference_command, run_agent

__all__ = ["run_agent", "reference_command", "AgentEnvironment", "AgentEpisode", "TASK_VARIABLE"]
