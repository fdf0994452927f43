"""Requests from concurrent sessions gathered into one engine call.

An idle engine takes a call at once, with whatever arrived in the same pass of the event loop; calls that arrive
while a batch is generating wait and form the next one (at most `max_batch` a batch). One batch generates at a
time, so batches grow exactly when the engine is busy. `window_s` (default 0) makes every batch wait that long for
others first, for engines whose cost hardly grows with the batch.
"""

from __future__ import annotations

import asyncio
import logging

from .engine import Engine, EngineError, Generation, GenerationRequest

__all__ = ["Batcher"]

logger = logging.getLogger("envkit.capture")


class Batcher:
    """Gathers `submit`ted requests into batches for `engine` (run on one event loop)."""

    def __init__(self, engine: Engine, *, window_s: float = 0.0, max_batch: int = 64) -> None:
        self.engine = engine
        self.window_s = window_s
        self.max_batch = max_batch
        self._pending: list[tuple[GenerationRequest, asyncio.Future[Generation]]] = []
        self._runner: asyncio.Task[None] | None = None
        #: Sizes of the batches generated so far (the benchmark reads them).
        self.batch_sizes: list[int] = []

    async def submit(self, request: GenerationRequest) -> Generation:
        """The engine's answer to `request`, generated in a batch with whatever else arrived alongside it."""
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run())
        return await future

    async def _run(self) -> None:
        while self._pending:
            await asyncio.sleep(self.window_s)   # 0: one pass of the loop, for calls already on their way
            batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
            self.batch_sizes.append(len(batch))
            try:
                results = await self.engine.generate([request for request, _ in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"the engine answered {len(results)} of {len(batch)} requests")
            except Exception as error:   # every caller of the batch hears of it; the next batch still runs
                if not isinstance(error, EngineError):
                    logger.exception("the engine failed a batch of %d", len(batch))
                    error = EngineError(" ".join(f"the engine failed: {type(error).__name__}: {error}".split()))
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                continue
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
