r"""Regex -> byte-level DFA: UTF-8 expansion, byte classes, size limit.

The regex syntax is Python ``re`` without lookarounds, backreferences and inline flags. The
language is the one ``re.fullmatch`` accepts, on UTF-8 bytes, except that ``\\d``, ``\\w`` and
``\\s`` are ASCII (``[0-9]``, ``[A-Za-z0-9_]``, ``[ \\t\\n\\r\\f\\v]``), as in xgrammar and
interegular, so that a constrained model never emits, say, Arabic digits for ``\\d``. Lazy
quantifiers (``*?``) accept the same language as greedy ones. Character classes become UTF-8
byte sequences, so a multi-byte character may be split across tokens. The pattern is read by
the package's one regex reader (:mod:`outlines_like.types._regex`, ASCII class table).

Nothing here leaves per-state objects for the garbage collector to scan: the NFA is flat int
arrays (sorted by source once built), a set of NFA states is a sorted tuple of ints (its own
dict key; the collector stops tracking such tuples), and the lazy DFA's rows are numpy. The
subset construction (:mod:`outlines_like.fsm._subset`) memoises each NFA state's epsilon
closure and runs of byte classes (one union per run, not per class), so the row of a DFA state
of one NFA state, nearly every state of a JSON Schema's DFA, is a few lookups; a lazy DFA can
tell where every UTF-8 character leads from a state without building the states inside
characters.

The NFA is built in :mod:`outlines_like.fsm._regex_nfa`, its subset construction runs in
:mod:`outlines_like.fsm._subset` (compiled in :mod:`outlines_like.fsm._accel_dfa` with the
``accel`` extra), and eager DFAs are minimised in :mod:`outlines_like.fsm._dfa_minimize`; this
module holds the two DFA classes and the regex-to-DFA entry points.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

from outlines_like.errors import ConstraintTooLargeError
from outlines_like.fsm._dfa_minimize import merge_classes, minimize
from outlines_like.fsm._regex_estimate import dfa_blowup, nfa_states
from outlines_like.fsm._regex_nfa import MAX_NFA_STATES, NFA, too_many_nfa_states
from outlines_like.fsm._row_tables import prime as _prime_rows
from outlines_like.fsm._row_tables import rows_table as _rows_table
from outlines_like.fsm._subset import VISIT_GROW, SubsetBuilder, dfa_kernels
from outlines_like.fsm._subset import short as _short
from outlines_like.types._regex import parse_regex

if TYPE_CHECKING:
    from outlines_like.fsm._accel_dfa import ItemArrays, KernelSubsetBuilder, TrieArrays

    Builder: TypeAlias = SubsetBuilder | KernelSubsetBuilder

__all__ = [
    "DEFAULT_MAX_STATES",
    "UNKNOWN",
    "ByteDFA",
    "LazyByteDFA",
    "compile_regex",
    "compile_regex_auto",
    "prime_row_table",
]

DEFAULT_MAX_STATES = 20_000
_MINIMIZE_LIMIT = 1_000


@dataclasses.dataclass(frozen=True, eq=False)
class ByteDFA:
    """A DFA over bytes whose every state can still reach an accepting state.

    Minimal when it has at most 1,000 states.

    Attributes:
        start: The start state.
        transitions: ``int32[n_states, 256]``; ``-1`` is the dead state.
        accepting: ``bool[n_states]``.
        byte_classes: ``int32[256]``: bytes with the same class have identical columns.
        class_transitions: ``int32[n_states, n_classes]``: ``transitions`` over classes.
        pattern: The regex it was compiled from.
    """

    start: int
    transitions: npt.NDArray[np.int32]
    accepting: npt.NDArray[np.bool_]
    byte_classes: npt.NDArray[np.int32]
    class_transitions: npt.NDArray[np.int32]
    pattern: str = ""
    lazy = False

    def expand(self, states: npt.ArrayLike) -> None:
        """No-op: every row is built (the interface of :class:`LazyByteDFA`)."""

    def is_accepting(self, state: int) -> bool:
        """Whether ``state`` is accepting."""
        return bool(self.accepting[state])

    @property
    def n_states(self) -> int:
        """Number of (live) states."""
        return int(self.transitions.shape[0])

    def step(self, state: int, data: bytes) -> int:
        """Return the state after ``data`` from ``state``, or ``-1`` if it dies."""
        t = self.transitions
        for b in data:
            if state < 0:
                return -1
            state = int(t[state, b])
        return state

    def fullmatch(self, data: bytes) -> bool:
        """Return whether ``data`` is in the language."""
        s = self.step(self.start, data)
        return s >= 0 and bool(self.accepting[s])


# --------------------------------------------------------------------------- DFA


def _build(pattern: str, max_states: int, refuse_blowup: bool = False) -> Builder:
    if not isinstance(pattern, str):
        raise TypeError(f"compile_regex takes a str pattern, got {type(pattern).__name__}")
    ast = parse_regex(pattern, strip_anchors=True)
    kernels = dfa_kernels()  # the compiled construction (same states, same numbering)
    program = None
    if kernels is not None:  # the same NFA, built in a kernel
        from outlines_like.fsm._accel_nfa import Program

        program = Program(ast)
    estimate = nfa_states(ast) if program is None else program.nfa_states()
    if estimate > 2 * MAX_NFA_STATES:  # refused before the states are built
        raise too_many_nfa_states()
    if refuse_blowup:
        w = dfa_blowup(ast) if program is None else program.dfa_blowup()
        if w >= 62 or 2**w > max_states:
            raise ConstraintTooLargeError(
                f"regex {_short(pattern)} needs an estimated 2**{w} DFA states, more than "
                f"max_states={max_states}: a loop is followed by {w} positions that can each "
                "start where the loop goes on; bound the loop or shorten what follows it",
                limit="states",
                where="regex DFA (estimate)",
            )
    if kernels is not None and program is not None:
        nfa, start, final = program.build()
        built: Builder = kernels.KernelSubsetBuilder(nfa, start, final, max_states, pattern)
        return built
    nfa = NFA()
    start, final = nfa.build(ast)
    nfa.freeze()
    return SubsetBuilder(nfa, start, final, max_states, pattern)


def compile_regex(pattern: str, *, max_states: int = DEFAULT_MAX_STATES) -> ByteDFA:
    """Compile a regex to a byte-level DFA (``re.fullmatch`` semantics on UTF-8 bytes).

    The DFA is minimal when it has at most 1,000 states (larger ones are left as the subset
    construction built them: exact, but not minimised).

    Args:
        pattern: The regular expression (Python ``re`` syntax; no lookarounds, backreferences
            or inline flags).
        max_states: Limit on DFA states; a larger automaton raises instead of using unbounded
            time and memory.

    Raises:
        InvalidConstraintError: The regex is invalid or unsupported (the message names the
            position), matches nothing, or needs more than ``max_states`` states.
    """
    return _eager(_build(pattern, max_states))


def _eager(builder: Builder) -> ByteDFA:
    table = builder.class_table()
    accepting = builder.accepting_array()
    s0 = 0
    if builder.compiled:  # the same minimisation, compiled (numba is there)
        from outlines_like.fsm import _accel_regex

        if table.shape[0] <= _MINIMIZE_LIMIT:
            table, acc8, s0 = _accel_regex.minimize(table, accepting.view(np.uint8), 0)
            accepting = acc8.view(bool)
        table, classes = _accel_regex.merge_classes(table, builder.classes)
    else:
        if table.shape[0] <= _MINIMIZE_LIMIT:
            # Moore refinement costs (states x classes) per round and needs as many rounds as
            # the longest distinguishing path; above this size a non-minimal DFA (still exact)
            # is cheaper than minimising it (~100 ms for 2,000-state JSON Schema DFAs)
            table, accepting, s0 = minimize(table, accepting, 0)
        table, classes = merge_classes(table, builder.classes)
    return ByteDFA(
        start=s0,
        transitions=np.ascontiguousarray(table[:, classes], dtype=np.int32),
        accepting=np.ascontiguousarray(accepting, dtype=bool),
        byte_classes=classes,
        class_transitions=table,
        pattern=builder.pattern,
    )


UNKNOWN = -2  # a row of a lazy DFA that is not built yet
# rows a lazy DFA's table reserves up front (at most max_states + 1): a table's pages (4 KiB:
# see _row_tables.rows_table) are touched only as states reach them, so the reserve costs no
# memory, and growing (a copy of every row, ~2 ms at 4,000 states, inside one mask) is left
# to DFAs past it
_RESERVE_ROWS = 1 << 15


def _reserve_rows(max_states: int) -> int:
    """The rows a new lazy DFA of at most ``max_states`` states reserves."""
    return max(64, min(max_states + 1, _RESERVE_ROWS))


def prime_row_table(max_states: int = DEFAULT_MAX_STATES) -> None:
    """Back the first pages of the table the next lazy DFA of ``max_states`` will take.

    For setup (see :func:`outlines_like.fsm._row_tables.prime`): the process's first lazy DFA
    then pays no page faults for its first 4,096 rows, and each compile that takes such a
    table has the next one backed in the background.
    """
    _prime_rows(_reserve_rows(max_states))


def _distinct(states: npt.NDArray[Any]) -> list[int]:
    """The distinct values of ``states``, ascending (``np.unique`` costs more below ~1k)."""
    if states.shape[0] > 1024:
        out: list[int] = np.unique(states).tolist()
        return out
    return sorted(set(states.tolist()))


class LazyByteDFA:
    """A byte DFA built state by state, as walks reach the states (for very large regexes).

    Same reading interface as :class:`ByteDFA`, except that rows of states not yet expanded
    hold :data:`UNKNOWN`; call :meth:`expand` before reading a state's row. Not minimised.
    Every state can still reach an accepting state. Expanding past ``max_states`` raises
    :class:`InvalidConstraintError`.
    """

    lazy = True

    def __init__(self, builder: Builder) -> None:
        self._b = builder
        self.start = 0
        self.pattern = builder.pattern
        self.byte_classes = builder.classes
        self._lock = threading.RLock()  # one lazy DFA may serve several vocabularies' indexes
        self._filled = 0  # rows set to UNKNOWN: those of the states discovered
        self._reserve(np.empty((0, 256), dtype=np.int32), np.zeros(0, dtype=bool))

    def _reserve(self, table: npt.NDArray[np.int32], expanded: npt.NDArray[np.bool_]) -> None:
        """Set up the tables, reserved to :data:`_RESERVE_ROWS`, from ``table``'s rows."""
        self._table = _rows_table(max(table.shape[0], _reserve_rows(self._b.max_states)))
        self._table[: table.shape[0]] = table
        self._expanded = np.zeros(self._table.shape[0], dtype=bool)
        self._expanded[: expanded.shape[0]] = expanded
        self._views = (self._table.data, self._expanded.data)
        # the flags as the kernels take them, kept (a view per call costs ~0.6 us, and a first
        # visit's walk calls the kernels and syncs a few times)
        self._done8 = self._expanded.view(np.uint8)
        self._sync()

    def __getstate__(self) -> dict[str, object]:
        # all under the lock: a compiled walk on another thread (its kernels release the GIL)
        # could otherwise build a row between the copies of the rows and of their flags
        with self._lock:
            self._sync()  # every discovered state's row set: built or UNKNOWN
            state = self.__dict__.copy()
            del state["_views"], state["_view"], state["_done8"]  # views: rebuilt on load
            state["_table"] = self._table[: self._filled].copy()  # not the reserve
            state["_expanded"] = self._expanded[: self._filled].copy()
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._reserve(self._table, self._expanded)

    def _sync(self, n: int = -1, mark: bool = True) -> None:
        """Grow the tables to the states discovered, and refresh the views read without a lock.

        Rows are never unbuilt and growing copies them, so a reader holding an older view
        still reads right answers. Rows past the states discovered are left unset (never
        read), so the pages of a table's spare capacity are never touched. ``mark=True`` sets
        the rows of the states discovered since to :data:`UNKNOWN`. ``mark=False`` (after a
        compiled walk, which reads the built-row flags, never :data:`UNKNOWN`) only grows:
        the rows of the states found since are set when :attr:`transitions` is next read, and
        rows never built nor read through it are never touched. Most states a JSON Schema's
        walk finds are inside characters of a bounded string, never built: marking them at
        once touched ~1,000 new 4 KiB pages in a qwen3 ``json_large`` walk instead of ~650
        (a first touch costs ~3 us of system time here).
        """
        b = self._b
        if n < 0:  # else the caller read it (the count is a numpy read, ~0.3 us)
            n = b.n_states
        cap = self._table.shape[0]
        if n > cap:
            new_cap = max(n, cap * 2)
            table = _rows_table(new_cap)
            old = min(n, cap)  # the rows of states discovered: UNKNOWN, built, or not set yet
            table[:old] = self._table[:old]
            expanded = np.zeros(new_cap, dtype=bool)
            expanded[:cap] = self._expanded
            self._table, self._expanded = table, expanded
            self._done8 = expanded.view(np.uint8)
            # cells[state, byte] and done[state] read plain ints fast; one tuple, so that a
            # reader never pairs a new table's flags with an old table's rows
            self._views = (self._table.data, self._expanded.data)
        if not mark:
            return
        if n > self._filled:  # rows built already (a compiled walk's states) stay
            if isinstance(b, SubsetBuilder):
                b.mark_unknown(self._table, self._expanded, self._filled, n, UNKNOWN)
            else:
                b.mark_unknown_u8(self._table, self._done8, self._filled, n, UNKNOWN)
            self._filled = n
        self._view = self._table[:n]

    @property
    def n_states(self) -> int:
        """States discovered so far."""
        return self._b.n_states

    @property
    def transitions(self) -> npt.NDArray[np.int32]:
        """``int32[n_states, 256]``; rows of unexpanded states are :data:`UNKNOWN`."""
        view = self._view
        if view.shape[0] != self._b.n_states:
            with self._lock:
                self._sync()
                view = self._view
        return view

    @property
    def accepting(self) -> npt.NDArray[np.bool_]:
        """``bool[n_states]``."""
        return self._b.accepting_array()

    def is_accepting(self, state: int) -> bool:
        """Whether ``state`` is accepting."""
        return self._b.is_accepting(state)

    def expand(self, states: npt.ArrayLike) -> None:
        """Build the rows of ``states``: a list in order, an array's distinct values ascending."""
        b = self._b
        if not isinstance(b, SubsetBuilder):  # compiled: the kernel sorts and skips built rows
            ascending = not isinstance(states, list)
            todo32 = np.ascontiguousarray(states, dtype=np.int32).reshape(-1)
            with self._lock:
                try:
                    b.fill_rows(todo32, ascending, self._table, self._done8)
                    self._take_found()
                except BaseException:  # (the growth too: an interrupt there is settled)
                    self._settle()
                    raise
            return
        todo = states if isinstance(states, list) else _distinct(np.asarray(states))
        done = self._views[1]
        if all(done[s] for s in todo):  # discovered states are in range
            return
        cstart = b.cstart
        with self._lock:
            for s in todo:
                if self._views[1][s]:
                    continue
                try:
                    runs = b.row_runs(s)
                except BaseException:
                    self._settle()
                    raise
                if len(b.order) > self._table.shape[0]:
                    self._sync()
                row = self._table[s]
                row[:] = -1
                for first, last, j in runs:  # the runs' bytes, one slice each
                    row[cstart[first] : cstart[last + 1]] = j
                self._expanded[s] = True
            if len(b.order) > self._filled:
                self._sync()

    def utf8_target(self, state: int, sequences: list[list[tuple[int, int]]]) -> int:
        """The one state every byte sequence leads to from ``state``, else ``-1``.

        Each byte range must lead to one state on the way; those states inside a character
        are compared as subsets, never built.
        """
        with self._lock:
            try:
                target = self._b.utf8_target(state, sequences)
                self._take_found()
            except BaseException:
                self._settle()
                raise
            return target

    def walk_trie(
        self,
        trie: TrieArrays,
        state: int,
        mask: npt.NDArray[np.uint32],
        ends: npt.NDArray[np.int32],
    ) -> bool:
        """Walk a token trie from ``state``, building every row it reads, in one compiled pass.

        ``trie``: the trie's ``(byte, depth, skip, root_child, node_tok, stack)``; ``mask``
        gets the bits of its nodes' tokens that live, ``ends`` (when not empty) their end
        states. Returns ``False`` (and does nothing) with the pure builder: the caller then
        walks, building rows as it meets them. The same rows either way, so the same states
        (numbered in another order).
        """
        b = self._b
        if isinstance(b, SubsetBuilder):
            return False
        self._walk(lambda: b.trie_walk(trie, state, self._table, self._done(), mask, ends))
        return True

    def walk_items(self, items: ItemArrays, mask: npt.NDArray[np.uint32]) -> bool:
        """Walk byte strings, each from its state, building every row they read (compiled).

        ``items``: ``(flat, begin, end, ids, start, chain)``: ``flat[begin[q]:end[q]]`` from
        ``chain[start[q]]``, ``ids[q]``'s bit set in ``mask`` when it lives. As
        :meth:`walk_trie`.
        """
        b = self._b
        if isinstance(b, SubsetBuilder):
            return False
        resume = np.zeros(1, dtype=np.int64)
        self._walk(lambda: b.item_walk(items, resume, self._table, self._done(), mask))
        return True

    def walk_compiled(self, kernel: Callable[..., bool], args: tuple[Any, ...]) -> bool:
        """Run ``kernel(store, rows, done, *args, max_states)``, building every row it reads.

        A compiled walk of the caller's (:mod:`outlines_like.fsm._accel_chain`), run as
        :meth:`walk_items` runs its own: called again after the table grows, so it must go on
        where it stopped. Returns ``False`` (and does nothing) with the pure builder.
        """
        b = self._b
        if isinstance(b, SubsetBuilder):
            return False
        self._walk(lambda: b.walk_rows(kernel, self._table, self._done8, args))
        return True

    def _walk(self, run: Callable[[], bool]) -> None:
        """Run a compiled walk to its end under the lock.

        ``run`` reads the current table and returns ``False`` where a state fell past it: the
        table grows, and ``run`` goes on where it stopped.
        """
        with self._lock:
            try:
                while not run():
                    self._sync(mark=False)
                self._take_found()
            except BaseException:  # (the growth too: an interrupt there is settled)
                self._settle()
                raise

    def _take_found(self) -> None:
        """Grow the table to the states a compiled call found past it.

        Callers hold the lock and call it inside the ``try`` that settles the DFA, so an
        interrupt in the growth is settled too.
        """
        if (n := self._b.n_states) > self._table.shape[0]:
            self._sync(n, mark=False)

    @property
    def nfa(self) -> NFA:
        """The NFA the states are sets of."""
        return self._b.nfa

    def subset(self, state: int) -> tuple[int, ...]:
        """The NFA states of ``state`` (discovered), ascending."""
        with self._lock:  # (a compiled walk on another thread may be growing the pool)
            return self._b.subset(state)

    @property
    def compiled(self) -> bool:
        """Whether the builder is the compiled one (:meth:`visit` and the walks run)."""
        return not isinstance(self._b, SubsetBuilder)

    def visit(
        self,
        state: int,
        mask: npt.NDArray[np.int32],
        steps: npt.NDArray[np.int32],
        fixed: tuple[Any, ...],
    ) -> int:
        """A token index's first visit of ``state``, compiled (``_accel_dfa_walk._visit``).

        ``mask``: the row's ``int32`` words; ``steps``: the chain memo's; ``fixed``: the
        kernel's arguments from the trie's ``byte`` to ``eos``. Returns ``VISIT_WALKED`` or
        ``VISIT_BODY``. The builder must be the compiled one (:attr:`compiled`).
        """
        b: KernelSubsetBuilder = self._b  # type: ignore[assignment]
        with self._lock:
            try:
                code = b.visit(self._table, self._done8, state, mask, steps, fixed)
                while not code:  # a state past the table
                    self._sync(mark=False)
                    code = b.visit(self._table, self._done8, state, mask, steps, fixed)
                if code & VISIT_GROW:
                    self._sync(mark=False)
            except BaseException:  # (the growth too: an interrupt there is settled)
                self._settle()
                raise
        return code & ~VISIT_GROW

    def _settle(self) -> None:
        """After the builder raised (a budget, the state limit): take in the states it found.

        The table then holds a row for each (set when read, as after a walk), so that a
        later read of one of them, from a mask of another request sharing this DFA, stays in
        range.
        """
        self._sync(mark=isinstance(self._b, SubsetBuilder))

    def _done(self) -> npt.NDArray[np.uint8]:
        """The built-row flags as ``uint8`` (the kernels' view)."""
        return self._done8

    def built_row(self, state: int) -> npt.NDArray[np.int32]:
        """The row of ``state``, built first if it is not (no other row is read or set)."""
        if not self._views[1][state]:
            self.expand([state])
        row: npt.NDArray[np.int32] = self._table[state]
        return row

    def expand_one(self, state: int) -> None:
        """Build the row of ``state``; cheap when it is built already."""
        if not self._views[1][state]:
            self.expand([state])

    def step(self, state: int, data: bytes) -> int:
        """Return the state after ``data`` from ``state``, or ``-1`` if it dies."""
        cells, done = self._views
        for b in data:
            if state < 0:
                return -1
            if not done[state]:
                self.expand([state])
                cells, done = self._views
            state = cells[state, b]
        return state

    def fullmatch(self, data: bytes) -> bool:
        """Return whether ``data`` is in the language."""
        s = self.step(self.start, data)
        return s >= 0 and self._b.is_accepting(s)


EAGERNFA_LIMIT = 3000


def compile_regex_auto(
    pattern: str,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    eager_nfa_limit: int = EAGERNFA_LIMIT,
    refuse_blowup: bool = False,
) -> ByteDFA | LazyByteDFA:
    """Compile eagerly (minimal :class:`ByteDFA`) when the regex is small, else lazily.

    Large regexes (JSON Schemas) would spend seconds in an up-front subset construction and
    minimisation; lazily, only the states generation reaches are ever built.

    Args:
        pattern: The regex.
        max_states: DFA size limit (checked as the lazy DFA grows).
        eager_nfa_limit: Largest NFA built eagerly.
        refuse_blowup: Refuse at once a regex whose DFA can be estimated to need more than
            ``max_states`` states (:func:`~outlines_like.fsm._regex_estimate.dfa_blowup`),
            rather than when generation reaches them.

    Raises:
        InvalidConstraintError: As :func:`compile_regex`; a
            :class:`~outlines_like.errors.ConstraintTooLargeError` for the size limits.
    """
    builder = _build(pattern, max_states, refuse_blowup)
    if builder.nfa.size <= eager_nfa_limit:
        return _eager(builder)
    return LazyByteDFA(builder)


# numpy sets up parts of np.unique(axis=0) and of its comparison loops on first use (~30 ms
# together): pay that at import time rather than in the first compile
np.unique(np.zeros((2, 2), dtype=np.int64), axis=0, return_inverse=True, return_index=True)
compile_regex("(ab|cb)+d?")
