"""The scheduler: admits requests between decode steps, batching them into shared forward passes.

One engine thread owns the :class:`~outlines_like.engine.pipeline.Pipeline`. Each loop turn it
admits waiting requests (up to ``max_batch_size`` active), runs ``pipeline.execute`` once for
every active request (new ones are prefilled in the same pass as the others decode), hands
each output to its request's consumer, and releases finished or cancelled requests. Consumers
live on an asyncio loop; outputs cross over with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Callable

from outlines_like.engine.pipeline import GenerationRequest, Pipeline, StepOutput

__all__ = ["Scheduler"]

_log = logging.getLogger("outlines_like.engine")


@dataclasses.dataclass
class _Entry:
    request: GenerationRequest
    deliver: Callable[[StepOutput | BaseException], None]


class Scheduler:
    """Continuous batching over a :class:`Pipeline`, on a background thread.

    Args:
        pipeline: The model's pipeline; only the engine thread touches it.
        max_batch_size: Most requests in one forward pass; the rest wait their turn.
    """

    def __init__(self, pipeline: Pipeline, *, max_batch_size: int = 64) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        self.pipeline = pipeline
        self.max_batch_size = max_batch_size
        self._cond = threading.Condition()
        self._waiting: collections.deque[_Entry] = collections.deque()
        self._active: dict[str, _Entry] = {}
        self._cancelled: set[str] = set()
        self._running = False
        self._thread: threading.Thread | None = None
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        """How many steps ran with each batch size (for tests and the benchmark)."""

    def start(self) -> None:
        """Start the engine thread (idempotent)."""
        with self._cond:
            if self._running:
                return
            self._running = True
        self._thread = threading.Thread(target=self._loop, name="outlines-like-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the engine thread; pending requests get an error."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        err = RuntimeError("server shutting down")
        for entry in [*self._waiting, *self._active.values()]:
            entry.deliver(err)
        self._waiting.clear()
        self._active.clear()

    @property
    def load(self) -> int:
        """Requests waiting or active."""
        with self._cond:
            return len(self._waiting) + len(self._active)

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a batch slot."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Requests in the running batch."""
        return len(self._active)

    def submit(
        self, request: GenerationRequest, deliver: Callable[[StepOutput | BaseException], None]
    ) -> None:
        """Queue a request; ``deliver`` is called (on the engine thread) with each output."""
        with self._cond:
            if not self._running:
                raise RuntimeError("the scheduler is not running")
            self._waiting.append(_Entry(request, deliver))
            self._cond.notify_all()

    def cancel(self, request_id: str) -> None:
        """Drop a request (a client that went away); its state is released before the next step."""
        with self._cond:
            self._cancelled.add(request_id)
            self._cond.notify_all()

    async def generate(self, request: GenerationRequest) -> AsyncIterator[StepOutput]:
        """Submit ``request`` and yield its outputs until it finishes (cancels it if abandoned)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StepOutput | BaseException] = asyncio.Queue()

        def deliver(item: StepOutput | BaseException) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the consumer's loop is closed: nobody is listening
                self.cancel(request.request_id)

        self.submit(request, deliver)
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
                if item.finished:
                    finished = True
                    return
        finally:
            if not finished:
                self.cancel(request.request_id)

    def _admit(self) -> None:
        """Under the lock: apply cancellations, then fill free batch slots from the queue."""
        if self._cancelled:
            for rid in self._cancelled:
                if self._active.pop(rid, None) is not None:
                    self.pipeline.release(rid)
            self._waiting = collections.deque(
                e for e in self._waiting if e.request.request_id not in self._cancelled
            )
            self._cancelled.clear()
        while self._waiting and len(self._active) < self.max_batch_size:
            entry = self._waiting.popleft()
            self._active[entry.request.request_id] = entry

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._running and not self._waiting and not self._active:
                    self._cond.wait()
                if not self._running:
                    return
                self._admit()
                batch = list(self._active.values())
            if not batch:
                continue
            try:
                outputs = self.pipeline.execute([e.request for e in batch])
            except Exception as exc:  # a model failure ends these requests, not the server
                _log.exception("pipeline step failed")
                with self._cond:
                    for entry in batch:
                        self._active.pop(entry.request.request_id, None)
                        self.pipeline.release(entry.request.request_id)
                for entry in batch:
                    entry.deliver(exc)
                continue
            self.batch_sizes[len(batch)] += 1
            for entry in batch:
                rid = entry.request.request_id
                out = outputs.get(rid)
                if out is None:
                    continue
                entry.deliver(out)
                if out.finished:
                    with self._cond:
                        self._active.pop(rid, None)
                    self.pipeline.release(rid)
