"""Mask work off the engine thread, under a time budget that stops it (not abandons it).

The masker computes a sequence's bitmask (and advances its matcher) in Python and numpy; a
hostile constraint can make one mask take many seconds (a lazy DFA that meets new states, a
grammar of thousands of alternatives). :class:`MaskWorkers` runs that work on a few threads so
that the engine thread only *waits* for it, up to a per-step budget: a sequence whose mask is
not ready sits the step out while the others decode, and a job that runs past its own budget
is stopped where it is (an exception raised inside the worker thread with
``PyThreadState_SetAsyncExc``, which the interpreter delivers at the next bytecode), so its
thread is free again and its sequence fails alone.

Jobs on one compiled constraint are serialised (its lazily built tables are shared by its
matchers); a constraint whose job was stopped half-way is not trusted again (the pipeline fails
every sequence on it, the server evicts it from its cache).
"""

from __future__ import annotations

import ctypes
import logging
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["MaskJob", "MaskTimeoutError", "MaskWorkers", "raise_in_thread"]

_log = logging.getLogger("outlines_like.engine")


def raise_in_thread(ident: int, exc_type: type[BaseException]) -> None:
    """Raise ``exc_type`` in the thread ``ident`` at its next bytecode (it stops Python work)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc_type))


class MaskTimeoutError(BaseException):
    """Raised inside a worker thread to stop a mask job past its budget.

    A ``BaseException`` so that the masker's own ``except Exception`` clauses do not swallow
    it on the way out.
    """


class MaskJob:
    """One unit of mask work for one sequence; its outcome is read by the engine thread.

    Attributes:
        started: ``time.monotonic()`` when a worker took it (``None`` while queued).
        submitted: ``time.monotonic()`` when it was queued.
    """

    def __init__(self, fn: Callable[[], Any], lock: threading.Lock) -> None:
        self._fn = fn
        self._lock = lock
        self._done = threading.Event()
        self._result: Any = None
        self._error: BaseException | None = None
        self.submitted = time.monotonic()
        self.started: float | None = None

    def run(self) -> None:
        """Run the work (on a worker thread), holding its constraint's lock."""
        try:
            with self._lock:
                self.started = time.monotonic()
                self._result = self._fn()
        except BaseException as exc:  # the job's own failure, or a stop
            self._error = exc
        finally:
            self._done.set()

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; whether the job is done."""
        return self._done.wait(max(0.0, timeout))

    def done(self) -> bool:
        """Whether the job has ended (result or error)."""
        return self._done.is_set()

    def outcome(self) -> Any:
        """The job's result; raises its error."""
        if self._error is not None:
            raise self._error
        return self._result

    def elapsed(self, now: float) -> float:
        """Seconds the job has been running (0 while it waits for a worker or its lock)."""
        return 0.0 if self.started is None else now - self.started


class MaskWorkers:
    """Threads that run :class:`MaskJob` s, and stop the ones that run too long.

    Args:
        threads: Worker threads.
        job_timeout: Seconds a job may run before :meth:`overdue` reports it.
        step_wait: Seconds a step waits for masks that are not ready.
    """

    def __init__(self, threads: int = 2, *, job_timeout: float = 2.0, step_wait: float = 0.02):
        if threads < 1:
            raise ValueError("mask workers need at least one thread")
        self.job_timeout = job_timeout
        self.step_wait = step_wait
        self._queue: queue.SimpleQueue[MaskJob | None] = queue.SimpleQueue()
        self._guard = threading.Lock()
        self._running: dict[int, MaskJob] = {}  # thread ident -> its job
        self._locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
        self.threads = threads
        self._threads: list[threading.Thread] = []
        self._orphans: list[tuple[MaskJob, Any]] = []

    def start(self) -> None:
        """Start the threads (idempotent; :meth:`submit` starts them too)."""
        with self._guard:
            if self._threads:
                return
            self._threads = [
                threading.Thread(target=self._work, name=f"outlines-like-mask-{i}", daemon=True)
                for i in range(self.threads)
            ]
            for thread in self._threads:
                thread.start()

    def submit(self, owner: Any, fn: Callable[[], Any]) -> MaskJob:
        """Queue ``fn`` (work on ``owner``, a compiled constraint; serialised per owner)."""
        if not self._threads:
            self.start()
        with self._guard:
            lock = self._locks.get(owner)
            if lock is None:
                lock = self._locks[owner] = threading.Lock()
        job = MaskJob(fn, lock)
        self._queue.put(job)
        return job

    def stop_job(self, job: MaskJob) -> None:
        """Stop ``job`` where it is, if a worker is running it (its error becomes the stop)."""
        with self._guard:
            for ident, running in self._running.items():
                if running is job:
                    raise_in_thread(ident, MaskTimeoutError)
                    return

    def orphan(self, job: MaskJob, owner: Any) -> None:
        """Keep an eye on the job of a sequence that was released (cancelled) mid-mask."""
        with self._guard:
            self._orphans.append((job, owner))

    def reap_orphans(self) -> list[Any]:
        """Stop orphaned jobs past their budget; the owners they may have left half-built."""
        now = time.monotonic()
        stopped: list[Any] = []
        with self._guard:
            orphans, self._orphans = self._orphans, []
        for job, owner in orphans:
            if job.done():
                continue
            if job.elapsed(now) > self.job_timeout:
                self.stop_job(job)
                stopped.append(owner)
            else:
                with self._guard:
                    self._orphans.append((job, owner))
        return stopped

    def shutdown(self) -> None:
        """Let the threads exit after their current job (a later :meth:`start` makes new ones)."""
        with self._guard:
            threads, self._threads = self._threads, []
        for _ in threads:
            self._queue.put(None)

    def _work(self) -> None:
        ident = threading.get_ident()
        while True:
            try:
                job = self._queue.get()
                if job is None:
                    return
                with self._guard:
                    self._running[ident] = job
                try:
                    job.run()
                finally:
                    with self._guard:
                        self._running.pop(ident, None)
            except MaskTimeoutError:  # a stop that landed between jobs: nothing to stop
                with self._guard:
                    self._running.pop(ident, None)
                continue
