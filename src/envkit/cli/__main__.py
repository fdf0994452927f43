"""`python -m envkit.cli` runs the `envkit` command."""

from .main import main

main()
