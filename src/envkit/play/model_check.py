"""Checking `--model` before anything is served, built or loaded: `tiny`, a local folder with a saved model,
or a Hugging Face Hub id, looked for in the local cache and then, unless `HF_HUB_OFFLINE` is set, asked of the
Hub once (5 s timeout, no retries).

    check_model("./my-model")          # ConfigurationError: --model ./my-model: no such folder (...); ...
    check_model("Qwen/Qwen3-1.7B")     # fine when cached or on the Hub

`envkit train` and `envkit eval` both call it, so a model that is nowhere is one line saying what was tried,
instead of a transformers traceback after a minute of Hub retries.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigurationError

__all__ = ["check_model", "HUB_TIMEOUT_S"]

#: Seconds the one request to the Hub may take.
HUB_TIMEOUT_S = 5.0
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")
_TRUE = ("1", "true", "yes", "on")


def check_model(model: str, flag: str = "--model", *, hub_timeout: float = HUB_TIMEOUT_S) -> None:
    """Raise `ConfigurationError` (one line: what was tried, what is wrong, what to do) unless `model` can be loaded."""
    if model == "tiny":
        return
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ConfigurationError(f"{flag} {model}: is a file; give the folder a model was saved to "
                                     "(it holds config.json)")
        if not (path / "config.json").is_file():
            raise ConfigurationError(f"{flag} {model}: the folder has no config.json, so it holds no saved model "
                                     "(save_pretrained writes one; envkit train saves to OUTPUT_DIR/model)")
        return
    if model.startswith((".", "/", "~")) or model.count("/") > 1 or "\\" in model:
        raise ConfigurationError(f"{flag} {model}: no such folder ({path.resolve()}); give the folder a model was "
                                 "saved to, a Hub id (owner/name) or tiny")
    if not _HUB_ID.match(model):
        raise ConfigurationError(f"{flag} {model!r}: neither a folder nor a Hub id (owner/name); check the spelling")
    _check_hub_id(model, flag, hub_timeout)


def _check_hub_id(model: str, flag: str, timeout: float) -> None:
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        return
    tried = f"{flag} {model}: not a local folder, and not in the Hugging Face cache"
    fetch = (f"download it where the Hub is reachable (hf download {model}; the cache is {constants.HF_HUB_CACHE}), "
             "give a local folder, or use tiny")
    if any(os.environ.get(name, "").strip().lower() in _TRUE for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        raise ConfigurationError(f"{tried} while HF_HUB_OFFLINE is set, so the Hub was not asked; {fetch}")
    try:
        HfApi().model_info(model, timeout=timeout)
    except GatedRepoError:
        return  # it exists; loading says whether this login may read it
    except RepositoryNotFoundError:
        raise ConfigurationError(f"{tried}, and the Hub ({constants.ENDPOINT}) has no model of that name (or it is "
                                 "private: log in with `hf auth login`); check the id, or give a local folder") from None
    except HfHubHTTPError as error:
        raise ConfigurationError(f"{tried}, and the Hub ({constants.ENDPOINT}) answered {_first_line(error)}") from None
    except Exception as error:  # the network itself: DNS, refused, timeout (httpx and OS errors alike)
        raise ConfigurationError(f"{tried}, and the Hub ({constants.ENDPOINT}) could not be reached "
                                 f"({_first_line(error) or type(error).__name__}); {fetch}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""
