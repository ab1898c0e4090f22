"""Vectorised walks of many (token, byte offset) pairs through one byte DFA (grammar masker).

The grammar masker needs more than "does this token survive the DFA": where a token's bytes stop
fitting the current lexeme, the lexeme may end there and the rest of the token starts a new one.
:func:`walk` therefore reports, for every item, either the state it ends in (all bytes consumed)
or the offset of the first byte with no transition and the state just before it.

With the ``accel`` extra (:mod:`outlines_like.fsm._accel`), the same walks run compiled, with
the same outputs: the whole vocabulary as one walk of its token trie (a dead byte after an
accepting state reports its subtree's tokens as stopped there), a list of items in a loop,
and the matcher DFA's walk (:func:`matcher_walk`) item by item until a row not built yet.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from outlines_like.fsm import _accel
from outlines_like.fsm._grammar_body import BodySets, body_key, body_sets

if TYPE_CHECKING:
    from outlines_like.fsm.vocabulary import Vocabulary

__all__ = [
    "ByteTable",
    "LexemeWalk",
    "WalkResult",
    "byte_table",
    "groups_by_key",
    "lexeme_walk",
    "matcher_walk",
    "pack",
    "rest_order",
    "rows_by_state",
    "sub_dfa",
    "walk",
]

_CACHE_KEY = "fsm.grammar.byte_table"
_MIN_LOOP_BYTES = 8  # try the self-loop shortcut when this many bytes loop on the start state

IntArray = npt.NDArray[np.int64]
AnyInts = npt.NDArray[np.integer[Any]]


@dataclasses.dataclass(frozen=True, eq=False)
class ByteTable:
    """The vocabulary's bytes laid out for column-wise numpy walks (the grammar masker's layout).

    Token ids index it directly (one flat byte buffer with offsets), unlike
    :class:`~outlines_like.fsm.index.TokenTable`, which keeps only the text tokens, sorted by
    length, for the regex index's walks.

    Attributes:
        buf: Every token's bytes, concatenated (uint8).
        starts: Offset of each token id in ``buf``.
        lengths: Byte length of each token id; special and empty tokens count as 0 (never walked).
        text_ids: The ids of the walkable tokens (non-special, non-empty), longest first.
        size: Number of token ids.
        byte_sets: ``uint64[V, 4]``: the set of bytes each token contains, as a 256-bit mask.
        text_byte_sets: ``byte_sets[text_ids]`` transposed (``uint64[4, len(text_ids)]``), so
            that a walk of all the text tokens tests them word by word, without a gather.
        text_first: The first byte of each text token: a walk of all the text tokens takes
            its first column from it, and gathers only for the tokens that survive it.
        text_pos: The position of each token id in ``text_ids`` (-1 for the others): the
            compiled walk reports tokens, :func:`walk` positions.
    """

    buf: npt.NDArray[np.uint8]
    starts: IntArray
    lengths: IntArray
    text_ids: IntArray
    size: int
    byte_sets: npt.NDArray[np.uint64]
    text_byte_sets: npt.NDArray[np.uint64]
    text_first: npt.NDArray[np.uint8]
    text_pos: IntArray


def byte_table(vocab: Vocabulary) -> ByteTable:
    """Return the :class:`ByteTable` of ``vocab`` (built once, cached on the vocabulary)."""
    cached = vocab._cache.get(_CACHE_KEY)
    if isinstance(cached, ByteTable):
        return cached
    tokens = vocab.tokens
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    starts = np.zeros(len(tokens), dtype=np.int64)
    if len(tokens) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    # one spare byte so that a gather at the end of the buffer never goes out of range (a
    # copy: the compiled walk takes writable arrays only)
    buf = np.frombuffer(b"".join(tokens) + b"\0", dtype=np.uint8).copy()
    walk_lengths = lengths.copy()
    if vocab.special_token_ids:
        walk_lengths[np.fromiter(vocab.special_token_ids, dtype=np.int64)] = 0
    ids = np.flatnonzero(walk_lengths > 0)
    ids = ids[np.argsort(-walk_lengths[ids], kind="stable")]
    owner = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
    data = buf[:-1].astype(np.int64)
    byte_sets = np.zeros((len(tokens), 4), dtype=np.uint64)
    np.bitwise_or.at(
        byte_sets, (owner, data >> 6), np.left_shift(np.uint64(1), (data & 63).astype(np.uint64))
    )
    text_byte_sets = np.ascontiguousarray(byte_sets[ids].T)
    text_pos = np.full(len(tokens), -1, dtype=np.int64)
    text_pos[ids] = np.arange(len(ids), dtype=np.int64)
    table = ByteTable(
        buf,
        starts,
        walk_lengths,
        ids.astype(np.int64),
        len(tokens),
        byte_sets,
        text_byte_sets,
        buf[starts[ids]],
        text_pos,
    )
    vocab._cache[_CACHE_KEY] = table
    return table


@dataclasses.dataclass(frozen=True, eq=False)
class WalkResult:
    """What :func:`walk` found for each item (items are positions in the input arrays).

    Attributes:
        end_items: Items whose remaining bytes were all consumed.
        end_states: The state each of those ended in.
        stop_items: Items that hit a byte with no transition.
        stop_offsets: The offset (in the token) of that byte.
        stop_states: The state before that byte.
    """

    end_items: IntArray
    end_states: IntArray
    stop_items: IntArray
    stop_offsets: IntArray
    stop_states: IntArray


_EMPTY = np.zeros(0, dtype=np.int64)


def walk(
    table: ByteTable,
    flat_transitions: npt.NDArray[np.int32],
    start: int,
    ids: npt.NDArray[np.integer[Any]],
    offsets: npt.NDArray[np.integer[Any]] | None = None,
    *,
    accepting: npt.NDArray[np.bool_] | None = None,
    trie: _accel.TokenTrie | None = None,
) -> WalkResult:
    """Walk each token ``ids[i]`` from byte ``offsets[i]`` through a DFA, starting in ``start``.

    Args:
        table: The vocabulary's :class:`ByteTable`.
        flat_transitions: The DFA's ``int32[n_states * 256]`` table (``-1`` = no transition).
        start: The state every item starts in.
        ids: Token ids (int64).
        offsets: Byte offset to start from in each token (``None``: 0). Items with no byte
            left end in ``start``.
        accepting: When given, only stops in an accepting state are reported (the others are
            of no use to the caller and cost time on the whole vocabulary).
        trie: The vocabulary's token trie (the ``accel`` extra), with ``accepting``: a walk
            of the whole vocabulary (``ids`` is ``table.text_ids``, no offsets) is then one
            compiled trie walk, any other one a compiled loop over the items (same items, not
            in the same order).

    Returns:
        The items split into those that consumed all their bytes and those that stopped.
    """
    if trie is not None and offsets is None and ids is table.text_ids and accepting is not None:
        end_tok, end_state, stop_tok, stop_off, stop_state = _accel.walk_lexer(
            trie, flat_transitions, accepting, start
        )
        return WalkResult(
            table.text_pos[end_tok],
            end_state.astype(np.int64),
            table.text_pos[stop_tok],
            stop_off.astype(np.int64),
            stop_state.astype(np.int64),
        )
    if trie is not None and accepting is not None:  # a list of items: a compiled loop
        starts = table.starts[ids]
        begin = starts if offsets is None else starts + offsets
        end_item, end_state, stop_item, stop_pos, stop_state = _accel.walk_lexer_list(
            flat_transitions, accepting, start, table.buf, begin, starts + table.lengths[ids]
        )
        return WalkResult(
            end_item.astype(np.int64),
            end_state.astype(np.int64),
            stop_item.astype(np.int64),
            stop_pos - starts[stop_item],
            stop_state.astype(np.int64),
        )
    end_items: list[IntArray] = []
    end_states: list[IntArray] = []
    stop_items: list[IntArray] = []
    stop_offsets: list[IntArray] = []
    stop_states: list[IntArray] = []
    row = flat_transitions[start * 256 : start * 256 + 256]
    loops = row == start
    if (
        offsets is None
        and ids is table.text_ids
        and np.count_nonzero(loops) < _MIN_LOOP_BYTES
        and accepting is not None
        and not accepting[start]
    ):
        # the whole vocabulary, no stop to report at its first byte: the first column from
        # the first bytes, then gathers for the few tokens that survive it only
        first = row.take(table.text_first)
        items = np.flatnonzero(first >= 0)
        pos = table.starts.take(ids.take(items)) + 1
        state = first.take(items)
        remaining = table.lengths.take(ids.take(items)) - 1
    else:
        starts = table.starts[ids]
        base = starts if offsets is None else starts + offsets
        end = starts + table.lengths[ids]
        # column 0: one state for all, so one row lookup; most tokens die here
        items = np.arange(len(ids), dtype=np.int64)
        # tokens made only of bytes that loop on `start` end there (most tokens, inside a
        # string): set them aside with one test on their byte sets
        if offsets is None and np.count_nonzero(loops) >= _MIN_LOOP_BYTES:
            outside = np.packbits(~loops, bitorder="little").view(np.uint64)
            if ids is table.text_ids:  # the whole vocabulary: no gather
                words = table.text_byte_sets
                hits = (words[0] & outside[0]) | (words[1] & outside[1])
                hits |= (words[2] & outside[2]) | (words[3] & outside[3])
                inside = hits == 0
            else:
                inside = ~((table.byte_sets[ids] & outside) != 0).any(axis=1)
            if inside.any():
                end_items.append(items[inside])
                end_states.append(np.full(int(inside.sum()), start, dtype=np.int64))
                keep = ~inside
                items, base, end = items[keep], base[keep], end[keep]
        done = base >= end
        if done.any():
            end_items.append(items[done])
            end_states.append(np.full(int(done.sum()), start, dtype=np.int64))
            keep = ~done
            items, base, end = items[keep], base[keep], end[keep]
        state = row.take(table.buf.take(base))
        live = state >= 0
        if accepting is None or accepting[start]:
            dead = ~live
            stop_items.append(items[dead])
            stop_offsets.append(base[dead] - table.starts[ids[items[dead]]])
            stop_states.append(np.full(len(stop_items[-1]), start, dtype=np.int64))
        items, pos, state = items[live], base[live] + 1, state[live]
        remaining = end[live] - pos
    # Longest rest first (the callers' order already, checked): the items done at a column are
    # then a suffix, cut off by one binary search instead of a mask over all the items.
    if len(remaining) > 1 and (remaining[1:] > remaining[:-1]).any():
        order = np.argsort(-remaining, kind="stable")
        items, pos, state, remaining = items[order], pos[order], state[order], remaining[order]
    neg_remaining = -remaining
    buf = table.buf
    column = 0
    while len(items):
        cut = int(np.searchsorted(neg_remaining, -column, side="left"))
        if cut < len(items):
            end_items.append(items[cut:])
            end_states.append(state[cut:].astype(np.int64))
            items, pos, neg_remaining, state = (
                items[:cut],
                pos[:cut],
                neg_remaining[:cut],
                state[:cut],
            )
            if not cut:
                break
        nxt = flat_transitions.take(state * 256 + buf.take(pos + column))
        dead = nxt < 0
        if dead.any():
            report = dead if accepting is None else dead & accepting[state]
            if report.any():
                stop_items.append(items[report])
                stop_offsets.append(pos[report] + column - table.starts[ids[items[report]]])
                stop_states.append(state[report].astype(np.int64))
            keep = ~dead
            items, pos, neg_remaining, nxt = (
                items[keep],
                pos[keep],
                neg_remaining[keep],
                nxt[keep],
            )
        state = nxt
        column += 1
    return WalkResult(
        _cat(end_items),
        _cat(end_states),
        _cat(stop_items),
        _cat(stop_offsets),
        _cat(stop_states),
    )


def _cat(parts: list[IntArray]) -> IntArray:
    if not parts:
        return _EMPTY
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts)


_LEXEME_KEY = "fsm.grammar.lexeme_walks"
_MAX_SUB_STATES = 48  # sub-DFAs this small are shared by key (inside a string, a number ...)
_MAX_LEXEME_WALKS = 256  # per vocabulary; each holds a few packed rows and the stopped tokens


@dataclasses.dataclass(frozen=True, eq=False)
class LexemeWalk:
    """The whole vocabulary walked through a small sub-DFA, in the sub-DFA's canonical numbering.

    What a token does inside a lexeme depends only on the part of the lexer DFA reachable from
    the state it starts in. Numbered canonically (breadth first, by byte), that part is the
    same automaton wherever the same lexeme goes on (inside a JSON string in every grammar and
    schema, say), so the walk is computed once per vocabulary and shared.

    Attributes:
        end_rows: Per state where tokens end inside the lexeme: that state and the packed row
            of those tokens.
        stops: Per accepting state where tokens stop (a byte with no transition): that state,
            the tokens and the offset of that byte, longest rest first.
        rests: What the grammar masker derives from ``stops`` once per vocabulary (the rests
            of those tokens as a trie, by state: ``CompiledGrammar._lexeme_row``).
    """

    end_rows: list[tuple[int, npt.NDArray[np.uint8]]]
    stops: list[tuple[int, npt.NDArray[np.int32], npt.NDArray[np.int32]]]
    rests: dict[int, Any] = dataclasses.field(default_factory=dict)


def sub_dfa(rows: Sequence[Sequence[int]], start: int) -> list[int] | None:
    """The states reachable from ``start``, breadth first by byte; None past a few dozen."""
    order = [start]
    seen = {start}
    i = 0
    while i < len(order):
        row = rows[order[i]]
        i += 1
        distinct = set(row)  # (a row's few distinct targets, told in C)
        distinct.discard(-1)
        if distinct <= seen:  # nothing new (most rows of a small sub-DFA)
            continue
        for target in row:
            if target >= 0 and target not in seen:
                if len(order) >= _MAX_SUB_STATES:
                    return None
                seen.add(target)
                order.append(target)
    return order


def lexeme_walk(
    vocab: Vocabulary,
    table: ByteTable,
    transitions: npt.NDArray[np.int32],
    accepting: npt.NDArray[np.bool_],
    order: list[int],
    trie: _accel.TokenTrie | None = None,
    body: BodySets | None = None,
) -> LexemeWalk:
    """The walk of every text token from ``order[0]`` through the sub-DFA on ``order``.

    Cached on the vocabulary by the sub-DFA's canonical form (see :class:`LexemeWalk`); the
    states it reports are positions in ``order``. A string's body with ``body`` given walks
    only the tokens that do not fit it, a few thousand (:mod:`._grammar_body`).
    """
    remap = np.full(transitions.shape[0], -1, dtype=np.int32)
    remap[order] = np.arange(len(order), dtype=np.int32)
    sub = transitions[order]
    canon = np.where(sub >= 0, remap[sub], -1).astype(np.int32)
    canon_accepting = np.ascontiguousarray(accepting[order])
    key = canon.tobytes() + canon_accepting.tobytes()
    cache: dict[bytes, LexemeWalk] = vocab._cache.setdefault(_LEXEME_KEY, {})
    found = cache.get(key)
    if found is not None:
        return found
    ids = table.text_ids
    flat = canon.reshape(-1)
    end_ids: AnyInts
    end_states: AnyInts
    stop_ids: AnyInts
    stop_offsets: AnyInts
    stop_states: AnyInts
    string_body = body_key(canon) if body is not None else None
    fit, unfit = (
        (None, None) if body is None or string_body is None else body_sets(table, body, string_body)
    )
    if fit is not None and unfit is not None:
        res = walk(table, flat, 0, unfit, accepting=canon_accepting, trie=trie)
        end_ids, end_states = unfit[res.end_items], res.end_states
        stop_ids, stop_offsets = unfit[res.stop_items], res.stop_offsets
        stop_states = res.stop_states
    elif trie is not None:  # token ids straight from the trie, no round trip through positions
        end_ids, end_states, stop_ids, stop_offsets, stop_states = _accel.walk_lexer(
            trie, flat, canon_accepting, 0
        )
    else:
        res = walk(table, flat, 0, ids, accepting=canon_accepting)
        end_ids, end_states = ids[res.end_items], res.end_states
        stop_ids, stop_offsets, stop_states = ids[res.stop_items], res.stop_offsets, res.stop_states
    end_rows = rows_by_state(end_ids, end_states, table.size)
    if fit is not None:  # the fitting tokens end where they started
        rows = dict(end_rows)
        rows[0] = fit | rows[0] if 0 in rows else fit.copy()
        end_rows = sorted(rows.items())
    stops = groups_by_key(stop_states, stop_ids, stop_offsets, table.lengths)
    found = LexemeWalk(end_rows, stops)
    if len(cache) >= _MAX_LEXEME_WALKS:
        cache.pop(next(iter(cache)))
    cache[key] = found
    return found


def rest_order(neg_rest: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.intp]:
    """The stable order of items by ``offset - length`` (longest rest first).

    The keys are small (minus a token's length at most): as int16 they sort by radix, in
    linear time, where a compiled walk's items (trie order) would cost a merge sort.
    """
    if len(neg_rest) and int(neg_rest.min()) > -32768:
        neg_rest = neg_rest.astype(np.int16)
    return np.argsort(neg_rest, kind="stable")


def rows_by_state(
    ids: AnyInts, states: AnyInts, size: int
) -> list[tuple[int, npt.NDArray[np.uint8]]]:
    """Per distinct state (ascending), the packed row (:func:`pack`) of the ``ids`` ending there.

    Compiled with the ``accel`` extra (one pass), else a boolean row per state.
    """
    if _accel.enabled() and len(ids):
        from outlines_like.fsm import _accel_grammar

        words = -(-size // 32)
        present, flat = _accel_grammar.pack_rows(
            np.ascontiguousarray(ids, dtype=np.int32),
            np.ascontiguousarray(states, dtype=np.int32),
            words,
        )
        rows = flat.view(np.uint8).reshape(len(present), words * 4)
        return list(zip(present.tolist(), rows, strict=True))
    out = []
    for state in _distinct(states):
        bits = np.zeros(size, dtype=np.bool_)
        bits[ids[states == state]] = True
        out.append((state, pack(bits)))
    return out


def groups_by_key(
    keys: AnyInts, ids: AnyInts, offsets: AnyInts, lengths: IntArray
) -> list[tuple[int, npt.NDArray[np.int32], npt.NDArray[np.int32]]]:
    """Per distinct key (ascending), its items' ids and offsets, longest rest first (stable).

    The order of :func:`rest_order` within each key, from one sort of all the items. With the
    ``accel`` extra, the walks that take the groups on take items in any order (the numpy
    walks sort what they get): the items are grouped by key only, in their order, and a
    single key (the common case) costs no sort at all.
    """
    if not len(keys):
        return []
    high = int(keys.max())
    if _accel.enabled():
        if high == int(keys.min()):
            return [(high, ids.astype(np.int32), offsets.astype(np.int32))]
        order = np.argsort(keys, kind="stable")
    else:
        neg_rest = offsets - lengths[ids]
        low = int(neg_rest.min())
        span = int(neg_rest.max()) - low + 1
        if (high + 1) * span <= 1 << 16:  # one key of 16 bits: a radix sort
            order = np.argsort((keys * span + (neg_rest - low)).astype(np.uint16), kind="stable")
        else:
            order = np.lexsort((neg_rest, keys))
    sorted_keys = keys[order]
    sorted_ids: npt.NDArray[np.int32] = ids[order].astype(np.int32)
    sorted_offsets: npt.NDArray[np.int32] = offsets[order].astype(np.int32)
    cuts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(sorted_keys)]
    return [
        (int(sorted_keys[a]), sorted_ids[a:b], sorted_offsets[a:b])
        for a, b in itertools.pairwise(bounds)
    ]


def _distinct(values: AnyInts) -> list[int]:
    """The distinct values of an array of small non-negative ints (no sort)."""
    if not len(values):
        return []
    distinct: list[int] = np.flatnonzero(np.bincount(values)).tolist()
    return distinct


def pack(bits: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    """Pack a boolean row into the bytes of ``ceil(V / 32)`` little-endian int32 words."""
    packed = np.packbits(bits, bitorder="little")
    out = np.zeros(-(-len(bits) // 32) * 4, dtype=np.uint8)
    out[: len(packed)] = packed
    return out


class MatcherRows(Protocol):
    """The grammar's lazily built matcher DFA, as :func:`matcher_walk` uses it.

    ``trans`` is its flat table (0: sink, 1: needs the stack's bottom, -2: row not built);
    ``_expand`` builds a state's row.
    """

    trans: npt.NDArray[np.int32]

    def _expand(self, sid: int) -> None: ...


#: Finishes items byte by byte in Python: ``(ids, positions, states, pending)`` to their ids
#: and end states (the matcher DFA's ``_walk_tail``).
TailWalk = Callable[
    [npt.NDArray[np.int32], IntArray, IntArray, list[tuple[int, int, int]]],
    tuple[npt.NDArray[np.int32], IntArray],
]


def matcher_walk(
    dfa: MatcherRows,
    table: ByteTable,
    ids: npt.NDArray[np.int32],
    pos: IntArray,
    starts: IntArray,
    pending: list[tuple[int, int, int]],
    tail: int,
    finish: TailWalk,
) -> IntArray:
    """The matcher DFA's walk in the compiled kernel (``accel``): each item's end state (0: dead).

    Item ``i`` is token ``ids[i]`` from byte ``pos[i]`` of ``table.buf``, from ``starts[i]``.
    Items stuck at an unbuilt row resume once its row is built; when ``tail`` or fewer are
    left, those alone at theirs go to ``finish`` instead (a row costs more than a
    few parser steps unless items share it, as in the numpy walk's tail). Items whose next
    byte needs the stack's bottom go to ``pending`` as ``(token, offset, state before it)``.
    """
    out = np.zeros(len(ids), dtype=np.int64)
    items = np.arange(len(ids), dtype=np.int64)
    end = table.starts[ids] + table.lengths[ids]
    states = starts.astype(np.int32)
    while len(items):
        ends, stops = _accel.walk_matcher(dfa.trans, table.buf, pos, end, states)
        out[items] = ends
        if len(stops.deep):
            deep_ids = ids[items[stops.deep]]
            offsets = stops.deep_pos - table.starts[deep_ids]
            pending.extend(
                zip(deep_ids.tolist(), offsets.tolist(), stops.deep_state.tolist(), strict=True)
            )
        items, pos, end = items[stops.stuck], stops.stuck_pos, end[stops.stuck]
        states = stops.stuck_state
        if not len(items):
            break
        # a row pays for items that share it; a lone item steps on in Python (few left)
        counts = np.bincount(states)
        alone = counts[states] == 1 if len(items) <= tail else None
        if alone is not None and alone.any():
            out[items[alone]] = finish(
                ids[items[alone]], pos[alone], states[alone].astype(np.int64), pending
            )[1]
            keep = ~alone
            items, pos, end, states = items[keep], pos[keep], end[keep], states[keep]
        for sid in _distinct(states.astype(np.int64)):
            dfa._expand(sid)
    return out
