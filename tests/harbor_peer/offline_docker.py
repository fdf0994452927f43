"""harbor 0.25's own docker environment, able to run `network_mode = "no-network"` tasks on an offline engine.

Loaded into harbor's venv with `harbor run -e offline_docker:OfflineDockerEnvironment` (this folder on PYTHONPATH).
harbor's docker provider enforces "no-network" only through its egress-control sidecar: an image built on the fly
FROM gogost/gost after a probe container from a digest-pinned alpine image, neither of which can be pulled here, so
it refuses such tasks. This subclass changes that one thing and nothing else: it skips the probe, and puts the task's
main service on `network_mode: none` with the compose overlay harbor ships for its other providers
(`harbor.environments.docker.COMPOSE_NO_NETWORK_PATH`). Build, start, exec, copy, the oracle agent, the verifier and
reward parsing are harbor's own code.
"""

from __future__ import annotations

from pathlib import Path

from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.environments.docker import COMPOSE_NO_NETWORK_PATH
from harbor.environments.docker.docker import DockerEnvironment
from harbor.models.task.config import NetworkMode


class OfflineDockerEnvironment(DockerEnvironment):
    """DockerEnvironment whose "no-network" is a container with no network at all (no egress sidecar)."""

    @classmethod
    def _egress_control_kernel_support(cls) -> bool:
        return False

    @property
    def _no_network(self) -> bool:
        return self.network_policy.network_mode == NetworkMode.NO_NETWORK

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return super().capabilities.model_copy(update={"disable_internet": self._no_network})

    @property
    def _docker_compose_paths(self) -> list[Path]:
        paths = super()._docker_compose_paths
        return [*paths, COMPOSE_NO_NETWORK_PATH] if self._no_network else paths
