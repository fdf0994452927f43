"""`envkit containers`: the containers `EnvClient.from_docker_image` started, and removing those left behind."""

from __future__ import annotations

import json

import click

from ..errors import EnvConnectionError


@click.command("containers")
@click.option("--remove-orphans", is_flag=True,
              help="Remove the containers whose client process on this host is gone (e.g. killed with -9).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per container instead.")
def command(remove_orphans: bool, as_json: bool) -> None:
    """List the containers envkit started on the Docker engine (DOCKER_HOST), with their owning client process.

    Each container carries the labels envkit.client-pid and envkit.client-host. A container is orphaned when its
    client ran on this host and has exited without closing it; --remove-orphans removes those and leaves the rest.

    \b
    Examples:
      envkit containers
      envkit containers --remove-orphans
      docker ps -a --filter label=envkit.client-pid   # as Docker lists them
    """
    from docker.errors import DockerException

    from ..client.docker import envkit_containers
    from ..client.docker import remove_orphans as remove

    try:
        found = remove() if remove_orphans else envkit_containers()
    except DockerException as error:
        raise EnvConnectionError("the Docker engine", f"{' '.join(str(error).split())}; is it running and "
                                                      "DOCKER_HOST right?") from None
    if as_json:
        for container in found:
            click.echo(json.dumps(container.__dict__))
    elif remove_orphans:
        for container in found:
            click.echo(f"removed {container.describe()}")
        if not found:
            click.echo("no orphaned envkit containers")
    else:
        for container in found:
            click.echo(container.describe())
        if not found:
            click.echo("no envkit containers")
