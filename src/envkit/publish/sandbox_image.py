"""Which sandbox backend an env's image will use where a Space runs it: Docker's default seccomp profile (no user
namespaces, so no bubblewrap), no added capabilities, a non-root user and no Docker engine leave the landlock
backend, which needs the host kernel's Landlock (ABI 6, Linux 6.12) and the image's libseccomp."""

from __future__ import annotations

from pathlib import Path

from .dockerfile import Instruction, image_env

__all__ = ["image_sandbox"]

#: What the image will use, said by `validate` and `push`.
LANDLOCK = "landlock (Landlock ABI 6 or later from the host's kernel, Linux 6.12; seccomp through the image's libseccomp)"


def _opens_sandboxes(folder: Path) -> bool:
    skipped = {"build", "tests", ".venv"}
    return any("open_sandbox" in path.read_text(errors="replace") for path in folder.rglob("*.py")
               if not skipped & set(path.relative_to(folder).parts))


def image_sandbox(folder: Path, instructions: list[Instruction]) -> tuple[list[str], str]:
    """What keeps the image's sandboxes from running on a Space (empty when nothing does), and what it will use."""
    if not _opens_sandboxes(folder):
        return [], "the environment opens no sandbox"
    chosen = image_env(instructions).get("ENVKIT_SANDBOX", "auto")
    if chosen in ("local", "docker"):
        return [f"the Dockerfile sets ENVKIT_SANDBOX={chosen}, which a Space cannot run (it refuses user namespaces "
                "and has no Docker engine): set it to landlock or leave it out"], ""
    bases = [instruction.value.split()[0].lower() for instruction in instructions if instruction.keyword == "FROM"]
    installs = " ".join(instruction.value for instruction in instructions if instruction.keyword == "RUN")
    if bases and "alpine" in bases[-1] and "libseccomp" not in installs:
        return [f"the base image {bases[-1]} has no libseccomp, which the landlock sandbox (the one a Space can run) "
                "needs: add `RUN apk add --no-cache libseccomp`"], ""
    return [], LANDLOCK
