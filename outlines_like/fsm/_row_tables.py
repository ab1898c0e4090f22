"""The lazy DFA's row tables: mapped without huge pages, and kept for reuse once dropped.

A lazy DFA (:class:`~outlines_like.fsm.regex_dfa.LazyByteDFA`) reserves a large table of
rows up front and touches it a few rows at a time as walks discover states, so how the OS
backs those pages shows in single masks. Here: the mapping (no huge pages past numpy's
threshold) and a small pool of dropped tables' mappings handed to the next table of their
size.
"""

from __future__ import annotations

import mmap
import threading
import weakref

import numpy as np
import numpy.typing as npt

__all__ = ["prime", "rows_table"]

_NOHUGEPAGE_BYTES = 4 << 20  # numpy advises huge pages from there on (see rows_table)
_FREE_TABLES = 4  # mappings of dropped tables kept for the next lazy DFAs (see rows_table)
_KEEP_BYTES = 4 << 20  # of a kept mapping's pages, those past this are handed back to the OS
_free_tables: list[mmap.mmap] = []
_free_lock = threading.Lock()


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
    the same size. 4 MiB are the rows of a DFA's first 4,096 states: a JSON Schema's lazy DFA
    builds rows that far (harness ``json_large``: ~1,500 rows among ~4,100 states, on ~650
    pages, as the states inside characters that are never built sit between them); with
    1 MiB kept, its first walk on a reused table still took 515 of those faults (~2 us
    each, ~10% of the walk). Its rows hold the old DFA's
    values: a lazy DFA never reads a row it did not write, as every read of a row checks its
    built flag (the kernels, ``LazyByteDFA.step``, ``LazyByteDFA.built_row``) or goes
    through ``LazyByteDFA.transitions``, which first sets the rows of the states found since
    (``UNKNOWN``).
    """
    nbytes = cap * 256 * 4
    if not _mapped(nbytes):
        return np.empty((cap, 256), dtype=np.int32)
    region = _take_free(nbytes)
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
    """Keep a mapping for an ``int32[cap, 256]`` table with its first pages already backed.

    Each page of a fresh mapping costs a page fault at first touch (~4 us on the 2-core VM of
    docs/performance.md, where a harness ``json_large`` first walk took ~650 of them: ~20% of
    the walk), where a table taken from the pool of dropped ones (:func:`rows_table`) finds
    its pages backed already; the first lazy DFA of a process has no such table. Called in setup
    (:func:`~outlines_like.fsm.index.prepare_vocabulary`), this backs the first
    :data:`_KEEP_BYTES` of one table now (1,024 pages in one pass: 2.2-2.9 ms once), so the
    process's first table reads like a reused one. Nothing is done where :func:`rows_table`
    would not map (small tables, no advice), or where the pool is full or already holds a
    table this size. Later tables of a process whose earlier ones are still in use (compiled
    constraints kept in a cache) are fresh mappings, as before.
    """
    nbytes = cap * 256 * 4
    if not _mapped(nbytes):
        return
    with _free_lock:
        if len(_free_tables) >= _FREE_TABLES or any(len(r) == nbytes for r in _free_tables):
            return
    region = _new_mapping(nbytes)
    if region is None:  # pragma: no cover - a kernel without the advice
        return
    pages = np.frombuffer(region, dtype=np.uint8, count=min(nbytes, _KEEP_BYTES))
    pages[:: mmap.PAGESIZE] = 0  # a write: the page is backed (a read maps the shared zero page)
    del pages
    with _free_lock:
        if len(_free_tables) < _FREE_TABLES:
            _free_tables.append(region)


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
