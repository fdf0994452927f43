"""The app: every surface over one session pool (`create_app`), and finding what to serve (`targets`).

    from envkit.app import create_app
"""

from ..moved import moved_names
from .asgi import EnvkitApp, create_app

__all__ = ["EnvkitApp", "create_app"]

__getattr__ = moved_names(__name__, "envkit.app.asgi")   # what `envkit.app` held before it was a package
