"""`envkit push [DIR]`: stage an env folder as a self-contained Space and upload it to the Hugging Face Hub."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from ..errors import ConfigurationError


def _repo_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from ..publish.space import check_repo_id

    try:
        return None if value is None else check_repo_id(value)
    except ConfigurationError as error:
        raise click.BadParameter(str(error)) from None


def _size(count: int) -> str:
    return f"{count} B" if count < 1024 else f"{count / 1024:.1f} KiB"


@click.command("push")
@click.argument("directory", default=".", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--repo-id", callback=_repo_id, help="Space to create or update, as user/name [default: your user/env name].")
@click.option("--private", is_flag=True, help="Create the Space as private (an existing Space keeps its visibility).")
@click.option("--dry-run", is_flag=True, help="Stage the Space folder and list what would be uploaded; no network.")
@click.option("--stage-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where to stage the Space [default: DIR/build/space with --dry-run, else a temporary folder].")
@click.option("--api-key-env", metavar="NAME", default=None,
              help="Set the key held in environment variable NAME as the Space secret ENVKIT_API_KEY, so the served "
                   "environment requires it (clients send it as X-API-Key).")
def command(directory: Path, repo_id: str | None, private: bool, dry_run: bool, stage_dir: Path | None,
            api_key_env: str | None) -> None:
    """Publish the env in DIRECTORY as a Hugging Face Space (docker SDK).

    The staged Space holds the env's files and a wheel of envkit built now, and its Dockerfile
    installs envkit from that wheel, so the Space builds on its own. The token comes from
    HF_TOKEN or `hf auth login`; it is never printed or written into the staged files.
    The env is validated first (`envkit validate DIRECTORY`); a failing env is not pushed.

    \b
    Examples:
      envkit push ./my_env --dry-run
      envkit push ./my_env --repo-id alice/my_env --private
      MY_ENV_KEY=... envkit push ./my_env --api-key-env MY_ENV_KEY
    """
    from ..publish.space import PublishError, create_space, not_publishable, stage_space, upload_space
    from ..publish.validate import validate_folder

    problem = not_publishable(directory)
    if problem is not None:
        raise click.UsageError(problem)
    report = validate_folder(directory)
    if not report.ok:
        click.echo(report.table(), err=True)
        raise click.ClickException(f"{directory} is not ready to publish; fix the failed checks above")
    sandbox = next((check.detail for check in report.checks if check.name == "sandbox"), "")
    if sandbox.startswith("landlock"):
        click.echo(f"Sandboxes in the image: {sandbox}")

    api_key = None
    if api_key_env is not None:
        api_key = os.environ.get(api_key_env, "").strip()
        if not api_key:
            raise click.UsageError(f"--api-key-env {api_key_env}: the environment variable {api_key_env} is not set "
                                   "or empty; export the key there first")
    elif not private:
        click.echo("envkit: warning: this publishes a public Space without an API key: anyone who finds it can open "
                   "sessions and hold every slot; pass --api-key-env NAME (or --private)", err=True)
    token = None
    if not dry_run:
        from huggingface_hub import get_token

        token = get_token()
        if token is None:
            raise click.ClickException("no Hugging Face token; set HF_TOKEN or run `hf auth login` "
                                       "(or use --dry-run to stage without uploading)")
    with tempfile.TemporaryDirectory(prefix="envkit-space-") as scratch:
        target = stage_dir or (directory / "build" / "space" if dry_run else Path(scratch) / "space")
        visibility = "private" if private else "public"
        try:
            staged = stage_space(directory, target)
            # the Hub is asked (token, network, rights) before anything is announced as uploading
            space = None if dry_run else create_space(staged.name, repo_id, private=private, token=token,
                                                      api_key=api_key)
        except (PublishError, ConfigurationError) as error:
            raise click.ClickException(str(error)) from None
        if space is None:
            click.echo(f"Staged {staged.name} in {staged.folder} (dry run: nothing uploaded).")
            click.echo(f"Would create Space {repo_id or f'<your user>/{staged.name}'} (docker SDK, {visibility}) "
                       f"if missing{', set its secret ENVKIT_API_KEY' if api_key else ''} and upload:")
        else:
            click.echo(f"Uploading {staged.name} to Space {space.repo_id} ({visibility}):")
        width = max(len(name) for name, _ in staged.listing())
        for name, size in staged.listing():
            click.echo(f"  {name.ljust(width)}  {_size(size)}")
        if space is None:
            click.echo(f"Build it locally: docker build -t {staged.name.replace('_', '-')} {staged.folder}")
            return
        try:
            url = upload_space(staged, space)
        except (PublishError, ConfigurationError) as error:
            raise click.ClickException(str(error)) from None
        click.echo(f"Pushed: {url}")
        if api_key:
            click.echo("The Space requires the API key: clients send it as X-API-Key (on a private Space the Hub's "
                       "token takes Authorization), e.g. ENVKIT_API_KEY=... envkit validate URL")
