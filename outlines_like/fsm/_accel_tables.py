"""The numba kernel of the grammar masker's LALR(1) tables (``accel`` extra).

Imported only through :func:`outlines_like.fsm._accel.warm_up` and the hook it registers in
:mod:`outlines_like.fsm._grammar_tables`, when numba is importable. It builds what
:func:`~outlines_like.fsm._grammar_tables.lalr_tables` builds in Python, as flat arrays: the
LR(0) states (kernels as sorted item arrays in an open-addressing table), then the lookaheads by
DeRemer and Pennello's relations over bitsets of the terminals. The automaton is the same; the
states are numbered breadth first, a state's successors in the order of their symbols (Python's
numbering follows its sets' order), which no mask depends on. A grammar with a conflict, or with
more states than the caller allows, is left to the Python build (which reports conflicts and
checks the compile budget as it goes).

Symbols: nonterminals ``0 .. n_nt - 1`` (the root's last), terminals ``n_nt .. n_sym - 1``;
lookahead bit 0 is ``$END``, bit ``b > 0`` terminal ``n_nt + b - 1``. Productions: ``lhs[p]``,
right sides ``rhs[rhs_off[p]:rhs_off[p + 1]]``, the root's last. Items: ``base[p] + dot`` with
``base[p] = rhs_off[p] + p``.

One cohesive algorithm (LR(0) states, then the digraph passes), kept in one module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_dfa_kernels import _hash, _isort
from outlines_like.fsm._accel_kernels import _i32, _jit

__all__ = ["CONFLICT", "OK", "TOO_MANY", "tables"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]
U8 = npt.NDArray[np.uint8]
Grammar = tuple[I32, I32, I32, I32, U8, I32]
"""What :func:`_grammar` returns: ``po_off, po, item_sym, item_prod, nullable, null_from``."""
LR0 = tuple[int, I64, I32, I32, I64, I32]
"""What :func:`_lr0` returns: ``n_states, tr_off, tr_sym, tr_tgt, red_off, red``."""

OK = 0
TOO_MANY = 1  # more LR(0) states than the caller allowed
CONFLICT = 2  # some state has two actions on a terminal: the Python build reports them


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _grow(a: Any, need: int) -> Any:  # pragma: no cover - compiled
    """``a`` when it holds ``need`` items, else a copy at least twice as large."""
    if need <= a.shape[0]:
        return a
    out = np.empty(max(need, 2 * a.shape[0]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _probe(
    htab: I32, khash: I64, koff: I64, kmem: I32, buf: I32, lo: int, hi: int, h: int
) -> int:  # pragma: no cover - compiled
    """The state whose kernel is ``buf[lo:hi]`` (hash ``h``), else ``~slot``: where it goes."""
    mask = htab.shape[0] - 1
    slot = h & mask
    while htab[slot] >= 0:
        cand = htab[slot]
        c0 = koff[cand]
        if khash[cand] == h and koff[cand + 1] - c0 == hi - lo:
            j = 0
            while j < hi - lo and kmem[c0 + j] == buf[lo + j]:
                j += 1
            if j == hi - lo:
                return int(cand)
        slot = (slot + 1) & mask
    return int(~slot)


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _rehash(khash: I64, n: int, size: int) -> I32:  # pragma: no cover - compiled
    """A table of ``size`` slots (a power of two) holding states ``0 .. n - 1`` by hash."""
    htab = np.full(size, -1, dtype=np.int32)
    mask = size - 1
    for v in range(n):
        e = khash[v] & mask
        while htab[e] >= 0:
            e = (e + 1) & mask
        htab[e] = v
    return htab


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _find(tr_off: I64, tr_sym: I32, state: int, sym: int) -> int:  # pragma: no cover - compiled
    """The index of ``state``'s transition on ``sym`` (sorted by symbol), or -1."""
    lo = tr_off[state]
    hi = tr_off[state + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        s = tr_sym[mid]
        if s == sym:
            return int(mid)
        if s < sym:
            lo = mid + 1
        else:
            hi = mid
    return -1


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _digraph(n: int, e_off: I64, e_to: I32, sets: U64, words: int) -> None:  # pragma: no cover
    """DeRemer and Pennello's digraph on bitsets: ``F(x) = sets(x) | F(y)`` for ``x -> y``.

    In place; each strongly connected component gets one set (as the Python build's).
    """
    depth = np.zeros(n, dtype=np.int64)
    low = np.zeros(n, dtype=np.int64)
    done = n + 1
    stack = np.empty(n, dtype=np.int64)
    work_x = np.empty(n, dtype=np.int64)
    work_i = np.empty(n, dtype=np.int64)
    sp = 0
    for root in range(n):
        if depth[root] != 0:
            continue
        if e_off[root] == e_off[root + 1]:
            depth[root] = done
            continue
        stack[sp] = root
        sp += 1
        depth[root] = sp
        low[root] = sp
        work_x[0] = root
        work_i[0] = e_off[root]
        wp = 1
        while wp > 0:
            x = work_x[wp - 1]
            i = work_i[wp - 1]
            if i < e_off[x + 1]:
                work_i[wp - 1] = i + 1
                y = e_to[i]
                if depth[y] == 0:
                    if e_off[y] == e_off[y + 1]:
                        depth[y] = done
                    else:
                        stack[sp] = y
                        sp += 1
                        depth[y] = sp
                        low[y] = sp
                        work_x[wp] = y
                        work_i[wp] = e_off[y]
                        wp += 1
                        continue
                elif depth[y] != done and low[y] < low[x]:
                    low[x] = low[y]
                for w in range(words):
                    sets[x * words + w] |= sets[y * words + w]
                continue
            wp -= 1
            if low[x] == depth[x]:
                while True:
                    sp -= 1
                    z = stack[sp]
                    depth[z] = done
                    if z == x:
                        break
                    for w in range(words):
                        sets[z * words + w] = sets[x * words + w]
            if wp > 0:
                parent = work_x[wp - 1]
                if depth[x] != done and low[x] < low[parent]:
                    low[parent] = low[x]
                for w in range(words):
                    sets[parent * words + w] |= sets[x * words + w]


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _csr(n: int, src: I32, dst: I32, m: int) -> tuple[I64, I32]:  # pragma: no cover - compiled
    """The edges ``src[i] -> dst[i]`` (``i < m``) by source: offsets and targets."""
    off = np.zeros(n + 1, dtype=np.int64)
    for i in range(m):
        off[src[i] + 1] += 1
    for v in range(n):
        off[v + 1] += off[v]
    fill = off[:n].copy()
    out = np.empty(max(m, 1), dtype=np.int32)
    for i in range(m):
        v = src[i]
        out[fill[v]] = dst[i]
        fill[v] += 1
    return off, out


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _grammar(n_nt: int, lhs: I32, rhs_off: I32, rhs: I32) -> Grammar:  # pragma: no cover - compiled
    """The grammar's tables: productions by nonterminal, items, nullable nonterminals.

    Returns ``(po_off, po, item_sym, item_prod, nullable, null_from)``: nonterminal ``a``'s
    productions are ``po[po_off[a]:po_off[a + 1]]``; per item its symbol after the dot (-1
    at the end) and production; per production where its nullable rest begins.
    """
    n_prods = lhs.shape[0]
    # productions of each nonterminal, in order
    po_off = np.zeros(n_nt + 1, dtype=np.int32)
    for p in range(n_prods):
        po_off[lhs[p] + 1] += 1
    for a in range(n_nt):
        po_off[a + 1] += po_off[a]
    po = np.empty(n_prods, dtype=np.int32)
    fill = po_off[:n_nt].copy()
    for p in range(n_prods):
        po[fill[lhs[p]]] = p
        fill[lhs[p]] += 1
    # items
    n_items = rhs_off[n_prods] + n_prods
    item_sym = np.empty(n_items, dtype=np.int32)
    item_prod = np.empty(n_items, dtype=np.int32)
    for p in range(n_prods):
        b = rhs_off[p] + p
        size = rhs_off[p + 1] - rhs_off[p]
        for d in range(size):
            item_sym[b + d] = rhs[rhs_off[p] + d]
            item_prod[b + d] = p
        item_sym[b + size] = -1
        item_prod[b + size] = p
    # nullable nonterminals, and per production where its nullable rest begins
    nullable = np.zeros(n_nt, dtype=np.uint8)
    changed = True
    while changed:
        changed = False
        for p in range(n_prods):
            if nullable[lhs[p]]:
                continue
            ok = True
            for j in range(rhs_off[p], rhs_off[p + 1]):
                s = rhs[j]
                if s >= n_nt or not nullable[s]:
                    ok = False
                    break
            if ok:
                nullable[lhs[p]] = 1
                changed = True
    null_from = np.empty(n_prods, dtype=np.int32)
    for p in range(n_prods):
        i = rhs_off[p + 1] - rhs_off[p]
        while i > 0:
            s = rhs[rhs_off[p] + i - 1]
            if s < n_nt and nullable[s]:
                i -= 1
            else:
                break
        null_from[p] = i

    return po_off, po, item_sym, item_prod, nullable, null_from


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _lr0(
    n_nt: int, n_sym: int, rhs_off: I32, rhs: I32, grammar: Grammar, max_states: int
) -> LR0:  # pragma: no cover - compiled
    """The LR(0) states, breadth first (-1 states past ``max_states``).

    Returns ``(n_states, tr_off, tr_sym, tr_tgt, red_off, red)``: per state its transitions,
    sorted by symbol, and the productions completed there.
    """
    po_off, po, item_sym, item_prod = grammar[0], grammar[1], grammar[2], grammar[3]
    root_prod = rhs_off.shape[0] - 2  # (the last production)
    n_items = item_sym.shape[0]
    # ---- LR(0) states
    cap = 256
    kmem = np.empty(1024, dtype=np.int32)
    koff = np.zeros(cap + 1, dtype=np.int64)
    khash = np.empty(cap, dtype=np.int64)
    htab = np.full(1024, -1, dtype=np.int32)
    tr_off = np.zeros(cap + 1, dtype=np.int64)
    tr_sym = np.empty(1024, dtype=np.int32)
    tr_tgt = np.empty(1024, dtype=np.int32)
    red_off = np.zeros(cap + 1, dtype=np.int64)
    red = np.empty(256, dtype=np.int32)
    nt_stamp = np.zeros(n_nt, dtype=np.int64)
    sym_stamp = np.zeros(n_sym, dtype=np.int64)
    sym_count = np.zeros(n_sym, dtype=np.int32)
    sym_fill = np.zeros(n_sym, dtype=np.int32)
    touched = np.empty(n_sym, dtype=np.int32)
    p_sym = np.empty(n_items + 1, dtype=np.int32)
    p_item = np.empty(n_items + 1, dtype=np.int32)
    grouped = np.empty(n_items + 1, dtype=np.int32)
    queue = np.empty(n_items + 1, dtype=np.int32)
    kmem[0] = rhs_off[root_prod] + root_prod
    koff[1] = 1
    n = 1
    n_tr = 0
    n_red = 0
    k = 0
    while k < n:
        stamp = k + 1
        n_pairs = 0
        n_touched = 0
        # the closure: the kernel's items, then those of each nonterminal after a dot (dot
        # at 0: an empty production's is complete)
        n_queue = koff[k + 1] - koff[k]
        queue[:n_queue] = kmem[koff[k] : koff[k + 1]]
        q = 0
        while q < n_queue:
            it = queue[q]
            q += 1
            s = item_sym[it]
            if s < 0:
                red = _grow(red, n_red + 1)
                red[n_red] = item_prod[it]
                n_red += 1
                continue
            if sym_stamp[s] != stamp:
                sym_stamp[s] = stamp
                sym_count[s] = 0
                touched[n_touched] = s
                n_touched += 1
            sym_count[s] += 1
            p_sym[n_pairs] = s
            p_item[n_pairs] = it + 1
            n_pairs += 1
            if s < n_nt and nt_stamp[s] != stamp:
                nt_stamp[s] = stamp
                for e in range(po_off[s], po_off[s + 1]):
                    queue[n_queue] = rhs_off[po[e]] + po[e]
                    n_queue += 1
        red_off[k + 1] = n_red
        _isort(touched, 0, n_touched)
        at = 0
        for t in range(n_touched):
            s = touched[t]
            sym_fill[s] = at
            at += sym_count[s]
        for j in range(n_pairs):
            s = p_sym[j]
            grouped[sym_fill[s]] = p_item[j]
            sym_fill[s] += 1
        tr_sym = _grow(tr_sym, n_tr + n_touched)
        tr_tgt = _grow(tr_tgt, n_tr + n_touched)
        lo = 0
        for t in range(n_touched):
            s = touched[t]
            hi = lo + sym_count[s]
            _isort(grouped, lo, hi)
            h = _hash(grouped, lo, hi - lo)
            sid = _probe(htab, khash, koff, kmem, grouped, lo, hi, h)
            if sid < 0:
                slot = ~sid
                if n >= max_states:
                    return -1, tr_off, tr_sym, tr_tgt, red_off, red
                sid = n
                if n + 1 >= cap:
                    cap *= 2
                    koff = _grow(koff, cap + 1)
                    khash = _grow(khash, cap)
                    tr_off = _grow(tr_off, cap + 1)
                    red_off = _grow(red_off, cap + 1)
                end = koff[n]
                kmem = _grow(kmem, end + hi - lo)
                kmem[end : end + hi - lo] = grouped[lo:hi]
                koff[n + 1] = end + hi - lo
                khash[n] = h
                htab[slot] = sid
                n += 1
                if 2 * n > htab.shape[0]:
                    htab = _rehash(khash, n, 2 * htab.shape[0])
            tr_sym[n_tr] = s
            tr_tgt[n_tr] = sid
            n_tr += 1
            lo = hi
        tr_off[k + 1] = n_tr
        k += 1

    return n, tr_off, tr_sym, tr_tgt, red_off, red


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _lookaheads(
    n_nt: int, n_sym: int, rhs_off: I32, rhs: I32, grammar: Grammar, lr0: LR0, start_nt: int
) -> tuple[U64, int]:  # pragma: no cover - compiled
    """DeRemer and Pennello's lookaheads.

    Returns the lookahead bitset of each completed production of each state (as in ``red``)
    and the state after the start symbol.
    """
    po_off, po, nullable, null_from = grammar[0], grammar[1], grammar[4], grammar[5]
    n_states, tr_off, tr_sym, tr_tgt, red_off, red = lr0
    words = (n_sym - n_nt + 1 + 63) // 64
    n_red = red_off[n_states]
    # ---- lookaheads: nonterminal transitions x = (state, A), the first of each state's
    x_first = np.zeros(n_states + 1, dtype=np.int64)
    for st in range(n_states):
        c = 0
        for e in range(tr_off[st], tr_off[st + 1]):
            if tr_sym[e] < n_nt:
                c += 1
        x_first[st + 1] = x_first[st] + c
    n_x = x_first[n_states]
    x_state = np.empty(n_x, dtype=np.int32)
    x_edge = np.empty(n_x, dtype=np.int64)
    for st in range(n_states):
        for i in range(x_first[st + 1] - x_first[st]):
            x_state[x_first[st] + i] = st
            x_edge[x_first[st] + i] = tr_off[st] + i
    sets = np.zeros(max(n_x, 1) * words, dtype=np.uint64)
    r_src = np.empty(64, dtype=np.int32)
    r_dst = np.empty(64, dtype=np.int32)
    n_r = 0
    for x in range(n_x):
        t = tr_tgt[x_edge[x]]
        for e in range(tr_off[t], tr_off[t + 1]):
            s = tr_sym[e]
            if s >= n_nt:
                b = s - n_nt + 1
                sets[x * words + b // 64] |= np.uint64(1) << np.uint64(b % 64)
            elif nullable[s]:
                r_src = _grow(r_src, n_r + 1)
                r_dst = _grow(r_dst, n_r + 1)
                r_src[n_r] = x
                r_dst[n_r] = x_first[t] + (e - tr_off[t])
                n_r += 1
    e0 = _find(tr_off, tr_sym, 0, start_nt)
    end_state = tr_tgt[e0]
    sets[(x_first[0] + e0 - tr_off[0]) * words] |= np.uint64(1)  # $END after the start symbol
    r_off, r_to = _csr(n_x, r_src, r_dst, n_r)
    _digraph(n_x, r_off, r_to, sets, words)
    # includes and lookbacks (a lookback: reduction index in `red`, transition)
    i_src = np.empty(64, dtype=np.int32)
    i_dst = np.empty(64, dtype=np.int32)
    n_i = 0
    lb_red = np.empty(64, dtype=np.int32)
    lb_x = np.empty(64, dtype=np.int32)
    n_lb = 0
    for x in range(n_x):
        ps = x_state[x]
        a = tr_sym[x_edge[x]]
        for q in range(po_off[a], po_off[a + 1]):
            p = po[q]
            here = ps
            tail = null_from[p] - 1
            for i in range(rhs_off[p + 1] - rhs_off[p]):
                s = rhs[rhs_off[p] + i]
                e = _find(tr_off, tr_sym, here, s)
                if s < n_nt and i >= tail:
                    i_src = _grow(i_src, n_i + 1)
                    i_dst = _grow(i_dst, n_i + 1)
                    i_src[n_i] = x_first[here] + (e - tr_off[here])
                    i_dst[n_i] = x
                    n_i += 1
                here = tr_tgt[e]
            r = -1
            for j in range(red_off[here], red_off[here + 1]):
                if red[j] == p:
                    r = j
                    break
            lb_red = _grow(lb_red, n_lb + 1)
            lb_x = _grow(lb_x, n_lb + 1)
            lb_red[n_lb] = r
            lb_x[n_lb] = x
            n_lb += 1
    i_off, i_to = _csr(n_x, i_src, i_dst, n_i)
    _digraph(n_x, i_off, i_to, sets, words)
    la = np.zeros(max(n_red, 1) * words, dtype=np.uint64)
    for j in range(n_lb):
        r = lb_red[j]
        x = lb_x[j]
        for w in range(words):
            la[r * words + w] |= sets[x * words + w]

    return la, int(end_state)


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _actions(
    n_nt: int, n_sym: int, lr0: LR0, la: U64, root_prod: int
) -> tuple[int, I32, I32, I32]:  # pragma: no cover - compiled
    """The actions of each state: its transitions, then its reductions by terminal."""
    n_states, tr_off, tr_sym, tr_tgt, red_off, red = lr0
    n_terms = n_sym - n_nt
    words = (n_terms + 1 + 63) // 64
    n_tr = tr_off[n_states]
    # ---- the table: transitions, then reductions by terminal
    taken = np.zeros(n_terms + 1, dtype=np.int64)
    act_off = np.zeros(n_states + 1, dtype=np.int32)
    act_sym = np.empty(n_tr + 64, dtype=np.int32)
    act_val = np.empty(n_tr + 64, dtype=np.int32)
    m = 0
    for st in range(n_states):
        stamp = st + 1
        act_sym = _grow(act_sym, m + tr_off[st + 1] - tr_off[st])
        act_val = _grow(act_val, m + tr_off[st + 1] - tr_off[st])
        for e in range(tr_off[st], tr_off[st + 1]):
            s = tr_sym[e]
            if s >= n_nt:
                taken[s - n_nt + 1] = stamp
            act_sym[m] = s
            act_val[m] = tr_tgt[e]
            m += 1
        for r in range(red_off[st], red_off[st + 1]):
            p = red[r]
            if p == root_prod:
                continue
            for w in range(words):
                word = la[r * words + w]
                b = w * 64
                while word:
                    if word & np.uint64(1):
                        if taken[b] == stamp:
                            return CONFLICT, act_off, act_sym, act_val
                        taken[b] = stamp
                        act_sym = _grow(act_sym, m + 1)
                        act_val = _grow(act_val, m + 1)
                        act_sym[m] = n_sym if b == 0 else n_nt + b - 1
                        act_val[m] = ~p
                        m += 1
                    word >>= np.uint64(1)
                    b += 1
        act_off[st + 1] = m
    return OK, act_off, act_sym[:m].copy(), act_val[:m].copy()


def _tables(
    n_nt: int,
    n_sym: int,
    lhs: I32,
    rhs_off: I32,
    rhs: I32,
    start_nt: int,
    max_states: int,
) -> tuple[int, I32, I32, I32, int]:  # pragma: no cover - compiled
    """The LALR(1) table: ``(code, act_off, act_sym, act_val, end state)``.

    State ``s``'s actions are ``act_sym[act_off[s]:act_off[s + 1]]`` (symbol ids, ``n_sym``
    for ``$END``) with ``act_val`` (the state to shift or go to, or ``~p`` to reduce by ``p``);
    the start state is 0. ``code`` is :data:`OK`, else the arrays are empty.
    """
    none = np.zeros(0, dtype=np.int32)
    grammar = _grammar(n_nt, lhs, rhs_off, rhs)
    lr0 = _lr0(n_nt, n_sym, rhs_off, rhs, grammar, max_states)
    if lr0[0] < 0:
        return TOO_MANY, none, none, none, -1
    la, end_state = _lookaheads(n_nt, n_sym, rhs_off, rhs, grammar, lr0, start_nt)
    code, act_off, act_sym, act_val = _actions(n_nt, n_sym, lr0, la, lhs.shape[0] - 1)
    if code != OK:
        return code, none, none, none, -1
    return OK, act_off, act_sym, act_val, end_state


tables: Callable[..., tuple[int, I32, I32, I32, int]] = _jit(
    _tables, numba.int64, numba.int64, _i32, _i32, _i32, numba.int64, numba.int64
)
