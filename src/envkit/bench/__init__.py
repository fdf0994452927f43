"""`envkit bench`: a load generator that speaks the shared wire protocol (envkit and OpenEnv servers).

    from envkit.bench import run_load, run_sync
    result = run_sync(run_load("http://127.0.0.1:8001", sessions=64, steps=100))
    print(result.text())

Uses picows (with uvloop and orjson) when the `bench` extra is installed, else `websockets`.
"""

from .drivers import available_clients
from .report import ChurnResult, LoadResult, RampResult
from .runner import run_churn, run_load, run_ramp, run_sync
from .script import TOKEN

__all__ = ["TOKEN", "ChurnResult", "LoadResult", "RampResult", "available_clients", "run_churn", "run_load",
           "run_ramp", "run_sync"]
