"""The regex NFA built in compiled kernels (the ``accel`` extra: numba), edge for edge.

:meth:`~outlines_like.fsm._regex_nfa.NFA.build` walks the regex tree in Python, a call per
node and a few per edge, and JSON Schema regexes repeat their sub-patterns (string bodies,
numbers, separators) hundreds of times. Here the tree's distinct nodes (the reader shares a
group text's node wherever the text comes again, in this pattern or an earlier one) are
written once into flat arrays shared by the programs (a node met in an earlier regex is not
written again), in one Python pass; one kernel gathers the nodes under the root into the
regex's program, the same size estimates as the Python ones are read off it (the NFA's
states, and the DFA blowup of :mod:`~outlines_like.fsm._regex_estimate`), and a kernel then
runs the same construction over the program (the
same states in the same order, the same edges in the same order) and sorts the edges by
source as :meth:`~outlines_like.fsm._regex_nfa.NFA.freeze` does (stably). The arrays are the
Python build's, int for int (the tests compare them); the sizes are known from the program
before a state is built, so a regex over :data:`~outlines_like.fsm._regex_nfa.MAX_NFA_STATES`
is refused as the Python build refuses it, with the same error.

The NFA's arrays are then packed for the compiled subset construction in one more kernel
(:func:`pack_kernel`: byte classes, their starts and the kernels' NFA array and layout, what
:class:`~outlines_like.fsm._accel_dfa.KernelSubsetBuilder` computed in some forty numpy calls).

Imported with :mod:`outlines_like.fsm._accel_dfa` (so loaded by
:func:`outlines_like.fsm._accel.warm_up`) and by :func:`~outlines_like.fsm.regex_dfa.compile_regex`
while the compiled subset construction is on.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from itertools import pairwise

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_dfa_kernels import (
    CLS,
    CSTART,
    DST,
    EFIRST,
    ELAST,
    EPS_DST,
    EPS_OFF,
    LE,
    LFINAL,
    LIVE,
    LK,
    LN,
    MARK1,
    OFF,
    SCR_END,
)
from outlines_like.fsm._accel_kernels import _i32, _i64, _jit
from outlines_like.fsm._accel_program import (
    _ALT,
    _CONCAT,
    _EMPTY,
    _SET,
    _SIZE_CAP,
    blowup_kernel,
    estimate_kernel,
    gather,
)
from outlines_like.fsm._regex_nfa import (
    MAX_NFA_STATES,
    NFA,
    REPEAT_MIN_COPIES,
    too_many_nfa_states,
)
from outlines_like.fsm.budget import check as _check
from outlines_like.types._regex import Node

__all__ = ["Program", "pack_kernel"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]


class Program:
    """A regex tree's distinct nodes as flat ints, children first (:mod:`._accel_program`).

    The tree's nodes are numbered in the programs' shared store (only the ones it has not
    met, in one Python pass) and the ones under the root gathered into this program's own
    arrays (one kernel); sets point into the store's set arrays.
    """

    def __init__(self, tree: Node) -> None:
        (
            (self.code, self.kids, self.root),
            (self.t_off, self.t_edges, self.t_n, self.t_shared),
            (self.r_off, self.ranges),
        ) = gather(tree)

    def code_arrays(self) -> tuple[I32, I32]:
        """The program's ``code`` and ``kids`` arrays."""
        return self.code, self.kids

    def nfa_states(self) -> int:
        """:func:`~outlines_like.fsm._regex_estimate.nfa_states` of the tree (the same count)."""
        return int(estimate_kernel(self.code, self.kids)[self.root])

    def dfa_blowup(self) -> int:
        """:func:`~outlines_like.fsm._regex_estimate.dfa_blowup` of the tree (the same value).

        One compiled pass over the program instead of a second walk of the tree in Python.
        """
        return int(blowup_kernel(self.code, self.kids, self.r_off, self.ranges, self.root))

    def build(self) -> tuple[NFA, int, int]:
        """The frozen NFA of the tree and its start and final states (as ``NFA.build``).

        Raises:
            ConstraintTooLargeError: The NFA would need more than ``MAX_NFA_STATES`` states.
        """
        _check("regex NFA")
        code, kids = self.code, self.kids
        t_off, t_edges, t_n, t_shared = self.t_off, self.t_edges, self.t_n, self.t_shared
        all_sizes = _sizes_kernel(code, kids, t_off, t_n, t_shared, REPEAT_MIN_COPIES)
        sizes: list[int] = all_sizes[self.root].tolist()
        n, n_edges, n_eps, shared, empty, _, n_reps = sizes
        n += 1  # and the start state
        if n + shared > MAX_NFA_STATES:
            raise too_many_nfa_states()
        out = np.empty(2 * n + 2 + 3 * n_edges + n_eps, dtype=np.int32)
        reps = np.empty(3 * n_reps, dtype=np.int32)
        final = int(
            _run_kernel(
                *(self.root, code, kids, t_off, t_edges, t_n, n, n_edges, n_eps, out),
                *(all_sizes, reps, REPEAT_MIN_COPIES),
            )
        )
        if final < 0:  # pragma: no cover - the sizes are the build's
            raise AssertionError("the compiled NFA build's sizes disagree with its program")
        nfa = NFA()
        nfa.n, nfa.shared, nfa.has_empty_set = n, shared, bool(empty)
        nfa.repeat_list = array("i", reps.tobytes())
        flat = array("i", out.tobytes())  # the parts sliced as arrays (np.split costs more)
        cut = [0, n + 1, n + 1 + n_edges, n + 1 + 2 * n_edges, n + 1 + 3 * n_edges]
        cut += [cut[-1] + n + 1, len(flat)]
        nfa.off, nfa.lo, nfa.hi, nfa.dst, nfa.eps_off, nfa.eps_dst = (
            flat[a:b] for a, b in pairwise(cut)
        )
        return nfa, 0, final


def _sizes(
    code: I32, kids: I32, t_off: I64, t_n: I32, t_shared: I64, min_copies: int
) -> I64:  # pragma: no cover - compiled
    """Each node's NFA sizes and flags (seven columns).

    ``(states, byte edges, epsilon edges, shared states, empty set, nullable, repeats)``:
    ``nullable``: the node matches the empty string; ``repeats``: the entries of
    :attr:`NFA.repeats` its build adds (repetitions of at least ``min_copies`` optional
    copies of a non-nullable item). Children come first, so one pass; counts saturate at
    ``_SIZE_CAP``.
    """
    m = code.shape[0] // 4
    out = np.zeros((m, 7), dtype=np.int64)
    for x in range(m):
        k, a0, a1, a2 = code[4 * x], code[4 * x + 1], code[4 * x + 2], code[4 * x + 3]
        if k == _SET:
            out[x, 0] = t_n[a0] - 1
            out[x, 1] = t_off[a0 + 1] - t_off[a0]
            out[x, 3] = t_shared[a0]
        elif k == _EMPTY:
            out[x, 0] = 1
            out[x, 4] = 1
        elif k <= _ALT:  # a concatenation or an alternation
            out[x, 5] = 1 if k == _CONCAT else 0
            for j in range(a0, a0 + a1):
                for c in (0, 1, 2, 3, 6):
                    out[x, c] = min(out[x, c] + out[kids[j], c], _SIZE_CAP)
                out[x, 4] |= out[kids[j], 4]
                if k == _CONCAT:
                    out[x, 5] &= out[kids[j], 5]
                else:
                    out[x, 5] |= out[kids[j], 5]
            if k == _ALT:
                out[x, 0] += 1
                out[x, 2] += a1
        else:  # a repetition: its item's copies, and a loop or an end state
            copies = a1 + 1 if a2 < 0 else a2
            for c in (0, 1, 2, 3, 6):
                out[x, c] = min(copies * out[a0, c], _SIZE_CAP)
            out[x, 4] = out[a0, 4] if copies > 0 else 0
            out[x, 5] = 1 if a1 == 0 else out[a0, 5]
            if a2 >= 0 and a2 - a1 >= min_copies and out[a0, 5] == 0:
                out[x, 6] = min(out[x, 6] + 1, _SIZE_CAP)
            if a2 < 0:
                out[x, 0] += 1
                out[x, 2] += 2
            elif a2 != a1:
                out[x, 0] += 1
                out[x, 2] += a2 - a1 + 1
    return out


def _run(
    root: int,
    code: I32,
    kids: I32,
    t_off: I64,
    t_edges: I32,
    t_n: I32,
    n: int,
    n_edges: int,
    n_eps: int,
    out: I32,
    sizes: I64,
    reps: I32,
    min_copies: int,
) -> int:  # pragma: no cover - compiled
    """Build the program's NFA into ``out`` (sorted by source); return the final state.

    ``NFA.build_into`` with an explicit stack: a frame is a node being built, its current
    state, the copies or items launched, its end state and (repetitions) its phase. ``out``
    gets ``off`` (``n + 1``), ``lo``, ``hi``, ``dst`` (``n_edges`` each), ``eps_off``
    (``n + 1``) and ``eps_dst``, ``reps`` the entries of :attr:`NFA.repeats` (repetitions
    of at least ``min_copies`` optional copies of an item ``sizes``, :func:`_sizes`' table,
    says is not nullable); ``-1`` when the sizes were wrong.
    """
    edges = np.empty(4 * n_edges + 4, dtype=np.int32)  # src, lo, hi, dst as they are added
    eps = np.empty(2 * n_eps + 2, dtype=np.int32)  # src, dst
    depth = code.shape[0] // 4 + 1  # a path down the tree meets a node at most once
    st_node = np.empty(depth, dtype=np.int64)
    st_s = np.empty(depth, dtype=np.int64)
    st_j = np.empty(depth, dtype=np.int64)
    st_end = np.empty(depth, dtype=np.int64)
    st_phase = np.empty(depth, dtype=np.int64)
    n_states = 1  # state 0: the start
    ne = 0
    np_ = 0
    nr = 0
    sp = 1
    st_node[0], st_s[0], st_j[0], st_phase[0] = root, 0, 0, 0
    ret = 0
    while sp > 0:
        f = sp - 1
        node = st_node[f]
        k, a0, a1, a2 = code[4 * node], code[4 * node + 1], code[4 * node + 2], code[4 * node + 3]
        s = st_s[f]
        if k == _SET:
            t = a0
            base = n_states - 1  # local state 0 is s; local j >= 1 is base + j
            n_states += t_n[t] - 1
            for j in range(t_off[t], t_off[t + 1]):
                src = t_edges[4 * j]
                edges[4 * ne] = s if src == 0 else base + src
                edges[4 * ne + 1] = t_edges[4 * j + 1]
                edges[4 * ne + 2] = t_edges[4 * j + 2]
                edges[4 * ne + 3] = base + t_edges[4 * j + 3]
                ne += 1
            ret = base + 1
            sp -= 1
            continue
        if k == _EMPTY:
            ret = n_states
            n_states += 1
            sp -= 1
            continue
        j = st_j[f]
        if k == _CONCAT:
            if j > 0:
                s = st_s[f] = ret
            if j < a1:
                st_j[f] = j + 1
                st_node[sp], st_s[sp], st_j[sp], st_phase[sp] = kids[a0 + j], s, 0, 0
                sp += 1
                continue
            ret = s
            sp -= 1
            continue
        if k == _ALT:
            if j == 0:
                st_end[f] = n_states
                n_states += 1
            else:
                eps[2 * np_] = ret
                eps[2 * np_ + 1] = st_end[f]
                np_ += 1
            if j < a1:
                st_j[f] = j + 1
                st_node[sp], st_s[sp], st_j[sp], st_phase[sp] = kids[a0 + j], s, 0, 0
                sp += 1
                continue
            ret = st_end[f]
            sp -= 1
            continue
        sub, lo, hi = a0, a1, a2
        phase = st_phase[f]
        if phase == 0:  # the copies every match has
            if j > 0:
                s = st_s[f] = ret
            if j < lo:
                st_j[f] = j + 1
                st_node[sp], st_s[sp], st_j[sp], st_phase[sp] = sub, s, 0, 0
                sp += 1
                continue
            if hi < 0:  # a loop: the item once more, from and back to a new state
                loop = n_states
                n_states += 1
                eps[2 * np_] = s
                eps[2 * np_ + 1] = loop
                np_ += 1
                st_end[f] = loop
                st_phase[f] = 2
                st_node[sp], st_s[sp], st_j[sp], st_phase[sp] = sub, loop, 0, 0
                sp += 1
                continue
            if hi == lo:
                ret = s
                sp -= 1
                continue
            st_end[f] = n_states
            n_states += 1
            st_phase[f] = 3
            st_j[f] = j = 0
            phase = 3
        if phase == 2:
            eps[2 * np_] = ret
            eps[2 * np_ + 1] = st_end[f]
            np_ += 1
            ret = st_end[f]
            sp -= 1
            continue
        # phase 3: the optional copies, each skippable to the end
        if j > 0:
            s = st_s[f] = ret
        eps[2 * np_] = s
        eps[2 * np_ + 1] = st_end[f]
        np_ += 1
        if j < hi - lo:
            st_j[f] = j + 1
            st_node[sp], st_s[sp], st_j[sp], st_phase[sp] = sub, s, 0, 0
            sp += 1
            continue
        ret = st_end[f]
        if hi - lo >= min_copies and sizes[sub, 5] == 0:  # recorded: its blocks (_sizes)
            if nr >= reps.shape[0] // 3:
                return -1
            base = st_end[f] + 1
            reps[3 * nr] = base
            reps[3 * nr + 1] = (n_states - base) // (hi - lo)
            reps[3 * nr + 2] = hi - lo
            nr += 1
        sp -= 1
    if n_states != n or ne != n_edges or np_ != n_eps or nr != reps.shape[0] // 3:
        return -1
    # stable counting sort by source: the order NFA.freeze's stable argsort gives
    lo_at, hi_at, dst_at = n + 1, n + 1 + n_edges, n + 1 + 2 * n_edges
    eoff_at = n + 1 + 3 * n_edges
    edst_at = eoff_at + n + 1
    out[: n + 1] = 0
    for e in range(n_edges):
        out[edges[4 * e] + 1] += 1
    out[eoff_at : eoff_at + n + 1] = 0
    for e in range(n_eps):
        out[eoff_at + eps[2 * e] + 1] += 1
    for x in range(n):
        out[x + 1] += out[x]
        out[eoff_at + x + 1] += out[eoff_at + x]
    fill = out[:n].copy()
    for e in range(n_edges):
        p = fill[edges[4 * e]]
        fill[edges[4 * e]] = p + 1
        out[lo_at + p] = edges[4 * e + 1]
        out[hi_at + p] = edges[4 * e + 2]
        out[dst_at + p] = edges[4 * e + 3]
    fill = out[eoff_at : eoff_at + n].copy()
    for e in range(n_eps):
        p = fill[eps[2 * e]]
        fill[eps[2 * e]] = p + 1
        out[edst_at + p] = eps[2 * e + 1]
    return ret


_RUN_ARGS = (numba.int64, _i32, _i32, _i64, _i32, _i32, *[numba.int64] * 3, _i32)
_run_kernel: Callable[..., int] = _jit(
    _run, *_RUN_ARGS, numba.types.Array(numba.int64, 2, "C"), _i32, numba.int64
)
_sizes_kernel: Callable[[I32, I32, I64, I32, I64, int], I64] = _jit(
    _sizes, _i32, _i32, _i64, _i32, _i64, numba.int64
)


def _pack(
    off: I32, lo: I32, hi: I32, dst: I32, eps_off: I32, eps_dst: I32, live: U8, final: int, lay: I64
) -> tuple[I32, I32, I32]:  # pragma: no cover - compiled
    """The byte classes, their starts and the subset kernels' NFA array, and its layout.

    What :class:`~outlines_like.fsm._subset.SubsetBase` and
    :class:`~outlines_like.fsm._accel_dfa.KernelSubsetBuilder` compute in some forty numpy
    calls: classes cut at every edge's ends (``classes``, ``cstart``), and the NFA's arrays
    one after another (``off``, each edge's first and last class, ``dst``, ``eps_off``,
    ``eps_dst``, ``live``, ``cstart``, ``classes``), their offsets and the scratch buffers'
    written into ``lay``.
    """
    n = off.shape[0] - 1
    n_edges = lo.shape[0]
    n_eps = eps_dst.shape[0]
    marks = np.zeros(257, dtype=np.int32)
    marks[0] = 1
    for e in range(n_edges):
        marks[lo[e]] = 1
        marks[hi[e] + 1] = 1
    classes = np.empty(256, dtype=np.int32)
    c = -1
    for b in range(256):
        c += marks[b]
        classes[b] = c
    k = c + 1
    cstart = np.empty(k + 1, dtype=np.int32)
    j = 0
    for b in range(256):
        if marks[b]:
            cstart[j] = b
            j += 1
    cstart[k] = 256
    lay[LN], lay[LE], lay[LFINAL], lay[LK] = n, n_edges, final, k
    sizes = (n + 1, n_edges, n_edges, n_edges, n + 1, n_eps, n, k + 1, 256)
    lay[OFF] = 0
    for i in range(9):
        lay[OFF + i + 1] = lay[OFF + i] + sizes[i]
    lay[MARK1] = 0
    for i in range(SCR_END - MARK1):
        size = n + 1 if i < 8 else (n_edges + 1 if i < 11 else 2 * n_edges + 2)
        lay[MARK1 + i + 1] = lay[MARK1 + i] + size
    out = np.empty(lay[OFF + 9], dtype=np.int32)
    out[lay[OFF] : lay[OFF] + n + 1] = off
    o_first, o_last, o_dst = lay[EFIRST], lay[ELAST], lay[DST]
    for e in range(n_edges):
        out[o_first + e] = classes[lo[e]]
        out[o_last + e] = classes[hi[e]]
        out[o_dst + e] = dst[e]
    out[lay[EPS_OFF] : lay[EPS_OFF] + n + 1] = eps_off
    out[lay[EPS_DST] : lay[EPS_DST] + n_eps] = eps_dst
    for x in range(n):
        out[lay[LIVE] + x] = live[x]
    out[lay[CSTART] : lay[CSTART] + k + 1] = cstart
    out[lay[CLS] : lay[CLS] + 256] = classes
    return classes, cstart, out


_u8_read = numba.types.Array(numba.uint8, 1, "C", readonly=True)  # ``live``: a bytes' view
pack_kernel: Callable[..., tuple[I32, I32, I32]] = _jit(
    _pack, _i32, _i32, _i32, _i32, _i32, _i32, _u8_read, numba.int64, _i64
)
