"""Keep the server's resident memory where its budgets put it: glibc's malloc, tuned and trimmed.

The constraint cache is bounded by bytes, but freed memory only leaves the process when the
allocator gives it back. glibc's does so poorly for a long-running threaded server: every
thread that allocates gets an arena of its own (up to 8 per core), the mmap threshold grows
with every large block freed (up to 32 MB), so later large blocks (a trial's compiled bytes,
numpy temporaries of a mask walk, torch activations) come from the arenas, and free space in
the middle of an arena is kept. In a 40-minute soak (``benchmarks/soak.py``, docs/server.md)
the server's RSS rose from 415 MB to 3.4 GB while the cache held 245-249 MB, nearly all of it
in fully resident 64 MB arena heaps: memory freed, but kept by the allocator.

:func:`tune_malloc` fixes the mmap threshold at 1 MiB (larger blocks are mapped and unmapped
whole) and caps the arenas at 2; :class:`Trimmer` calls ``malloc_trim(0)`` every few seconds
on a daemon thread, which hands back the free pages inside every arena (the call runs without
the GIL). Both are for a foreground server that owns its process (``outlines-like serve``);
where the C library is not glibc they do nothing.

:func:`freeze_heap` moves every object alive after start-up (the model, the tokenizer, the
vocabulary's tables, imported modules: numba alone brings ~80,000) out of the cyclic garbage
collector's reach. Otherwise each full collection scans them all again (45-90 ms on a 2-core
VM with the ``accel`` extra), and such a pause lands in whatever runs next: often a token mask.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import threading
from typing import Any

__all__ = ["Trimmer", "freeze_heap", "trim", "tune_malloc"]

_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD = 1 << 20
"""Blocks from this size up are mapped on their own and returned whole when freed."""
ARENA_MAX = 2
"""malloc arenas the process may use (glibc's default: 8 per core)."""


@functools.cache
def _glibc() -> Any:
    """glibc, or ``None`` where the C library is another one (musl, macOS, Windows)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):
        return None
    return libc


def tune_malloc() -> bool:
    """Fix the mmap threshold and cap the arenas (see the module); whether it applied.

    Call it early, before the threads that allocate are started.
    """
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return bool(libc.mallopt(_M_ARENA_MAX, ARENA_MAX) == 1 and ok)


def freeze_heap() -> int:
    """Collect, then freeze what is left (``gc.freeze``); how many objects are frozen now.

    For a process that owns its heap, once its long-lived objects are loaded: frozen objects
    are never scanned again, and never freed (they live as long as the process anyway).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def trim() -> bool:
    """Give the free pages of every malloc arena back to the system; whether any went."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))


class Trimmer:
    """A daemon thread that calls :func:`trim` every ``interval`` seconds until stopped."""

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="outlines-like-trim", daemon=True)

    def start(self) -> Trimmer:
        """Start trimming (a no-op thread where the C library is not glibc)."""
        if _glibc() is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            trim()
