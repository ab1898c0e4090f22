"""The lazy DFA's row tables: mapped without huge pages, kept for reuse, stocked ahead of use.

A lazy DFA (:class:`~outlines_like.fsm.regex_dfa.LazyByteDFA`) reserves a large table of
rows up front and touches it a few rows at a time as walks discover states, so how the OS
backs those pages shows in single masks. Here: the mapping (no huge pages past numpy's
threshold), a small pool of dropped tables' mappings handed to the next table of their
size, and a stock: a table whose first pages are backed, made in setup (:func:`prime`) and
made again by a background thread after each compile that took one (:func:`refill`).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import queue
import threading
import time
import weakref

import numpy as np
import numpy.typing as npt

__all__ = ["prime", "refill", "rows_table", "wait_refills"]

_NOHUGEPAGE_BYTES = 4 << 20  # numpy advises huge pages from there on (see rows_table)
_FREE_TABLES = 4  # mappings of dropped tables kept for the next lazy DFAs (see rows_table)
_KEEP_BYTES = 4 << 20  # of a kept mapping's pages, those past this are handed back to the OS
_free_tables: list[mmap.mmap] = []
_free_lock = threading.Lock()
_stock_sizes: set[int] = set()  # table sizes (bytes) kept in stock: those prime() backed
_wanted: set[int] = set()  # stocked sizes taken since the last refill()
_refilling: set[int] = set()  # sizes asked of the refill thread, not stocked yet
_refill_queue: queue.SimpleQueue[int] | None = None  # the refill thread's, once started


def rows_table(cap: int) -> npt.NDArray[np.int32]:
    """An uninitialised ``int32[cap, 256]`` table whose pages the OS maps 4 KiB at a time.

    numpy advises huge pages for its arrays of 4 MiB or more: the mask that first touches a
    new 2 MiB page of such a table waits while the OS zeroes all of it (~250 us here), or
    first compacts memory to find one (first walks showed single masks of 4-10 ms). A lazy
    table is touched a few rows (1 KiB each) at a time, as states are discovered, so its
    reserve is mapped here with ``MADV_NOHUGEPAGE`` (qwen3 first walks, fresh processes,
    medians of 8: ``json_large`` 72 -> 65 us a mask, ``json_medium`` 112 -> 93). Where that
    advice is not available, a plain ``np.empty``.

    A fresh mapping takes a page fault at each page's first touch, where glibc's heap handed
    back pages a dropped table had touched; so the mapping of a table nothing views any more
    is kept (at most :data:`_FREE_TABLES` of them, their first :data:`_KEEP_BYTES` still
    mapped: at most 16 MiB held, only pages a table touched) and handed to the next table of
    the same size; a table of a size :func:`prime` stocked is stocked again once the compile
    that took it is done (:func:`refill`). 4 MiB are the rows of a DFA's first 4,096 states:
    a JSON Schema's lazy DFA builds rows that far (harness ``json_large``: ~1,350 rows among
    ~3,000 states, on ~500 pages, as the states inside characters that are never built sit
    between them); with 1 MiB kept, its first walk on a reused table still took 515 of
    those faults (~2 us each, ~10% of the walk). Its rows hold the old DFA's
    values: a lazy DFA never reads a row it did not write, as every read of a row checks its
    built flag (the kernels, ``LazyByteDFA.step``, ``LazyByteDFA.built_row``) or goes
    through ``LazyByteDFA.transitions``, which first sets the rows of the states found since
    (``UNKNOWN``).
    """
    nbytes = cap * 256 * 4
    if not _mapped(nbytes):
        return np.empty((cap, 256), dtype=np.int32)
    region = _take_free(nbytes)
    if nbytes in _stock_sizes:
        with _free_lock:
            _wanted.add(nbytes)  # stocked again after the compile (refill)
    if region is None:
        region = _new_mapping(nbytes)
    if region is None:  # pragma: no cover - a kernel without the advice
        return np.empty((cap, 256), dtype=np.int32)
    flat = np.frombuffer(region, dtype=np.int32)
    # every view of the table holds ``flat``'s buffer (a memoryview of the mapping): when the
    # last one goes, the mapping is free for the next table
    buffer: object = flat.base
    if isinstance(buffer, memoryview):  # (a numpy whose base were the mapping: not kept)
        weakref.finalize(buffer, _give_back, region).atexit = False
    table: npt.NDArray[np.int32] = flat.reshape(cap, 256)
    return table


def prime(cap: int) -> None:
    """Stock an ``int32[cap, 256]`` table with its first pages already backed, and keep doing so.

    Each page of a fresh mapping costs a page fault at first touch (~4 us on the 2-core VM of
    docs/performance.md, where a harness ``json_large`` first walk took ~500 of them: ~15% of
    the walk), where a table taken from the pool (:func:`rows_table`) finds its pages backed
    already. Called in setup (:func:`~outlines_like.fsm.index.prepare_vocabulary`), this
    backs the first :data:`_KEEP_BYTES` of one table now (1,024 pages in one pass: 2.2-2.9
    ms once), so the process's first lazy DFA reads like one on a reused table; it makes
    ``cap`` a stocked size, whose tables taken are stocked again in the background
    (:func:`refill`), so the lazy DFAs of later constraints, while the earlier ones are
    still in use (compiled constraints kept in a cache), find theirs backed too; and it
    starts the refill thread (~0.2 ms), here rather than in a compile. Nothing is done where
    :func:`rows_table` would not map (small tables, no advice).
    """
    nbytes = cap * 256 * 4
    if not _mapped(nbytes):
        return
    _stock_sizes.add(nbytes)
    _stock(nbytes)
    with _free_lock:
        _refill_thread()


def _stock(nbytes: int) -> None:
    """Pool a mapping of ``nbytes`` with its first pages backed (unless the pool is full)."""
    with _free_lock:
        if len(_free_tables) >= _FREE_TABLES or any(len(r) == nbytes for r in _free_tables):
            return
    region = _new_mapping(nbytes)
    if region is None:  # pragma: no cover - a kernel without the advice
        return
    pages = (ctypes.c_char * min(nbytes, _KEEP_BYTES)).from_buffer(region)
    # written: each page is backed (a read would map the shared zero page); ctypes releases
    # the GIL while the OS zeroes the pages, so a refill in its thread holds up no mask
    ctypes.memset(ctypes.addressof(pages), 0, len(pages))
    del pages  # (the mapping's buffer export, which would keep it from being unmapped)
    with _free_lock:
        if len(_free_tables) < _FREE_TABLES and all(len(r) != nbytes for r in _free_tables):
            _free_tables.append(region)
            return
    region.close()


def refill() -> None:
    """Stock again, in the background, the stocked table sizes taken since the last call.

    :func:`~outlines_like.fsm.compile.compile_constraint` calls it after a compile and its
    first mask (a refill running beside a compile slowed it by ~0.4 ms; beside the walks
    that follow it costs them 1-4%). The refill thread backs the pages while the caller goes
    on (~3 ms of the OS zeroing pages, on another core or between masks): the next lazy DFA
    of that size finds its first 4,096 rows' pages backed (harness ``json_large`` first walk,
    fresh processes, medians alternated with refills off: llama3 -14% to -19%, qwen3 -17%).
    The stock costs ~4 MiB of resident memory.
    """
    if not _wanted:
        return
    with _free_lock:
        for nbytes in _wanted:
            if nbytes not in _refilling:
                _refilling.add(nbytes)
                _refill_thread().put(nbytes)
        _wanted.clear()


def _refill_thread() -> queue.SimpleQueue[int]:
    """The refill thread's queue (under ``_free_lock``); the thread starts on first use."""
    global _refill_queue
    if _refill_queue is None:
        _refill_queue = queue.SimpleQueue()
        thread = threading.Thread(
            target=_refill_loop, args=(_refill_queue,), name="ol-row-tables", daemon=True
        )
        thread.start()
    return _refill_queue


def _refill_loop(asked: queue.SimpleQueue[int]) -> None:
    while True:
        nbytes = asked.get()
        try:
            _stock(nbytes)
        finally:
            with _free_lock:
                _refilling.discard(nbytes)


def wait_refills(timeout: float = 5.0) -> bool:
    """Wait until the refill thread has no table left to stock; whether it finished (tests)."""
    deadline = time.monotonic() + timeout
    while _refilling:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _after_fork_in_child() -> None:
    # a forked child has no refill thread, and a lock another thread held at the fork stays
    # held there: the lock starts afresh, and the child stocks nothing more (a short-lived
    # child would start a thread for a table it never uses) until it primes again
    global _free_lock, _refill_queue
    _free_lock = threading.Lock()
    _refill_queue = None
    _stock_sizes.clear()
    _wanted.clear()
    _refilling.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _mapped(nbytes: int) -> bool:
    """Whether a table of ``nbytes`` is a mapping of its own (else numpy's ``np.empty``)."""
    return (
        hasattr(mmap, "MADV_NOHUGEPAGE")
        and hasattr(mmap, "MAP_ANONYMOUS")
        and nbytes >= _NOHUGEPAGE_BYTES
    )


def _new_mapping(nbytes: int) -> mmap.mmap | None:
    """A fresh anonymous mapping advised off huge pages, or ``None`` where that fails."""
    try:
        # private, as malloc's own mappings are (a shared one would be shared with a forked
        # child, and its pages are the shared-memory file system's, slower to fault)
        region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_NOHUGEPAGE)
    except (OSError, ValueError):  # pragma: no cover - a kernel without the advice
        return None
    return region


def _take_free(nbytes: int) -> mmap.mmap | None:
    """A kept mapping of ``nbytes`` bytes, or ``None``."""
    with _free_lock:
        for i, region in enumerate(_free_tables):
            if len(region) == nbytes:
                return _free_tables.pop(i)
    return None


def _give_back(region: mmap.mmap) -> None:
    """Keep ``region`` for a later table (its pages past :data:`_KEEP_BYTES` released).

    Runs when the last view of a table goes, in whatever thread drops it, possibly inside a
    garbage collection that interrupted :func:`_take_free` on this thread: so the lock is
    only tried, and a mapping that cannot be kept is unmapped as before.
    """
    if not _free_lock.acquire(blocking=False):
        return
    try:
        if len(_free_tables) >= _FREE_TABLES:
            return
        size = len(region)
        if size > _KEEP_BYTES:
            try:
                region.madvise(mmap.MADV_DONTNEED, _KEEP_BYTES, size - _KEEP_BYTES)
            except (OSError, ValueError):  # pragma: no cover - then not kept
                return
        _free_tables.append(region)
    finally:
        _free_lock.release()
