"""Finding the model a run names, before anything is served or built: `locate_model("Qwen/Qwen3-1.7B")`.

`--model` is `tiny`, a local folder or a Hugging Face Hub id. A Hub id is looked for in the local
cache first; if it is not there and the Hub may be asked (`HF_HUB_OFFLINE` unset), one request with
a short timeout and no retries asks whether it exists. Whatever is wrong comes back as one
`ModelNotFoundError` saying what was tried, instead of a transformers traceback after a minute
of retries.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvkitError
from .settings import TINY

__all__ = ["ModelSource", "ModelNotFoundError", "locate_model"]

#: Seconds the one request to the Hub may take.
HUB_TIMEOUT_S = 5.0
_TRUE = ("1", "true", "yes", "on")


class ModelNotFoundError(EnvkitError):
    """The model a run names is not a local folder, not in the cache, and not (reachable) on the Hub."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model was found: `kind` is "tiny", "folder", "cache" or "hub"; `path` the folder, if local."""

    name: str
    kind: str
    path: str | None = None


def locate_model(model: str, *, hub_timeout: float = HUB_TIMEOUT_S) -> ModelSource:
    """Where `model` (`tiny`, a local folder or a Hub id) is; raises `ModelNotFoundError` saying what was tried."""
    if model == TINY:
        return ModelSource(model, "tiny")
    path = Path(model).expanduser()
    if path.exists():
        return _local_folder(model, path)
    if _looks_like_path(model):
        raise ModelNotFoundError(f"--model {model}: no such folder ({path.resolve()}); give the folder of a saved "
                                 "model (with its config.json), a Hugging Face Hub id such as Qwen/Qwen3-0.6B, or "
                                 "tiny")
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model)
    except HFValidationError:
        raise ModelNotFoundError(f"--model {model}: not a local folder, and not a Hugging Face Hub id (those look "
                                 "like owner/name, e.g. Qwen/Qwen3-0.6B)") from None
    return _hub_model(model, hub_timeout)


def _looks_like_path(model: str) -> bool:
    """A Hub id is `name` or `owner/name`; anything with more slashes, or starting like a path, is a path."""
    return model.startswith((".", "~", "/", "\\")) or model.count("/") > 1 or "\\" in model


def _local_folder(model: str, path: Path) -> ModelSource:
    if not path.is_dir():
        raise ModelNotFoundError(f"--model {model}: {path.resolve()} is a file; give the folder of a saved model "
                                 "(with its config.json)")
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(f"--model {model}: the folder {path.resolve()} holds no model (no config.json); "
                                 "give the folder save_pretrained() wrote")
    return ModelSource(model, "folder", str(path.resolve()))


def _offline() -> bool:
    return any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _hub_model(model: str, timeout: float) -> ModelSource:
    from huggingface_hub import constants, try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json")
    if isinstance(cached, str):
        return ModelSource(model, "cache", str(Path(cached).parent))
    tried = f"--model {model}: not a local folder, not in the Hugging Face cache ({constants.HF_HUB_CACHE})"
    if _offline():
        raise ModelNotFoundError(f"{tried}, and HF_HUB_OFFLINE is set, so the Hub was not asked. Download it where "
                                 f"the Hub is reachable (hf download {model}), pass a local folder, or use --model "
                                 "tiny")
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        HfApi().model_info(model, timeout=timeout)
    except GatedRepoError:
        raise ModelNotFoundError(f"{tried}; on the Hub ({constants.ENDPOINT}) it is gated: accept its terms on its "
                                 "page and log in (hf auth login), or set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise ModelNotFoundError(f"{tried}, and the Hub ({constants.ENDPOINT}) has no model of that name (or it is "
                                 "private: log in with hf auth login, or set HF_TOKEN). Check the spelling, or use "
                                 "--model tiny") from None
    except HfHubHTTPError as error:
        raise ModelNotFoundError(f"{tried}, and the Hub ({constants.ENDPOINT}) answered {_first_line(error)}") from None
    except Exception as error:  # the network itself: DNS, refused, timeout (httpx and OS errors alike)
        raise ModelNotFoundError(f"{tried}, and the Hub ({constants.ENDPOINT}) could not be reached "
                                 f"({_first_line(error) or type(error).__name__}). Download it where the Hub is "
                                 f"reachable (hf download {model}), pass a local folder, or use --model tiny") from None
    return ModelSource(model, "hub")


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else ""
