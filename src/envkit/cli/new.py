"""`envkit new NAME`: render the env template into a new, Space-ready env folder."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import ConfigurationError


@click.command("new")
@click.argument("name")
@click.option("--output-dir", type=click.Path(path_type=Path), default=Path("."), show_default=True,
              help="Folder to create the env in (made if missing).")
def command(name: str, output_dir: Path) -> None:
    """Create the env NAME in OUTPUT_DIR/NAME from envkit's template.

    NAME becomes the package name and the class prefix (my_env → MyEnvEnvironment): lowercase
    letters, digits and _, starting with a letter, not a keyword or an existing module name.
    The env is complete at once: models, an environment with a @tool, the server app, a typed
    client, tests, a README with Hugging Face Space front matter, a Dockerfile and a pyproject.

    \b
    Example:
      envkit new my_env && pip install -e "./my_env[test]" && pytest my_env
      envkit serve ./my_env
    """
    from ..publish.scaffold import render_env

    try:
        folder = render_env(name, output_dir)
    except ConfigurationError as error:
        raise click.UsageError(str(error)) from None
    click.echo(f"Created {folder}\n\nNext:\n"
               f"  pip install -e \"{folder}[test]\"\n"
               f"  pytest {folder}\n"
               f"  envkit serve {folder}\n"
               f"  envkit validate {folder}\n"
               f"  envkit eval --env {folder} --policy solver --policy random\n"
               f"  envkit train --env {folder}\n"
               f"  envkit push {folder} --dry-run")
