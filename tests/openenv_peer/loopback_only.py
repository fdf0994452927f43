"""Run an OpenEnv command with every server it starts on 127.0.0.1; run with the OpenEnv venv's python.

    python loopback_only.py harbor serve --dataset DIR --host 127.0.0.1 ...   (the arguments of `openenv`)

OpenEnv 0.10.0's capture proxy (`openenv/core/harness/capture/runner.py`) builds its `uvicorn.Config` with
host "0.0.0.0"; the tests may only listen on loopback, so every Config asking for all interfaces gets 127.0.0.1.
"""

import runpy
import sys

import uvicorn

_config_init = uvicorn.Config.__init__


def _loopback_config(self, app, *args, **kwargs):
    if kwargs.get("host") in ("0.0.0.0", "::"):
        kwargs["host"] = "127.0.0.1"
    _config_init(self, app, *args, **kwargs)


uvicorn.Config.__init__ = _loopback_config
sys.argv = ["openenv", *sys.argv[1:]]
runpy.run_module("openenv.cli", run_name="__main__", alter_sys=True)
