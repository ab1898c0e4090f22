r"""A string body's mask in two compiled calls: its character chain, then its boundary tokens.

The compiled form (numba) of :func:`outlines_like.fsm.index._lexeme_walk`'s two walks:

* :meth:`ChainMemo.follow` follows the *character chain* from a state (``c0 -> c1 -> ...``: every
  non-ASCII character and every ASCII byte of one set ``O`` step ``ci`` to ``c(i+1)``, as in
  ``[^"\\]{0,40}``) as far as the vocabulary's longest token of whole characters, so that every
  token that fits ``O`` is decided by the chain's length (one cached mask of the vocabulary's
  :class:`~outlines_like.fsm._lexemes.CharSets`) and none is walked. Each state's step is
  memoised in arrays (a new step builds the state's row first, which answers the first byte of
  every character), and the chain from a later state of the last chain followed to its end is
  the rest of it, so the next positions of a bounded string cost no new step.
* :meth:`ChainMemo.walk_tails` walks the tokens that leave the lexeme (a quote, an escape, a control
  byte, a split character: :class:`~outlines_like.fsm._lexemes.ChainTails`, one table per
  ``O`` whatever the chain) from the chain state their fitting prefix reaches. The table is
  sorted by suffix, so equal suffixes are side by side: when two reach the same state after
  their first byte (a closing quote from any position of a bounded string), the walk of the
  rest is done once. A group whose first byte leads every chain state it starts from to one
  state (a closing quote) has the same live items at every position: they are walked once
  per DFA and kept, and a later position sets their bits alone (the quotes' ~1,300 items,
  ~580 walks, become their ~160 live ones on llama3).

A lazy DFA's rows are built as the walks read them (:meth:`LazyByteDFA.walk_compiled`); an
eager DFA's table is read as it is (every row built).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel_dfa_kernels import (
    _OPTIONS,
    _STORE,
    OK,
    STATUS,
    Store,
    _ready,
    entry_point,
)
from outlines_like.fsm._accel_dfa_walk import walk_bytes
from outlines_like.fsm._accel_utf8 import sequence_arrays, utf8_row
from outlines_like.fsm._lexemes import ChainTails
from outlines_like.fsm._repeat_shift import RepeatShift
from outlines_like.fsm.regex_dfa import LazyByteDFA

__all__ = ["ChainMemo", "chain_kernel", "tails_kernel"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
U32 = npt.NDArray[np.uint32]
U64 = npt.NDArray[np.uint64]

_UNSEEN = -2  # a state whose chain step is not known yet
_TAIL_MEMOS = 8  # boundary tables whose live items a DFA keeps (one per byte set O)
# info: what follow_chain found
_NEED_MEMO, _M, _LOOP, _DEAD, _HAS_O = 0, 1, 2, 3, 4


def _utf8_rows(
    rows: I32, state: int, seq_off: I32, seq_lo: I32, seq_hi: I32
) -> int:  # pragma: no cover - compiled
    """The one state every byte sequence leads to from ``state`` through built rows, else -1.

    As :func:`outlines_like.fsm.index._utf8_target` on an eager table: each byte range must
    lead to one live state, every sequence to the same last one.
    """
    target = -1
    for q in range(seq_off.shape[0] - 1):
        cur = state
        for p in range(seq_off[q], seq_off[q + 1]):
            nxt = rows[cur, seq_lo[p]]
            if nxt < 0:
                return -1
            for x in range(seq_lo[p] + 1, seq_hi[p] + 1):
                if rows[cur, x] != nxt:
                    return -1
            cur = nxt
        if q == 0:
            target = cur
        elif cur != target:
            return -1
    return target


_utf8_rows_inner = numba.njit(**_OPTIONS)(_utf8_rows)


def _chain(
    store: Store,
    rows: I32,
    done: U8,
    state: int,
    max_steps: int,
    eager: bool,
    seq_off: I32,
    seq_lo: I32,
    seq_hi: I32,
    min_bytes: int,
    step_next: I32,
    step_o: U64,
    chain: I32,
    o_out: U64,
    info: I64,
    max_states: int,
) -> bool:  # pragma: no cover - compiled
    """Follow the character chain from ``state`` (see :meth:`ChainMemo.follow`).

    ``step_next[s]``/``step_o[2s:2s+2]`` memoise each state's step (``-2``: unseen, ``-1``:
    none). ``False`` when the builder stopped (``meta[STATUS]``); calling again goes on.
    """
    store[9][STATUS] = OK
    for k in range(info.shape[0]):
        info[k] = 0
    cap = step_next.shape[0]
    chain[0] = state
    m = 0
    loop = False
    has_o = False
    o0 = np.uint64(0)
    o1 = np.uint64(0)
    cur = state
    for _ in range(max_steps):
        if cur >= cap:
            info[_NEED_MEMO] = 1
            return True
        nxt = step_next[cur]
        if nxt == _UNSEEN:
            if eager:
                t = _utf8_rows_inner(rows, cur, seq_off, seq_lo, seq_hi)
            else:  # the row first: it answers every character's first byte
                if not _ready(cur, store, rows, done, max_states):
                    return False
                t = utf8_row(store, rows, cur, seq_off, seq_lo, seq_hi, max_states)
                if t == -2:
                    return False
            w0 = np.uint64(0)
            w1 = np.uint64(0)
            nxt = -1
            if t >= 0:
                count = 0
                for b in range(128):
                    if rows[cur, b] == t:
                        count += 1
                        if b < 64:
                            w0 |= np.uint64(1) << np.uint64(b)
                        else:
                            w1 |= np.uint64(1) << np.uint64(b - 64)
                if count >= min_bytes:
                    nxt = t
            step_o[2 * cur] = w0
            step_o[2 * cur + 1] = w1
            step_next[cur] = nxt
        if nxt < 0:
            break
        w0 = step_o[2 * cur]
        w1 = step_o[2 * cur + 1]
        if has_o and (w0 != o0 or w1 != o1):
            break
        o0 = w0
        o1 = w1
        has_o = True
        if nxt == cur:
            loop = True
            break
        cur = nxt
        m += 1
        chain[m] = cur
    dead = False
    if has_o and not loop:
        if not _ready(cur, store, rows, done, max_states):
            return False
        dead = True
        for b in range(256):
            inside = True
            if b < 64:
                inside = ((o0 >> np.uint64(b)) & np.uint64(1)) != 0
            elif b < 128:
                inside = ((o1 >> np.uint64(b - 64)) & np.uint64(1)) != 0
            if inside and rows[cur, b] >= 0:
                dead = False
                break
    o_out[0] = o0
    o_out[1] = o1
    info[_M] = m
    info[_LOOP] = 1 if loop else 0
    info[_DEAD] = 1 if dead else 0
    info[_HAS_O] = 1 if has_o else 0
    return True


def _tails(
    store: Store,
    rows: I32,
    done: U8,
    flat: U8,
    begin: I64,
    end: I64,
    ids: I32,
    pre: I32,
    same: U8,
    partial: U8,
    group_byte: I32,
    group_lo: I64,
    group_pre: I32,
    group_partial: U8,
    chain: I32,
    m: int,
    loop: bool,
    mask: U32,
    resume: I64,
    memo_s1: I32,
    memo_n: I32,
    memo_live: I32,
    max_states: int,
) -> bool:  # pragma: no cover - compiled
    """Walk the boundary tokens from the chain ``chain[0..m]`` (see :meth:`ChainMemo.walk_tails`).

    Item ``q`` is ``flat[begin[q]:end[q]]`` from ``chain[pre[q]]`` (``chain[m]`` on a loop;
    skipped when ``pre[q] > m`` otherwise). A group whose first byte dies from every chain
    state its items start from is skipped whole (control bytes in a JSON string); a partial
    character lives from every state that steps on. ``same[q]``: item ``q`` has item
    ``q - 1``'s bytes, so when both reach the same state after their first byte the rest is
    not walked again. Starts at group ``resume[0]``, item ``resume[1]`` (at least), and leaves
    there where it stopped.

    A group whose first byte leads every chain state its items start from to one state
    ``s1`` (a closing quote from any position of a bounded string) has items that live or
    not whatever their start: which do is walked once per ``s1`` and kept across calls
    (``memo_s1[g]``: the ``s1`` known, -3 none; ``memo_n[g]`` live items, their indices at
    ``memo_live[group_lo[g]:]``), so the next position of the string sets their bits alone.
    """
    store[9][STATUS] = OK
    for g in range(resume[0], group_byte.shape[0]):
        resume[0] = g
        lo_p = group_pre[2 * g]
        if lo_p > m and not loop:
            continue
        if group_partial[g] and (loop or group_pre[2 * g + 1] < m):
            continue  # in the caller's mask
        b = group_byte[g]
        live_somewhere = False
        common = True
        s1c = -3
        for p in range(min(lo_p, m), min(group_pre[2 * g + 1], m) + 1):
            s = chain[p]
            if not _ready(s, store, rows, done, max_states):
                return False
            t = rows[s, b]
            if t >= 0:
                live_somewhere = True
            if s1c == -3:
                s1c = t
            elif t != s1c:
                common = False
                if live_somewhere:
                    break
        if not live_somewhere:
            continue
        g0 = group_lo[g]
        if common:
            if memo_s1[g] != s1c:
                # a partial character lives from s1c when some start steps on (a start
                # before cm, or a loop): s1c is where its first byte leads from there
                steps_on = loop or min(lo_p, m) < m
                n_live = 0
                prev_live = False
                for q in range(g0, group_lo[g + 1]):
                    if partial[q] and steps_on:
                        prev_live = True
                    elif q == g0 or not same[q]:
                        at = walk_bytes(
                            store, rows, done, flat, begin[q] + 1, end[q], s1c, max_states
                        )
                        if at < 0:
                            return False
                        prev_live = at == end[q]
                    if prev_live:
                        memo_live[g0 + n_live] = q
                        n_live += 1
                memo_n[g] = n_live
                memo_s1[g] = s1c
            for k in range(memo_n[g]):
                q = memo_live[g0 + k]
                if pre[q] > m and not loop:
                    continue
                t = ids[q]
                mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
            continue
        prev_s1 = -3  # the state item q - 1 reached after its first byte (-3: none)
        prev_live = False
        for q in range(max(group_lo[g], resume[1]), group_lo[g + 1]):
            resume[1] = q
            p = pre[q]
            if p > m:
                if not loop:
                    prev_s1 = -3
                    continue
                p = m
            live = False
            if partial[q] and (p < m or loop):
                s1 = -3
                live = True
            else:
                s = chain[p]
                if not _ready(s, store, rows, done, max_states):
                    return False
                i = begin[q]
                s1 = rows[s, flat[i]]
                if s1 >= 0:
                    if same[q] and s1 == prev_s1:
                        live = prev_live
                    else:
                        at = walk_bytes(store, rows, done, flat, i + 1, end[q], s1, max_states)
                        if at < 0:
                            return False
                        live = at == end[q]
            prev_s1 = s1
            prev_live = live
            if live:
                t = ids[q]
                mask[t >> 5] |= np.uint32(1) << np.uint32(t & 31)
    resume[0] = group_byte.shape[0]
    return True


_A, _int, _bool = numba.types.Array, numba.int64, numba.boolean
_u8, _i32, _i64, _u32, _u64 = (
    _A(t, 1, "C") for t in (numba.uint8, numba.int32, numba.int64, numba.uint32, numba.uint64)
)
_rows = _A(numba.int32, 2, "C")
chain_kernel = numba.njit(
    (
        *(_STORE, _rows, _u8, _int, _int, _bool, _i32, _i32, _i32, _int, _i32, _u64, _i32),
        *(_u64, _i64, _int),
    ),
    **_OPTIONS,
)(_chain)
tails_kernel = numba.njit(
    (
        *(_STORE, _rows, _u8, _u8, _i64, _i64, _i32, _i32, _u8, _u8, _i32, _i64, _i32, _u8),
        *(_i32, _int, _bool, _u32, _i64, _i32, _i32, _i32, _int),
    ),
    **_OPTIONS,
)(_tails)


def _no_store() -> Store:
    """A builder store for eager tables: never read (every row is built)."""
    i32, i64 = np.zeros(1, dtype=np.int32), np.zeros(16, dtype=np.int64)
    return (i32, i64, i64, i32, i64, i32, i64, np.zeros(1, np.uint8), i32, i64, i32)


_NO_STORE = _no_store()


class ChainMemo:
    """Per DFA: each state's chain step, memoised (grown as needed), and the compiled walks.

    Args:
        sequences: The non-ASCII UTF-8 characters as byte-range sequences (see
            :func:`outlines_like.fsm.index._utf8_target`).
        max_steps: How far a chain is followed.
        min_bytes: The fewest ASCII bytes ``O`` may have.
    """

    def __init__(
        self, sequences: list[list[tuple[int, int]]], max_steps: int, min_bytes: int
    ) -> None:
        self.seq = sequence_arrays(sequences)
        self.max_steps = max_steps
        self.min_bytes = min_bytes
        self.next = np.full(0, _UNSEEN, dtype=np.int32)
        self.o = np.zeros(0, dtype=np.uint64)
        self.chain = np.zeros(max_steps + 1, dtype=np.int32)
        self.o_out = np.zeros(2, dtype=np.uint64)
        self.info = np.zeros(5, dtype=np.int64)
        self._o_keys: dict[tuple[int, int], bytes] = {}  # O's words -> O as bool[128] bytes
        # the last chain followed to its own end (not cut at max_steps), and where each of
        # its states is in it: a chain from one of them is the rest of it
        self._last: tuple[I32, bytes, bool, bool] | None = None
        self._last_at: dict[int, int] = {}
        # per boundary table walked: its groups' live items, kept per first-byte target
        self._tail_memos: dict[int, tuple[ChainTails, I32, I32, I32]] = {}
        # a lazy DFA's long counted repetitions, where a chain may stop as a loop (set by the
        # token index when its NFA has one: see :meth:`follow`)
        self.shift: RepeatShift | None = None

    def grow(self, n: int) -> None:
        """Room for states ``0 .. n - 1`` at least."""
        cap = max(n, 2 * self.next.shape[0], 64)
        nxt = np.full(cap, _UNSEEN, dtype=np.int32)
        nxt[: self.next.shape[0]] = self.next
        o = np.zeros(2 * cap, dtype=np.uint64)
        o[: self.o.shape[0]] = self.o
        self.next, self.o = nxt, o

    def steps_on(self, state: int) -> bool:
        """Whether ``state``'s chain step is known, and goes on (a string body's state)."""
        return state < self.next.shape[0] and int(self.next[state]) >= 0

    def follow(
        self, trans: I32, state: int, lazy: LazyByteDFA | None
    ) -> tuple[I32, bytes | None, bool, bool] | None:
        """The character chain from ``state``: ``(states c0 .. cm, O, loop, dead)``, compiled.

        As :func:`outlines_like.fsm.index._char_chain` with ``max_steps`` steps: ``O`` as
        ``bool[128]`` bytes (``None``: no chain), whether ``cm`` steps to itself, whether every
        byte of ``O`` and every non-ASCII byte dies in ``cm``. ``trans`` is an eager DFA's table
        (``lazy`` ``None``). ``None`` when a lazy DFA's builder is not the compiled one.
        """
        last = self._last
        if last is not None:
            # a later position of the last chain (the next mask of a bounded string): the
            # kernel would step the same memoised states to the same end
            n = self._last_at.get(state, 0)
            if n:
                return last[0][n:], last[1], last[2], last[3]
        if self.shift is not None and lazy is not None:
            # a long counted repetition: two steps, and ``c1`` may be a loop already
            if not self._steps(trans, state, lazy, 2):
                return None
            info = self.info
            if info[_M] == 2 and not info[_LOOP]:
                o_key = self._o_key()
                if self.shift.loops(lazy.subset, int(self.chain[1]), int(self.chain[2]), o_key):
                    self._last = None
                    return self.chain[:2].copy(), o_key, True, False
        if not self._steps(trans, state, lazy, self.max_steps):
            return None
        info = self.info
        if not info[_HAS_O]:
            return self.chain[:1].copy(), None, False, False
        o_key = self._o_key()
        m = int(info[_M])
        found = self.chain[: m + 1].copy(), o_key, bool(info[_LOOP]), bool(info[_DEAD])
        self._last = None
        if 1 < m < self.max_steps:  # not cut: a chain from c1 .. c(m - 1) is the rest of it
            self._last = found
            self._last_at = dict(zip(found[0][1:m].tolist(), range(1, m), strict=True))
        return found

    def _steps(self, trans: I32, state: int, lazy: LazyByteDFA | None, max_steps: int) -> bool:
        """Run the chain kernel from ``state`` for at most ``max_steps`` steps (``info``).

        ``False`` when a lazy DFA's builder is not the compiled one.
        """
        n_states = lazy.n_states if lazy is not None else trans.shape[0]
        if self.next.shape[0] < n_states:
            self.grow(n_states)
        while True:
            args = (
                state,
                max_steps,
                lazy is None,
                *self.seq,
                self.min_bytes,
                self.next,
                self.o,
                self.chain,
                self.o_out,
                self.info,
            )
            if lazy is None:
                rows = np.ascontiguousarray(trans, dtype=np.int32)
                done = np.ones(rows.shape[0], dtype=np.uint8)
                entry_point(chain_kernel)(_NO_STORE, rows, done, *args, 0)
            elif not lazy.walk_compiled(chain_kernel, args):
                return False
            if not self.info[_NEED_MEMO]:
                return True
            self.grow(lazy.n_states if lazy is not None else n_states)

    def _o_key(self) -> bytes:
        """The last chain's ``O`` as ``bool[128]`` bytes (one object per set)."""
        words = (int(self.o_out[0]), int(self.o_out[1]))
        o_key = self._o_keys.get(words)
        if o_key is None:
            bits = np.unpackbits(self.o_out.view(np.uint8), bitorder="little").astype(np.bool_)
            o_key = self._o_keys[words] = bits.tobytes()
        return o_key

    def walk_tails(
        self,
        tails: ChainTails,
        chain: I32,
        loop: bool,
        trans: I32,
        lazy: LazyByteDFA | None,
        mask: U32,
    ) -> bool:
        """Set in ``mask`` the boundary tokens that live from the chain ``chain`` (compiled).

        Each from the chain state its fitting prefix reaches (see :class:`ChainTails`); those
        whose prefix is longer than the chain are skipped unless it loops. ``False`` (nothing
        done) when a lazy DFA's builder is not the compiled one. The live items of groups
        whose first byte has one target from the whole chain are kept per ``tails`` (the
        DFA's rows never change, so they hold for any later chain). Groups of partial
        characters that all live are left out: they are in
        :meth:`~outlines_like.fsm._lexemes.CharSets.body_mask`, which the caller adds.
        """
        m = int(chain.shape[0]) - 1
        resume = np.zeros(2, dtype=np.int64)
        memo = self._tail_memos.get(id(tails))
        if memo is None or memo[0] is not tails:
            n_groups = tails.group_byte.shape[0]
            memo = (
                tails,
                np.full(n_groups, -3, dtype=np.int32),
                np.zeros(n_groups, dtype=np.int32),
                np.zeros(tails.ids.shape[0], dtype=np.int32),
            )
            if len(self._tail_memos) >= _TAIL_MEMOS:
                self._tail_memos.clear()
            self._tail_memos[id(tails)] = memo
        args = (
            tails.flat,
            tails.begin,
            tails.end,
            tails.ids,
            tails.pre,
            tails.same,
            tails.partial,
            tails.group_byte,
            tails.group_lo,
            tails.group_pre,
            tails.group_partial,
            chain,
            m,
            loop,
            mask,
            resume,
            *memo[1:],
        )
        if lazy is not None:
            return lazy.walk_compiled(tails_kernel, args)
        rows = np.ascontiguousarray(trans, dtype=np.int32)
        done = np.ones(rows.shape[0], dtype=np.uint8)
        entry_point(tails_kernel)(_NO_STORE, rows, done, *args, 0)
        return True
