"""Bind an Open Reward Standard server (an openreward-SDK environment, or any ORS endpoint) to TRL.

The class is the same kind `bind` makes for envkit servers (one typed method per tool, `episode`
and `tally` for reward functions and the report); only the session underneath differs: `reset(**row)`
opens an ORS session for the row's `task_index` (of the run's split) — or, for a row without one,
with the row's columns as the task spec — and returns the task's prompt; each tool call is one
ORS `/call`, whose reward adds to the episode and whose `finished` ends it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..client.ors_client import OrsEpisodeClient, OrsServer
from ..play.binding import ServedEnvironment, Tally, make_class

__all__ = ["OrsServedEnvironment", "bind_ors", "ors_split"]


class OrsServedEnvironment(ServedEnvironment):
    """Base of the classes bound to ORS servers; each episode is one ORS session."""

    server: ClassVar[OrsServer]
    split: ClassVar[str] = "train"

    def _connect(self) -> Any:
        return OrsEpisodeClient(self.server, self.split)


def ors_split(server: OrsServer, split: str | None) -> str:
    """The split to train on: `split` if the server has it, else `train`, else its first (ValueError if none)."""
    splits = server.splits()
    if split is not None:
        if split not in splits:
            raise ValueError(f"{server.env_name} at {server.url} has no split {split!r}; its splits: "
                             f"{', '.join(splits) or 'none'}")
        return split
    if not splits:
        raise ValueError(f"{server.env_name} at {server.url} lists no splits, so there are no tasks to train on")
    return "train" if "train" in splits else splits[0]


def bind_ors(url: str, *, name: str | None = None, split: str | None = None, tally: Tally | None = None,
             reconnect_timeout: float = 0.0) -> type[OrsServedEnvironment]:
    """The TRL environment class for the ORS server at `url`: the environment called `name` if the server lists
    one, else its first (`name` then only names it in this run).

    Raises `ValueError` for a split the server does not have, `BindingError` for a tool TRL could not offer.
    """
    server = OrsServer(url)
    if name is not None and name != server.env_name and name in server.environments:
        server = OrsServer(url, env_name=name)
    chosen = ors_split(server, split)
    metadata = {"name": server.env_name, "protocol": "ors", "split": chosen,
                "description": f"The {server.env_name} environment (Open Reward Standard)."}
    return make_class(OrsServedEnvironment, name or server.env_name, url, server.tools(), tally=tally, metadata=metadata,
                      server=server, split=chosen, reconnect_timeout=reconnect_timeout)
