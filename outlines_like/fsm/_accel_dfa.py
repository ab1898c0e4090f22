"""Subset construction (regex NFA -> DFA rows) in compiled kernels: the ``accel`` extra (numba).

The same construction as :class:`~outlines_like.fsm._subset.SubsetBuilder`, state for state:
the same epsilon closures (memoised per NFA state, in one pool), the same runs of byte classes
(cut at every edge's ends, each run's target the union of the closures of the edges covering
it), and the same numbering (the targets of a row are added in class order, the rows of a batch
built in the order given), so a DFA built here is the pure builder's, table for table. A set of
NFA states is a sorted run of ints in one pool, found again through an open-addressing hash
table kept in an array (equality checked on the ints). Nothing is a Python object per state:
a row costs well under a microsecond instead of ~8 us of Python.

Every array the kernels write grows in Python: a kernel that runs out of room stops before it
commits the row it was building, says what to grow (``meta[_STATUS]``), and is called again
(a row's work is deterministic, so building it again finds the sets it added). Past
``max_states`` a kernel stops the same way and the builder raises the pure builder's error,
at the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_dfa_kernels import (
    BUILT,
    CHECK_ROWS,
    GROW_CLO,
    GROW_HASH,
    GROW_POOL,
    GROW_ROWS,
    GROW_STATES,
    OK,
    PAUSE,
    SCR_END,
    STATUS,
    TOO_MANY,
    N,
    Store,
    entry_point,
    expand_all_kernel,
    expand_kernel,
    rehash_kernel,
    start_kernel,
)
from outlines_like.fsm._accel_dfa_walk import (
    item_walk_kernel,
    mark_kernel,
    trie_walk_kernel,
    visit_kernel,
)
from outlines_like.fsm._accel_nfa import pack_kernel
from outlines_like.fsm._accel_utf8 import sequence_arrays, utf8_kernel
from outlines_like.fsm._regex_nfa import NFA
from outlines_like.fsm._subset import VISIT_CHECK, SubsetBase, live_states, too_many_states
from outlines_like.fsm.budget import check as _check

__all__ = ["ItemArrays", "KernelSubsetBuilder", "TrieArrays"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

U32 = npt.NDArray[np.uint32]

TrieArrays = tuple[U8, I32, I32, I32, I32, I32]
"""A token trie's ``(byte, depth, skip, root_child, node_tok, stack)`` (``_accel.TokenTrie``)."""
ItemArrays = tuple[U8, I64, I64, I32, I32, I32]
"""Byte strings to walk: ``(flat, begin, end, ids, start, chain)`` (see :func:`_item_walk`)."""

_CHUNK = 1024  # rows per call of the eager build (the budget is checked between calls)


class KernelSubsetBuilder(SubsetBase):
    """:class:`~outlines_like.fsm._subset.SubsetBuilder`'s construction, in compiled kernels.

    Same interface for :class:`~outlines_like.fsm.regex_dfa.LazyByteDFA` and the eager build,
    same states in the same order, same errors.
    """

    compiled = True

    def __init__(self, nfa: NFA, start: int, final: int, max_states: int, pattern: str) -> None:
        live = live_states(nfa, start, final, pattern)
        lay = np.zeros(SCR_END + 1, dtype=np.int64)
        classes, cstart, self._nfa32 = pack_kernel(
            *(np.frombuffer(a, np.int32) for a in (nfa.off, nfa.lo, nfa.hi, nfa.dst)),
            np.frombuffer(nfa.eps_off, np.int32),
            np.frombuffer(nfa.eps_dst, np.int32),
            np.frombuffer(live, np.uint8),
            final,
            lay,
        )
        super().__init__(nfa, start, final, max_states, pattern, (live, classes, cstart.tolist()))
        n = nfa.n
        self._lay = lay
        self._scr = np.zeros(int(lay[SCR_END]), dtype=np.int32)
        self._clo_idx = np.full(2 * n, -1, dtype=np.int64)
        self._clo_pool = np.empty(max(1024, n), dtype=np.int32)
        self._set_off = np.zeros(257, dtype=np.int64)
        self._set_pool = np.empty(4096, dtype=np.int32)
        self._set_hash = np.zeros(256, dtype=np.int64)
        self._acc = np.zeros(256, dtype=np.uint8)
        self._htab = np.full(1024, -1, dtype=np.int32)
        self._meta = np.zeros(8, dtype=np.int64)
        self._st: Store | None = None
        self._visit_run = entry_point(visit_kernel)
        while start_kernel(self._store(), start, max_states) < 0:
            self._grow()

    def _store(self) -> Store:
        """The arrays the kernels take (one tuple, rebuilt after an array grows)."""
        st = self._st
        if st is None:
            st = self._st = self._arrays()
        return st

    def _arrays(self) -> Store:
        return (
            self._nfa32,
            self._lay,
            self._clo_idx,
            self._clo_pool,
            self._set_off,
            self._set_pool,
            self._set_hash,
            self._acc,
            self._htab,
            self._meta,
            self._scr,
        )

    def _checked(self) -> None:
        """Check the budget's clock (raises past it) when enough rows were built since."""
        if self._meta[BUILT] >= CHECK_ROWS:
            self._meta[BUILT] = 0
            _check("regex DFA")

    def _grow(self) -> None:
        """Grow what the last kernel call ran out of (or raise past ``max_states``)."""
        self._st = None
        status = int(self._meta[STATUS])
        n = int(self._meta[N])
        room = self.nfa.n + 1  # the largest set
        if status == TOO_MANY:
            raise too_many_states(self.pattern, self.max_states)
        if status == PAUSE:
            self._checked()
            return
        if status == GROW_STATES:
            cap = 2 * self._set_hash.shape[0]
            self._set_off = _resized(self._set_off, cap + 1)
            self._set_hash = _resized(self._set_hash, cap)
            self._acc = _resized(self._acc, cap)
        elif status == GROW_POOL:
            self._set_pool = _resized(self._set_pool, 2 * self._set_pool.shape[0] + room)
        elif status == GROW_CLO:
            self._clo_pool = _resized(self._clo_pool, 2 * self._clo_pool.shape[0] + room)
        elif status == GROW_HASH:
            self._htab = np.full(2 * self._htab.shape[0], -1, dtype=np.int32)
            rehash_kernel(self._set_off, self._set_hash, n, self._htab)
        else:  # pragma: no cover - a kernel stopped without saying why
            raise AssertionError(f"subset kernel stopped with status {status}")

    @property
    def n_states(self) -> int:
        """DFA states discovered so far."""
        return int(self._meta[N])

    def is_accepting(self, i: int) -> bool:
        """Whether DFA state ``i`` is accepting."""
        return bool(self._acc[i] & 1)

    def accepting_array(self) -> npt.NDArray[np.bool_]:
        """``bool[n_states]``."""
        return (self._acc[: self.n_states] & 1).astype(bool)

    def subset(self, i: int) -> tuple[int, ...]:
        """The NFA states of DFA state ``i``, ascending."""
        lo, hi = int(self._set_off[i]), int(self._set_off[i + 1])
        return tuple(self._set_pool[lo:hi].tolist())

    def fill_rows(self, todo: I32, ascending: bool, rows: I32, done: U8) -> None:
        """Write the rows of the states of ``todo`` not ``done`` yet (``ascending``: sorted).

        ``rows`` is ``int32[capacity, 256]`` (byte rows) or ``int32[capacity, k]`` (class
        rows), its capacity at least the states of ``todo``; states added on the way get no
        row. Raises past ``max_states`` at the state the pure builder raises at.
        """
        while True:
            order = np.empty_like(todo)
            run = entry_point(expand_kernel)
            if run(self._store(), todo, ascending, rows, done, self.max_states, order):
                self._checked()
                return
            self._grow()

    def _paths(self, kernel: Callable[..., bool], *args: Any) -> bool:
        """Run a path kernel to the end, growing arrays; ``False``: ``rows`` must grow first."""
        run = entry_point(kernel)
        while True:
            if run(self._store(), *args, self.max_states):
                self._checked()
                return True
            if self._meta[STATUS] == GROW_ROWS:
                return False
            self._grow()

    def mark_unknown_u8(self, rows: I32, done: U8, lo: int, hi: int, value: int) -> None:
        """:meth:`mark_unknown`, compiled, with the built-row flags as ``uint8``.

        The lazy DFA keeps that view of its flags (making one per call costs ~0.6 us).
        """
        entry_point(mark_kernel)(rows, done, lo, hi, value)

    def trie_walk(
        self, trie: TrieArrays, state: int, rows: I32, done: U8, mask: U32, ends: I32
    ) -> bool:
        """Walk a token trie from ``state``, building its rows (see :func:`_trie_walk`).

        ``False`` when a state falls past ``rows`` (grow it and call again).
        """
        return self._paths(trie_walk_kernel, *trie, state, rows, done, mask, ends)

    def item_walk(self, items: ItemArrays, resume: I64, rows: I32, done: U8, mask: U32) -> bool:
        """Walk byte strings, building their rows (see :func:`_item_walk`).

        ``items``: ``(flat, begin, end, ids, start, chain)``. ``False`` when a state falls past
        ``rows`` (grow it and call again: the walk goes on from ``resume``).
        """
        return self._paths(item_walk_kernel, *items, resume, rows, done, mask)

    def walk(self, kernel: Callable[..., bool], args: tuple[Any, ...]) -> bool:
        """Run another module's path kernel ``kernel(store, *args, max_states)`` (as above)."""
        return self._paths(kernel, *args)

    def walk_rows(
        self, kernel: Callable[..., bool], rows: I32, done: U8, args: tuple[Any, ...]
    ) -> bool:
        """:meth:`walk` of ``kernel(store, rows, done, *args, max_states)``, in one frame.

        A lazy DFA's first visit of a state runs one of these (:meth:`walk` packs and unpacks
        its arguments three times more, and calls two more functions: ~1 us of a visit's
        ~30).
        """
        run = entry_point(kernel)
        meta = self._meta
        while True:
            st = self._st
            if st is None:
                st = self._st = self._arrays()
            if run(st, rows, done, *args, self.max_states):
                if meta[BUILT] >= CHECK_ROWS:
                    self._checked()
                return True
            if meta[STATUS] == GROW_ROWS:
                return False
            self._grow()

    def visit(
        self, rows: I32, done: U8, state: int, mask: I32, steps: I32, fixed: tuple[Any, ...]
    ) -> int:
        """:func:`~._accel_dfa_walk._visit` of ``state`` into ``mask``, in one frame.

        ``fixed``: its arguments from the trie's ``byte`` to ``eos``. Returns its code with
        ``VISIT_CHECK`` handled (the budget's clock read); ``0``: a state fell past ``rows``
        (grow it and call again).
        """
        run = self._visit_run
        while True:
            st = self._st
            if st is None:
                st = self._st = self._arrays()
            code: int = run(st, rows, done, state, mask, steps, *fixed, self.max_states)
            if code:
                if code & VISIT_CHECK:
                    self._checked()
                    code &= ~VISIT_CHECK
                return code
            if self._meta[STATUS] == GROW_ROWS:
                return 0
            self._grow()

    def class_table(self) -> I32:
        """Build every state (eagerly): ``int32[n_states, k]``, the class-indexed rows."""
        rows = np.empty((64, self.k), dtype=np.int32)
        done = np.zeros(64, dtype=np.uint8)
        i = 0
        while i < self.n_states:
            i = int(expand_all_kernel(self._store(), i, i + _CHUNK, rows, done, self.max_states))
            if self._meta[STATUS] == GROW_ROWS:
                cap = 2 * rows.shape[0]
                rows, done = _resized(rows, cap), _resized(done, cap)
            elif self._meta[STATUS] != OK:
                self._grow()
            self._checked()
        return rows[: self.n_states]

    def utf8_target(self, i: int, sequences: list[list[tuple[int, int]]]) -> int:
        """The DFA state every byte sequence of ``sequences`` leads to from ``i``, else ``-1``.

        As :meth:`~outlines_like.fsm._subset.SubsetBuilder.utf8_target`: only the last set
        becomes a DFA state.
        """
        off32, lo, hi = sequence_arrays(sequences)
        while True:
            got = int(utf8_kernel(self._store(), i, off32, lo, hi, self.max_states))
            if got != -2:
                return got
            self._grow()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_st"] = None  # rebuilt on first use
        del state["_visit_run"]  # (numba's compiled function does not pickle)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._visit_run = entry_point(visit_kernel)


def _resized(a: npt.NDArray[Any], n: int) -> npt.NDArray[Any]:
    """``a`` with ``n`` rows (the first ones kept; new ones uninitialised or -1 / 0)."""
    out = np.empty((n, *a.shape[1:]), dtype=a.dtype)
    k = min(n, a.shape[0])
    out[:k] = a[:k]
    if a.dtype == np.uint8:
        out[k:] = 0
    return out
