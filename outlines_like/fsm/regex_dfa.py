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
subset construction memoises each NFA state's epsilon closure and runs of byte classes (one
union per run, not per class), so the row of a DFA state of one NFA state, nearly every state
of a JSON Schema's DFA, is a few lookups; a lazy DFA can tell where every UTF-8 character
leads from a state without building the states inside characters.

The NFA is built in :mod:`outlines_like.fsm._regex_nfa`, eager DFAs are minimised in
:mod:`outlines_like.fsm._dfa_minimize`; this module holds the subset construction (eager and
lazy) and the two DFA classes.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.fsm._dfa_minimize import merge_classes, minimize
from outlines_like.fsm._regex_estimate import dfa_blowup, nfa_states
from outlines_like.fsm._regex_nfa import MAX_NFA_STATES, NFA, ints, too_many_nfa_states
from outlines_like.fsm.budget import check as _check
from outlines_like.types._regex import parse_regex

__all__ = [
    "DEFAULT_MAX_STATES",
    "UNKNOWN",
    "ByteDFA",
    "LazyByteDFA",
    "compile_regex",
    "compile_regex_auto",
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


def _coreachable(nfa: NFA, final: int) -> bytes:
    """NFA states from which ``final`` can be reached (``1`` bytes)."""
    n = nfa.n
    off, eps_off = np.frombuffer(nfa.off, np.int32), np.frombuffer(nfa.eps_off, np.int32)
    src = np.concatenate(
        [np.repeat(np.arange(n), np.diff(off)), np.repeat(np.arange(n), np.diff(eps_off))]
    )
    dst = np.concatenate([np.frombuffer(nfa.dst, np.int32), np.frombuffer(nfa.eps_dst, np.int32)])
    order = np.argsort(dst, kind="stable")
    rev_off = np.searchsorted(dst[order], np.arange(n + 1)).tolist()
    rev = src[order].tolist()
    ok = bytearray(n)
    ok[final] = 1
    stack = [final]
    while stack:
        y = stack.pop()
        for x in rev[rev_off[y] : rev_off[y + 1]]:
            if not ok[x]:
                ok[x] = 1
                stack.append(x)
    return bytes(ok)


def _byte_classes(nfa: NFA) -> tuple[npt.NDArray[np.int32], int]:
    marks = np.zeros(257, dtype=np.int32)
    marks[0] = 1
    marks[np.frombuffer(nfa.lo, np.int32)] = 1
    marks[np.frombuffer(nfa.hi, np.int32) + 1] = 1
    classes = (np.cumsum(marks[:256]) - 1).astype(np.int32)
    return classes, int(classes[-1]) + 1


_Key = tuple[int, ...]
"""A set of NFA states (a DFA state, or a set inside a character), sorted: its own key."""
_Seg = tuple[int, int, _Key]
"""``(first class, last class, target set)`` of a run of byte classes."""


class _SubsetBuilder:
    """Subset construction over byte classes, one DFA state at a time (eager or lazy).

    The NFA is pruned to the states that can reach the final state first, so every non-empty
    subset is co-reachable: a DFA state never leads only to dead ends. A set of NFA states is
    a sorted tuple of ints (its own dict key; the collector stops tracking such tuples), and
    each NFA state's epsilon closure and runs of classes are computed once, so the row of a
    DFA state of one NFA state (nearly every state of a JSON Schema's DFA) is a lookup.
    """

    def __init__(self, nfa: NFA, start: int, final: int, max_states: int, pattern: str) -> None:
        self.nfa = nfa
        self.final = final
        self.max_states = max_states
        self.pattern = pattern
        self.classes, self.k = _byte_classes(nfa)
        self._cls: list[int] = self.classes.tolist()  # plain ints index faster
        # the first and last class of each byte edge
        self._efirst = ints(self.classes[np.frombuffer(nfa.lo, np.int32)])
        self._elast = ints(self.classes[np.frombuffer(nfa.hi, np.int32)])
        # class c is the bytes cstart[c] .. cstart[c + 1] - 1 (classes are cut at range ends)
        self.cstart: list[int] = [*np.flatnonzero(np.diff(self.classes, prepend=-1)).tolist(), 256]
        # Every fragment of a regex without an empty set matches something, so every state
        # reaches the final one; only empty sets ([^\x00-\U0010FFFF]) leave dead ends.
        self.live = _coreachable(nfa, final) if nfa.has_empty_set else b"\x01" * nfa.n
        if not self.live[start]:
            raise InvalidConstraintError(f"regex {_short(pattern)} matches no string")
        self._closure: dict[int, _Key] = {}
        self._runs: dict[_Key, tuple[_Seg, ...]] = {}
        self._uniform: dict[tuple[_Key, int, int], _Key | None] = {}
        start_set = self.closure(start)
        self.ids: dict[_Key, int] = {start_set: 0}
        self.order: list[_Key] = [start_set]
        self.accepting: list[bool] = [final in start_set]

    def closure(self, s: int) -> _Key:
        """Live epsilon closure of ``s``, restricted to states with byte edges or final."""
        c = self._closure.get(s)
        if c is None:
            nfa, final = self.nfa, self.final
            eps_off, eps_dst, off = nfa.eps_off, nfa.eps_dst, nfa.off
            if eps_off[s] == eps_off[s + 1]:
                c = (s,) if off[s] < off[s + 1] or s == final else ()
            else:
                live = self.live
                seen = {s}
                stack = [s]
                while stack:
                    x = stack.pop()
                    for y in eps_dst[eps_off[x] : eps_off[x + 1]]:
                        if y not in seen and live[y]:
                            seen.add(y)
                            stack.append(y)
                c = tuple(sorted(x for x in seen if off[x] < off[x + 1] or x == final))
            self._closure[s] = c
        return c

    def segments(self, subset: _Key) -> tuple[_Seg, ...]:
        """``(first class, last class, target set)`` of each run of live classes, ascending.

        Memoised. The classes are cut at every edge's ends, so each run's target set is one
        union over the edges that cover it (no loop over the classes themselves).
        """
        runs = self._runs.get(subset)
        if runs is not None:
            return runs
        edges: list[_Seg] = []
        ordered = True  # sorted by first class, and disjoint
        if len(subset) == 1:
            live, closures, off = self.live, self._closure, self.nfa.off
            k0, k1 = off[subset[0]], off[subset[0] + 1]
            if k1 == k0 + 1:  # one byte edge: most states of literal text
                t = self.nfa.dst[k0]
                c = closures.get(t)
                runs = (
                    ((self._efirst[k0], self._elast[k0], self.closure(t) if c is None else c),)
                    if live[t]
                    else ()
                )
                self._runs[subset] = runs
                return runs
            last = -1
            for a, b, t in zip(
                self._efirst[k0:k1], self._elast[k0:k1], self.nfa.dst[k0:k1], strict=True
            ):
                if live[t]:
                    c = closures.get(t)
                    ordered = ordered and a > last
                    last = b
                    edges.append((a, b, self.closure(t) if c is None else c))
        else:
            for s in subset:
                edges.extend(self.segments((s,)))
            ordered = False
        if not ordered:
            edges.sort(key=_first)
            ordered = all(edges[k][0] > edges[k - 1][1] for k in range(1, len(edges)))
        if ordered:
            runs = tuple(edges)  # disjoint edges (a set's byte ranges): each is a run of its own
        else:
            cuts = sorted({e[0] for e in edges} | {e[1] + 1 for e in edges})
            out: list[_Seg] = []
            for a, b in itertools.pairwise(cuts):
                covering = [tgt for clo, chi, tgt in edges if clo <= a <= chi]
                if len(covering) == 1:
                    out.append((a, b - 1, covering[0]))
                elif covering:  # an edge covers a whole run or none of it
                    out.append((a, b - 1, tuple(sorted(set().union(*covering)))))
            runs = tuple(out)
        self._runs[subset] = runs
        return runs

    def intern(self, subset: _Key) -> int:
        """The DFA state of ``subset``, added if new (past ``max_states``: an error)."""
        j = self.ids.get(subset)
        if j is None:
            j = len(self.order)
            if j >= self.max_states:
                raise ConstraintTooLargeError(
                    f"regex {_short(self.pattern)} needs more than max_states="
                    f"{self.max_states} DFA states; simplify it (smaller repetition bounds, "
                    "fewer alternatives), raise max_states, or use a grammar",
                    limit="states",
                    where="regex DFA",
                )
            self.ids[subset] = j
            self.order.append(subset)
            self.accepting.append(self.final in subset)
        return j

    def row_runs(self, i: int) -> list[tuple[int, int, int]]:
        """``(first class, last class, DFA state)`` of each live run of DFA state ``i``.

        Adds the new states it leads to.
        """
        _check("regex DFA")
        ids = self.ids
        subset = self.order[i]
        runs = self._runs.get(subset)
        if runs is None:
            runs = self.segments(subset)
        out = []
        for a, b, f in runs:
            j = ids.get(f)
            out.append((a, b, self.intern(f) if j is None else j))
        return out

    def expand(self, i: int) -> list[int]:
        """Return the class-indexed row of DFA state ``i`` (``-1`` = dead), adding new states."""
        row = [-1] * self.k
        for a, b, j in self.row_runs(i):
            row[a : b + 1] = [j] * (b + 1 - a)
        return row

    def step_uniform(self, subset: _Key, lo: int, hi: int) -> _Key | None:
        """The one target set every byte ``lo..hi`` leads to from ``subset``, else ``None``.

        Memoised; no DFA state is added (the sets inside a character stay subsets).
        """
        key = (subset, lo, hi)
        if key in self._uniform:
            return self._uniform[key]
        first, last = self._cls[lo], self._cls[hi]
        out: _Key | None = None
        covered = first
        for a, b, f in self.segments(subset):
            if b < first:
                continue
            if a > last:
                break
            if a > covered or (out is not None and f != out):
                out = None  # a dead class, or two targets
                break
            out, covered = f, b + 1
        if covered <= last:
            out = None
        self._uniform[key] = out
        return out

    def utf8_target(self, i: int, sequences: list[list[tuple[int, int]]]) -> int:
        """The DFA state every byte sequence of ``sequences`` leads to from ``i``, else ``-1``.

        Each byte range must lead to one set (:meth:`step_uniform`), and every sequence to
        the same last one; only that last set becomes a DFA state.
        """
        target: _Key | None = None
        for seq in sequences:
            cur = self.order[i]
            for lo, hi in seq:
                nxt = self.step_uniform(cur, lo, hi)
                if nxt is None:
                    return -1
                cur = nxt
            if target is None:
                target = cur
            elif cur != target:
                return -1
        return -1 if target is None else self.intern(target)


def _first(edge: _Seg) -> int:
    return edge[0]


def _short(pattern: str) -> str:
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:77] + "...")


def _build(pattern: str, max_states: int, refuse_blowup: bool = False) -> _SubsetBuilder:
    if not isinstance(pattern, str):
        raise TypeError(f"compile_regex takes a str pattern, got {type(pattern).__name__}")
    ast = parse_regex(pattern, strip_anchors=True)
    if nfa_states(ast) > 2 * MAX_NFA_STATES:  # refused before the states are built
        raise too_many_nfa_states()
    if refuse_blowup:
        w = dfa_blowup(ast)
        if w >= 62 or 2**w > max_states:
            raise ConstraintTooLargeError(
                f"regex {_short(pattern)} needs an estimated 2**{w} DFA states, more than "
                f"max_states={max_states}: a loop is followed by {w} positions that can each "
                "start where the loop goes on; bound the loop or shorten what follows it",
                limit="states",
                where="regex DFA (estimate)",
            )
    nfa = NFA()
    start, final = nfa.build(ast)
    nfa.freeze()
    return _SubsetBuilder(nfa, start, final, max_states, pattern)


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


def _eager(builder: _SubsetBuilder) -> ByteDFA:
    rows: list[list[int]] = []
    i = 0
    while i < len(builder.order):
        rows.append(builder.expand(i))
        i += 1
    table = np.array(rows, dtype=np.int32).reshape(len(rows), builder.k)
    accepting = np.array(builder.accepting, dtype=bool)
    s0 = 0
    if table.shape[0] <= _MINIMIZE_LIMIT:
        # Moore refinement costs (states x classes) per round and needs as many rounds as the
        # longest distinguishing path; above this size a non-minimal DFA (still exact) is
        # cheaper than minimising it (~100 ms for 2,000-state JSON Schema DFAs)
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

    def __init__(self, builder: _SubsetBuilder) -> None:
        self._b = builder
        self.start = 0
        self.pattern = builder.pattern
        self.byte_classes = builder.classes
        self._lock = threading.RLock()  # one lazy DFA may serve several vocabularies' indexes
        self._table = np.full((64, 256), UNKNOWN, dtype=np.int32)
        self._expanded = np.zeros(64, dtype=bool)
        self._views = (self._table.data, self._expanded.data)
        self._sync()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        del state["_views"], state["_view"]  # views: rebuilt on load
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._views = (self._table.data, self._expanded.data)
        self._sync()

    def _sync(self) -> None:
        """Grow the tables to the states discovered, and refresh the views read without a lock.

        Rows are never unbuilt and growing copies them, so a reader holding an older view
        still reads right answers.
        """
        n = len(self._b.order)
        cap = self._table.shape[0]
        if n > cap:
            new_cap = max(n, cap * 2)
            table = np.full((new_cap, 256), UNKNOWN, dtype=np.int32)
            table[:cap] = self._table
            expanded = np.zeros(new_cap, dtype=bool)
            expanded[:cap] = self._expanded
            self._table, self._expanded = table, expanded
            # cells[state, byte] and done[state] read plain ints fast; one tuple, so that a
            # reader never pairs a new table's flags with an old table's rows
            self._views = (self._table.data, self._expanded.data)
        self._view = self._table[:n]

    @property
    def n_states(self) -> int:
        """States discovered so far."""
        return len(self._b.order)

    @property
    def transitions(self) -> npt.NDArray[np.int32]:
        """``int32[n_states, 256]``; rows of unexpanded states are :data:`UNKNOWN`."""
        view = self._view
        if view.shape[0] != len(self._b.order):
            with self._lock:
                self._sync()
                view = self._view
        return view

    @property
    def accepting(self) -> npt.NDArray[np.bool_]:
        """``bool[n_states]``."""
        return np.array(self._b.accepting, dtype=bool)

    def is_accepting(self, state: int) -> bool:
        """Whether ``state`` is accepting."""
        return self._b.accepting[state]

    def expand(self, states: npt.ArrayLike) -> None:
        """Build the rows of ``states``: a list in order, an array's distinct values ascending."""
        todo = states if isinstance(states, list) else _distinct(np.asarray(states))
        done = self._views[1]
        if all(done[s] for s in todo):  # discovered states are in range
            return
        b = self._b
        cstart = b.cstart
        with self._lock:
            for s in todo:
                if self._views[1][s]:
                    continue
                runs = b.row_runs(s)
                if len(b.order) > self._table.shape[0]:
                    self._sync()
                row = self._table[s]
                row[:] = -1
                for first, last, j in runs:  # the runs' bytes, one slice each
                    row[cstart[first] : cstart[last + 1]] = j
                self._expanded[s] = True

    def utf8_target(self, state: int, sequences: list[list[tuple[int, int]]]) -> int:
        """The one state every byte sequence leads to from ``state``, else ``-1``.

        Each byte range must lead to one state on the way; those states inside a character
        are compared as subsets, never built.
        """
        with self._lock:
            target = self._b.utf8_target(state, sequences)
            if len(self._b.order) > self._table.shape[0]:
                self._sync()
            return target

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
        return s >= 0 and self._b.accepting[s]


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
