"""OpenEnv environments served by envkit unchanged: an OpenEnv folder or `module:Class` of an OpenEnv
`Environment` / `MCPEnvironment` subclass becomes an envkit `Environment` class on envkit's session pool.

The openenv package is only needed when such an environment is served; `import envkit` never imports it.
"""

from .folder import OpenEnvApp, is_openenv_class, is_openenv_folder, read_openenv_folder
from .wrapper import openenv_metadata, wrap_openenv

__all__ = ["OpenEnvApp", "is_openenv_class", "is_openenv_folder", "read_openenv_folder", "wrap_openenv",
           "openenv_metadata"]
