"""How fast sandboxes are created and how many wait: starts beyond the creation rate wait their turn or are refused
in one line, and warm pools grow with demand and shrink when idle (counted, not timed)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sandbox_helpers import leftovers, require, wait_until

from envkit.sandbox import SandboxBusyError, close_pools, open_sandbox
from envkit.sandbox import base
from envkit.sandbox.base import CreationRate
from envkit.sandbox.pool import WARM_SLOTS, pool_for


@pytest.fixture
def landlock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    require("landlock")
    close_pools()
    yield
    close_pools()


def test_starts_beyond_the_rate_wait_their_turn_then_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """One start a second, each waiting at most 1.5 s: of four asked for at once, the first starts at once, the
    second waits its turn (1 s), the other two would wait 2 and 3 s and are refused."""
    monkeypatch.setenv("ENVKIT_SANDBOX_CREATE_RATE", "1")
    monkeypatch.setenv("ENVKIT_SANDBOX_CREATE_WAIT_S", "1.5")
    rate = CreationRate()
    admitted, refused = [], []

    def start() -> None:
        try:
            rate.admit(10)      # ENVKIT_SANDBOX_CREATE_RATE wins over a backend's default
            admitted.append(1)
        except SandboxBusyError as error:
            refused.append(str(error))

    threads = [threading.Thread(target=start) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert (len(admitted), len(refused)) == (2, 2)
    assert "ENVKIT_SANDBOX_CREATE_RATE" in refused[0] and "\n" not in refused[0]


def test_unset_the_rate_is_the_backends_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no ENVKIT_SANDBOX_CREATE_RATE, a backend's CREATE_RATE applies: containers 10 a second (the 11th start
    of a burst would wait, refused here as the wait allowed is 0), local sandboxes none."""
    monkeypatch.delenv("ENVKIT_SANDBOX_CREATE_RATE", raising=False)
    monkeypatch.setenv("ENVKIT_SANDBOX_CREATE_WAIT_S", "0")
    from envkit.sandbox.docker import DockerSandbox
    from envkit.sandbox.local import LocalSandbox

    def refusals(default: float) -> int:
        rate, refused = CreationRate(), 0
        for _ in range(30):
            try:
                rate.admit(default)
            except SandboxBusyError:
                refused += 1
        return refused

    assert refusals(LocalSandbox.CREATE_RATE) == 0
    assert 0 < refusals(DockerSandbox.CREATE_RATE) <= 20


def test_open_sandbox_says_the_engine_is_saturated(landlock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "0")
    monkeypatch.setenv("ENVKIT_SANDBOX_CREATE_RATE", "0.001")
    monkeypatch.setenv("ENVKIT_SANDBOX_CREATE_WAIT_S", "0")
    monkeypatch.setattr(base.CREATION_RATE, "_next", 0.0)   # a fresh bucket
    with open_sandbox("landlock") as box:
        with pytest.raises(SandboxBusyError, match=r"saturated: starts are limited to 0.001 a second"):
            open_sandbox("landlock")
        assert box.run("echo still here").stdout == "still here\n"
    wait_until(lambda: leftovers()["processes"] == leftovers()["folders"] == 0, "the sandboxes to be gone")


def test_a_pool_grows_with_demand_and_shrinks_when_idle(landlock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "1")
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM_MAX", "4")
    monkeypatch.setenv("ENVKIT_SANDBOX_IDLE_S", "2")
    boxes = [open_sandbox("landlock") for _ in range(6)]     # faster than one pool's filling keeps up with
    pool = pool_for(("landlock", boxes[0].limits), lambda: None)
    for box in boxes:
        box.close()
    grown = pool.size
    assert grown > 1
    wait_until(lambda: pool.waiting == grown, f"the grown pool to hold {grown} waiting", timeout_s=60)
    wait_until(lambda: pool.waiting == 1 and pool.size == 1, "the idle pool to shrink back to 1", timeout_s=60)
    assert WARM_SLOTS.held == 1


def test_warm_refills_yield_to_sessions(landlock: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's start took the one start the rate allows for the next 1,000 s: the pool does not queue a refill
    behind it (which would hold the next session's turn), it leaves the refill to the next take."""
    monkeypatch.setenv("ENVKIT_SANDBOX_WARM", "1")
    monkeypatch.setenv("ENVKIT_SANDBOX_CREATE_RATE", "0.001")
    monkeypatch.setenv("ENVKIT_SANDBOX_CREATE_WAIT_S", "5000")
    monkeypatch.setattr(base.CREATION_RATE, "_next", 0.0)   # a fresh bucket
    with open_sandbox("landlock") as box:
        pool = pool_for(("landlock", box.limits), lambda: None)
        wait_until(lambda: pool._filling is None, "the pool's refill to give up")
        assert (pool.waiting, WARM_SLOTS.held, base.CREATION_RATE.free(0)) == (0, 0, False)
