"""Compiling request constraints for the server: tried in a killable worker, cached by bytes.

A constraint the server has not seen is compiled (with its first mask) in a worker process
under the time and memory budgets (:mod:`~outlines_like.server.compile_workers`); past a
budget the worker is killed and the request gets a 400. A constraint that passed comes back
compiled (its tables, re-attached to the server's vocabulary) and is cached: each constraint
is compiled once. Only one that could not be sent back is compiled again here, off the event
loop. The cache is bounded by the memory its entries hold (they grow as generation reaches
new states; sizes are measured again after each use), not by their number; one that alone
holds over a quarter of the bound serves its request and is not kept. A constraint that
fails (at compile time, or later while masking) is evicted and its failure remembered, so
that a resend costs nothing (by a digest of the constraint and a short message: 4,096
remembered failures hold a few megabytes at most).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import gc
import hashlib
import logging
import pickle
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.server.compile_workers import CompileWorkers
from outlines_like.server.dialects import ConstraintSpec, RequestError

if TYPE_CHECKING:
    from outlines_like.fsm._protocols import Compiled
    from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["ConstraintCompiler", "nbytes"]

_OUTCOMES: dict[str, tuple[str, str]] = {
    "timeout": ("did not compile within {timeout:g} s; simplify it", "constraint_too_complex"),
    "memory": ("needs more memory than this server allows to compile", "constraint_too_complex"),
    "invalid": ("is invalid: {message}", "invalid_constraint"),
    "unsupported": ("is not supported: {message}", "unsupported_constraint"),
    "failed": ("failed while generating and is refused: {message}", "constraint_too_complex"),
}
"""How a failed constraint is refused: the message after the field's name, and the error code."""

_MAX_REMEMBERED_FAILURES = 4096
_MAX_FAILURE_MESSAGE = 500
_LARGEST_SHARE = 4
"""A constraint holding more than 1/4 of the cache's bytes serves its request and is not kept:
it would push every other constraint out (one request could empty everyone's cache)."""
_REMEASURE_S = 5.0
_log = logging.getLogger("outlines_like.server")


def _digest(key: tuple[str, str]) -> bytes:
    """A failed constraint's key in the failure memory (not its text: up to 200 kB each)."""
    return hashlib.sha256(f"{key[0]}\0{key[1]}".encode("utf-8", "surrogatepass")).digest()


def nbytes(root: object, skip: set[int] | None = None) -> int:
    """Approximate memory held by ``root``: every object reachable from it, numpy arrays whole.

    Objects whose ids are in ``skip`` (and what only they reach) are not counted, nor are
    modules, classes and functions.
    """
    seen: set[int] = set(skip or ())
    total = 0
    stack = [root]
    ignored = (type, type(sys), type(nbytes))
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, ignored):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj, 64)
        owned = getattr(obj, "nbytes", None)
        if isinstance(owned, int) and getattr(obj, "base", None) is None:
            total += owned
        stack.extend(gc.get_referents(obj))
    return total


class ConstraintCompiler:
    """Compile request constraints with our masker under budgets, keeping them by bytes.

    Args:
        vocabulary: The served model's vocabulary.
        max_states: DFA state limit.
        max_bytes: Largest constraint text.
        timeout: Seconds a compile (and its first mask) may take.
        memory_bytes: Resident memory a trial compile may reach.
        workers: Trial compile processes.
        cache_bytes: Memory the cached constraints may hold.
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        *,
        max_states: int,
        max_bytes: int,
        timeout: float,
        memory_bytes: int = 2_000_000_000,
        workers: int = 2,
        cache_bytes: int = 256_000_000,
    ) -> None:
        self.vocabulary = vocabulary
        self.max_states = max_states
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.cache_bytes = cache_bytes
        self.trials = CompileWorkers(
            vocabulary,
            processes=workers,
            timeout=timeout,
            memory_bytes=memory_bytes,
            max_states=max_states,
        )
        self._lock = threading.Lock()
        self._compiled: collections.OrderedDict[tuple[str, str], Compiled] = (
            collections.OrderedDict()
        )
        self._sizes: dict[tuple[str, str], int] = {}
        self._measured: dict[tuple[str, str], float] = {}
        self._unseen: dict[tuple[str, str], int] = {}
        self._failed: collections.OrderedDict[bytes, tuple[str, str]] = collections.OrderedDict()
        self._skip = {id(vocabulary), *(id(o) for o in gc.get_referents(vocabulary))}
        self.local_compiles = 0
        """Constraints compiled in this process (after a trial that could not send its result)."""
        self._inflight: dict[tuple[str, str], concurrent.futures.Future[Compiled]] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(workers + 2, "outlines-like-compile")

    def start(self) -> None:
        """Start the trial workers (they load in the background)."""
        self.trials.start()

    def shutdown(self) -> None:
        """Stop the trial workers (compiles in flight end with a 400); ``start`` again later."""
        self.trials.shutdown()

    @property
    def cached_bytes(self) -> int:
        """Memory held by the cached constraints, as last measured."""
        with self._lock:
            return sum(self._sizes.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._compiled)

    def _refuse(self, spec: ConstraintSpec, outcome: str, message: str) -> RequestError:
        what, code = _OUTCOMES[outcome]
        text = what.format(message=message, timeout=self.timeout)
        return RequestError(f"{spec.field} {text}", param=spec.field, code=code)

    def _remember_failure(self, key: tuple[str, str], outcome: str, message: str) -> None:
        if len(message) > _MAX_FAILURE_MESSAGE:
            message = message[: _MAX_FAILURE_MESSAGE - 3] + "..."
        with self._lock:
            self._failed[_digest(key)] = (outcome, message)
            while len(self._failed) > _MAX_REMEMBERED_FAILURES:
                self._failed.popitem(last=False)

    def _compile_now(self, spec: ConstraintSpec) -> Compiled:
        from outlines_like.fsm.compile import clear_caches, compile_constraint

        with self._lock:
            self.local_compiles += 1
        try:
            return compile_constraint(spec.term, self.vocabulary, max_states=self.max_states)
        finally:
            clear_caches()  # this cache is the one owner: its byte bound holds

    def _received(self, spec: ConstraintSpec, data: bytes | None) -> Compiled:
        """The trial's compiled constraint on this side, or compiled here where none came."""
        if data is not None:
            from outlines_like.fsm._transfer import load_compiled

            try:
                return load_compiled(data, self.vocabulary)
            except (pickle.UnpicklingError, EOFError, AttributeError, TypeError) as exc:
                _log.warning("a trial's compiled %s did not load (%s)", spec.field, exc)
        return self._compile_now(spec)

    def _measure(self, compiled: Compiled) -> int:
        """Bytes held by ``compiled`` alone (the vocabulary and its shared tables left out)."""
        skip = self._skip | {id(v) for v in list(self.vocabulary._cache.values())}
        return nbytes(compiled, skip)

    async def compile(self, spec: ConstraintSpec) -> Compiled:
        """Compile (or fetch from the cache) a request's constraint.

        Raises:
            RequestError: Invalid, unsupported, too large, too slow or too big to compile,
                or known to have failed before.
        """
        key = spec.key
        with self._lock:
            cached = self._compiled.get(key)
            if cached is not None:
                self._compiled.move_to_end(key)
                return cached
            failed = self._failed.get(_digest(key))
        if failed is not None:
            raise self._refuse(spec, *failed)
        if len(key[1]) > self.max_bytes:
            raise RequestError(
                f"{spec.field} is too large ({len(key[1])} bytes; the limit is {self.max_bytes})",
                param=spec.field,
                code="constraint_too_large",
            )
        with self._lock:  # one compile per constraint, however many requests wait for it
            shared = self._inflight.get(key)
            if shared is None:
                shared = self._inflight[key] = self._pool.submit(self._compile_sync, spec)
        return await asyncio.wrap_future(shared)

    def _compile_sync(self, spec: ConstraintSpec) -> Compiled:
        """Trial, then compile here and cache (on a pool thread); shared by concurrent callers."""
        key = spec.key
        try:
            trial = self.trials.trial_sync(spec.term)
            if trial.outcome != "ok":
                self._remember_failure(key, trial.outcome, trial.message)
                raise self._refuse(spec, trial.outcome, trial.message)
            try:  # passed its trial: its result, or the same work, known to fit the budgets
                compiled = self._received(spec, trial.compiled)
            except (InvalidConstraintError, UnsupportedConstraintError, RecursionError) as exc:
                self._remember_failure(key, "invalid", str(exc))
                raise self._refuse(spec, "invalid", str(exc)) from exc
            walked = self._measure(compiled)
            # a walk cannot see into every object (Lark's tables: 24 MB walked, 98 MB
            # allocated for 5,000 alternatives); the compiled bytes are a floor
            unseen = max(0, len(trial.compiled or b"") - walked)
            size = walked + unseen
            if size * _LARGEST_SHARE > self.cache_bytes:
                return compiled
            with self._lock:
                self._compiled[key] = compiled
                self._sizes[key] = size
                self._unseen[key] = unseen
                self._trim()
            return compiled
        finally:
            with self._lock:
                self._inflight.pop(key, None)

    def remeasure(self, key: tuple[str, str]) -> None:
        """Measure a cached constraint again (it grew while generating) and trim the cache.

        At most once every 5 s per constraint: a busy constraint is measured often enough.
        """
        now = time.monotonic()
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None or now - self._measured.get(key, 0.0) < _REMEASURE_S:
                return
            self._measured[key] = now
        walked = self._measure(compiled)
        with self._lock:
            if key in self._compiled:
                self._sizes[key] = walked + self._unseen.get(key, 0)
                self._trim()

    def evict(self, key: tuple[str, str], reason: str) -> None:
        """Drop a constraint that failed while generating; resends are refused at once."""
        with self._lock:
            self._compiled.pop(key, None)
            self._sizes.pop(key, None)
            self._unseen.pop(key, None)
            self._measured.pop(key, None)
        self._remember_failure(key, "failed", reason)

    def _trim(self) -> None:
        """Under the lock: drop the least recently used entries until under the byte bound."""
        total = sum(self._sizes.values())
        while total > self.cache_bytes and self._compiled:
            old, _ = self._compiled.popitem(last=False)
            total -= self._sizes.pop(old, 0)
            self._unseen.pop(old, None)
            self._measured.pop(old, None)

    def status(self) -> dict[str, Any]:
        """Cache and worker figures for ``/stats``."""
        with self._lock:
            entries, held, failures = (
                len(self._compiled),
                sum(self._sizes.values()),
                len(self._failed),
            )
        return {
            "cached": entries,
            "cached_bytes": held,
            "remembered_failures": failures,
            "local_compiles": self.local_compiles,
            **self.trials.status(),
        }
