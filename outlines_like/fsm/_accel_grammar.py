"""The numba kernel of the grammar masker (``accel`` extra): LALR parsing inside the token walk.

Imported only through :mod:`outlines_like.fsm._grammar_kernel` (and :func:`_accel.warm_up`)
when numba is importable. One call walks many items (a token from a byte offset, from a parser
configuration and a lexer state): the bytes go through the lexer context's DFA; where a byte
does not extend the lexeme, the lexeme ends as the terminal of its state (``%ignore`` ones feed
nothing), the LALR actions run on an overlay over the item's configuration (nothing is copied
per item), the new top state selects the next lexer context, and the byte starts the next
lexeme there; at the token's end, the item is allowed when the lexeme can still become a
terminal the parser takes. The rules are those of :class:`~outlines_like.fsm.grammar._MatcherDFA`
(see ``CompiledGrammar._viable3`` and the parser module's docstring on truncated stacks).

Layouts: the LALR table as CSR rows of sorted symbol ids (action ``>= 0`` shift, ``< 0`` reduce
by rule ``~action``, :data:`NONE` absent); contexts' DFAs concatenated (state ``g`` of the
whole is state ``g - ctx_base[cid]`` of context ``cid``; ``trans[g * 256 + byte]`` is the local
target or -1), each state's terminal (-1: none) and the terminals it can still become (CSR).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

__all__ = ["DEAD", "NONE", "OK", "OVERFLOW", "PENDING", "STUCK", "grammar_walk", "pack_rows"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]

NONE = -(2**31)  # no action
# an item's outcome
DEAD = 0
OK = 1
PENDING = 2  # needs the stack's bottom (truncated configurations)
STUCK = 3  # a lexer context not built yet (its LALR state in ``out_lex``)
OVERFLOW = 4  # a scratch buffer was too small: grow it and walk the item again


def _grammar_walk(
    first: I32,
    sym: I32,
    val: I32,
    rule_size: I32,
    rule_goto: I32,
    ignore: U8,
    ctx_of_state: I32,
    ctx_base: I32,
    trans: I32,
    term_of: I32,
    reach_first: I32,
    reach_term: I32,
    cfg_first: I64,
    cfg_states: I32,
    buf: U8,
    pos: I64,
    end: I64,
    item_cfg: I32,
    item_lex: I32,
    tmp: I32,
    tmp2: I32,
    status: U8,
    out_pos: I64,
    out_lex: I32,
    out_low: I32,
    out_first: I64,
    out_stack: I32,
) -> int:  # pragma: no cover - compiled
    """Walk every item; returns the room used in ``out_stack``.

    Item ``q``: the bytes ``buf[pos[q]:end[q]]`` from lexer state ``item_lex[q]`` and the
    configuration ``cfg_states[cfg_first[c]:cfg_first[c + 1]]``, ``c = item_cfg[q]``. Its
    outcome goes to ``status[q]``; a :data:`PENDING` item also reports the position of the
    byte whose step needs the bottom (``end[q]``: the end state's viability does), the lexer
    state before it and its configuration then: the first ``out_low[q]`` states of its own,
    then ``out_stack[out_first[q]:out_first[q + 1]]`` (``out_first`` has ``n + 1`` entries).
    A :data:`STUCK` item reports the LALR state whose context is missing in ``out_lex``.

    The item's stack is ``cfg_states[b0:b0 + low] + tmp[low:h]`` (``tmp`` indexed by stack
    position: the states it pushed over its configuration). A terminal is fed on a second
    overlay, ``tmp2`` above ``low2``, and committed to ``tmp`` once shifted; the feeds at the
    token's end (is some terminal the lexeme can still become taken?) are never committed.
    (The feed is written once, inline: a helper taking the arrays would count references.)
    """
    n = pos.shape[0]
    cap = tmp.shape[0]
    used = 0
    room = out_stack.shape[0]
    for q in range(n):
        out_first[q] = used
        c = item_cfg[q]
        b0 = cfg_first[c]
        h = cfg_first[c + 1] - b0
        low = h
        lex = item_lex[q]
        p = pos[q]
        e = end[q]
        top = cfg_states[b0 + h - 1]
        cid = ctx_of_state[top]
        if cid < 0:
            status[q] = STUCK
            out_lex[q] = top
            continue
        g = ctx_base[cid]
        outcome = DEAD
        while True:
            at_end = p == e
            term = -1
            if at_end:  # the token's end: can the lexeme still become a terminal taken?
                k_lo = reach_first[g + lex]
                k_hi = reach_first[g + lex + 1]
            else:
                byte = buf[p]
                nxt = trans[(g + lex) * 256 + byte]
                if nxt >= 0:
                    lex = nxt
                    p += 1
                    continue
                term = term_of[g + lex]
                if term < 0:
                    break  # dead
                k_lo = 0
                k_hi = 0 if ignore[term] else 1
            code = 0  # of the last feed: 0 rejected, 1 shifted, 2 needs the bottom, 3 no room
            low2 = h
            h2 = h
            deep = False
            for k in range(k_lo, k_hi):
                if at_end:
                    term = reach_term[k]
                    if ignore[term]:
                        code = 1
                        break
                # feed `term` on the overlay
                low2 = h
                h2 = h
                while True:
                    i = h2 - 1
                    top = tmp2[i] if i >= low2 else tmp[i] if i >= low else cfg_states[b0 + i]
                    lo = first[top]
                    hi = first[top + 1]
                    action = NONE
                    while lo < hi:
                        mid = (lo + hi) >> 1
                        s = sym[mid]
                        if s == term:
                            action = val[mid]
                            break
                        if s < term:
                            lo = mid + 1
                        else:
                            hi = mid
                    if action == NONE:
                        code = 0
                        break
                    if action >= 0:
                        if h2 >= cap:
                            code = 3
                            break
                        tmp2[h2] = action
                        if h2 < low2:
                            low2 = h2
                        h2 += 1
                        code = 1
                        break
                    rule = ~action
                    size = rule_size[rule]
                    if size:
                        h2 -= size
                        if h2 <= 0:
                            code = 2
                            break
                        i = h2 - 1
                        top = tmp2[i] if i >= low2 else tmp[i] if i >= low else cfg_states[b0 + i]
                        if top < 0:
                            code = 2
                            break
                    i = h2 - 1
                    top = tmp2[i] if i >= low2 else tmp[i] if i >= low else cfg_states[b0 + i]
                    symbol = rule_goto[rule]
                    lo = first[top]
                    hi = first[top + 1]
                    goto = NONE
                    while lo < hi:
                        mid = (lo + hi) >> 1
                        s = sym[mid]
                        if s == symbol:
                            goto = val[mid]
                            break
                        if s < symbol:
                            lo = mid + 1
                        else:
                            hi = mid
                    if h2 >= cap:
                        code = 3
                        break
                    tmp2[h2] = goto
                    if h2 < low2:
                        low2 = h2
                    h2 += 1
                if code == 1 or code == 3:
                    break
                if code == 2:
                    deep = True
            if at_end:
                outcome = OK if code == 1 else OVERFLOW if code == 3 else PENDING if deep else DEAD
                break
            if k_hi:  # a terminal fed (not an ignored one)
                if code == 2:
                    outcome = PENDING
                    break
                if code == 3:
                    outcome = OVERFLOW
                    break
                if code == 0:
                    break  # rejected
                for i in range(low2, h2):  # commit the overlay
                    tmp[i] = tmp2[i]
                if low2 < low:
                    low = low2
                h = h2
                top = tmp[h - 1] if h - 1 >= low else cfg_states[b0 + h - 1]
                cid = ctx_of_state[top]
                if cid < 0:
                    outcome = STUCK
                    out_lex[q] = top
                    break
                g = ctx_base[cid]
            nxt = trans[g * 256 + byte]
            if nxt < 0:
                break  # dead
            lex = nxt
            p += 1
        if outcome == PENDING:
            if used + h - low > room:
                outcome = OVERFLOW
            else:
                out_pos[q] = p
                out_lex[q] = lex
                out_low[q] = low
                for i in range(low, h):
                    out_stack[used] = tmp[i]
                    used += 1
        status[q] = outcome
    out_first[n] = used
    return used


def _pack_rows(ids: I32, states: I32, words: int) -> tuple[I32, U32]:  # pragma: no cover
    """The packed row (``words`` uint32) of the ``ids`` ending in each state, states ascending.

    Returns the distinct states and their rows, one after the other.
    """
    n = ids.shape[0]
    top = 0
    for i in range(n):
        if states[i] >= top:
            top = states[i] + 1
    slot = np.full(top, -1, dtype=np.int32)
    for i in range(n):
        slot[states[i]] = 0
    present = np.empty(top, dtype=np.int32)
    k = 0
    for s in range(top):
        if slot[s] == 0:
            slot[s] = k
            present[k] = s
            k += 1
    rows = np.zeros(k * words, dtype=np.uint32)
    for i in range(n):
        t = ids[i]
        rows[slot[states[i]] * words + (t >> 5)] |= np.uint32(1) << np.uint32(t & 31)
    return present[:k].copy(), rows


_C1 = numba.types.Array
_i32 = _C1(numba.int32, 1, "C")
_u8 = _C1(numba.uint8, 1, "C")
_i64 = _C1(numba.int64, 1, "C")


def _jit(func: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    compiled: Callable[..., Any] = numba.njit(args, cache=True, nogil=True, boundscheck=False)(func)
    return compiled


grammar_walk: Callable[..., int] = _jit(
    _grammar_walk,
    *[_i32] * 5,
    _u8,
    *[_i32] * 6,
    _i64,
    _i32,
    _u8,
    _i64,
    _i64,
    _i32,
    _i32,
    _i32,
    _i32,
    _u8,
    _i64,
    _i32,
    _i32,
    _i64,
    _i32,
)
pack_rows: Callable[..., tuple[I32, U32]] = _jit(_pack_rows, _i32, _i32, numba.int64)
