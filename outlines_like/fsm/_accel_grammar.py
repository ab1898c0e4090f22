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
The same kernel walks a token trie instead of items (a whole row): the state at each node of
the path is kept per depth, and an undo log restores the stack on the way back up.

Layouts: the LALR table as CSR rows of sorted symbol ids (action ``>= 0`` shift, ``< 0`` reduce
by rule ``~action``, :data:`NONE` absent); contexts' DFAs concatenated (state ``g`` of the
whole is state ``g - ctx_base[cid]`` of context ``cid``; ``trans[g * 256 + byte]`` is the local
target or -1), each state's terminal (-1: none) and the terminals it can still become (CSR).
"""

from __future__ import annotations

from collections.abc import Callable

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_kernels import _i32, _i64, _jit, _u8, _u32

__all__ = [
    "DEAD",
    "NONE",
    "OK",
    "OVERFLOW",
    "OVER_BUDGET",
    "PENDING",
    "SAVED",
    "STUCK",
    "grammar_walk",
    "pack_rows",
    "trie_children",
]

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
OVER_BUDGET = 5  # (trie) the walk visited more nodes than it was allowed
# (trie) ints kept per depth in ``saved``: the state at the node, then the feed its children
# share (a child byte that ends the lexeme feeds the same terminal on the same stack)
SAVED = 32
_GEN = 12  # (a parent's) the stack its children's shared feed leaves, once one committed it
_FED = 13  # where the fed overlay starts (at most SAVED - _FED states; longer: not kept)


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
    c_byte: U8,
    c_first: I32,
    c_node: I32,
    t_tok: I32,
    mask: U32,
    undo: I32,
    saved: I32,
    memo: I32,
) -> int:  # pragma: no cover - compiled
    """Walk items (``c_node`` empty) or a token trie (a whole row); see the module docstring.

    Items: item ``q`` is the bytes ``buf[pos[q]:end[q]]`` from lexer state ``item_lex[q]``
    and the configuration ``cfg_states[cfg_first[c]:cfg_first[c + 1]]``, ``c = item_cfg[q]``.
    Its outcome goes to ``status[q]``; a :data:`PENDING` item also reports the position of
    the byte whose step needs the bottom (``end[q]``: the end state's viability does), the
    lexer state before it and its configuration then: the first ``out_low[q]`` states of its
    own, then ``out_stack[out_first[q]:out_first[q + 1]]`` (``out_first`` has ``n + 1``
    entries). A :data:`STUCK` item reports the LALR state whose context is missing in
    ``out_lex[q]``. Returns the room used in ``out_stack``.

    Trie: every token of the trie (the children of node ``x`` are ``c_node[c_first[x]:c_first[x
    + 1]]``, reached by the bytes ``c_byte[...]``: side by side, so a dead child costs a byte
    read; ``t_tok`` per node, -1 where no token ends) from configuration 0 (a whole stack) and
    lexer state ``item_lex[0]``; an allowed token sets its bit in ``mask``. ``status[0]`` gets
    :data:`OK`, or :data:`STUCK` (the LALR state in ``out_lex[0]``) or :data:`OVERFLOW`, and the
    caller walks again once that is fixed, or :data:`OVER_BUDGET`: the walk stopped past
    ``pos[0]`` nodes. Returns the nodes visited. ``saved`` holds :data:`SAVED` ints per trie
    depth (the state at the node of the path at that depth, the cursor over the children at
    that depth, and the feed of the lexeme that ends at the node's children, computed for the
    first child whose byte ends it and reused by its siblings, with the next lexeme's context:
    a sibling whose byte neither extends nor starts a lexeme is dead without a restore),
    ``undo`` pairs (position, old state) to restore ``tmp`` on the way back up, ``memo`` (-1:
    unknown) the viability of each lexer state as ``2 * stack + ok``: the stacks of a walk are
    numbered (0: the configuration's own; a new number at each commit, shared by siblings
    whose byte ends the same lexeme, as the stack they leave is the same), and a token ending
    in a lexer state already decided on the same stack takes that answer. (Past the first
    byte almost every token has ended the lexeme open at the configuration, a ``:`` say, so
    a memo of the configuration's own stack alone rarely answers.)

    The stack of a walk is ``cfg_states[b0:b0 + low] + tmp[low:h]`` (``tmp`` indexed by stack
    position: the states pushed over its configuration). A terminal is fed on a second
    overlay, ``tmp2`` above ``low2``, and committed to ``tmp`` once shifted; the feeds at a
    token's end (is some terminal the lexeme can still become taken?) are never committed.
    (The feed is written once, inline: a helper taking the arrays counts references, 10x.)
    """
    trie = c_node.shape[0] > 0
    n = pos.shape[0]
    budget = pos[0] if trie else 0
    cap = tmp.shape[0]
    undo_cap = undo.shape[0] // 2
    used = 0
    room = out_stack.shape[0]
    n_undo = 0
    b0 = cfg_first[0]
    h = cfg_first[1] - b0
    low = h
    lex = item_lex[0] if n else 0
    g = 0
    p = 0
    e = 0
    changed = 0  # (trie) the stack's number: 0 the configuration's own, else its commit's
    n_gen = 0  # (trie) stacks numbered so far
    byte = 0
    depth = 0
    deepest = h - 1  # (trie) the lowest position of the configuration read (-1: its bottom)
    if trie:
        top = cfg_states[b0 + h - 1]
        cid = ctx_of_state[top]
        if cid < 0:
            status[0] = STUCK
            out_lex[0] = top
            return 0
        g = ctx_base[cid]
        saved[0] = lex
        saved[1] = g
        saved[2] = h
        saved[3] = low
        saved[4] = 0
        saved[5] = 0
        saved[6] = -1
        saved[11] = -1
        saved[_GEN] = -1
        saved[SAVED + 9] = c_first[0]  # the root's children
        saved[SAVED + 10] = c_first[1]
        depth = 1
        status[0] = OK
    u = -1  # the item, or the trie node
    fresh = True  # go on to the next item / node
    at_end = False
    while True:
        went_on = False  # (trie) the node's byte extended the lexeme: no parser step
        if fresh:
            fresh = False
            at_end = False
            if trie:  # the next child at this depth, else back up
                while depth > 0 and saved[depth * SAVED + 9] >= saved[depth * SAVED + 10]:
                    depth -= 1
                if depth == 0:
                    break
                base = (depth - 1) * SAVED
                kc = saved[depth * SAVED + 9]
                k_end = saved[depth * SAVED + 10]
                # children dead by the parent's state alone, told apart without a restore: the
                # byte neither extends the lexeme nor, once it ends (the feed its siblings
                # share, when known), starts the next one
                # (the parent's lexeme-end fields are read once a child's byte does not extend
                # the lexeme: most first children extend it)
                lex = saved[base]
                g = saved[base + 1]
                row = (g + lex) * 256
                p_term = -2  # not read yet
                p_fed = -1
                p_next = -1
                nxt = -1
                while kc < k_end:
                    byte = c_byte[kc]
                    nxt = trans[row + byte]
                    if nxt >= 0:
                        break
                    if p_term == -2:
                        p_term = term_of[g + lex]
                        p_fed = saved[base + 6]
                        p_next = saved[base + 11]
                    if p_term >= 0:
                        if ignore[p_term]:
                            if trans[saved[base + 1] * 256 + byte] >= 0:
                                break
                        elif p_fed < 0 or (
                            p_fed == 1 and (p_next < 0 or trans[p_next * 256 + byte] >= 0)
                        ):
                            break
                    used += 1
                    if used > budget:
                        status[0] = OVER_BUDGET
                        return used
                    kc += 1
                if kc >= k_end:
                    saved[depth * SAVED + 9] = kc
                    fresh = True
                    continue
                saved[depth * SAVED + 9] = kc + 1
                u = c_node[kc]
                used += 1  # (the nodes visited)
                if used > budget:
                    status[0] = OVER_BUDGET
                    return used
                while n_undo > saved[base + 4]:  # back to the parent's stack
                    n_undo -= 1
                    tmp[undo[2 * n_undo]] = undo[2 * n_undo + 1]
                h = saved[base + 2]
                low = saved[base + 3]
                changed = saved[base + 5]
                if nxt >= 0:  # the lexeme goes on (most nodes): no parser step
                    lex = nxt
                    outcome = OK
                    went_on = True  # (its children and token end: the walk's step below)
            else:
                u += 1
                if u >= n:
                    break
                out_first[u] = used
                c = item_cfg[u]
                b0 = cfg_first[c]
                h = cfg_first[c + 1] - b0
                low = h
                lex = item_lex[u]
                p = pos[u]
                e = end[u]
                top = cfg_states[b0 + h - 1]
                cid = ctx_of_state[top]
                if cid < 0:
                    status[u] = STUCK
                    out_lex[u] = top
                    fresh = True
                    continue
                g = ctx_base[cid]
        if not went_on:
            if not trie:
                at_end = p == e
                if not at_end:
                    byte = buf[p]
            outcome = DEAD  # of this step (OK: it went on, or the token is allowed)
            term = -1
            k_lo = 0
            k_hi = 0
            known = -1
            if at_end:  # the token's end: can the lexeme still become a terminal taken?
                if trie:
                    known = memo[g + lex]
                    known = known & 1 if known >= 0 and known >> 1 == changed else -1
                k_lo = reach_first[g + lex]
                k_hi = reach_first[g + lex + 1] if known < 0 else k_lo
            else:
                nxt = trans[(g + lex) * 256 + byte]
                if nxt >= 0:
                    outcome = OK
                    lex = nxt
                else:
                    term = term_of[g + lex]
                    if term >= 0 and not ignore[term]:
                        k_hi = 1
            code = 0  # of the last feed: 0 rejected, 1 shifted, 2 needs the bottom, 3 no room
            low2 = h
            h2 = h
            deep = False
            fed = -1  # (trie) where the parent's feed is kept: its siblings end the same lexeme
            if trie and k_hi and not at_end:
                fed = (depth - 1) * SAVED
                if saved[fed + 6] >= 0:  # a sibling fed it: the same stack, the same result
                    code = saved[fed + 6]
                    low2 = saved[fed + 7]
                    h2 = saved[fed + 8]
                    for i in range(low2, h2):
                        tmp2[i] = saved[fed + _FED + i - low2]
                    k_lo = k_hi
                    fed = -1
            for k in range(k_lo, k_hi):
                if at_end:
                    term = reach_term[k]
                    if ignore[term]:
                        code = 1
                        break
                low2 = h
                h2 = h
                symbol = term  # then, after a reduction, the rule's left side (a goto)
                while True:  # feed `term` on the overlay
                    i = h2 - 1
                    top = tmp2[i] if i >= low2 else tmp[i] if i >= low else cfg_states[b0 + i]
                    if i < deepest:
                        deepest = i
                    lo = first[top]
                    hi = first[top + 1]
                    action = NONE
                    while lo < hi:
                        mid = (lo + hi) >> 1
                        s = sym[mid]
                        if s == symbol:
                            action = val[mid]
                            break
                        if s < symbol:
                            lo = mid + 1
                        else:
                            hi = mid
                    if action == NONE:
                        code = 0
                        break
                    if symbol != term or action >= 0:  # a goto, or the terminal shifted: push
                        if h2 >= cap:
                            code = 3
                            break
                        tmp2[h2] = action
                        if h2 < low2:
                            low2 = h2
                        h2 += 1
                        if symbol == term:
                            code = 1
                            break
                        symbol = term
                        continue
                    rule = ~action
                    size = rule_size[rule]
                    if size:
                        h2 -= size
                        if h2 <= 0:
                            code = 2
                            deepest = -1
                            break
                        i = h2 - 1
                        top = tmp2[i] if i >= low2 else tmp[i] if i >= low else cfg_states[b0 + i]
                        if i < deepest:
                            deepest = i
                        if top < 0:
                            code = 2
                            break
                    symbol = rule_goto[rule]
                if code == 1 or code == 3:
                    break
                if code == 2:
                    deep = True
            if fed >= 0 and code != 3 and h2 - low2 <= SAVED - _FED:
                saved[fed + 6] = code
                saved[fed + 7] = low2
                saved[fed + 8] = h2
                for i in range(low2, h2):
                    saved[fed + _FED + i - low2] = tmp2[i]
            if at_end:
                if known >= 0:
                    outcome = OK if known else DEAD
                else:
                    outcome = (
                        OK if code == 1 else OVERFLOW if code == 3 else PENDING if deep else DEAD
                    )
                    if trie and outcome != OVERFLOW:
                        memo[g + lex] = 2 * changed + (1 if outcome == OK else 0)
            elif outcome != OK and term >= 0:  # the lexeme ends: its terminal, the next lexeme
                outcome = DEAD
                if k_hi:  # a terminal fed (not an ignored one)
                    if code == 2:
                        outcome = PENDING
                    elif code == 3:
                        outcome = OVERFLOW
                    elif code == 1:
                        outcome = OK
                        for i in range(low2, h2):  # commit the overlay
                            if trie:
                                if n_undo >= undo_cap:
                                    outcome = OVERFLOW
                                    break
                                undo[2 * n_undo] = i
                                undo[2 * n_undo + 1] = tmp[i]
                                n_undo += 1
                            tmp[i] = tmp2[i]
                        if low2 < low:
                            low = low2
                        h = h2
                        if trie:  # siblings ending the same lexeme leave the same stack
                            fed = (depth - 1) * SAVED
                            if saved[fed + _GEN] < 0:
                                n_gen += 1
                                saved[fed + _GEN] = n_gen
                            changed = saved[fed + _GEN]
                        top = tmp[h - 1] if h - 1 >= low else cfg_states[b0 + h - 1]
                        if h - 1 < deepest:
                            deepest = h - 1
                        cid = ctx_of_state[top]
                        if cid < 0:
                            outcome = STUCK
                            out_lex[0 if trie else u] = top
                        else:
                            g = ctx_base[cid]
                            if trie:  # (the next lexeme's context: the siblings' dead test)
                                saved[(depth - 1) * SAVED + 11] = g
                else:
                    outcome = OK  # an ignored terminal: the same stack and context
                if outcome == OK:
                    nxt = trans[g * 256 + byte]
                    if nxt >= 0:
                        lex = nxt
                    else:
                        outcome = DEAD
        # what the step means for the walk
        if trie:
            if outcome in (STUCK, OVERFLOW):
                status[0] = outcome
                return 0
            if at_end:
                if outcome == OK:
                    t = t_tok[u]
                    mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                fresh = True
            elif outcome != OK:  # dead (a whole stack never needs the bottom): skip the subtree
                fresh = True
            else:
                if c_first[u] < c_first[u + 1]:  # its children next, one depth down
                    base = depth * SAVED
                    saved[base] = lex
                    saved[base + 1] = g
                    saved[base + 2] = h
                    saved[base + 3] = low
                    saved[base + 4] = n_undo
                    saved[base + 5] = changed
                    saved[base + 6] = -1  # (its children's feed: not known yet)
                    saved[base + 11] = -1
                    saved[base + _GEN] = -1
                    saved[base + SAVED + 9] = c_first[u]
                    saved[base + SAVED + 10] = c_first[u + 1]
                    depth += 1
                t = t_tok[u]
                if t < 0:
                    fresh = True
                elif memo[g + lex] >= 0 and memo[g + lex] >> 1 == changed:  # its end, known
                    if memo[g + lex] & 1:
                        mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
                    fresh = True
                else:
                    at_end = True  # (then its children)
            continue
        if at_end or outcome != OK:
            if outcome == PENDING:
                if used + h - low > room:
                    outcome = OVERFLOW
                else:
                    out_pos[u] = p
                    out_lex[u] = lex
                    out_low[u] = low
                    for i in range(low, h):
                        out_stack[used] = tmp[i]
                        used += 1
            status[u] = outcome
            fresh = True
        else:
            p += 1
    if not trie:
        out_first[n] = used
    elif out_lex.shape[0] > 1:
        out_lex[1] = deepest
    return used


def _trie_children(depth: I32) -> tuple[I32, I32]:  # pragma: no cover - compiled
    """The children of each node of a depth-first trie (node 0: the root), as CSR arrays.

    Returns ``first`` (``n + 1``) and ``node``: node ``x``'s children are
    ``node[first[x]:first[x + 1]]``, in the trie's order.
    """
    n = depth.shape[0]
    path = np.zeros(n + 1, dtype=np.int32)  # the node of the current path at each depth
    parent = np.zeros(n, dtype=np.int32)
    first = np.zeros(n + 1, dtype=np.int32)
    for j in range(1, n):
        d = depth[j]
        path[d] = j
        parent[j] = path[d - 1]
        first[parent[j] + 1] += 1
    for x in range(n):
        first[x + 1] += first[x]
    fill = first[:n].copy()
    node = np.zeros(max(n - 1, 0), dtype=np.int32)
    for j in range(1, n):
        x = parent[j]
        node[fill[x]] = j
        fill[x] += 1
    return first, node


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
    _u8,
    _i32,
    _i32,
    _i32,
    _u32,
    _i32,
    _i32,
    _i32,
)
pack_rows: Callable[..., tuple[I32, U32]] = _jit(_pack_rows, _i32, _i32, numba.int64)
trie_children: Callable[[I32], tuple[I32, I32]] = _jit(_trie_children, _i32)
