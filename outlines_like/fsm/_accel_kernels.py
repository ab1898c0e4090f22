"""The numba kernels of the ``accel`` extra: a token trie built and walked per DFA state.

Imported only by :mod:`outlines_like.fsm._accel` when numba is importable. Each kernel is a
plain, typed Python function compiled with ``njit(cache=True, nogil=True)``: numba keeps the
machine code on disk (beside this file, or under ``NUMBA_CACHE_DIR`` when the package folder
is read-only), so a process loads it instead of compiling it again.

Transition tables are ``int32[n_states, 256]`` with ``-1`` dead and ``-2`` (``UNKNOWN``) in the
rows a lazy DFA has not built yet. A walk that meets ``UNKNOWN`` does not guess: it records
where it stopped (a trie node or a token, and the state whose row is missing), skips that part
and goes on; the caller builds the rows and walks the recorded parts again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

__all__ = [
    "build_trie",
    "lexer_list_walk",
    "lexer_trie_walk",
    "list_walk",
    "matcher_walk",
    "trie_walk",
]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]

_UNKNOWN = -2


def _build_trie(
    flat: U8, offsets: I64, n_nodes_max: int
) -> tuple[U8, I32, I32, I32, int]:  # pragma: no cover - compiled
    """Trie nodes, in depth-first order, of tokens sorted by their bytes.

    Token ``k`` is ``flat[offsets[k]:offsets[k + 1]]``; the tokens are sorted, so each one adds
    the nodes past its longest common prefix with the previous one. Node 0 is the root.

    Returns ``(byte, depth, skip, node_of, n_nodes)``: each node's byte and depth, the first
    node past its subtree, and the node each token ends on.
    """
    n = offsets.shape[0] - 1
    byte = np.zeros(n_nodes_max, dtype=np.uint8)
    depth = np.zeros(n_nodes_max, dtype=np.int32)
    skip = np.zeros(n_nodes_max, dtype=np.int32)
    node_of = np.zeros(n, dtype=np.int32)
    max_len = 0
    for k in range(n):
        max_len = max(max_len, offsets[k + 1] - offsets[k])
    path = np.zeros(max_len + 1, dtype=np.int32)  # path[d]: the open node at depth d
    open_depth = 0  # nodes path[1..open_depth] are open (their subtrees not closed yet)
    n_nodes = 1
    prev_lo = 0
    prev_len = 0
    for k in range(n):
        lo = offsets[k]
        length = offsets[k + 1] - lo
        lcp = 0
        limit = min(length, prev_len)
        while lcp < limit and flat[lo + lcp] == flat[prev_lo + lcp]:
            lcp += 1
        # close the open nodes deeper than the common prefix
        while open_depth > lcp:
            skip[path[open_depth]] = n_nodes
            open_depth -= 1
        for d in range(lcp + 1, length + 1):
            byte[n_nodes] = flat[lo + d - 1]
            depth[n_nodes] = d
            path[d] = n_nodes
            open_depth = d
            n_nodes += 1
        node_of[k] = path[length]
        prev_lo = lo
        prev_len = length
    while open_depth > 0:
        skip[path[open_depth]] = n_nodes
        open_depth -= 1
    skip[0] = n_nodes
    return byte, depth, skip, node_of, n_nodes


def _trie_walk(
    trans: I32,
    byte: U8,
    depth: I32,
    skip: I32,
    node_tok: I32,
    root_child: I32,
    item_node: I32,
    item_state: I32,
    n_items: int,
    stack: I32,
    mask: U32,
    ends: I32,
    pend_node: I32,
    pend_state: I32,
) -> int:  # pragma: no cover - compiled
    """Walk trie subtrees, setting the mask bits of the tokens whose every byte is live.

    Item ``q`` is the subtree of node ``item_node[q]`` entered from state ``item_state[q]``
    (its parent's state); node 0 is the whole trie from that state, entered through
    ``root_child`` (the node of each first byte, ``-1`` when none) so that first bytes that
    die never touch the node arrays. Live-prefix pruning: a node whose byte dies skips its
    subtree. ``node_tok[i]`` is the token that ends at node ``i`` (a sentinel id past the
    vocabulary when none does: its bit lands in a spare last word of ``mask``, so the loop has
    no branch on it). A node whose parent's row is ``UNKNOWN`` is recorded in
    ``pend_node``/``pend_state`` (as a new item) and skipped. ``ends`` (when not empty)
    receives each allowed token's end state. Returns the number of recorded items.
    """
    want_ends = ends.shape[0] > 0
    n_pend = 0
    for q in range(n_items):
        lo = item_node[q]
        top = item_state[q]
        whole = lo == 0
        if whole:
            stack[0] = top
        else:
            stack[depth[lo] - 1] = top
        for b in range(256 if whole else 1):
            if whole:
                c = root_child[b]
                if c < 0 or trans[top, b] == -1:
                    continue
                i = c
                hi = skip[c]
            else:
                i = lo
                hi = skip[lo]
            while i < hi:
                d = depth[i]
                parent = stack[d - 1]
                s = trans[parent, byte[i]]
                if s < 0:
                    if s == _UNKNOWN:
                        pend_node[n_pend] = i
                        pend_state[n_pend] = parent
                        n_pend += 1
                    i = skip[i]
                    continue
                stack[d] = s
                t = node_tok[i]
                mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                if want_ends:
                    ends[t] = s
                i += 1
    return n_pend


def _list_walk(
    trans: I32,
    flat: U8,
    begin: I64,
    end: I64,
    ids: I32,
    starts: I32,
    n_items: int,
    mask: U32,
    pend_item: I32,
    pend_begin: I64,
    pend_state: I32,
) -> int:  # pragma: no cover - compiled
    """Walk byte strings, each from its own state; set the mask bit of each one that lives.

    Item ``q`` is ``flat[begin[q]:end[q]]``, walked from ``starts[q]``; ``ids[q]`` is its
    token. An item that reaches an ``UNKNOWN`` row is recorded where it stopped (item, byte
    position, and the state whose row is missing), to be resumed there once the row is built.
    Returns the number of recorded items.
    """
    n_pend = 0
    for q in range(n_items):
        s = starts[q]
        b = begin[q]
        e = end[q]
        nxt = s
        while b < e:
            nxt = trans[s, flat[b]]
            if nxt < 0:
                break
            s = nxt
            b += 1
        if b == e:
            t = ids[q]
            mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
        elif nxt == _UNKNOWN:
            pend_item[n_pend] = q
            pend_begin[n_pend] = b
            pend_state[n_pend] = s
            n_pend += 1
    return n_pend


def _matcher_walk(
    trans: I32,
    buf: U8,
    pos: I64,
    end: I64,
    state: I32,
    n_items: int,
    out_state: I32,
    pend_item: I32,
    pend_pos: I64,
    pend_state: I32,
    deep_item: I32,
    deep_pos: I64,
    deep_state: I32,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Walk byte strings through the grammar's matcher DFA, each from its own state.

    ``trans`` is the flat ``int32[n_states * 256]`` table: ``0`` the sink, ``1`` the state
    that needs the stack's bottom, ``UNKNOWN`` a row not built yet. Item ``q`` is
    ``buf[pos[q]:end[q]]`` from ``state[q]``; ``out_state[q]`` receives the state it ends in
    (0: dead). An item whose next byte leads to state 1 is recorded in ``deep_*`` (item, byte
    position, state before it) and ends in 0; one that meets an unbuilt row is recorded in
    ``pend_*`` (to resume there) and gets ``-1``. Returns the two counts.
    """
    n_pend = 0
    n_deep = 0
    for q in range(n_items):
        s = state[q]
        p = pos[q]
        e = end[q]
        while p < e and s > 0:
            nxt = trans[s * 256 + buf[p]]
            if nxt == _UNKNOWN:
                pend_item[n_pend] = q
                pend_pos[n_pend] = p
                pend_state[n_pend] = s
                n_pend += 1
                s = -1
                break
            if nxt == 1:
                deep_item[n_deep] = q
                deep_pos[n_deep] = p
                deep_state[n_deep] = s
                n_deep += 1
                s = 0
                break
            s = nxt
            p += 1
        out_state[q] = s
    return n_pend, n_deep


def _lexer_trie_walk(
    trans: I32,
    accepting: U8,
    start: int,
    byte: U8,
    depth: I32,
    skip: I32,
    node_one: I32,
    sentinel: int,
    slot_first: I32,
    slot_tok: I32,
    stack: I32,
    end_tok: I32,
    end_state: I32,
    stop_tok: I32,
    stop_off: I32,
    stop_state: I32,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Walk the whole trie through a lexer DFA from ``start``: where each token ends or stops.

    ``trans`` is the flat ``int32[n_states * 256]`` table (``-1`` dead). The tokens of node
    ``i`` are ``slot_tok[slot_first[i]:slot_first[i + 1]]`` (tokens in trie order, those with
    the same bytes side by side), so a subtree's tokens are one run of slots, copied without
    visiting its nodes; ``node_one[i]`` is node ``i``'s token when it has one only (``-1``
    when several, ``sentinel`` when none). A token whose every byte is live goes to
    ``end_tok``/``end_state`` with the state it ends in. Where a byte dies after an accepting
    state (the lexeme may end there), every token of that node's subtree goes to ``stop_*``:
    the byte's offset in the token and the state before it; after a state that does not
    accept, the subtree is skipped. Returns the two counts.
    """
    n_end = 0
    n_stop = 0
    stack[0] = start
    n_nodes = byte.shape[0]
    i = 1
    while i < n_nodes:
        d = depth[i]
        parent = stack[d - 1]
        s = trans[parent * 256 + byte[i]]
        if s < 0:
            hi = skip[i]
            if accepting[parent]:
                for j in range(slot_first[i], slot_first[hi]):
                    stop_tok[n_stop] = slot_tok[j]
                    stop_off[n_stop] = d - 1
                    stop_state[n_stop] = parent
                    n_stop += 1
            i = hi
            continue
        stack[d] = s
        t = node_one[i]
        if t != sentinel:
            if t >= 0:
                end_tok[n_end] = t
                end_state[n_end] = s
                n_end += 1
            else:
                for j in range(slot_first[i], slot_first[i + 1]):
                    end_tok[n_end] = slot_tok[j]
                    end_state[n_end] = s
                    n_end += 1
        i += 1
    return n_end, n_stop


def _lexer_list_walk(
    trans: I32,
    accepting: U8,
    start: int,
    buf: U8,
    begin: I64,
    end: I64,
    end_item: I32,
    end_state: I32,
    stop_item: I32,
    stop_pos: I64,
    stop_state: I32,
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Walk byte strings ``buf[begin[q]:end[q]]`` through a lexer DFA, all from ``start``.

    ``trans`` is the flat ``int32[n_states * 256]`` table (``-1`` dead). An item whose every
    byte is live goes to ``end_*`` with the state it ends in; one with a dead byte after an
    accepting state goes to ``stop_*`` with that byte's position and the state before it (the
    others are dropped). Returns the two counts.
    """
    n_end = 0
    n_stop = 0
    for q in range(begin.shape[0]):
        s = start
        p = begin[q]
        e = end[q]
        while p < e:
            nxt = trans[s * 256 + buf[p]]
            if nxt < 0:
                break
            s = nxt
            p += 1
        if p == e:
            end_item[n_end] = q
            end_state[n_end] = s
            n_end += 1
        elif accepting[s]:
            stop_item[n_stop] = q
            stop_pos[n_stop] = p
            stop_state[n_stop] = s
            n_stop += 1
    return n_end, n_stop


# Explicit signatures: the kernels are compiled (or loaded from the cache) once, at import, and
# an argument of another type or layout is refused rather than compiled again in a mask.
_C1 = numba.types.Array
_i32 = _C1(numba.int32, 1, "C")
_u8 = _C1(numba.uint8, 1, "C")
_i64 = _C1(numba.int64, 1, "C")
_u32 = _C1(numba.uint32, 1, "C")
_trans = _C1(numba.int32, 2, "C")


def _jit(func: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    compiled: Callable[..., Any] = numba.njit(args, cache=True, nogil=True, boundscheck=False)(func)
    return compiled


build_trie: Callable[[U8, I64, int], tuple[U8, I32, I32, I32, int]] = _jit(
    _build_trie, _u8, _i64, numba.int64
)
trie_walk: Callable[..., int] = _jit(
    _trie_walk,
    _trans,
    _u8,
    _i32,
    _i32,
    _i32,
    _i32,
    _i32,
    _i32,
    numba.int64,
    _i32,
    _u32,
    _i32,
    _i32,
    _i32,
)
list_walk: Callable[..., int] = _jit(
    _list_walk, _trans, _u8, _i64, _i64, _i32, _i32, numba.int64, _u32, _i32, _i64, _i32
)
matcher_walk: Callable[..., tuple[int, int]] = _jit(
    _matcher_walk,
    _i32,
    _u8,
    _i64,
    _i64,
    _i32,
    numba.int64,
    _i32,
    _i32,
    _i64,
    _i32,
    _i32,
    _i64,
    _i32,
)
lexer_trie_walk: Callable[..., tuple[int, int]] = _jit(
    _lexer_trie_walk, _i32, _u8, numba.int64, _u8, *[_i32] * 3, numba.int64, *[_i32] * 8
)
lexer_list_walk: Callable[..., tuple[int, int]] = _jit(
    _lexer_list_walk, _i32, _u8, numba.int64, _u8, _i64, _i64, _i32, _i32, _i32, _i64, _i32
)
