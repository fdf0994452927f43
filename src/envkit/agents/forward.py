"""`envkit-forward`: runs inside a sandbox, ahead of an agent's command, and relays the agent's model calls.

    python3 -I -S forward.py PORT SOCKET ENV_JSON -- COMMAND...

It listens on 127.0.0.1:PORT in the sandbox's own network namespace (which has nothing but loopback), then forks:
the child relays each connection's bytes both ways to the unix socket SOCKET (the host's model server, seen through
the sandbox's channel folder); the parent sets the variables of ENV_JSON and execs COMMAND. The port is bound before
the command starts, so its first call finds it; the relay ends with the command, when the sandbox ends every
process a command leaves behind. Standard library only: it runs on whatever Python the sandbox has.
"""

import json
import os
import socket
import sys
import threading

CHUNK = 65536


def pipe(source, target):
    """Copy bytes from `source` to `target` until `source` ends, then pass the end on (a half close)."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        try:
            target.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def relay(client, path):
    """One connection: both directions copied until both ends are done."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError as error:
        sys.stderr.write(f"envkit-forward: cannot reach the model server at {path}: {error.strerror}\n")
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
    back.start()
    pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(listener, path):
    while True:
        client, _ = listener.accept()
        # What comes back is sent as it arrives, often a response's head and body apart: with Nagle's algorithm on,
        # the body would wait for the agent's delayed acknowledgement of the head (up to 40 ms a call).
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=relay, args=(client, path), daemon=True).start()


def main():
    port, path, variables, dash, *command = sys.argv[1:]
    if dash != "--" or not command:
        sys.exit("usage: forward.py PORT SOCKET ENV_JSON -- COMMAND...")
    if not os.path.exists(path):
        sys.exit(f"envkit-forward: no model server socket at {path}; the host must listen there before the agent runs")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", int(port)))
    except OSError as error:
        sys.exit(f"envkit-forward: cannot listen on 127.0.0.1:{port} in the sandbox: {error.strerror}")
    listener.listen(64)
    if os.fork() == 0:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        try:
            serve(listener, path)
        finally:
            os._exit(1)
    listener.close()
    os.environ.update(json.loads(variables))
    try:
        os.execvp(command[0], command)
    except OSError as error:
        sys.exit(f"{command[0]}: {error.strerror}")


if __name__ == "__main__":
    main()
