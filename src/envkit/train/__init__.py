"""Training against served environments with TRL's `GRPOTrainer` (`envkit train`).

    from envkit.train import environment_factory
    GRPOTrainer(model=..., environment_factory=environment_factory("http://127.0.0.1:8001"), ...)

`environment_factory` needs only the envkit client (and transformers, to check tool schemas);
the trainer itself (`envkit.train.runner`) imports torch, transformers and TRL when it runs.
"""

from ..play.binding import Episode, ServedEnvironment, Tally, bind, environment_factory
from ..play.schema import BindingError

__all__ = ["BindingError", "Episode", "ServedEnvironment", "Tally", "bind", "environment_factory"]
