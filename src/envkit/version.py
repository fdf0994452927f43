"""envkit's version (also in pyproject.toml), for the modules that report it: ORS's `/version`, `envkit new`'s pin."""

__version__ = "0.1.0"
