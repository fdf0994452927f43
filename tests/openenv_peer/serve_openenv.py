"""Serve an OpenEnv environment with OpenEnv 0.10's own server; run with the OpenEnv venv's python.

    python serve_openenv.py FOLDER PORT              # an OpenEnv folder: its server/app.py's app
    python serve_openenv.py FILE.py:Class PORT       # a class: OpenEnv's create_app(Class, Action, Observation)
"""

import importlib
import sys
import typing
from pathlib import Path

import uvicorn

target, port = sys.argv[1], int(sys.argv[2])
if ":" in target:
    path, _, name = target.rpartition(":")
    sys.path.insert(0, str(Path(path).resolve().parent))
    env_class = getattr(importlib.import_module(Path(path).stem), name)
    action, observation = next(typing.get_args(base)[:2] for base in env_class.__orig_bases__)
    from openenv.core.env_server.http_server import create_app

    app = create_app(env_class, action, observation, max_concurrent_envs=4)
else:
    folder = Path(target).resolve()
    sys.path[:0] = [str(folder.parent), str(folder)]
    package = f"{folder.name}." if (folder / "__init__.py").is_file() else ""
    app = importlib.import_module(f"{package}server.app").app
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
