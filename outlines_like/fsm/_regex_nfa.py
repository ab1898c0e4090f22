"""Regex tree -> byte-level Thompson NFA, in flat int arrays (UTF-8 sets as shared tries)."""

from __future__ import annotations

import dataclasses
import functools
from array import array
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from outlines_like.errors import ConstraintTooLargeError
from outlines_like.fsm.budget import check as _check
from outlines_like.types._charset import SURROGATES, Ranges, drop_surrogates, utf8_byte_ranges
from outlines_like.types._regex import Alt, Chars, Concat, Node, Repeat

_Span: TypeAlias = tuple[Node, int, int, int, int, int, int, int, int, int, bool, int, int]
"""Where a node's first build went: ``(node, start, end, n0, n1, e0, e1, p0, p1, shared,
empty, r0, r1)``: its states ``n0 .. n1 - 1``, its ints of the edge and epsilon lists, the
shared states, whether it added an empty set and its entries of :attr:`NFA.repeats`."""

REPEAT_MIN_COPIES = 16
"""The fewest optional copies of a counted repetition :attr:`NFA.repeats` records."""

# a fragment with fewer edge ints than this is copied in Python (numpy's calls cost more)
_NUMPY_COPY = 96


class _Edges:
    """The edges of a fragment, ``width`` ints each (``src, ..., dst``), to add again shifted.

    Sources are the fragment's start (``-1``) or its own states (from ``0``), destinations its
    own states: a copy from start ``s`` on states from ``n0`` is ``src -> s`` or ``+ n0``,
    ``dst + n0``, the ints in between as they are.
    """

    __slots__ = ("flat", "from_start", "shift", "small", "width")

    def __init__(self, ints: array[int], width: int, s: int, n0: int) -> None:
        rows = np.frombuffer(ints, dtype=np.int32).reshape(-1, width).copy()
        self.width = width
        starts = rows[:, 0] == s
        rows[:, 0] -= n0
        rows[:, -1] -= n0
        rows[starts, 0] = -1
        self.small = len(ints) < _NUMPY_COPY
        if self.small:  # (src, *middle, dst) tuples
            self.flat: list[tuple[int, ...]] | npt.NDArray[np.int32] = [
                tuple(r) for r in rows.tolist()
            ]
        else:
            self.flat = rows
            self.from_start = np.flatnonzero(starts)
            self.shift = np.zeros(width, dtype=np.int32)
            self.shift[0] = self.shift[-1] = 1

    def emit(self, out: array[int], s: int, n0: int) -> None:
        """Append the edges to ``out``, from ``s`` on states from ``n0``."""
        if self.small:
            add = out.extend
            if self.width == 4:
                for a, lo, hi, d in self.flat:
                    add((s if a < 0 else a + n0, lo, hi, d + n0))
            else:
                for a, d in self.flat:
                    add((s if a < 0 else a + n0, d + n0))
            return
        rows = self.flat + self.shift * np.int32(n0)
        rows[self.from_start, 0] = s
        out.frombytes(rows.tobytes())


@dataclasses.dataclass(frozen=True, slots=True)
class _Fragment:
    """A node's NFA fragment, cut from its first build, to add again from another state."""

    n_new: int  # states it adds
    shared: int  # states its sets' templates saved
    empty: bool  # whether it holds an empty set
    end: int  # its end state (``-1``: the start)
    edges: _Edges
    eps: _Edges
    repeats: tuple[tuple[int, int, int], ...]  # its repeats' entries, first block from 0


__all__ = [
    "MAX_NFA_STATES",
    "NFA",
    "REPEAT_MIN_COPIES",
    "encodable",
    "ints",
    "set_template",
    "too_many_nfa_states",
]

MAX_NFA_STATES = 400_000


def too_many_nfa_states() -> ConstraintTooLargeError:
    """The error of a regex whose NFA needs more than :data:`MAX_NFA_STATES` states."""
    return ConstraintTooLargeError(
        f"regex is too large: its automaton needs more than {MAX_NFA_STATES} NFA "
        "states (large counted repetitions?); use a grammar or smaller bounds",
        limit="states",
        where="regex NFA",
    )


class NFA:
    """Thompson-style NFA over bytes: byte-range edges and epsilon edges.

    Fragments are built *into* an existing start state and never add an edge into it, so
    alternatives can share their start and literal runs become plain chains.

    The edges go into flat int arrays (no object per state or edge: nothing for the garbage
    collector to track or scan, however large the automaton), which :meth:`freeze` sorts by
    source: the byte edges of state ``s`` are ``lo[k]..hi[k] -> dst[k]`` for ``k`` in
    ``off[s] .. off[s + 1] - 1``, its epsilon edges ``eps_dst[k]`` for ``k`` in
    ``eps_off[s] .. eps_off[s + 1] - 1``.
    """

    def __init__(self) -> None:
        self.n = 0  # states
        self.edge_list = array("i")  # while building: src, lo, hi, dst of each byte edge
        self.eps_list = array("i")  # while building: src, dst of each epsilon edge
        self.off = self.lo = self.hi = self.dst = self.eps_off = self.eps_dst = array("i")
        self.has_empty_set = False
        # the counted repetitions' optional copies, as built: see :attr:`repeats`
        self.repeat_list = array("i")
        self._nullable: dict[int, bool] = {}
        # states the set templates saved by sharing UTF-8 suffixes: size limits and the
        # eager/lazy choice count them, so they decide as they did before the sharing
        self.shared = 0
        # id(node) -> where its first build went, then its fragment (see :meth:`_again`)
        self._built: dict[int, _Span | _Fragment] = {}

    @property
    def size(self) -> int:
        """NFA states, counting set templates as unshared prefix tries."""
        return self.n + self.shared

    @property
    def repeats(self) -> npt.NDArray[np.int32]:
        """``int32[r, 3]``: each counted repetition's optional copies as ``(base, width, k)``.

        A repetition ``x{lo,hi}`` with ``k = hi - lo >= REPEAT_MIN_COPIES`` optional copies of
        an ``x`` that cannot match the empty string: copy ``j`` (``0 <= j < k``) is built on
        the states ``base + j * width .. base + (j + 1) * width - 1`` (its *block*), from the
        end state of copy ``j - 1`` (in block ``j - 1``; copy 0 from a state before the
        blocks), each copy the one before shifted by ``width`` states, and every copy's start
        has an epsilon edge to the one end state ``base - 1``. One entry per place the
        repetition was built (a repetition inside another's copies: one per copy), in the
        order the builds finished. :mod:`outlines_like.fsm._repeat_shift` reads them.
        """
        return np.frombuffer(self.repeat_list, dtype=np.int32).reshape(-1, 3)

    def new(self) -> int:
        if self.n + self.shared >= MAX_NFA_STATES:
            raise too_many_nfa_states()
        if not self.n & 1023:
            _check("regex NFA")
        self.n += 1
        return self.n - 1

    def build(self, node: Node) -> tuple[int, int]:
        s = self.new()
        return s, self.build_into(node, s)

    def freeze(self) -> None:
        """Sort the built edges by source into the CSR arrays."""
        n = self.n
        edges = np.frombuffer(self.edge_list, dtype=np.int32).reshape(-1, 4)
        edges = edges[np.argsort(edges[:, 0], kind="stable")]
        self.off = ints(np.searchsorted(edges[:, 0], np.arange(n + 1)))
        self.lo, self.hi, self.dst = ints(edges[:, 1]), ints(edges[:, 2]), ints(edges[:, 3])
        eps = np.frombuffer(self.eps_list, dtype=np.int32).reshape(-1, 2)
        eps = eps[np.argsort(eps[:, 0], kind="stable")]
        self.eps_off = ints(np.searchsorted(eps[:, 0], np.arange(n + 1)))
        self.eps_dst = ints(eps[:, 1])
        self.edge_list, self.eps_list = array("i"), array("i")
        self._built.clear()
        self._nullable.clear()

    def build_into(self, node: Node, s: int) -> int:
        """Add the paths of ``node`` leaving ``s``; return the end state.

        A node met again (the reader shares the nodes of a group text it read before, and a
        counted repetition builds its item once per copy) is not built again: the edges its
        first build added are copied, their states shifted (:meth:`_again`). The arrays come
        out as a build from scratch makes them, edge for edge.
        """
        if type(node) is Chars:
            return self.build_set(encodable(node.ranges), s)
        built = self._built.get(id(node))
        if built is not None:
            return self._again(id(node), built, s)
        n0, e0, p0, sh0 = self.n, len(self.edge_list), len(self.eps_list), self.shared
        empty = self.has_empty_set
        r0 = len(self.repeat_list)
        end = self._build_node(node, s)
        self._built[id(node)] = (
            node,
            s,
            end,
            n0,
            self.n,
            e0,
            len(self.edge_list),
            p0,
            len(self.eps_list),
            self.shared - sh0,
            self.has_empty_set and not empty,
            r0,
            len(self.repeat_list),
        )
        return end

    def _again(self, key: int, built: _Span | _Fragment, s: int) -> int:
        """Add the edges of a node's first build again from ``s``, on new states."""
        if isinstance(built, tuple):  # the first build's span of the arrays: cut it out
            built = self._built[key] = self._fragment(built)
        n0 = self.n
        n_new = built.n_new
        if n0 + n_new + self.shared + built.shared > MAX_NFA_STATES:
            raise too_many_nfa_states()
        if n0 >> 10 != (n0 + n_new) >> 10 or not n0 & 1023:  # where new() checks the clock
            _check("regex NFA")
        self.n = n0 + n_new
        self.shared += built.shared
        self.has_empty_set |= built.empty
        built.edges.emit(self.edge_list, s, n0)
        built.eps.emit(self.eps_list, s, n0)
        for base, width, k in built.repeats:
            self.repeat_list.extend((n0 + base, width, k))
        return s if built.end < 0 else n0 + built.end

    def _fragment(self, span: _Span) -> _Fragment:
        """The fragment a first build added: its states from 0, its start state as ``-1``."""
        _, s, end, n0, n1, e0, e1, p0, p1, shared, empty, r0, r1 = span
        flat = self.repeat_list[3 * r0 : 3 * r1]
        return _Fragment(
            n_new=n1 - n0,
            shared=shared,
            empty=empty,
            end=-1 if end == s else end - n0,
            edges=_Edges(self.edge_list[e0:e1], 4, s, n0),
            eps=_Edges(self.eps_list[p0:p1], 2, s, n0),
            repeats=tuple((flat[i] - n0, flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)),
        )

    def _build_node(self, node: Node, s: int) -> int:
        """Build a node other than a set (see :meth:`build_into`)."""
        if isinstance(node, Concat):
            for item in node.items:
                s = self.build_into(item, s)
            return s
        eps = self.eps_list
        if isinstance(node, Alt):
            e = self.new()
            for item in node.items:
                eps.extend((self.build_into(item, s), e))
            return e
        if not isinstance(node, Repeat):  # anchors and atomic groups: stripped / refused
            raise AssertionError(f"unexpected {node!r} in the NFA build")
        sub, lo, hi = node.item, node.low, node.high  # lazy: same language
        for _ in range(lo):
            s = self.build_into(sub, s)
        if hi is None:
            loop = self.new()
            eps.extend((s, loop))
            eps.extend((self.build_into(sub, loop), loop))
            return loop
        if hi == lo:
            return s
        end = self.new()
        base = self.n
        for _ in range(hi - lo):
            eps.extend((s, end))
            s = self.build_into(sub, s)
        eps.extend((s, end))
        k = hi - lo
        if k >= REPEAT_MIN_COPIES and not self.nullable(sub):
            self.repeat_list.extend((base, (self.n - base) // k, k))
        return end

    def nullable(self, node: Node) -> bool:
        """Whether ``node`` matches the empty string (memoised per node while building)."""
        known = self._nullable.get(id(node))
        if known is not None:
            return known
        if isinstance(node, Chars):
            out = False
        elif isinstance(node, Concat):
            out = all(self.nullable(item) for item in node.items)
        elif isinstance(node, Alt):
            out = any(self.nullable(item) for item in node.items)
        elif isinstance(node, Repeat):
            out = node.low == 0 or self.nullable(node.item)
        else:  # pragma: no cover - anchors and atomic groups never reach the build
            raise AssertionError(f"unexpected {node!r} in the NFA build")
        self._nullable[id(node)] = out
        return out

    def build_set(self, ranges: Ranges, s: int) -> int:
        if not ranges:
            self.has_empty_set = True
            return self.new()
        n_local, local_edges, n_trie = set_template(ranges)
        self.shared += n_trie - n_local
        add = self.edge_list.extend
        if n_local == 2:  # all ranges go straight to the end (ASCII, or one byte each)
            e = self.new()
            for _, lo, hi, _ in local_edges:
                add((s, lo, hi, e))
            return e
        base = self.n - 1  # local state 0 is s; local k >= 1 is base + k
        if base + self.shared + n_local > MAX_NFA_STATES:
            self.new()  # raises the size error
        self.n += n_local - 1
        for src, lo, hi, dst in local_edges:
            add((s if src == 0 else base + src, lo, hi, base + dst))
        return base + 1


def ints(a: npt.NDArray[np.integer]) -> array[int]:
    """``a`` as a flat ``array('i')``: plain ints on indexing, untracked by the collector."""
    return array("i", np.ascontiguousarray(a, dtype=np.int32).tobytes())


@functools.lru_cache(maxsize=1024)
def encodable(ranges: Ranges) -> Ranges:
    """``ranges`` less the surrogates (UTF-8 cannot encode them)."""
    s_lo, s_hi = SURROGATES
    if any(lo <= s_hi and hi >= s_lo for lo, hi in ranges):
        return drop_surrogates(ranges)
    return ranges


@functools.lru_cache(maxsize=1024)
def set_template(ranges: Ranges) -> tuple[int, tuple[tuple[int, int, int, int], ...], int]:
    """The NFA fragment of a character set.

    Returns the local state count, the local edges (0 -> 1), and the state count of the
    prefix trie before its suffixes were shared.
    """
    n = 2
    out: list[tuple[int, int, int, int]] = []
    trie: dict[tuple[int, int, int], int] = {}
    for lo, hi in ranges:
        for seq in utf8_byte_ranges(lo, hi):
            cur = 0
            for k, (blo, bhi) in enumerate(seq):
                if k == len(seq) - 1:
                    out.append((cur, blo, bhi, 1))
                else:
                    key = (cur, blo, bhi)
                    nxt = trie.get(key)
                    if nxt is None:
                        nxt = n
                        n += 1
                        trie[key] = nxt
                        out.append((cur, blo, bhi, nxt))
                    cur = nxt
    n_trie = n
    n, out = _share_suffixes(out)
    return n, tuple(out), n_trie


def _share_suffixes(
    edges: list[tuple[int, int, int, int]],
) -> tuple[int, list[tuple[int, int, int, int]]]:
    """Merge the trie nodes of a set template that accept the same byte suffixes.

    The prefix trie of a set's UTF-8 sequences keeps one node per lead-byte range even where
    the rest is the same (``E1-EC`` and ``EE-EF`` both need two continuation bytes); merging
    nodes with equal outgoing edges (bottom-up) leaves the language as it is and gives the
    lazy DFA fewer states inside characters. Local state 0 is the start, 1 the end.
    """
    out_of: dict[int, list[tuple[int, int, int]]] = {}
    for src, lo, hi, dst in edges:
        out_of.setdefault(src, []).append((lo, hi, dst))
    canon: dict[int, int] = {1: 1}
    rep_of: dict[tuple[tuple[int, int, int], ...], int] = {}

    def resolve(node: int) -> int:  # depth <= 4: one level per UTF-8 byte
        known = canon.get(node)
        if known is not None:
            return known
        sig = tuple(sorted((lo, hi, resolve(d)) for lo, hi, d in out_of.get(node, [])))
        rep = rep_of.setdefault(sig, node)
        canon[node] = rep
        return rep

    number: dict[int, int] = {0: 0, 1: 1}
    merged: list[tuple[int, int, int, int]] = []
    todo = [0]
    while todo:
        node = todo.pop()
        for lo, hi, dst in out_of.get(node, []):
            rep = resolve(dst)
            if rep not in number:
                number[rep] = len(number)
                todo.append(rep)
            merged.append((number[node], lo, hi, number[rep]))
    return len(number), merged
