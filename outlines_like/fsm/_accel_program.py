"""A regex tree as a program of flat ints, and the size estimates read off it, compiled.

The programs' nodes live in one store shared by the regexes compiled since its last reset
(:func:`clear_programs`, or past :data:`_STORE_LIMIT`): the reader hands out the same node
for a group text it read before, in this pattern or an earlier one, and numbered once in the
store, a node met in an earlier regex is not written again. :func:`gather` numbers a tree's
new nodes (one Python pass) and gathers the nodes under its root into the regex's own
program (one kernel), children first: four ints a node, ``kind, a0, a1, a2``. Two kernels
then read the size estimates of :mod:`~outlines_like.fsm._regex_estimate` off the program, the
same values as the Python ones (the tests compare them): the NFA's states
(:func:`~outlines_like.fsm._regex_estimate.nfa_states`) and the DFA blowup
(:func:`~outlines_like.fsm._regex_estimate.dfa_blowup`). :mod:`~outlines_like.fsm._accel_nfa`
builds the NFA from the program. The reader's pairing of a long pattern's parentheses (a hint
for its memo of groups) is a kernel here too (:func:`_pair_parens`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from itertools import chain
from typing import cast

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_kernels import _i32, _i64, _jit
from outlines_like.fsm._regex_nfa import encodable, set_template
from outlines_like.types._charset import Ranges
from outlines_like.types._regex import Alt, Chars, Concat, Node, Repeat, set_paren_pairing

__all__ = ["blowup_kernel", "clear_programs", "estimate_kernel", "gather"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]

# program node kinds; a node is four ints ``kind, a0, a1, a2`` in ``code``
_SET = 0  # a0: its set template, a1: its ranges (in r_off), a2: its term of the size estimate
_EMPTY = 1  # a set with no encodable character: one state, no edge (a1, a2: as a set's)
_CONCAT = 2  # a0, a1: its items in kids[a0 : a0 + a1]
_ALT = 3  # same
_REPEAT = 4  # a0: the item's node, a1: low, a2: high (-1: unbounded)
_MAX_COUNT = 2**31 - 1  # the largest repeat count the int32 program holds
_SIZE_CAP = 1 << 40  # sizes saturate here (far past MAX_NFA_STATES)
_ESTIMATE_CAP = 1 << 62  # as nfa_states caps


@functools.lru_cache(maxsize=4096)
def _set_entry(ranges: Ranges) -> tuple[int, tuple[int, ...], int, int, tuple[int, ...]]:
    """A set's part of a program, worked out once per process.

    Its template's local state count (``-1``: no encodable character), local edges (flat),
    shared states, term of the size estimate, and its ranges (flat): JSON Schemas' regexes use
    the same few dozen sets.
    """
    estimate = 1 + min(len(ranges), 4)  # as nfa_states counts it
    flat = tuple(chain.from_iterable(ranges))
    usable = encodable(ranges)
    if not usable:
        return -1, (), 0, estimate, flat
    n_local, local_edges, n_trie = set_template(usable)
    return n_local, tuple(chain.from_iterable(local_edges)), n_trie - n_local, estimate, flat


class _Store:
    """The programs' shared nodes: every tree node met since the last reset, numbered once.

    A JSON Schema's regex shares most of its nodes with earlier ones (the reader hands out the
    same node for a group text it read before, and schemas repeat their strings, numbers and
    whole objects): numbered here once, a later regex's program only numbers its new nodes
    (measured on the real-world corpus's regexes in order: ~70% were met before). Nodes are
    told apart by identity (kept alive here, so their ids stay theirs), sets by their ranges.
    The lists grow only; their arrays are copied out a new tail at a time.
    """

    def __init__(self) -> None:
        self.code: list[int] = []
        self.kids: list[int] = []
        self.index: dict[int, int] = {}  # id(node) -> its number
        self.keep: list[Node] = []  # the nodes numbered (their ids stay valid)
        self.sets: dict[Ranges, int] = {}  # ranges -> their program node
        self.t_off: list[int] = [0]
        self.t_edges: list[int] = []
        self.t_n: list[int] = []
        self.t_shared: list[int] = []
        self.r_off: list[int] = [0]  # set k's ranges: r_flat[2 * r_off[k] : 2 * r_off[k + 1]]
        self.r_flat: list[int] = []  # lo, hi, lo, hi ... (the sets as read: for the estimate)
        self._mirrors: list[npt.NDArray[np.int64] | npt.NDArray[np.int32]] = []

    def chars(self, ranges: Ranges) -> int:
        """The program node of a set (its arrays' part is worked out once per process)."""
        got = self.sets.get(ranges)
        if got is not None:
            return got
        code = self.code
        got = len(code) >> 2
        n_local, edges, shared, estimate, flat = _set_entry(ranges)
        at = len(self.r_off) - 1
        self.r_flat += flat
        self.r_off.append(len(self.r_flat) >> 1)
        if n_local < 0:
            code += (_EMPTY, 0, at, estimate)
        else:
            code += (_SET, len(self.t_n), at, estimate)
            self.t_edges += edges
            self.t_off.append(len(self.t_edges) >> 2)
            self.t_n.append(n_local)
            self.t_shared.append(shared)
        self.sets[ranges] = got
        return got

    def node(self, node: Node) -> int:
        """The program node of ``node`` (not seen yet), added after its children."""
        index = self.index
        if type(node) is Concat or type(node) is Alt:
            items = [*map(index.get, map(id, node.items))]  # mostly known: no Python loop
            if None in items:
                for j, k in enumerate(items):
                    if k is None:
                        item = node.items[j]
                        k = index.get(id(item))  # an item met twice in this node
                        if k is None:
                            if type(item) is Chars:  # most new items: no call of node()
                                k = index[id(item)] = self.chars(item.ranges)
                                self.keep.append(item)
                            else:
                                k = self.node(item)
                        items[j] = k
            code = self.code
            got = len(code) >> 2
            code += (_ALT if type(node) is Alt else _CONCAT, len(self.kids), len(items), 0)
            self.kids += items  # type: ignore[arg-type]  # every None filled above
        elif type(node) is Chars:
            got = self.chars(node.ranges)
        elif type(node) is Repeat:
            k = index.get(id(node.item))
            sub = self.node(node.item) if k is None else k
            got = len(self.code) >> 2
            # (counts past int32 are clamped: such a repeat is refused by its size estimate
            # either way, as the Python build refuses the unclamped one)
            low = min(node.low, _MAX_COUNT)
            high = -1 if node.high is None else min(node.high, _MAX_COUNT)
            self.code += (_REPEAT, sub, low, high)
        else:  # anchors and atomic groups: stripped / refused by the reader
            raise AssertionError(f"unexpected {node!r} in the NFA build")
        index[id(node)] = got
        self.keep.append(node)
        return got

    def arrays(self) -> list[npt.NDArray[np.int64] | npt.NDArray[np.int32]]:
        """The lists as arrays (views of their current length: later growth leaves them be)."""
        lists = (
            self.code,
            self.kids,
            self.t_off,
            self.t_edges,
            self.t_n,
            self.t_shared,
            self.r_off,
            self.r_flat,
        )
        mirrors = self._mirrors
        if not mirrors:
            mirrors += [np.empty(64, dtype=t) for t in _STORE_TYPES]
            self._filled = [0] * len(lists)
        out = []
        for i, values in enumerate(lists):
            have, n = self._filled[i], len(values)
            if n > have:
                if n > mirrors[i].shape[0]:  # a new array: views given out keep the old one
                    grown = np.empty(max(n, 2 * mirrors[i].shape[0]), dtype=mirrors[i].dtype)
                    grown[:have] = mirrors[i][:have]
                    mirrors[i] = grown
                mirrors[i][have:n] = values[have:n]
                self._filled[i] = n
            out.append(mirrors[i][:n])
        return out


_STORE_TYPES = (np.int32, np.int32, np.int64, np.int32, np.int32, np.int64, np.int64, np.int64)
_STORE_LIMIT = 1 << 18
"""Ints of node code (four a node) past which the store starts again (a bound on the nodes
it keeps alive: ~65k, a few MB)."""
_store = _Store()
_store_lock = threading.Lock()


def clear_programs() -> None:
    """Start the programs' shared store again (and let go of the nodes it keeps)."""
    global _store
    with _store_lock:
        _store = _Store()


def gather(tree: Node) -> tuple[tuple[I32, I32, int], tuple[I64, I32, I32, I64], tuple[I64, I64]]:
    """The program of ``tree``: its ``code``, ``kids`` and root, and the store's set arrays.

    The set arrays: the templates' ``t_off``, ``t_edges``, ``t_n``, ``t_shared``, and the
    ranges' ``r_off`` and flat ``ranges``.
    """
    global _store
    with _store_lock:
        if len(_store.code) > _STORE_LIMIT:
            _store = _Store()
        store = _store
        got = store.index.get(id(tree))
        root = store.node(tree) if got is None else got
        arrays = store.arrays()
    code, kids, t_off, t_edges, t_n, t_shared, r_off, ranges = arrays
    program = _gather_kernel(cast("I32", code), cast("I32", kids), root)
    sets = cast("tuple[I64, I32, I32, I64]", (t_off, t_edges, t_n, t_shared))
    return program, sets, cast("tuple[I64, I64]", (r_off, ranges))


def _gather(code: I32, kids: I32, root: int) -> tuple[I32, I32, int]:  # pragma: no cover
    """The nodes under ``root`` renumbered from 0, children first; their root's number.

    A set keeps its template and ranges (the store's); a concatenation's or alternation's
    items and a repetition's item are renumbered.
    """
    mark = np.zeros(root + 1, dtype=np.uint8)  # a node's number is below its parents'
    order = np.empty(root + 1, dtype=np.int64)
    mark[root] = 1
    order[0] = root
    count = 1
    n_kids = 0
    at = 0
    while at < count:  # every node reached once: ``order`` is also the stack
        x = order[at]
        at += 1
        k, a0, a1 = code[4 * x], code[4 * x + 1], code[4 * x + 2]
        if _CONCAT <= k <= _ALT:  # a concatenation or an alternation
            n_kids += a1
            for j in range(a0, a0 + a1):
                y = kids[j]
                if not mark[y]:
                    mark[y] = 1
                    order[count] = y
                    count += 1
        elif k == _REPEAT and not mark[a0]:
            mark[a0] = 1
            order[count] = a0
            count += 1
    nodes = np.sort(order[:count])
    local = np.empty(root + 1, dtype=np.int32)
    out = np.empty(4 * count, dtype=np.int32)
    out_kids = np.empty(n_kids, dtype=np.int32)
    kk = 0
    for c in range(count):
        x = nodes[c]
        local[x] = c
        k, a0, a1, a2 = code[4 * x], code[4 * x + 1], code[4 * x + 2], code[4 * x + 3]
        out[4 * c] = k
        out[4 * c + 2] = a1
        out[4 * c + 3] = a2
        if _CONCAT <= k <= _ALT:  # a concatenation or an alternation
            out[4 * c + 1] = kk
            for j in range(a1):
                out_kids[kk + j] = local[kids[a0 + j]]
            kk += a1
        elif k == _REPEAT:
            out[4 * c + 1] = local[a0]
        else:
            out[4 * c + 1] = a0
    return out, out_kids, count - 1


def _estimate(code: I32, kids: I32) -> I64:  # pragma: no cover - compiled
    """Each node's ``nfa_states`` (capped at ``2**62`` as it is)."""
    m = code.shape[0] // 4
    out = np.zeros(m, dtype=np.int64)
    for x in range(m):
        k, a0, a1, a2 = code[4 * x], code[4 * x + 1], code[4 * x + 2], code[4 * x + 3]
        if k <= _EMPTY:  # a set
            out[x] = a2
        elif k <= _ALT:  # a concatenation or an alternation
            total = 1
            for j in range(a0, a0 + a1):
                total = min(total + out[kids[j]], _ESTIMATE_CAP)
            out[x] = total
        else:
            copies = max(a2 if a2 >= 0 else a1 + 1, 1)
            sub = out[a0]
            if sub > (_ESTIMATE_CAP - 1) // copies:
                out[x] = _ESTIMATE_CAP
            else:
                out[x] = min(copies * sub + 1, _ESTIMATE_CAP)
    return out


def _blowup(code: I32, kids: I32, r_off: I64, ranges: I64, root: int) -> int:  # pragma: no cover
    """The root's ``dfa_blowup`` (:mod:`~outlines_like.fsm._regex_estimate`), node by node.

    Children come first, so one pass computes each node's width, characters, first characters
    and worst loop as ``_Facts`` and ``_worst`` do. A set of characters is a bitset over the
    atoms the program's sets cut the code points into (every set is a union of atoms), so a
    union is an or and ``_common`` an and, weighed by the atoms' sizes. Counts saturate at
    ``_SIZE_CAP`` (the NFA estimate checked before bounds them far below).
    """
    m = code.shape[0] // 4
    nr = 0  # the ranges of the program's sets (the store holds others')
    for x in range(m):
        if code[4 * x] <= _EMPTY:
            nr += r_off[code[4 * x + 2] + 1] - r_off[code[4 * x + 2]]
    cuts = np.empty(2 * nr + 1, dtype=np.int64)
    c = 0
    for x in range(m):
        if code[4 * x] <= _EMPTY:
            for j in range(r_off[code[4 * x + 2]], r_off[code[4 * x + 2] + 1]):
                cuts[c] = ranges[2 * j]
                cuts[c + 1] = ranges[2 * j + 1] + 1
                c += 2
    cuts[2 * nr] = 0
    cuts = np.unique(cuts)
    n_atoms = max(cuts.shape[0] - 1, 1)
    size = np.zeros(64 * ((n_atoms + 63) // 64), dtype=np.int64)
    for a in range(cuts.shape[0] - 1):
        size[a] = cuts[a + 1] - cuts[a]
    words = size.shape[0] // 64
    chars = np.zeros((m, words), dtype=np.uint64)
    first = np.zeros((m, words), dtype=np.uint64)
    lo = np.zeros(m, dtype=np.int64)
    hi = np.zeros(m, dtype=np.int64)  # -1: unbounded
    worst = np.zeros(m, dtype=np.int64)
    flat = np.empty(16, dtype=np.int64)  # a concatenation's items, nested ones opened
    st_node = np.empty(m + 1, dtype=np.int64)
    st_j = np.empty(m + 1, dtype=np.int64)
    for x in range(m):
        k, a0, a1, a2 = code[4 * x], code[4 * x + 1], code[4 * x + 2], code[4 * x + 3]
        if k <= _EMPTY:  # a set: one character
            lo[x] = hi[x] = 1
            for j in range(r_off[a1], r_off[a1 + 1]):
                at = np.searchsorted(cuts, ranges[2 * j])
                end = np.searchsorted(cuts, ranges[2 * j + 1] + 1)
                for a in range(at, end):
                    chars[x, a >> 6] |= np.uint64(1) << np.uint64(a & 63)
            for v in range(words):
                first[x, v] = chars[x, v]
        elif k == _REPEAT:
            sub = a0
            lo[x] = _SIZE_CAP if a1 and lo[sub] > _SIZE_CAP // a1 else lo[sub] * a1
            if a2 < 0 or hi[sub] < 0:
                hi[x] = -1
            else:
                hi[x] = _SIZE_CAP if a2 and hi[sub] > _SIZE_CAP // a2 else hi[sub] * a2
            for v in range(words):
                chars[x, v] = chars[sub, v]
                first[x, v] = first[sub, v]
            worst[x] = worst[sub]
        elif k == _ALT:
            lo[x] = _SIZE_CAP
            for j in range(a0, a0 + a1):
                kid = kids[j]
                lo[x] = min(lo[x], lo[kid])
                if hi[x] >= 0:
                    hi[x] = -1 if hi[kid] < 0 else max(hi[x], hi[kid])
                for v in range(words):
                    chars[x, v] |= chars[kid, v]
                    first[x, v] |= first[kid, v]
                worst[x] = max(worst[x], worst[kid])
        else:  # a concatenation
            open_first = True
            for j in range(a0, a0 + a1):
                kid = kids[j]
                lo[x] = min(lo[x] + lo[kid], _SIZE_CAP)
                if hi[x] >= 0:
                    hi[x] = -1 if hi[kid] < 0 else min(hi[x] + hi[kid], _SIZE_CAP)
                for v in range(words):
                    chars[x, v] |= chars[kid, v]
                if open_first:
                    for v in range(words):
                        first[x, v] |= first[kid, v]
                    open_first = lo[kid] == 0
            # the items with nested concatenations opened, in order (as _flat)
            n_flat = 0
            sp = 1
            st_node[0], st_j[0] = x, 0
            while sp > 0:
                f = st_node[sp - 1]
                j = st_j[sp - 1]
                if j == code[4 * f + 2]:
                    sp -= 1
                    continue
                st_j[sp - 1] = j + 1
                item = kids[code[4 * f + 1] + j]
                if code[4 * item] == _CONCAT:
                    st_node[sp], st_j[sp] = item, 0
                    sp += 1
                    continue
                if n_flat == flat.shape[0]:
                    grown = np.empty(2 * n_flat, dtype=np.int64)
                    grown[:n_flat] = flat
                    flat = grown
                flat[n_flat] = item
                n_flat += 1
            w_x = 0
            for i in range(n_flat):
                item = flat[i]
                w_x = max(w_x, worst[item])
                if code[4 * item] != _REPEAT or code[4 * item + 3] >= 0:
                    continue
                loop = code[4 * item + 1]  # a loop over its item: the positions after it
                loop_size = 0
                for a in range(64 * words):
                    if first[loop, a >> 6] & (np.uint64(1) << np.uint64(a & 63)):
                        loop_size += size[a]
                started = False
                w = 0
                for q in range(i + 1, n_flat):
                    nxt = flat[q]
                    common = 0  # the code points both read (atoms in both)
                    for v in range(words):
                        both = chars[nxt, v] & first[loop, v]
                        a = 64 * v
                        while both:
                            if both & np.uint64(1):
                                common += size[a]
                            both >>= np.uint64(1)
                            a += 1
                    if common == 0:
                        if lo[nxt] == 0:
                            continue
                        break
                    if not started:
                        started = common < loop_size
                        if started and hi[nxt] > 1:
                            w = min(w + hi[nxt] - 1, _SIZE_CAP)
                        if hi[nxt] < 0:
                            break
                        continue
                    if common >= 2:
                        w = min(w + (lo[nxt] if hi[nxt] < 0 else hi[nxt]), _SIZE_CAP)
                    if hi[nxt] < 0:
                        break
                w_x = max(w_x, w)
            worst[x] = w_x
    return int(worst[root])


estimate_kernel: Callable[[I32, I32], I64] = _jit(_estimate, _i32, _i32)
_gather_kernel: Callable[[I32, I32, int], tuple[I32, I32, int]] = _jit(
    _gather, _i32, _i32, numba.int64
)
blowup_kernel: Callable[[I32, I32, I64, I64, int], int] = _jit(
    _blowup, _i32, _i32, _i64, _i64, numba.int64
)


def _pair_parens(code: U32) -> I32:  # pragma: no cover - compiled
    """Where each ``(`` of a pattern closes (``-1``: nowhere), as the reader pairs them.

    ``code``: the pattern's code points. A parenthesis right after a backslash is skipped; a
    ``)`` with no ``(`` open is left alone (:func:`outlines_like.types._regex._closing_parens`).
    """
    n = code.shape[0]
    out = np.full(n, -1, dtype=np.int32)
    opened = np.empty(n + 1, dtype=np.int64)
    sp = 0
    for at in range(n):
        c = code[at]
        if (c == 0x28 or c == 0x29) and (at == 0 or code[at - 1] != 0x5C):
            if c == 0x28:
                opened[sp] = at
                sp += 1
            elif sp > 0:
                sp -= 1
                out[opened[sp]] = at
    return out


_u32_read = numba.types.Array(numba.uint32, 1, "C", readonly=True)  # a bytes' view
_pair_kernel: Callable[[U32], I32] = _jit(_pair_parens, _u32_read)


def _pairing(pattern: str) -> memoryview:
    """The reader's pairing of a long pattern's parentheses, by :func:`_pair_parens`."""
    code = np.frombuffer(pattern.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return _pair_kernel(code).data


set_paren_pairing(_pairing)
