"""Checking that a server can listen where it is told to, before anything is started.

The server binds with `SO_REUSEADDR` (uvicorn's and asyncio's default), so a trial bind with the
same option fails exactly when its own would: another process listens on the port, the port is
privileged, or the host is not an address of this machine.
"""

from __future__ import annotations

import errno
import socket

from ..errors import EnvkitError

__all__ = ["ListenError", "check_listen"]


class ListenError(EnvkitError):
    """The server cannot listen on the host and port it was given; the message says what to do."""


def check_listen(host: str, port: int) -> None:
    """Raise `ListenError` if a server could not listen on `host:port` now (port 0 always can)."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise ListenError(f"cannot listen on host {host!r}: {error.strerror}; give --host an address of this "
                          "machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as trial:
        trial.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            trial.bind(address)
        except OSError as error:
            raise ListenError(_reason(host, port, error)) from None


def _reason(host: str, port: int, error: OSError) -> str:
    where = f"port {port} on {host}"
    if error.errno == errno.EADDRINUSE:
        return (f"{where} is already in use (another server listens there); stop it, choose another port with "
                "--port, or use --port 0 for any free one")
    if error.errno == errno.EACCES:
        return f"{where} needs privileges to listen on; choose a port above 1023 with --port, or --port 0"
    if error.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host!r}: not an address of this machine; use --host 127.0.0.1 or 0.0.0.0"
    return f"cannot listen on {where}: {error.strerror or error}"
