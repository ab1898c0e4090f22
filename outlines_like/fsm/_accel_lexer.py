"""The numba kernel of the grammar lexer (``accel`` extra): a lexer context's product DFA.

Imported only through :func:`outlines_like.fsm._accel.warm_up` and the hook it registers in
:mod:`outlines_like.fsm._grammar_lexer`, when numba is importable. It builds what
:func:`~outlines_like.fsm._grammar_lexer.build_context` builds in Python for a context without
priorities, retyping or GLR matches (every context of a JSON Schema's grammar): the same
states, numbered the same way (breadth first; a state's new successors in the order of the
first byte reaching them), each state's first matching terminal, and the terminals each state
can still become.

Layout: the components' DFAs concatenated (``trans[g * 256 + byte]`` is the local target of
row ``g``, or -1; component ``c``'s rows start at ``offs[c]``); a product state is its live
members' global rows, ascending (so in component order), stored flat.
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_kernels import _i32, _i64, _jit, _u8

__all__ = ["OK", "TOO_MANY", "product"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

OK = 0
TOO_MANY = 1  # more states than the caller allowed: it builds the context in Python instead


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _hash(buf: I32, n: int) -> int:  # pragma: no cover - compiled
    """FNV-1a over ``buf[:n]``, as a non-negative int64."""
    h = np.uint64(1469598103934665603)
    for j in range(n):
        h = (h ^ np.uint64(buf[j] + 1)) * np.uint64(1099511628211)
    out: int = np.int64(h >> np.uint64(1))
    return out


def _product(
    trans: I32,
    acc: U8,
    offs: I64,
    starts: I32,
    comp_term: I32,
    n_terms: int,
    max_states: int,
) -> tuple[int, I32, I32, U8]:  # pragma: no cover - compiled
    n_comps = offs.shape[0]
    # component of each global row
    n_rows = trans.shape[0] // 256
    comp_of = np.empty(n_rows, dtype=np.int32)
    for c in range(n_comps):
        end = offs[c + 1] if c + 1 < n_comps else n_rows
        for g in range(offs[c], end):
            comp_of[g] = c
    cap = 64
    mem = np.empty(max(cap * 4, 2 * n_comps), dtype=np.int32)
    st_off = np.zeros(cap + 1, dtype=np.int64)
    rows = np.full(cap * 256, -1, dtype=np.int32)
    hcap = 256
    htab = np.full(hcap, -1, dtype=np.int32)
    hval = np.empty(cap, dtype=np.int64)
    scratch = np.empty(n_comps + 1, dtype=np.int32)
    # the start state: every component (it is never returned to, so not hashed)
    for c in range(n_comps):
        mem[c] = offs[c] + starts[c]
    st_off[1] = n_comps
    n = 1
    # per row (when first met), the bytes where its target differs from the byte before's
    # (byte 0 always): a state's row is constant between its members' boundaries
    rb = np.empty(n_rows * 257, dtype=np.int16)
    rb_len = np.full(n_rows, -1, dtype=np.int32)
    mark = np.zeros(257, dtype=np.int32)
    succ = np.empty(cap * 4, dtype=np.int32)  # distinct successors per state, flat
    succ_off = np.zeros(cap + 1, dtype=np.int64)
    cuts = np.empty(258, dtype=np.int32)
    k = 0
    while k < n:
        lo = st_off[k]
        r = st_off[k + 1] - lo
        n_cuts = 0
        for j in range(r):
            g = mem[lo + j]
            m = rb_len[g]
            if m < 0:
                m = 0
                last = -2
                for b in range(256):
                    t = trans[g * 256 + b]
                    if t != last:
                        rb[g * 257 + m] = b
                        m += 1
                        last = t
                rb_len[g] = m
            for e in range(g * 257, g * 257 + m):
                mark[rb[e]] = k + 1
        for b in range(256):
            if mark[b] == k + 1:
                cuts[n_cuts] = b
                n_cuts += 1
        cuts[n_cuts] = 256
        s_lo = succ_off[k]
        n_succ = 0
        for seg in range(n_cuts):
            b = cuts[seg]
            cnt = 0
            for j in range(r):
                g = mem[lo + j]
                t = trans[g * 256 + b]
                if t >= 0:
                    scratch[cnt] = offs[comp_of[g]] + t
                    cnt += 1
            if cnt == 0:
                continue
            h = _hash(scratch, cnt)
            mask = hcap - 1
            slot = h & mask
            sid = -1
            while True:
                cand = htab[slot]
                if cand < 0:
                    break
                if hval[cand] == h:
                    clo = st_off[cand]
                    if st_off[cand + 1] - clo == cnt:
                        eq = True
                        for j in range(cnt):
                            if mem[clo + j] != scratch[j]:
                                eq = False
                                break
                        if eq:
                            sid = cand
                            break
                slot = (slot + 1) & mask
            if sid < 0:
                if n >= max_states:
                    return TOO_MANY, rows, mem, np.empty(0, dtype=np.uint8)
                sid = n
                if n + 1 >= cap:  # grow the per-state arrays
                    new_cap = cap * 2
                    g_off = np.zeros(new_cap + 1, dtype=np.int64)
                    g_off[: cap + 1] = st_off
                    st_off = g_off
                    g_soff = np.zeros(new_cap + 1, dtype=np.int64)
                    g_soff[: cap + 1] = succ_off
                    succ_off = g_soff
                    g_rows = np.full(new_cap * 256, -1, dtype=np.int32)
                    g_rows[: cap * 256] = rows
                    rows = g_rows
                    g_val = np.empty(new_cap, dtype=np.int64)
                    g_val[:cap] = hval
                    hval = g_val
                    cap = new_cap
                end = st_off[n]
                if end + cnt > mem.shape[0]:
                    grown = np.empty(2 * (end + cnt), dtype=np.int32)
                    grown[:end] = mem[:end]
                    mem = grown
                for j in range(cnt):
                    mem[end + j] = scratch[j]
                st_off[n + 1] = end + cnt
                hval[n] = h
                n += 1
                htab[slot] = sid
                if 2 * n > hcap:  # rehash
                    hcap *= 2
                    htab = np.full(hcap, -1, dtype=np.int32)
                    mask = hcap - 1
                    for s in range(1, n):
                        p = hval[s] & mask
                        while htab[p] >= 0:
                            p = (p + 1) & mask
                        htab[p] = s
            for b in range(cuts[seg], cuts[seg + 1]):
                rows[k * 256 + b] = sid
            seen = False
            for j in range(n_succ):
                if succ[s_lo + j] == sid:
                    seen = True
                    break
            if not seen:
                if s_lo + n_succ >= succ.shape[0]:
                    g_succ = np.empty(2 * succ.shape[0], dtype=np.int32)
                    g_succ[: s_lo + n_succ] = succ[: s_lo + n_succ]
                    succ = g_succ
                succ[s_lo + n_succ] = sid
                n_succ += 1
        succ_off[k + 1] = s_lo + n_succ
        k += 1
    # each state's terminal: its first member that accepts
    label = np.full(n, -1, dtype=np.int32)
    words = (n_terms + 63) // 64
    reach = np.zeros(n * words, dtype=np.uint64)
    for s in range(n):
        for j in range(st_off[s], st_off[s + 1]):
            g = mem[j]
            c = comp_of[g]
            if acc[g]:
                label[s] = c
                t = comp_term[c]
                reach[s * words + t // 64] |= np.uint64(1) << np.uint64(t % 64)
                break
    # the terminals reachable: backward passes until nothing changes (breadth-first order:
    # one pass settles every loop-free part)
    changed = True
    while changed:
        changed = False
        for s in range(n - 1, -1, -1):
            for e in range(succ_off[s], succ_off[s + 1]):
                x = succ[e]
                for w in range(words):
                    merged = reach[s * words + w] | reach[x * words + w]
                    if merged != reach[s * words + w]:
                        reach[s * words + w] = merged
                        changed = True
    # unpacked, a byte per terminal (the caller views it as bools)
    out = np.zeros(n * n_terms, dtype=np.uint8)
    for s in range(n):
        for w in range(words):
            word = reach[s * words + w]
            t = w * 64
            while word:
                if word & np.uint64(1):
                    out[s * n_terms + t] = 1
                word >>= np.uint64(1)
                t += 1
    return OK, rows[: n * 256].copy(), label, out


product: Callable[..., tuple[int, I32, I32, U8]] = _jit(
    _product, _i32, _u8, _i64, _i32, _i32, numba.int64, numba.int64
)
