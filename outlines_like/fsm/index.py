"""Token index: which tokens a DFA state allows, and where each leads, vectorised with numpy.

The vocabulary's text tokens are laid out once per vocabulary (:class:`TokenTable`): sorted by
first byte, their bytes stored column by column. A walk from a set of DFA states starts only
from the tokens whose first byte is live in that state (most tokens die on their first byte
and are never touched), then does one gather per byte column over the surviving (state,
token) pairs, dropping the dead and the finished after each column. Results are cached per
state by :class:`TokenIndex` as a packed int32 bitmask row plus the sorted allowed ids and
their end states, so the steady state of a matcher is a row copy and a lookup.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from outlines_like.fsm.regex_dfa import ByteDFA
from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["StateRow", "TokenIndex", "TokenTable", "pack_ids", "token_table", "walk_tokens"]

_DENSE_COLUMNS = 16
I32 = npt.NDArray[np.int32]


class TokenTable:
    """The text tokens of a vocabulary laid out for vectorised DFA walks.

    Special, EOS and empty tokens are left out: they are never text.

    Attributes:
        ids: ``int32[n]``: token id at each table position (sorted by first byte, then id).
        lengths: ``int32[n]``: byte length at each position.
        first: ``uint8[n]``: first byte at each position.
        first_start: ``int64[257]``: positions of first byte ``b`` are
            ``first_start[b]:first_start[b + 1]``.
        dense: ``uint8[16, n]``: byte ``j`` of each token (0 past its end), for ``j < 16``.
        flat, offsets: all bytes concatenated, and where each position's bytes start.
        max_len: The longest token.
        vocab_size, words: ``V`` and ``ceil(V / 32)``.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        special = vocab.special_token_ids
        text_ids = [i for i, t in enumerate(vocab.tokens) if t and i not in special]
        firsts = np.array([vocab.tokens[i][0] for i in text_ids], dtype=np.int64)
        ids = np.array(text_ids, dtype=np.int64)
        order = np.lexsort((ids, firsts))
        self.ids: I32 = ids[order].astype(np.int32)
        toks = [vocab.tokens[i] for i in self.ids.tolist()]
        self.lengths: I32 = np.array([len(t) for t in toks], dtype=np.int32)
        self.first = firsts[order].astype(np.uint8)
        self.first_start = np.searchsorted(self.first, np.arange(257), side="left").astype(np.int64)
        n = len(toks)
        self.flat = np.frombuffer(b"".join(toks), dtype=np.uint8)
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])
        self.max_len = int(self.lengths.max()) if n else 0
        dense = np.zeros((_DENSE_COLUMNS, n), dtype=np.uint8)
        for j in range(min(_DENSE_COLUMNS, self.max_len)):
            has = np.nonzero(self.lengths > j)[0]
            dense[j, has] = self.flat[self.offsets[has] + j]
        self.dense = dense
        self.vocab_size = vocab.size
        self.words = vocab.mask_words
        self.eos_ids = np.array(vocab.eos_token_ids, dtype=np.int32)

    @property
    def n_text(self) -> int:
        """Number of text tokens."""
        return int(self.ids.shape[0])

    def column(self, j: int, pos: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
        """Byte ``j`` of the tokens at positions ``pos`` (which all have more than j bytes)."""
        col: npt.NDArray[np.uint8]
        col = self.dense[j][pos] if j < _DENSE_COLUMNS else self.flat[self.offsets[pos] + j]
        return col


_TABLE_LOCK = threading.Lock()


def token_table(vocab: Vocabulary) -> TokenTable:
    """Return the vocabulary's :class:`TokenTable`, built once and kept on the vocabulary."""
    table = vocab._cache.get("token_table")
    if table is None:
        with _TABLE_LOCK:
            table = vocab._cache.get("token_table")
            if table is None:
                table = TokenTable(vocab)
                vocab._cache["token_table"] = table
    assert isinstance(table, TokenTable)
    return table


def walk_tokens(
    transitions: npt.NDArray[np.int32], table: TokenTable, states: npt.ArrayLike
) -> list[tuple[I32, I32]]:
    """Walk every text token from each of ``states`` through a byte DFA at once.

    Args:
        transitions: ``int32[n_states, 256]`` transition table, ``-1`` = dead (a
            :attr:`ByteDFA.transitions`, or any lexer DFA in the same layout).
        table: The vocabulary's :class:`TokenTable`.
        states: The start states.

    Returns:
        For each start state, ``(token_ids, end_states)``: the tokens whose every byte has a
        live transition, sorted by id, and the state each one ends in.
    """
    st_in = np.asarray(states, dtype=np.int64).reshape(-1)
    n_states = st_in.shape[0]
    tflat = np.ascontiguousarray(transitions, dtype=np.int32).reshape(-1)
    fs = table.first_start
    counts_by_byte = fs[1:] - fs[:-1]
    # candidates: (state, position) for every live first byte of each state
    rows = transitions[st_in]  # (n_states, 256)
    which, byte = np.nonzero(rows >= 0)
    cnt = counts_by_byte[byte]
    nz = cnt > 0
    which, byte, cnt = which[nz], byte[nz], cnt[nz]
    total = int(cnt.sum())
    if total == 0:
        empty = np.zeros(0, dtype=np.int32)
        return [(empty, empty) for _ in range(n_states)]
    seg_start = np.cumsum(cnt) - cnt
    pos = np.arange(total, dtype=np.int64) - np.repeat(seg_start - fs[byte], cnt)
    cur = np.repeat(rows[which, byte].astype(np.int64), cnt)
    owner = np.repeat(which.astype(np.int64), cnt)
    lengths = table.lengths
    done_pos: list[npt.NDArray[np.int64]] = []
    done_state: list[npt.NDArray[np.int64]] = []
    done_owner: list[npt.NDArray[np.int64]] = []
    j = 1
    while pos.shape[0]:
        fin = lengths[pos] == j
        if fin.any():
            done_pos.append(pos[fin])
            done_state.append(cur[fin])
            done_owner.append(owner[fin])
            keep = ~fin
            pos, cur, owner = pos[keep], cur[keep], owner[keep]
            if not pos.shape[0]:
                break
        b = table.column(j, pos)
        cur = tflat[cur * 256 + b].astype(np.int64)
        ok = cur >= 0
        if not ok.all():
            pos, cur, owner = pos[ok], cur[ok], owner[ok]
        j += 1
    if done_pos:
        all_pos = np.concatenate(done_pos)
        all_state = np.concatenate(done_state)
        all_owner = np.concatenate(done_owner)
    else:
        all_pos = all_state = all_owner = np.zeros(0, dtype=np.int64)
    tok = table.ids[all_pos].astype(np.int64)
    order = np.lexsort((tok, all_owner))
    tok, all_state, all_owner = tok[order], all_state[order], all_owner[order]
    bounds = np.searchsorted(all_owner, np.arange(n_states + 1))
    out: list[tuple[I32, I32]] = []
    for k in range(n_states):
        a, b2 = bounds[k], bounds[k + 1]
        out.append((tok[a:b2].astype(np.int32), all_state[a:b2].astype(np.int32)))
    return out


def pack_ids(ids: npt.ArrayLike, words: int) -> I32:
    """Pack token ids into an int32 bitmask row: bit ``i % 32`` of word ``i // 32``."""
    bits = np.zeros(words * 32, dtype=bool)
    bits[np.asarray(ids, dtype=np.int64)] = True
    return np.packbits(bits, bitorder="little").view(np.int32)


class StateRow:
    """What one DFA state allows: packed bitmask row, sorted ids, their end states."""

    __slots__ = ("ends", "ids", "mask", "next_of")

    def __init__(self, mask: I32, ids: I32, ends: I32) -> None:
        self.mask = mask
        self.ids = ids
        self.ends = ends
        # token id -> next state, filled on demand by advance()
        self.next_of: dict[int, int] = {}

    def next_state(self, token_id: int) -> int:
        """Return the state after ``token_id``, or ``-1`` if the token is not allowed."""
        ns = self.next_of.get(token_id)
        if ns is not None:
            return ns
        ids = self.ids
        i = int(np.searchsorted(ids, token_id))
        ns = int(self.ends[i]) if i < ids.shape[0] and int(ids[i]) == token_id else -1
        self.next_of[token_id] = ns
        return ns


class TokenIndex:
    """Lazy per-state token sets of one byte DFA over one vocabulary (shared by matchers).

    Args:
        dfa: The DFA (every state co-reachable, so a surviving token keeps the text extendable).
        vocab: The vocabulary.
        lookahead: When a state is first computed, also compute the states its allowed tokens
            lead to, up to this many steps ahead, in the same vectorised batch (0 = lazy only).
        eager_limit: Compute every state up front when the DFA has at most this many states.
    """

    def __init__(
        self, dfa: ByteDFA, vocab: Vocabulary, *, lookahead: int = 1, eager_limit: int = 0
    ) -> None:
        self.dfa = dfa
        self.vocab = vocab
        self.table = token_table(vocab)
        self.accepting: list[bool] = dfa.accepting.tolist()
        self.rows: list[StateRow | None] = [None] * dfa.n_states
        self.lookahead = lookahead
        self._lock = threading.Lock()
        if 0 < dfa.n_states <= eager_limit:
            self._compute(list(range(dfa.n_states)))

    def row(self, state: int) -> StateRow:
        """Return the cached :class:`StateRow` of ``state``, computing it on first use."""
        r = self.rows[state]
        if r is None:
            with self._lock:
                r = self.rows[state]
                if r is None:
                    self._compute_ahead(state)
                    r = self.rows[state]
        assert r is not None
        return r

    def _compute_ahead(self, state: int) -> None:
        todo = [state]
        self._compute(todo)
        for _ in range(self.lookahead):
            nxt: set[int] = set()
            for s in todo:
                r = self.rows[s]
                assert r is not None
                nxt.update(np.unique(r.ends).tolist())
            todo = [s for s in nxt if self.rows[s] is None]
            if not todo:
                break
            self._compute(todo)

    def _compute(self, states: list[int]) -> None:
        results = walk_tokens(self.dfa.transitions, self.table, states)
        words = self.table.words
        eos = self.table.eos_ids
        for s, (ids, ends) in zip(states, results, strict=True):
            mask_ids = np.concatenate([ids, eos]) if self.accepting[s] else ids
            self.rows[s] = StateRow(pack_ids(mask_ids, words), ids, ends)

    @property
    def computed_states(self) -> int:
        """How many states have their row computed."""
        return sum(r is not None for r in self.rows)
