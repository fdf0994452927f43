"""Checking `--model` before anything heavy loads: a local folder with a saved model, or a Hub id that exists.

    check_model("./my-model")          # ConfigurationError: no model folder at ./my-model
    check_model("Qwen/Qwen3-1.7B")     # fine when cached or on the Hub

`tiny` (built on the spot) is always fine.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import ConfigurationError

__all__ = ["check_model"]

_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_model(model: str, flag: str = "--model") -> None:
    """Raise `ConfigurationError` (one line: what is wrong, what to do) unless `model` can be loaded."""
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
        raise ConfigurationError(f"{flag} {model}: no such folder; give the folder a model was saved to, a Hub id "
                                 "(owner/name) or tiny")
    if not _HUB_ID.match(model):
        raise ConfigurationError(f"{flag} {model!r}: neither a folder nor a Hub id (owner/name); check the spelling")
    _check_hub_id(model, flag)


def _check_hub_id(model: str, flag: str) -> None:
    from huggingface_hub import model_info, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(model, "config.json"), str):
        return
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        raise ConfigurationError(f"{flag} {model}: not a folder, and not in the Hugging Face cache while "
                                 "HF_HUB_OFFLINE is set; download it first or give a local folder")
    try:
        model_info(model, timeout=10)
    except GatedRepoError:
        return  # it exists; loading says whether this login may read it
    except RepositoryNotFoundError:
        raise ConfigurationError(f"{flag} {model}: no such model on the Hugging Face Hub (or it is private: log in "
                                 "with `hf auth login`); check the id, or give a local folder") from None
    except Exception as error:
        raise ConfigurationError(f"{flag} {model}: not a folder, and the Hugging Face Hub cannot be reached to look "
                                 f"it up ({type(error).__name__}); give a local folder or check the network") from None
