"""Subset construction in pure Python: regex NFA -> DFA states, one state at a time.

The NFA is pruned to the states that can reach the final state first, so every non-empty subset
is co-reachable. A set of NFA states is a sorted tuple of ints (its own dict key; the collector
stops tracking such tuples), and each NFA state's epsilon closure and runs of byte classes are
memoised, so the row of a DFA state of one NFA state (nearly every state of a JSON Schema's
DFA) is a few lookups. :mod:`outlines_like.fsm._accel_dfa` does the same work in compiled
kernels (the ``accel`` extra) and numbers the states the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import ModuleType

import numpy as np
import numpy.typing as npt

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.fsm._regex_nfa import NFA, ints
from outlines_like.fsm.budget import check as _check

__all__ = [
    "VISIT_BODY",
    "VISIT_CHECK",
    "VISIT_GROW",
    "VISIT_STOPPED",
    "VISIT_WALKED",
    "SubsetBase",
    "SubsetBuilder",
    "byte_classes",
    "coreachable",
    "dfa_kernels",
    "set_dfa_kernels",
    "short",
    "too_many_states",
]

_kernels_hook: Callable[[], ModuleType | None] | None = None

# what the compiled first visit of a token index's state (``_accel_dfa_walk._visit``) found,
# or what its caller must do next (here, where the code without numba reads them too)
VISIT_STOPPED, VISIT_WALKED, VISIT_BODY = 0, 1, 2
VISIT_CHECK = 4  # rows were built since the budget's clock was last read: read it
VISIT_GROW = 8  # states were found past the row table: grow it


def set_dfa_kernels(hook: Callable[[], ModuleType | None]) -> None:
    """Register where the compiled subset construction comes from (:mod:`._accel` does).

    ``hook()`` returns :mod:`outlines_like.fsm._accel_dfa` while the compiled path is on, else
    ``None``; without a hook (before :mod:`._accel` is imported) the pure builder is used.
    """
    global _kernels_hook
    _kernels_hook = hook


def dfa_kernels() -> ModuleType | None:
    """The compiled subset construction when it is on, else ``None``."""
    return None if _kernels_hook is None else _kernels_hook()


def short(pattern: str) -> str:
    """``pattern`` as ``repr``, cut to 80 characters (error messages)."""
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:77] + "...")


def too_many_states(pattern: str, max_states: int) -> ConstraintTooLargeError:
    """The error of a DFA that needs more than ``max_states`` states."""
    return ConstraintTooLargeError(
        f"regex {short(pattern)} needs more than max_states="
        f"{max_states} DFA states; simplify it (smaller repetition bounds, "
        "fewer alternatives), raise max_states, or use a grammar",
        limit="states",
        where="regex DFA",
    )


def live_states(nfa: NFA, start: int, final: int, pattern: str) -> bytes:
    r"""The NFA states that can reach ``final`` (all of them without empty sets); checks start.

    Every fragment of a regex without an empty set matches something, so every state reaches
    the final one; only empty sets ([^\x00-\U0010FFFF]) leave dead ends.
    """
    live = coreachable(nfa, final) if nfa.has_empty_set else b"\x01" * nfa.n
    if not live[start]:
        raise InvalidConstraintError(f"regex {short(pattern)} matches no string")
    return live


def coreachable(nfa: NFA, final: int) -> bytes:
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


def byte_classes(nfa: NFA) -> tuple[npt.NDArray[np.int32], int]:
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


class SubsetBase:
    """What both builders (pure and compiled) know of their NFA before the first state.

    Attributes:
        nfa: The NFA (frozen).
        final: Its final state.
        max_states: The limit on DFA states.
        pattern: The regex (error messages).
        classes: ``int32[256]``, each byte's class; ``k`` classes.
        cstart: Class ``c`` is the bytes ``cstart[c] .. cstart[c + 1] - 1`` (``k + 1`` ints).
        live: ``1`` per NFA state that can reach ``final``.
    """

    def __init__(
        self,
        nfa: NFA,
        start: int,
        final: int,
        max_states: int,
        pattern: str,
        prepared: tuple[bytes, npt.NDArray[np.int32], list[int]] | None = None,
    ) -> None:
        """``prepared``: ``live``, ``classes`` and ``cstart`` when the caller has them."""
        self.nfa = nfa
        self.final = final
        self.max_states = max_states
        self.pattern = pattern
        if prepared is None:
            self.live = live_states(nfa, start, final, pattern)
            self.classes, self.k = byte_classes(nfa)
            # classes are cut at range ends
            self.cstart = [*np.flatnonzero(np.diff(self.classes, prepend=-1)).tolist(), 256]
        else:
            self.live, self.classes, self.cstart = prepared
            self.k = len(self.cstart) - 1

    def mark_unknown(
        self, rows: npt.NDArray[np.int32], done: npt.NDArray[np.bool_], lo: int, hi: int, value: int
    ) -> None:
        """Set the rows of the states ``lo .. hi - 1`` not ``done`` to ``value``."""
        rows[lo + np.flatnonzero(~done[lo:hi])] = value


class SubsetBuilder(SubsetBase):
    """Subset construction over byte classes, one DFA state at a time (eager or lazy).

    The NFA is pruned to the states that can reach the final state first, so every non-empty
    subset is co-reachable: a DFA state never leads only to dead ends. A set of NFA states is
    a sorted tuple of ints (its own dict key; the collector stops tracking such tuples), and
    each NFA state's epsilon closure and runs of classes are computed once, so the row of a
    DFA state of one NFA state (nearly every state of a JSON Schema's DFA) is a lookup.
    """

    compiled = False  # the pure builder (see :mod:`outlines_like.fsm._accel_dfa`)

    def __init__(self, nfa: NFA, start: int, final: int, max_states: int, pattern: str) -> None:
        super().__init__(nfa, start, final, max_states, pattern)
        self._cls: list[int] = self.classes.tolist()  # plain ints index faster
        # the first and last class of each byte edge
        self._efirst = ints(self.classes[np.frombuffer(nfa.lo, np.int32)])
        self._elast = ints(self.classes[np.frombuffer(nfa.hi, np.int32)])
        self._closure: dict[int, _Key] = {}
        self._runs: dict[_Key, tuple[_Seg, ...]] = {}
        self._uniform: dict[tuple[_Key, int, int], _Key | None] = {}
        start_set = self.closure(start)
        self.ids: dict[_Key, int] = {start_set: 0}
        self.order: list[_Key] = [start_set]
        self.accepting: list[bool] = [final in start_set]

    @property
    def n_states(self) -> int:
        """DFA states discovered so far."""
        return len(self.order)

    def is_accepting(self, i: int) -> bool:
        """Whether DFA state ``i`` is accepting."""
        return self.accepting[i]

    def accepting_array(self) -> npt.NDArray[np.bool_]:
        """``bool[n_states]``."""
        return np.array(self.accepting, dtype=bool)

    def class_table(self) -> npt.NDArray[np.int32]:
        """Build every state (eagerly): ``int32[n_states, k]``, the class-indexed rows."""
        rows: list[list[int]] = []
        i = 0
        while i < len(self.order):
            rows.append(self.expand(i))
            i += 1
        return np.array(rows, dtype=np.int32).reshape(len(rows), self.k)

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

    def subset(self, i: int) -> tuple[int, ...]:
        """The NFA states of DFA state ``i``, ascending."""
        return self.order[i]

    def intern(self, subset: _Key) -> int:
        """The DFA state of ``subset``, added if new (past ``max_states``: an error)."""
        j = self.ids.get(subset)
        if j is None:
            j = len(self.order)
            if j >= self.max_states:
                raise too_many_states(self.pattern, self.max_states)
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
