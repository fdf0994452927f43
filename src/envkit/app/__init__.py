"""The app: every surface over one session pool (`create_app`), and finding what to serve (`targets`).

    from envkit.app import create_app
"""

from .asgi import EnvkitApp, create_app

__all__ = ["EnvkitApp", "create_app"]
