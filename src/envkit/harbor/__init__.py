"""Harbor task folders as envkit environments: every command that takes an environment takes a task folder.

    envkit serve ./tasks                         # each session in its task's container
    envkit eval --env ./tasks --policy oracle    # every task's solution/solve.sh, verified: all score 1

See docs/harbor.md.
"""

from .environment import HarborAction, HarborEnvironment, HarborObservation, HarborState, harbor_environment
from .images import ImageBuildError, task_image
from .tasks import HarborTask, HarborTaskError, find_tasks, is_task_collection, load_task

__all__ = ["HarborTask", "HarborTaskError", "ImageBuildError", "task_image", "load_task", "find_tasks", "is_task_collection",
           "harbor_environment", "HarborEnvironment", "HarborAction", "HarborObservation", "HarborState"]
