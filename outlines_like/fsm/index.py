"""Token index: which tokens a DFA state allows, vectorised over the vocabulary with numpy.

The vocabulary's text tokens are laid out once per vocabulary (:class:`TokenTable`): sorted by
length, their bytes stored column by column, with per-first-byte position lists and per-token
byte sets. A string-body state (a loop or a counter on which every non-ASCII character and one
ASCII set ``O`` step alike: a JSON string, ``[^"]{0,40}``) reads most of its mask from the
vocabulary's lexeme sets (:mod:`outlines_like.fsm._lexemes`, shared by every constraint): the
tokens of whole characters in ``O`` up to the chain's length are one cached mask, and only the
tokens that leave the lexeme are walked, from the byte where they leave it. Any other state
is walked (:func:`walk_tokens`, per state in :class:`TokenIndex`):

1. takes only the tokens whose first byte is live (most tokens die on their first byte), or
   whose first two bytes are, from per-byte-pair groups (after an optional space);
2. decides whole groups at once by byte-set tests: tokens of whole UTF-8 characters in a
   string-body state or along a *character chain* (a bounded string body, where every
   non-ASCII character and one ASCII set step a counter), and tokens whose remaining bytes
   follow a *chain* of states (a loop such as ``[a-z]+``, or a counter such as
   ``[^"]{0,40}``);
3. walks the rest one gather per byte column, dropping dead tokens and setting finished ones
   aside after each column, and finishes the last few long tokens byte by byte.

With the ``accel`` extra (numba, :mod:`outlines_like.fsm._accel`), :class:`TokenIndex` computes
the same rows with compiled kernels instead: a walk of the vocabulary's token trie per state
(string-body states keep the lexeme sets: :mod:`outlines_like.fsm._accel_chain` follows their
character chain as far as the longest token and walks only the few boundary tokens);
:func:`walk_tokens` stays the numpy walk.

:class:`TokenIndex` caches each state's packed int32 bitmask row (EOS bit in accepting
states); the state a token leads to is found by walking its bytes when a matcher advances, and
memoised. The steady state of a matcher is a row copy and a dict lookup.


One cohesive algorithm (the vectorised token walk and its shortcuts), kept in one module of
some 1,200 lines: the shortcuts share the walk's tables and invariants.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from outlines_like.errors import ConstraintTooLargeError
from outlines_like.fsm import _accel
from outlines_like.fsm._grammar_kernel import shared_rest_tries, trie_layout
from outlines_like.fsm._grammar_lexer import terminal_dfa
from outlines_like.fsm._grammar_tables import load_lark
from outlines_like.fsm._grammar_walk import byte_table, lexeme_walk, sub_dfa
from outlines_like.fsm._lexemes import (
    NON_ASCII,
    LexemeCache,
    SuffixTable,
    TokenBytes,
    column_layout,
    utf8_valid_prefixes,
)
from outlines_like.fsm._repeat_shift import RepeatShift
from outlines_like.fsm._subset import VISIT_WALKED
from outlines_like.fsm.budget import DEFAULT_BUDGET, Budget, active, start, stop
from outlines_like.fsm.regex_dfa import UNKNOWN, ByteDFA, LazyByteDFA, prime_row_table
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types.json_schema._text import STRING as JSON_STRING

if TYPE_CHECKING:
    from outlines_like.fsm._accel_chain import ChainMemo

__all__ = [
    "StateRow",
    "TokenIndex",
    "TokenTable",
    "body_token_sets",
    "pack_ids",
    "prepare_vocabulary",
    "token_table",
    "walk_tokens",
]

I32 = npt.NDArray[np.int32]

# np.unique on 1-d arrays imports numpy.ma on first use (~20 ms): pay that at import time,
# not in the first mask of the first constraint
np.unique(np.zeros(2, dtype=np.int32))


ACCEL_PRECOMPUTE_FACTOR = 8.0
"""How many times more candidates :class:`TokenIndex` precomputes with the compiled walk."""


class TokenTable:
    """The text tokens of a vocabulary laid out for vectorised DFA walks.

    Special, EOS and empty tokens are left out: they are never text. Table positions are sorted
    by token length, longest first, so the tokens still running at byte ``j`` are a prefix of
    any ascending list of positions. Building it takes ~0.15 s for 150k tokens.

    Attributes:
        ids: ``int32[n]``: token id at each position.
        lengths: ``int32[n]``: byte length at each position (non-increasing).
        first: ``uint8[n]``: first byte at each position.
        active: ``int64[max_len + 1]``: ``active[j]`` positions have more than ``j`` bytes.
        columns: ``columns[j]`` is ``uint8[active[j]]``: byte ``j`` of those positions.
        by_first: ``by_first[b]``: ascending positions whose first byte is ``b``.
        first_count: ``int64[256]``: how many positions start with each byte.
        pair_order: ``intp[n]``: positions grouped by (first byte, second byte), a one-byte
            token's second byte counted as 256; ascending within a group.
        pair_bounds: ``int64[256 * 257 + 1]``: group ``257 * b + b2`` is
            ``pair_order[pair_bounds[k] : pair_bounds[k + 1]]``.
        pair_count: ``int64[256, 257]``: the size of each group.
        bytesets: ``uint64[4, n]``: the byte values in each token after its first byte.
        tail_any: ``bool[4, n]``: whether each of those 64-bit words is non-zero.
        complete: ``bool[n]``: the token is whole, valid UTF-8 characters.
        ascii_words: ``uint64[2, n]``: the ASCII byte values in each token.
        n_chars: ``int32[n]``: bytes that are not UTF-8 continuation bytes (for a complete
            token: its number of characters).
        max_chars: The most characters (non-continuation bytes) of a token.
        tokens_by_pos: the token bytes at each position.
        flat, offsets: the tokens end to end, in position order (token ``p`` is
            ``flat[offsets[p]:offsets[p + 1]]``).
        vocab_size, words: ``V`` and ``ceil(V / 32)``.
        lexemes: the token sets of string bodies (:class:`~outlines_like.fsm._lexemes.CharSets`),
            built on first use and shared by every constraint on the vocabulary.
    """

    def __init__(self, vocab: Vocabulary) -> None:
        special = vocab.special_token_ids
        text_ids = np.array(
            [i for i, t in enumerate(vocab.tokens) if t and i not in special], dtype=np.int64
        )
        lens = np.array([len(vocab.tokens[i]) for i in text_ids.tolist()], dtype=np.int64)
        order = np.lexsort((text_ids, -lens))
        self.ids: I32 = text_ids[order].astype(np.int32)
        self.lengths: I32 = lens[order].astype(np.int32)
        toks = [vocab.tokens[i] for i in self.ids.tolist()]
        self.tokens_by_pos: tuple[bytes, ...] = tuple(toks)
        n = len(toks)
        max_len = int(self.lengths[0]) if n else 0
        self.max_len = max_len
        self.active, self.columns, self.flat, self.offsets = column_layout(
            self.tokens_by_pos, self.lengths
        )
        self.first: npt.NDArray[np.uint8] = self.columns[0] if n else np.zeros(0, dtype=np.uint8)
        by_first_order = np.argsort(self.first, kind="stable")
        bounds = np.searchsorted(self.first[by_first_order], np.arange(257))
        self.by_first: list[npt.NDArray[np.intp]] = [
            by_first_order[bounds[b] : bounds[b + 1]].astype(np.intp) for b in range(256)
        ]
        self.first_count = np.diff(bounds).astype(np.int64)
        second = np.full(n, 256, dtype=np.int64)
        if max_len > 1:
            second[: int(self.active[1])] = self.columns[1]
        pair_key = self.first.astype(np.int64) * 257 + second
        self.pair_order: npt.NDArray[np.intp] = np.argsort(pair_key, kind="stable").astype(np.intp)
        self.pair_bounds = np.searchsorted(pair_key[self.pair_order], np.arange(256 * 257 + 1))
        self.pair_count = np.diff(self.pair_bounds).astype(np.int64).reshape(256, 257)
        # which byte values each token contains after its first byte: 4 x 64-bit words
        bytesets = np.zeros((4, n), dtype=np.uint64)
        for j in range(1, max_len):
            col = self.columns[j]
            word = col >> 6
            bit = np.left_shift(np.uint64(1), (col & 63).astype(np.uint64))
            for w in range(4):
                sel = np.flatnonzero(word == w)
                if sel.shape[0]:
                    bytesets[w, sel] |= bit[sel]
        self.bytesets = bytesets
        self.tail_any: npt.NDArray[np.bool_] = bytesets != 0
        # tokens made of whole, valid UTF-8 characters, and the ASCII bytes of each token
        valid = utf8_valid_prefixes(toks)
        complete = valid == self.lengths
        self.complete = complete
        self.n_complete = int(complete.sum())
        ascii_words = np.zeros((2, n), dtype=np.uint64)
        for j in range(max_len):
            col = self.columns[j]
            k = col.shape[0]
            is_ascii = col < 128
            bit = np.left_shift(np.uint64(1), (col & 63).astype(np.uint64))
            for w in range(2):
                sel = np.flatnonzero(is_ascii & ((col >> 6) == w))
                if sel.shape[0]:
                    ascii_words[w, :k][sel] |= bit[sel]
        self.ascii_words = ascii_words
        n_chars = np.zeros(n, dtype=np.int32)
        for j in range(max_len):
            col = self.columns[j]
            n_chars[: col.shape[0]] += (col & 0xC0) != 0x80
        self.n_chars: I32 = n_chars
        self.max_chars = int(n_chars.max()) if n else 0  # the most characters of a token
        self.vocab_size = vocab.size
        self.words = vocab.mask_words
        self.layout = TokenBytes(self.flat, self.offsets, valid)
        self.lexemes = LexemeCache(
            complete, ascii_words, n_chars, self.ids, vocab.size, self.layout
        )
        self.eos_ids = np.array(vocab.eos_token_ids, dtype=np.int32)

    @property
    def n_text(self) -> int:
        """Number of text tokens."""
        return int(self.ids.shape[0])


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


def token_trie(vocab: Vocabulary) -> _accel.TokenTrie:
    """Return the vocabulary's token trie (the compiled walk's layout), built once (needs numba)."""
    trie = vocab._cache.get("token_trie")
    if trie is None:
        table = token_table(vocab)
        with _TABLE_LOCK:
            trie = vocab._cache.get("token_trie")
            if trie is None:
                trie = _accel.TokenTrie(table.tokens_by_pos, table.ids, table.vocab_size)
                vocab._cache["token_trie"] = trie
    assert isinstance(trie, _accel.TokenTrie)
    return trie


def prepare_vocabulary(vocab: Vocabulary, *, stock_row_tables: bool = True) -> None:
    """Build the tables every compiled constraint on ``vocab`` shares, now rather than lazily.

    The layouts are built and kept on the vocabulary: the regex index's :class:`TokenTable`
    with the token sets of a JSON string's body, and the grammar masker's byte table; with the
    ``accel`` extra, the token trie too, and the compiled walk's kernels are loaded (or
    compiled, the first time: seconds) so that no mask pays for them; the first pages of
    a lazy DFA's row table are backed, and kept in stock by a background thread
    (:func:`~outlines_like.fsm.regex_dfa.prime_row_table`; not with
    ``stock_row_tables=False``: a process that compiles nothing itself but forks children
    that do, which would inherit the pages copy-on-write); the grammar kernel's layout of the
    token trie is made (~5 ms on llama3); the grammar masker's walk of the vocabulary inside
    a JSON string is made (:func:`_walk_json_string`, ~2 ms); and Lark's modules, which
    grammar compiles use, are imported and its grammar reader built (~95 ms once a process:
    :func:`~outlines_like.fsm._grammar_tables.load_lark`). Benchmarks and servers call this in
    setup, so the first compile does not pay for them (~0.3 s for 150k tokens, ~0.5 s with
    the extra).
    """
    table = token_table(vocab)
    if _accel.enabled():
        _accel.warm_up()
        trie_layout(token_trie(vocab))  # (the grammar kernel's layout of it: ~5 ms on llama3)
    body = table.lexemes.chars(JSON_STRING_BODY)
    body.suffixes()
    for k in (*range(1, _CHAR_CHAIN_STEPS + 1), body.max_chars):
        body.mask_upto(k)
    if _accel.enabled():  # the compiled walk's table, and the masks of every chain length
        body.chain_tails()
        for k in range(body.max_chars + 1):
            body.body_mask(k, False)
        body.body_mask(0, True)
    byte_table(vocab)
    _walk_json_string(vocab)
    _ = vocab.hash
    if stock_row_tables:
        prime_row_table()
    load_lark()


def body_token_sets(
    vocab: Vocabulary, key: bytes
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.integer[Any]]]:
    """A string body's token sets for the grammar masker's lexical walks.

    ``key``: the ASCII bytes that loop on the body (``bool[128]`` bytes). Returns the packed
    row of the tokens that fit the body and the ids of the other text tokens
    (:data:`~outlines_like.fsm._grammar_body.BodySets`).
    """
    tokens = token_table(vocab)
    sets = tokens.lexemes.chars(key)
    return sets.mask_upto(sets.max_chars).view(np.uint8), tokens.ids[sets.unfit_pos]


def _walk_json_string(vocab: Vocabulary) -> None:
    """Walk the vocabulary inside a JSON string for the grammar masker, once, in setup.

    A grammar whose lexer reads nothing but a JSON string after an opening quote (a Lark or
    EBNF JSON grammar's string terminal, a JSON Schema grammar's string values) takes the
    tokens inside the string from a lexical walk the vocabulary keeps, keyed by the part of
    the lexer DFA past the quote (:func:`~outlines_like.fsm._grammar_walk.lexeme_walk`), and
    those that close the string from tries of their rests kept with it. The process's first
    such mask built both (~1.5-2.5 ms on llama3); here they are built from the JSON string
    terminal's own DFA, whose part past the quote is, numbered canonically, the one every
    such lexer context has (any regex of that language: the terminal DFAs are minimal).
    """
    dfa = terminal_dfa("STRING", "re", JSON_STRING, ())
    inside = int(dfa.transitions[dfa.start, ord('"')])
    order = sub_dfa(dfa.transitions.tolist(), inside)
    if order is None:  # pragma: no cover - the JSON string's DFA has a dozen states
        return
    table = byte_table(vocab)
    trie = token_trie(vocab) if _accel.enabled() else None
    walk = lexeme_walk(
        vocab,
        table,
        dfa.transitions,
        dfa.accepting,
        order,
        trie,
        lambda key: body_token_sets(vocab, key),
    )
    if trie is not None:  # (the rests are walked by the grammar kernel only)
        shared_rest_tries(walk, table)


def _ascii_set(excluded: bytes) -> bytes:
    """An ASCII byte set as the ``bool[128]`` bytes that key :class:`LexemeCache`."""
    in_set = np.ones(128, dtype=bool)
    in_set[list(excluded)] = False
    return in_set.tobytes()


JSON_STRING_BODY = _ascii_set(bytes(range(0x20)) + b'"\\')
"""The ASCII bytes of a JSON string's body (all but the quote, the backslash and control bytes).

The key of the lexeme sets :func:`prepare_vocabulary` builds up front.
"""


_SELECTIVE = 8  # walk from per-first-byte lists when they cover under 1/8 of the vocabulary
_MIN_LOOP_BYTES = 8  # try the chain shortcut when its byte set has this many bytes
_MIN_LOOP_TOKENS = 512  # ... and this many tokens start into the chain
_SCALAR_TAIL = 24  # finish the walk in Python once this few tokens are still running


def walk_tokens(
    transitions: npt.NDArray[np.int32], table: TokenTable, states: npt.ArrayLike
) -> list[tuple[I32, I32]]:
    """Walk every text token from each of ``states`` through a byte DFA.

    Per state: start from the tokens whose first byte is live (one gather over the first bytes,
    or the per-first-byte lists when few are live), then one gather per byte column over the
    survivors, dropping dead tokens and setting finished ones aside after each column.

    Args:
        transitions: ``int32[n_states, 256]`` transition table, ``-1`` = dead (a
            :attr:`ByteDFA.transitions`, or any lexer DFA in the same layout).
        table: The vocabulary's :class:`TokenTable`.
        states: The start states.

    Returns:
        For each start state, ``(token_ids, end_states)``: the tokens whose every byte has a
        live transition, sorted by id, and the state each one ends in.
    """
    trans = np.ascontiguousarray(transitions, dtype=np.int32)
    tflat = trans.reshape(-1)
    scratch = np.empty(table.vocab_size, dtype=np.int32)
    bits = np.zeros(table.vocab_size, dtype=bool)
    memo: dict[Any, Any] = {}  # chain steps and per-set tests, shared by these states
    return [
        _sort_by_token(*_walk_one(trans, tflat, table, int(s), None, memo), scratch, bits)
        for s in np.asarray(states, dtype=np.int64).reshape(-1).tolist()
    ]


def _walk_one(
    trans: I32,
    tflat: I32,
    table: TokenTable,
    state: int,
    lazy: LazyByteDFA | None = None,
    char_memo: dict[Any, Any] | None = None,
) -> tuple[I32, I32]:
    """Walk all text tokens from ``state``: (token ids, end states), in table order.

    ``char_memo`` keeps :func:`_char_step` results between calls on the same DFA.
    """
    if lazy is not None:
        lazy.expand([state])
        trans = lazy.transitions
        tflat = trans.reshape(-1)
    row = trans[state]
    live = np.flatnonzero(row >= 0)
    n_cand = int(table.first_count[live].sum())
    empty = np.zeros(0, dtype=np.int32)
    if n_cand == 0:
        return empty, empty
    pos: npt.NDArray[np.intp]
    done_pos: list[npt.NDArray[np.intp]] = []
    done_cur: list[I32] = []
    per_target_min = _MIN_LOOP_TOKENS
    use_pairs = n_cand > _PAIR_MIN and n_cand <= _PAIR_SHARE * table.n_text
    pairs = _pair_candidates(trans, table, row, live, lazy) if use_pairs else None
    if lazy is not None:
        trans = lazy.transitions
        tflat = trans.reshape(-1)
    if pairs is not None:
        pos = pairs
        cur = row[table.first[pos]]
    elif n_cand * _SELECTIVE < table.n_text:
        parts = [table.by_first[b] for b in live.tolist() if table.first_count[b]]
        pos = np.sort(np.concatenate(parts)) if len(parts) > 1 else parts[0]
        cur = row[table.first[pos]]
    else:
        cur_all = row[table.first]
        live_tok = cur_all >= 0
        if table.n_complete and _utf8_closed(trans, state, lazy):
            # Every non-ASCII character leads from this state back to it (a string body):
            # tokens of whole UTF-8 characters whose ASCII bytes all loop here end here.
            if lazy is not None:
                trans = lazy.transitions
                tflat = trans.reshape(-1)
            out = np.packbits(row[:128] != state, bitorder="little").view(np.uint64)
            aw = table.ascii_words
            stay = table.complete & (((aw[0] & out[0]) | (aw[1] & out[1])) == 0) & live_tok
            hit = np.flatnonzero(stay)
            done_pos.append(hit)
            done_cur.append(np.full(hit.shape[0], state, dtype=np.int32))
            live_tok[hit] = False
        elif table.n_complete:
            if char_memo is None:
                char_memo = {}
            n_done = len(done_pos)
            trans = _char_chain_decide(
                trans, table, state, lazy, char_memo, live_tok, done_pos, done_cur
            )
            tflat = trans.reshape(-1)
            if len(done_pos) > n_done:
                # most tokens are decided: walk the rest rather than test byte chains
                per_target_min = table.n_text + 1
        # Chains: from the state t a token's first byte leads to, the bytes of a common set O
        # step t -> c1 -> c2 ... (a loop when c1 = t: string bodies, [a-z]+; a counter for
        # bounded repeats: [^"]{0,40}). A token whose other bytes all lie in O ends at the
        # chain state its length picks: one byte-set test instead of a walk.
        per_target = np.bincount(row[live], weights=table.first_count[live])
        for t in np.flatnonzero(per_target >= per_target_min).tolist():
            sel_mask = cur_all == t
            sel = np.flatnonzero(sel_mask)
            chain = _chain(trans, t, table.max_len - 1, lazy)
            if chain is None:
                continue
            if lazy is not None:
                trans = lazy.transitions
                tflat = trans.reshape(-1)
            in_set, states, kind = chain
            if sel.shape[0] * 4 > table.n_text:
                # many tokens: test whole arrays, with the per-set test kept for other states
                if char_memo is None:
                    char_memo = {}
                key = ("tails", in_set.tobytes())
                ok = char_memo.get(key)
                if ok is None:
                    ok = _tails_within(table, in_set, sel, None, whole=True)
                    char_memo[key] = ok
                hit = np.flatnonzero(sel_mask & ok)
            else:
                hit = _tails_within(table, in_set, sel, None)
            hit = hit[live_tok[hit]]  # not decided already
            tail = table.lengths[hit] - 1
            m = states.shape[0] - 1
            if kind == _LOOP:
                decided = hit_kept = hit
                hit_ends = states[np.minimum(tail, m)]
            else:
                within = tail <= m
                hit_kept = hit[within]
                hit_ends = states[tail[within]]
                # _DEAD: longer tails die on O; _STOP: they still need the walk
                decided = hit if kind == _DEAD else hit_kept
            done_pos.append(hit_kept)
            done_cur.append(hit_ends)
            live_tok[decided] = False
        pos = np.flatnonzero(live_tok)
        cur = cur_all[pos]
    _walk_columns(trans, tflat, table, pos, cur, lazy, done_pos, done_cur)
    if not done_pos:
        return empty, empty
    tok: I32 = table.ids[np.concatenate(done_pos)]
    ends: I32 = np.concatenate(done_cur)
    return tok, ends


def _walk_columns(
    trans: I32,
    tflat: I32,
    table: TokenTable | SuffixTable,
    pos: npt.NDArray[np.intp],
    cur: I32,
    lazy: LazyByteDFA | None,
    done_pos: list[npt.NDArray[np.intp]],
    done_cur: list[I32],
) -> None:
    """Walk the tokens at ascending positions ``pos``, in states ``cur`` after their first byte.

    One gather per byte column, dropping dead tokens and setting finished ones aside (onto the
    done lists) after each column; the last few long tokens are finished byte by byte.
    """
    active = table.active
    columns = table.columns
    j = 1
    while True:
        k = int(np.searchsorted(pos, active[j])) if j < active.shape[0] else 0
        if k < pos.shape[0]:
            done_pos.append(pos[k:])
            done_cur.append(cur[k:])
            pos, cur = pos[:k], cur[:k]
        if k == 0:
            break
        col = columns[j][pos]
        if lazy is not None and int(cur.max()) * 256 >= tflat.shape[0]:
            # another thread's rows (a DFA shared by indexes) found states past this view
            tflat = lazy.transitions.reshape(-1)
        nxt = tflat[cur * 256 + col]
        if lazy is not None:
            unknown = np.flatnonzero(nxt == UNKNOWN)
            if unknown.shape[0]:
                lazy.expand(cur[unknown])
                tflat = lazy.transitions.reshape(-1)
                nxt[unknown] = tflat[cur[unknown] * 256 + col[unknown]]
        cur = nxt
        ok = cur >= 0
        if not ok.all():
            keep = np.flatnonzero(ok)
            pos, cur = pos[keep], cur[keep]
            if not keep.shape[0]:
                break
        j += 1
        if pos.shape[0] <= _SCALAR_TAIL:
            # a few long tokens left: finish them byte by byte rather than column by column
            _finish_scalar(trans, table, pos, cur, j, lazy, done_pos, done_cur)
            break


_LOOP, _DEAD, _STOP = 0, 1, 2
_PAIR_MIN = 2048  # filter candidates on their first two bytes above this many
_PAIR_SHARE = 0.75  # ... and below this share of the text tokens
_PAIR_SELECTIVE = _SELECTIVE  # ... and use them when under 1/_PAIR_SELECTIVE survive that


def _pair_candidates(
    trans: I32, table: TokenTable, row: I32, live: npt.NDArray[np.intp], lazy: LazyByteDFA | None
) -> npt.NDArray[np.intp] | None:
    """Ascending positions whose first two bytes are live from the state of ``row``.

    Many candidates can die on their second byte (after an optional space, most tokens that
    start with a space): the (first byte, second byte) groups of the token table find the
    survivors without a gather over all of them. ``None`` when they would still be more than
    ``1 / _PAIR_SELECTIVE`` of the text tokens (the caller's other selections are cheaper).
    """
    live = live[table.first_count[live] > 0]
    targets = row[live]
    if lazy is not None:
        lazy.expand(targets)
        trans = lazy.transitions
    second_live = np.ones((live.shape[0], 257), dtype=bool)
    second_live[:, :256] = trans[targets] >= 0
    counts = table.pair_count[live] * second_live
    if int(counts.sum()) * _PAIR_SELECTIVE >= table.n_text:
        return None
    bi, b2 = np.nonzero(counts)
    keys = live[bi].astype(np.int64) * 257 + b2
    starts = table.pair_bounds[keys]
    lens = counts[bi, b2]
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.intp)
    # concatenated ranges [starts[i], starts[i] + lens[i]) without a Python loop
    offsets = np.cumsum(lens) - lens
    idx = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lens)
    pos: npt.NDArray[np.intp] = np.sort(table.pair_order[idx])
    return pos


def _utf8_closed(trans: I32, state: int, lazy: LazyByteDFA | None) -> bool:
    """Whether every non-ASCII UTF-8 character leads from ``state`` back to ``state``."""
    for seq in NON_ASCII:
        states = [state]
        for lo, hi in seq:
            if lazy is not None:
                lazy.expand(states)
                trans = lazy.transitions
            nxt = np.unique(trans[states, lo : hi + 1])
            if nxt.shape[0] == 0 or int(nxt[0]) < 0:
                return False
            states = nxt.tolist()
        if states != [state]:
            return False
    return True


def _utf8_plan() -> list[tuple[npt.NDArray[np.int64], ...]]:
    """The gathers of :func:`_utf8_target`, one per byte of a UTF-8 character.

    Each: which sequences of ``NON_ASCII`` are that long, the bytes of their ranges laid end
    to end, the sequence of each byte, and each range's start.
    """
    plan: list[tuple[npt.NDArray[np.int64], ...]] = []
    for level in range(4):
        act = [i for i, seq in enumerate(NON_ASCII) if len(seq) > level]
        if not act:
            break
        ranges = [NON_ASCII[i][level] for i in act]
        sizes = [hi - lo + 1 for lo, hi in ranges]
        byte_idx = np.concatenate([np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in ranges])
        seg_of = np.repeat(np.arange(len(act), dtype=np.int64), sizes)
        starts = np.cumsum([0, *sizes[:-1]], dtype=np.int64)
        plan.append((np.array(act, dtype=np.int64), byte_idx, seg_of, starts))
    return plan


_UTF8_PLAN = _utf8_plan()


def _utf8_target(trans: I32, state: int, lazy: LazyByteDFA | None) -> int:
    """The one state every non-ASCII UTF-8 character leads to from ``state``, else ``-1``.

    Stricter than needed (each byte range of a character must lead to a single state), which
    keeps the test to one gather per byte of a character over all byte ranges at once (a lazy
    DFA answers on its subsets, without building the states inside characters); ``-1`` only
    means the caller walks instead.
    """
    if lazy is not None:  # on the subsets: the lazy DFA builds no state inside a character
        return lazy.utf8_target(state, NON_ASCII)
    cur = np.full(len(NON_ASCII), state, dtype=np.int64)
    for act, byte_idx, seg_of, starts in _UTF8_PLAN:
        xs = cur[act]
        vals = trans[xs[seg_of], byte_idx]
        low = np.minimum.reduceat(vals, starts)
        if int(low.min()) < 0 or not (np.maximum.reduceat(vals, starts) == low).all():
            return -1
        cur[act] = low
    target = int(cur[0])
    return target if bool((cur == target).all()) else -1


_CHAR_CHAIN_STEPS = 16  # character chains: follow at most this many steps


def _char_step(
    trans: I32, state: int, lazy: LazyByteDFA | None, memo: dict[Any, Any]
) -> tuple[int, bytes] | None:
    """One step of a character chain from ``state``, memoised.

    Returns ``(next, O)`` when every non-ASCII character and at least ``_MIN_LOOP_BYTES``
    ASCII bytes (``O``, as ``bool[128]`` bytes) lead from ``state`` to the same state
    ``next``; ``None`` otherwise.
    """
    if state in memo:
        known: tuple[int, bytes] | None = memo[state]
        return known
    out: tuple[int, bytes] | None = None
    nxt = _utf8_target(trans, state, lazy)
    if nxt >= 0:
        if lazy is not None:
            lazy.expand_one(state)
            trans = lazy.transitions
        in_set = trans[state, :128] == nxt
        if np.count_nonzero(in_set) >= _MIN_LOOP_BYTES:
            out = (nxt, in_set.tobytes())
    memo[state] = out
    return out


def _char_chain(
    trans: I32, state: int, lazy: LazyByteDFA | None, memo: dict[Any, Any], max_steps: int
) -> tuple[I32, bytes | None, list[int], bool, bool]:
    r"""Follow the character chain from ``state`` (see :func:`_char_chain_decide`).

    Returns ``(trans, O, [c0 .. cm], loop, dead)``: the (possibly grown) transition table, ``O``
    as ``bool[128]`` bytes (``None``: no chain), the chain's states, whether ``cm`` steps to
    itself, and whether every byte of ``O`` and every non-ASCII byte dies in ``cm``.
    """
    states = [state]
    o_key: bytes | None = None
    cur = state
    loop = False
    for _ in range(max_steps):
        step = _char_step(trans, cur, lazy, memo)
        if lazy is not None:
            trans = lazy.transitions
        if step is None or (o_key is not None and step[1] != o_key):
            break
        o_key = step[1]
        if step[0] == cur:
            loop = True
            break
        cur = step[0]
        states.append(cur)
    dead = False
    if o_key is not None and not loop:
        if lazy is not None:
            lazy.expand([cur])
            trans = lazy.transitions
        in_set = np.frombuffer(o_key, dtype=np.bool_)
        row = trans[cur]
        dead = bool((row[:128][in_set] < 0).all()) and bool((row[128:] < 0).all())
    return trans, o_key, states, loop, dead


def _char_chain_decide(
    trans: I32,
    table: TokenTable,
    state: int,
    lazy: LazyByteDFA | None,
    memo: dict[Any, Any],
    live_tok: npt.NDArray[np.bool_],
    done_pos: list[npt.NDArray[np.intp]],
    done_cur: list[I32],
) -> I32:
    r"""Decide the tokens of whole UTF-8 characters that step through a character chain.

    From ``c0 = state``, a character chain ``c0 -> c1 -> ... -> cm`` has every non-ASCII
    character and every ASCII byte of one set ``O`` lead from ``ci`` to ``c(i+1)`` (a bounded
    string body: ``[^"\\]{0,40}``). A token of whole characters whose ASCII bytes all lie in
    ``O`` ends at ``c(n)``, ``n`` its number of characters: one byte-set test and a gather
    instead of a walk. Tokens with more than ``m`` characters die when every byte of ``O`` and
    every non-ASCII byte dies in ``cm``, else they are left to the walk. Updates ``live_tok``
    and the done lists; returns the (possibly grown) transition table.
    """
    steps = min(_CHAR_CHAIN_STEPS, table.max_len)
    trans, o_key, states, loop, dead = _char_chain(trans, state, lazy, memo, steps)
    if o_key is None:
        return trans
    # the tokens of whole characters whose ASCII bytes lie in O, per vocabulary and O (every
    # constraint shares them); their first bytes are live: in O, or lead bytes of characters
    # that reach c1
    sets = table.lexemes.chars(o_key)
    hit, n = sets.fit_pos, sets.fit_chars
    m = len(states) - 1
    chain = np.array(states, dtype=np.int32)
    if loop or sets.max_chars <= m:
        done_pos.append(hit)
        done_cur.append(chain[np.minimum(n, m)] if loop else chain[n])
        live_tok &= sets.unfit
        return trans
    within = n <= m
    kept = hit[within]
    done_pos.append(kept)
    done_cur.append(chain[n[within]])
    if dead:
        live_tok &= sets.unfit
    else:
        live_tok[kept] = False
    return trans


_LEXEME_SHARE = 4  # string bodies: read the mask from the shared sets when 1/4 of tokens fit


def _lexeme_walk(
    trans: I32,
    table: TokenTable,
    state: int,
    lazy: LazyByteDFA | None,
    memo: dict[Any, Any],
    out: npt.NDArray[np.uint32] | None = None,
    chain_memo: ChainMemo | None = None,
) -> tuple[I32, I32] | None:
    """The mask of a string-body state from the vocabulary's shared sets, plus a short walk.

    When a character chain (:func:`_char_chain_decide`) starts at ``state`` and most tokens
    fit its byte set ``O``, the fitting tokens the chain allows are one cached mask of the
    vocabulary's :class:`~outlines_like.fsm._lexemes.CharSets` (shared by every constraint);
    only the rest (tokens that cross the lexeme's boundary, and longer ones the chain cannot
    decide) are walked. Returns ``(mask of the fitting tokens allowed, ids of the other
    tokens allowed)``, or ``None`` when ``state`` is no such state. With ``out`` (a packed
    ``uint32`` row) and ``chain_memo`` (the ``accel`` extra), both walks are compiled
    (:func:`_compiled_lexeme_walk`) and the rest is set in ``out`` (the ids returned are
    then empty); ``None`` there also when a lazy DFA's builder has no kernels (the caller
    walks the token trie instead).
    """
    # (a lazy DFA's whole table is read only where needed: reading it sets the rows of every
    # state found so far, and the compiled walks never read it)
    row = trans[state] if lazy is None else lazy.built_row(state)
    if row[0xC3] < 0 or row[0xE4] < 0:  # a chain lets every non-ASCII character through
        return None
    if out is not None:
        if chain_memo is None:
            raise ValueError("a compiled lexeme walk needs the DFA's chain memo")
        return _compiled_lexeme_walk(trans, table, state, lazy, chain_memo, out)
    if lazy is not None:
        trans = lazy.transitions
    # follow the chain some way (memoised per state: a string's states are each stepped once);
    # tokens with more characters than it has steps are walked whole
    steps = min(_CHAR_CHAIN_STEPS, table.max_len)
    trans, o_key, chain, loop, dead = _char_chain(trans, state, lazy, memo, steps)
    if o_key is None:
        return None
    sets = table.lexemes.chars(o_key)
    if sets.n_fit * _LEXEME_SHARE < table.n_text:
        return None
    m = len(chain) - 1
    fit_mask = sets.mask_upto(sets.max_chars if loop else m)
    if lazy is not None:
        trans = lazy.transitions
    tflat = trans.reshape(-1)
    done_pos: list[npt.NDArray[np.intp]] = []
    done_cur: list[I32] = []
    parts: list[I32] = []
    # the tokens that leave the lexeme: their prefix steps the chain, the walk starts at the
    # byte that leaves it
    sfx = sets.suffixes()
    pre = sfx.pre_chars
    starts = np.array(chain, dtype=np.int32)[np.minimum(pre, m)]
    cur = tflat[starts * 256 + sfx.first]
    ok = cur >= 0
    if not loop:
        ok &= pre <= m  # longer prefixes: walked below, or dead with the chain
    pos = np.flatnonzero(ok)
    _walk_columns(trans, tflat, sfx, pos, cur[pos], lazy, done_pos, done_cur)
    if done_pos:
        parts.append(sfx.ids[np.concatenate(done_pos)])
    if not loop and not dead:
        # the chain stops: tokens with more characters than it has steps are walked whole
        longer = np.concatenate([sets.fit_pos[sets.fit_chars > m], sfx.orig_pos[pre > m]])
        if longer.shape[0]:
            if lazy is not None:
                trans = lazy.transitions
            longer = np.sort(longer)
            cur = row[table.first[longer]]
            keep = np.flatnonzero(cur >= 0)
            done_pos, done_cur = [], []
            _walk_columns(
                trans, trans.reshape(-1), table, longer[keep], cur[keep], lazy, done_pos, done_cur
            )
            if done_pos:
                parts.append(table.ids[np.concatenate(done_pos)])
    tok: I32 = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
    return fit_mask, tok


_COMPILED_CHAIN_STEPS = 1 << 16  # compiled chains: at most this many steps (tests lower it)


def _chain_memo(table: TokenTable) -> ChainMemo:
    """A DFA's memo of compiled chain steps, followed as far as the longest token (needs numba)."""
    from outlines_like.fsm._accel_chain import ChainMemo

    steps = min(table.max_chars, _COMPILED_CHAIN_STEPS)
    return ChainMemo(NON_ASCII, steps, _MIN_LOOP_BYTES)


_NO_ROWS = np.zeros((0, 256), dtype=np.int32)


def _compiled_lexeme_walk(
    trans: I32,
    table: TokenTable,
    state: int,
    lazy: LazyByteDFA | None,
    chain_memo: ChainMemo,
    out: npt.NDArray[np.uint32],
) -> tuple[I32, I32] | None:
    """:func:`_lexeme_walk`'s compiled form: the chain, then the boundary tokens, in kernels.

    Returns its result (the mask is :meth:`~outlines_like.fsm._lexemes.CharSets.body_mask`:
    the fitting tokens and the partial characters the chain decides, which the boundary walk
    then skips), or ``None`` when ``state`` is no string-body state, its chain stops after
    one step (neither looping nor dying), or a lazy DFA's builder has no kernels (each way
    the caller walks the token trie). A longer chain that stops before the longest tokens
    (its byte set changes, or ``_COMPILED_CHAIN_STEPS``) leaves them to the item walk, from
    its end.
    """
    found = chain_memo.follow(trans, state, lazy)
    if found is None:
        return None
    chain, o_key, loop, dead = found
    if o_key is None:
        return None
    m = chain.shape[0] - 1
    if m <= 1 and not (loop or dead):
        # one step, then another byte set (a member name that may not be a declared one,
        # a pattern's first character): nearly every token is longer than the chain and
        # would be walked whole, one by one, as the trie walk does with shared prefixes
        # (llama3: 2.5 ms against 2.9), and ``O``'s sets built first (~25 ms once)
        return None
    sets = table.lexemes.chars(o_key)
    if sets.n_fit * _LEXEME_SHARE < table.n_text:
        return None
    tails = sets.chain_tails()
    if lazy is not None and not lazy.compiled:
        trans = lazy.transitions
    if not chain_memo.walk_tails(tails, chain, loop, trans, lazy, out):
        return None
    if not (loop or dead or (sets.max_chars <= m and tails.max_pre <= m)):
        longer = sets.longer(m)
        items = (longer.flat, longer.begin, longer.end, longer.ids, longer.start, chain)
        if lazy is None or not lazy.walk_items(items, out):
            starts = np.full(longer.ids.shape[0], chain[m], dtype=np.int32)
            _accel.walk_list(trans if lazy is None else lazy.transitions, longer, starts, lazy, out)
    return sets.body_mask(m, loop), np.zeros(0, dtype=np.int32)


_ALL_ONES = np.uint64(0xFFFFFFFFFFFFFFFF)


def _tails_within(
    table: TokenTable,
    in_set: npt.NDArray[np.bool_],
    sel: npt.NDArray[np.intp],
    sel_mask: npt.NDArray[np.bool_] | None,
    *,
    whole: bool = False,
) -> npt.NDArray[Any]:
    """Positions of ``sel`` whose bytes after the first all lie in ``in_set``.

    ``sel_mask`` (the same selection as a boolean array over all positions) makes the test
    run on whole arrays instead of gathering ``sel``: cheaper when ``sel`` is most of them.
    ``whole=True`` returns the test itself for every position (``bool[n]``; ``sel`` unused).
    """
    if whole:
        sel_mask = np.ones(table.n_text, dtype=bool)
    outside = np.packbits(~in_set, bitorder="little").view(np.uint64)
    bad: npt.NDArray[np.bool_] | None = None
    for w in range(4):
        ow = outside[w]
        if ow == 0:
            continue
        if ow == _ALL_ONES:
            any_w = table.tail_any[w]
            term = any_w if sel_mask is not None else any_w[sel]
        else:
            words = table.bytesets[w] if sel_mask is not None else table.bytesets[w][sel]
            term = (words & ow) != 0
        bad = term.copy() if bad is None else (bad | term)
    if sel_mask is None:
        return sel if bad is None else sel[~bad]
    ok = sel_mask if bad is None else (sel_mask & ~bad)
    return ok if whole else np.flatnonzero(ok)


def _chain(
    trans: I32, t: int, max_steps: int, lazy: LazyByteDFA | None
) -> tuple[npt.NDArray[np.bool_], I32, int] | None:
    """The chain of states a common byte set O steps through from ``t``.

    Returns ``(O as bool[256], chain states c0 = t .. cm, kind)`` where ``kind`` says what
    follows cm on O: ``_LOOP`` (cm again, forever), ``_DEAD`` (every byte of O dies) or
    ``_STOP`` (unknown: tokens longer than the chain must be walked). ``None`` when O would
    have fewer than ``_MIN_LOOP_BYTES`` bytes.
    """
    if lazy is not None:
        lazy.expand_one(t)
        trans = lazy.transitions
    row = trans[t]
    targets = row[row >= 0]
    if targets.shape[0] < _MIN_LOOP_BYTES:
        return None
    counts = np.bincount(targets)
    nxt = int(counts.argmax())
    if int(counts[nxt]) < _MIN_LOOP_BYTES:
        return None
    in_set = row == nxt
    rep = int(np.flatnonzero(in_set)[0])
    states = [t]
    cur = t
    kind = _STOP
    for _ in range(max_steps):
        if nxt == cur:
            kind = _LOOP
            break
        states.append(nxt)
        cur = nxt
        if lazy is not None:
            lazy.expand_one(cur)
            trans = lazy.transitions
        row = trans[cur]
        nxt = int(row[rep])
        if nxt < 0:
            # every byte of O dies here, or O splits (then only tails up to here are decided)
            kind = _DEAD if bool((row[in_set] < 0).all()) else _STOP
            break
        narrowed = in_set & (row == nxt)
        if int(narrowed.sum()) < _MIN_LOOP_BYTES:
            break
        in_set = narrowed
    return in_set, np.array(states, dtype=np.int32), kind


def _finish_scalar(
    trans: I32,
    table: TokenTable | SuffixTable,
    pos: npt.NDArray[np.intp],
    cur: I32,
    j: int,
    lazy: LazyByteDFA | None,
    done_pos: list[npt.NDArray[np.intp]],
    done_cur: list[I32],
) -> None:
    tokens = table.tokens_by_pos
    keep_pos: list[int] = []
    keep_cur: list[int] = []
    for p, state in zip(pos.tolist(), cur.tolist(), strict=True):
        if lazy is not None:
            state = lazy.step(state, tokens[p][j:])
        else:
            for b in tokens[p][j:]:
                state = int(trans[state, b])
                if state < 0:
                    break
        if state >= 0:
            keep_pos.append(p)
            keep_cur.append(state)
    done_pos.append(np.array(keep_pos, dtype=np.intp))
    done_cur.append(np.array(keep_cur, dtype=np.int32))


def _sort_by_token(
    tok: I32, ends: I32, scratch: I32, bits: npt.NDArray[np.bool_]
) -> tuple[I32, I32]:
    if not tok.shape[0]:
        return tok, ends
    bits[tok] = True
    ids = np.flatnonzero(bits).astype(np.int32)
    bits[tok] = False
    scratch[tok] = ends
    out_ends: I32 = scratch[ids]
    return ids, out_ends


def pack_ids(ids: npt.ArrayLike, words: int) -> I32:
    """Pack token ids into an int32 bitmask row: bit ``i % 32`` of word ``i // 32``."""
    bits = np.zeros(words * 32, dtype=bool)
    bits[np.asarray(ids, dtype=np.int64)] = True
    return np.packbits(bits, bitorder="little").view(np.int32)


class StateRow:
    """What one DFA state allows: its packed bitmask row, and next states found so far.

    Only the mask is kept per state (``ceil(V / 32)`` words); the state a token leads to is
    found by walking the token's bytes through the DFA when a matcher advances with it, and
    memoised.
    """

    __slots__ = ("_dfa", "_tokens", "mask", "next_of", "state", "successors")

    def __init__(
        self, mask: I32, dfa: ByteDFA | LazyByteDFA, tokens: tuple[bytes, ...], state: int
    ) -> None:
        self.mask = mask
        self._dfa = dfa
        self._tokens = tokens
        self.next_of: dict[int, int] = {}
        self.successors: list[int] | None = None
        self.state = state

    def allows(self, token_id: int) -> bool:
        """Whether the mask has ``token_id``'s bit."""
        if not 0 <= token_id < self.mask.shape[0] * 32:
            return False
        return bool((int(self.mask[token_id >> 5]) >> (token_id & 31)) & 1)

    def next_state(self, token_id: int) -> int:
        """Return the state after text token ``token_id``, or ``-1`` if it is not allowed."""
        ns = self.next_of.get(token_id)
        if ns is None:
            ns = -1
            if token_id < len(self._tokens) and self.allows(token_id):
                ns = self._dfa.step(self.state, self._tokens[token_id])
            self.next_of[token_id] = ns
        return ns

    def ids(self, size: int) -> I32:
        """The allowed token ids, sorted (EOS included in accepting states)."""
        unpacked = np.unpackbits(self.mask.view(np.uint8), bitorder="little")[:size]
        ids: I32 = np.flatnonzero(unpacked).astype(np.int32)
        return ids


class _Visit:
    """A token index's first visit of a lazy DFA's state as one kernel call: what it passes."""

    __slots__ = ("dups", "fixed", "lazy", "memo", "trie", "words")

    def __init__(
        self,
        lazy: LazyByteDFA,
        memo: ChainMemo,
        trie: _accel.TokenTrie,
        stack: I32,
        no_ends: I32,
        eos: I32,
    ) -> None:
        self.lazy = lazy
        self.memo = memo  # (its ``next`` grows: read per call)
        self.trie = trie
        self.words = trie.words
        self.dups = trie.dup_of.shape[0] > 0
        arrays = (trie.byte, trie.depth, trie.skip, trie.root_child, trie.node_tok)
        self.fixed: tuple[Any, ...] = (*arrays, stack, no_ends, eos)


class TokenIndex:
    """Lazy per-state token sets of one byte DFA over one vocabulary (shared by matchers).

    Args:
        dfa: The DFA, eager or lazy (every state co-reachable, so a surviving token keeps the
            text extendable).
        vocab: The vocabulary.
        lookahead: When a state is first computed, also compute the states its allowed tokens
            lead to, up to this many steps ahead (0 = lazy only).
        eager_limit: Compute every state up front when an eager DFA has at most this many
            states.
        precompute: Up front, compute the rows of the cheapest states of an eager DFA (fewest
            candidate tokens first) while their candidates add up to at most this fraction of
            the text tokens: selective states (digits, punctuation) cost little to walk, and
            having them ready keeps first visits off the generation path. 0 turns it off.
            With the compiled walk (``accel``) a state costs ~5-10x less, so the fraction is
            multiplied by :data:`ACCEL_PRECOMPUTE_FACTOR`: about the same compile time then
            covers every state of a typical pattern (email, UUID, phone number).
    """

    def __init__(
        self,
        dfa: ByteDFA | LazyByteDFA,
        vocab: Vocabulary,
        *,
        lookahead: int = 0,
        eager_limit: int = 0,
        precompute: float = 0.0,
        budget: Budget = DEFAULT_BUDGET,
    ) -> None:
        self.dfa = dfa
        self.budget = budget
        self.nbytes = 0  # bytes of the rows kept, checked against budget.max_bytes
        self.failed: ConstraintTooLargeError | None = None  # a budget ran out: evict me
        self.vocab = vocab
        self.table = token_table(vocab)
        self.rows: dict[int, StateRow] = {}
        self.lookahead = lookahead
        self._lock = threading.Lock()
        self._lazy = dfa if isinstance(dfa, LazyByteDFA) else None
        self._bits = np.zeros(self.table.words * 32, dtype=bool)
        self._char_memo: dict[Any, Any] = {}
        self._trie = token_trie(vocab) if _accel.enabled() else None
        self._chain_memo = _chain_memo(self.table) if self._trie is not None else None
        # string-body rows shared by the states of a long counted repetition one shift apart
        # (the repetitions' test is the chain memo's, where chains stop as loops)
        self._shifted: dict[tuple[int, ...], I32] = {}
        lazy = self._lazy
        if self._chain_memo is not None and lazy is not None and lazy.compiled:
            self._chain_memo.shift = RepeatShift.of(lazy.nfa, self.table.max_len)
        self._stack = np.empty(self._trie.stack_size if self._trie else 0, dtype=np.int32)
        self._no_ends = np.zeros(0, dtype=np.int32)
        self._body = np.zeros(1, dtype=np.uint8)
        self._visit_args = self._visit_setup()
        if self._lazy is None and 0 < dfa.n_states <= eager_limit:
            self._compute(list(range(dfa.n_states)))
        elif self._lazy is None and precompute > 0:
            factor = ACCEL_PRECOMPUTE_FACTOR if self._trie is not None else 1.0
            self._compute(self._cheapest(precompute * factor))

    def _cheapest(self, fraction: float) -> list[int]:
        """States whose candidate counts, smallest first, sum to at most ``fraction`` of V."""
        live = self.dfa.transitions >= 0
        counts = live.astype(np.int64) @ self.table.first_count
        order = np.argsort(counts, kind="stable")
        within = np.cumsum(counts[order]) <= fraction * self.table.n_text
        return [int(s) for s in order[within].tolist()]

    def is_accepting(self, state: int) -> bool:
        """Whether the text is complete in ``state``."""
        return self.dfa.is_accepting(state)

    def row(self, state: int) -> StateRow:
        """Return the cached :class:`StateRow` of ``state``, computing it on first use."""
        r = self.rows.get(state)
        if r is None:
            r = self._first_row(state)
        return r

    def _first_row(self, state: int) -> StateRow:
        """Compute the row of ``state`` (its first visit), under the lock and a mask's meter."""
        with self._lock:
            r = self.rows.get(state)
            if r is not None:
                return r
            outer = active() is not None  # a compile's first mask: under the compile's meter
            try:
                if not outer:
                    start(self.budget, "mask")
                if self._visit_args is not None:
                    self._visit_row(state, self._visit_args)
                elif self.lookahead:
                    self._compute_ahead(state)
                elif self._trie is not None:
                    self._accel_row(state, self._trie)
                else:
                    self._compute([state])
            except ConstraintTooLargeError as exc:
                self.failed = exc
                raise
            finally:
                if not outer:
                    stop()
            return self.rows[state]

    def _compute_ahead(self, state: int) -> None:
        todo = [state]
        self._compute(todo)
        for _ in range(self.lookahead):
            nxt: set[int] = set()
            for s in todo:
                nxt.update(self.rows[s].successors or ())
            todo = [s for s in nxt if s not in self.rows]
            if not todo:
                break
            self._compute(todo)

    def _compute(self, states: list[int]) -> None:
        if self._trie is not None:
            self._compute_accel(states, self._trie)
            return
        eos = self.table.eos_ids
        trans = self.dfa.transitions
        tflat = trans.reshape(-1)
        bits = self._bits
        for s in states:
            fast = None
            if not self.lookahead:  # the end states are not needed: shared sets may do
                fast = _lexeme_walk(trans, self.table, s, self._lazy, self._char_memo)
            if fast is not None:
                fit_mask, tok = fast
            else:
                tok, ends = _walk_one(trans, tflat, self.table, s, self._lazy, self._char_memo)
            bits[tok] = True
            if self.dfa.is_accepting(s):
                bits[eos] = True
            mask: I32 = np.packbits(bits, bitorder="little").view(np.int32)
            bits[:] = False
            if fast is not None:
                mask |= fit_mask
            successors = np.unique(ends).tolist() if self.lookahead else None
            self._keep(s, mask, successors)

    def _compute_accel(self, states: list[int], trie: _accel.TokenTrie) -> None:
        """:meth:`_compute` by the compiled walk (the ``accel`` extra): same rows."""
        if not self.lookahead:
            for s in states:
                self._accel_row(s, trie)
            return
        eos = self.table.eos_ids
        for s in states:
            out = trie.new_mask()
            ends = np.full(trie.sentinel + 1, -1, dtype=np.int32)
            self._trie_row(s, trie, out, ends)
            if self.dfa.is_accepting(s):
                np.bitwise_or.at(out, eos >> 5, np.left_shift(np.uint32(1), eos & 31))
            reached = ends[: self.table.vocab_size]
            successors = np.unique(reached[reached >= 0]).tolist()
            self._keep(s, out[: self.table.words].view(np.int32), successors)

    def _visit_setup(self) -> _Visit | None:
        """What :meth:`_visit_row` passes on each call, when a first visit is one kernel call."""
        lazy, memo, trie = self._lazy, self._chain_memo, self._trie
        if self.lookahead or lazy is None or memo is None or trie is None or not lazy.compiled:
            return None
        return _Visit(lazy, memo, trie, self._stack, self._no_ends, self.table.eos_ids)

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_visit_args"] = None  # (the trie's arrays: pickled, they are the vocabulary's)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._visit_args = self._visit_setup()

    def _accel_row(self, s: int, trie: _accel.TokenTrie) -> None:
        """One row by the compiled walk, without end states (the first visit of a state)."""
        if self._visit_args is not None:
            self._visit_row(s, self._visit_args)
        else:
            self._body_row(s, trie, trie.new_mask())

    def _visit_row(self, s: int, v: _Visit) -> None:
        """The first visit of ``s`` in a lazy DFA's compiled walk: one kernel call.

        :meth:`LazyByteDFA.visit` builds the state's row, walks the trie and sets the EOS
        bits unless the row is a string body's (a state the chain steps on already is one);
        a string body's row comes from the shared sets (:meth:`_body_row`).
        """
        mask = np.zeros(v.words, dtype=np.int32)  # the row as it is kept
        if v.lazy.visit(s, mask, v.memo.next, v.fixed) == VISIT_WALKED:
            if v.dups:
                _accel.add_duplicates(v.trie, mask.view(np.uint32), None)
            self._keep(s, mask, None)
            return
        # (nothing walked: ``mask`` is still zero)
        shift = v.memo.shift
        key = None if shift is None else shift.key(v.lazy.subset(s))
        shared = None if key is None else self._shifted.get(key)
        if shared is not None:  # a later position of a long bounded string: the same row
            self._keep(s, shared, None, shared=True)
            return
        self._body_row(s, v.trie, v.trie.new_mask())
        if key is not None:
            self._shifted[key] = self.rows[s].mask

    def _body_row(self, s: int, trie: _accel.TokenTrie, out: npt.NDArray[np.uint32]) -> None:
        """The row of a string body's state from the shared sets, else by the trie walk."""
        fit_mask = None
        lazy = self._lazy
        trans = self.dfa.transitions if lazy is None else _NO_ROWS  # (a lazy DFA's: read there)
        fast = _lexeme_walk(trans, self.table, s, lazy, self._char_memo, out, self._chain_memo)
        if fast is not None:
            fit_mask = fast[0]
        else:
            self._trie_row(s, trie, out, None)
        if self.dfa.is_accepting(s):
            eos = self.table.eos_ids
            np.bitwise_or.at(out, eos >> 5, np.left_shift(np.uint32(1), eos & 31))
        mask: I32 = out[: self.table.words].view(np.int32)
        if fit_mask is not None:
            mask |= fit_mask
        self._keep(s, mask, None)

    def _trie_row(
        self,
        s: int,
        trie: _accel.TokenTrie,
        out: npt.NDArray[np.uint32],
        ends: npt.NDArray[np.int32] | None,
    ) -> None:
        """Walk the token trie from ``s`` into ``out`` (and ``ends``), compiled."""
        # (the trie's arrays are not kept here: pickled, they are the vocabulary's)
        arrays = (trie.byte, trie.depth, trie.skip, trie.root_child, trie.node_tok)
        if self._lazy is not None and self._lazy.walk_trie(
            (*arrays, self._stack), s, out, self._no_ends if ends is None else ends
        ):  # compiled: the walk builds every row it reads, in one pass
            _accel.add_duplicates(trie, out, ends)
        else:
            _accel.walk_trie(trie, self.dfa.transitions, s, self._lazy, out, ends)

    def _keep(
        self, state: int, mask: I32, successors: list[int] | None, shared: bool = False
    ) -> None:
        """Keep ``state``'s row (``shared``: its mask is another row's, not counted again)."""
        self.nbytes += (0 if shared else mask.nbytes) + 64
        if self.nbytes > self.budget.max_bytes:
            self.budget.check_bytes(self.nbytes, "token index rows")
        row = StateRow(mask, self.dfa, self.vocab.tokens, state)
        if successors is not None:
            row.successors = successors
        self.rows[state] = row

    @property
    def computed_states(self) -> int:
        """How many states have their row computed."""
        return len(self.rows)
