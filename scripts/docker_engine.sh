#!/usr/bin/env bash
# The project's Docker engine, for the suite and for local work (run as root).
#
#   bash scripts/docker_engine.sh start   # install, start (or reuse), make the base image
#   eval "$(bash scripts/docker_engine.sh start | tail -1)"   # ... and point DOCKER_HOST at it
#   bash scripts/docker_engine.sh stop    # stop it and undo what it changed
#
# `start` installs Debian's docker.io and debootstrap when missing, starts dockerd in isolated
# mode (no iptables rules, no IP forwarding: the host network is left alone; containers publish
# on 127.0.0.1 and have no route out, so builds that pip-install need `docker build --network
# host`) with everything under one folder, ${ENVKIT_DOCKER_DIR:-/tmp/envkit-docker}. An engine
# this script started there is reused; concurrent calls wait for each other. No registry is
# reachable here, so the base image the Dockerfiles use, python:3.11-slim, is made from Debian's
# packages (bookworm's python3 is 3.11) when missing. The last line printed is
# `export DOCKER_HOST=unix://<folder>/docker.sock`.
#
# `stop` stops that dockerd by its PID, ends any containerd or shim it left, unmounts what it
# mounted under the folder and deletes the docker0 bridge when this script's engine made it.
# Images stay in the folder, so the next start does not rebuild them; delete the folder to drop
# them.
set -euo pipefail

DIR=${ENVKIT_DOCKER_DIR:-/tmp/envkit-docker}
SOCK=$DIR/docker.sock
PIDFILE=$DIR/dockerd.pid
LOG=$DIR/dockerd.log
BRIDGE_MARK=$DIR/bridge-made-here
BASE_IMAGE=python:3.11-slim
export DOCKER_HOST=unix://$SOCK

say() { echo "docker_engine: $*" >&2; }
die() { say "$*"; exit 1; }

engine_pid() {  # the PID of the dockerd this script started in $DIR, if it still runs
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "dockerd.*--pidfile $PIDFILE" || return 1
    echo "$pid"
}

descendants() {  # the PIDs below $1, children first
    local child
    for child in $(pgrep -P "$1" || true); do echo "$child"; descendants "$child"; done
}

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

install_packages() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    local made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then  # keep the package from starting a second dockerd
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        made_policy=1
    fi
    apt-get update -q >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
    [ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
    return 0
}

start_dockerd() {
    ip link show docker0 >/dev/null 2>&1 || touch "$BRIDGE_MARK"
    say "starting dockerd (log: $LOG)"
    # setsid: the engine outlives the shell that started it and gets none of its signals.
    setsid dockerd \
        --data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$PIDFILE" \
        --host "unix://$SOCK" --iptables=false --ip-forward=false --ip-masq=false \
        --storage-driver overlay2 --shutdown-timeout 3 >"$LOG" 2>&1 </dev/null 9>&- &
    local pid=$! i
    for i in $(seq 1 300); do  # up to 60 s
        answers && return 0
        kill -0 "$pid" 2>/dev/null || { tail -n 5 "$LOG" >&2; die "dockerd exited at start (log above)"; }
        sleep 0.2
    done
    tail -n 5 "$LOG" >&2
    die "dockerd did not answer on $SOCK within 60 s"
}

make_base_image() {
    docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
    say "making $BASE_IMAGE with debootstrap (about 2 minutes)"
    local root=$DIR/rootfs
    rm -rf "$root"
    debootstrap --variant=minbase --include=python3,python3-pip,python-is-python3,ca-certificates \
        bookworm "$root" http://deb.debian.org/debian >&2
    rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
        chroot "$root" update-ca-certificates >&2
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "$BASE_IMAGE" >&2
    rm -rf "$root"
}

start() {
    [ "$(id -u)" -eq 0 ] || die "run as root (sudo bash $0 start)"
    mkdir -p "$DIR"
    exec 9>"$DIR/.lock"
    flock 9
    install_packages
    if engine_pid >/dev/null && answers; then
        say "reusing dockerd $(engine_pid) on $SOCK"
    else
        start_dockerd
    fi
    make_base_image
    echo "export DOCKER_HOST=unix://$SOCK"
}

stop() {
    [ -d "$DIR" ] || { say "nothing to stop in $DIR"; return 0; }
    exec 9>"$DIR/.lock"
    flock 9
    local pid i left=""
    if pid=$(engine_pid); then
        say "stopping dockerd $pid"
        left=$(descendants "$pid")
        # Kill the containers first: dockerd would give each its 10 s stop timeout.
        docker ps -q 2>/dev/null | xargs -r docker kill >/dev/null 2>&1 || true
        kill -TERM "$pid"
        for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    # What the engine started and left running: its children (containerd, docker-proxy) and the
    # container shims, which detach from it but name its containerd socket under $DIR.
    for pid in $left $(pgrep -f -- "containerd.*$DIR/" || true); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    local mounts
    mounts=$(grep -o " $DIR/[^ ]*" /proc/mounts | sort -r || true)
    for m in $mounts; do umount -l "$m" || true; done
    if [ -e "$BRIDGE_MARK" ]; then
        ip link delete docker0 2>/dev/null || true
        rm -f "$BRIDGE_MARK"
    fi
    rm -f "$SOCK" "$PIDFILE"
    say "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: bash $0 start|stop" >&2; exit 2 ;;
esac
