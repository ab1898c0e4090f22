r"""Lexeme-level token sets of one vocabulary, shared by every constraint compiled for it.

A string body (JSON's ``[^"\\\\\\x00-\\x1f]``, a free-text field, ``[^"]{0,40}``) lets every
non-ASCII character and one set ``O`` of ASCII bytes step the same way. Which tokens consist of
whole UTF-8 characters whose ASCII bytes all lie in ``O``, and how many characters each has,
depends on ``O`` and the vocabulary only. :class:`CharSets` holds that once per ``(vocabulary,
O)``: the fitting tokens, the rest (the few thousand tokens that cross the lexeme's boundary:
a quote, an escape, a control byte, a split character), and packed masks of the fitting tokens
up to ``k`` characters. A string-body state's mask is then one of those masks, OR-ed with the
walk of the rest (:func:`outlines_like.fsm.index.TokenIndex`).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading

import numpy as np
import numpy.typing as npt

from outlines_like.fsm._byte_strings import bytes_order, gather_bytes
from outlines_like.types._charset import utf8_byte_ranges

__all__ = [
    "NON_ASCII",
    "ChainTails",
    "CharSets",
    "LexemeCache",
    "SuffixTable",
    "TokenBytes",
    "WalkList",
    "column_layout",
    "utf8_valid_prefixes",
]

I32 = npt.NDArray[np.int32]


def _non_ascii_sequences() -> list[list[tuple[int, int]]]:
    out: list[list[tuple[int, int]]] = []
    for lo, hi in ((0x80, 0xD7FF), (0xE000, 0x10FFFF)):
        out.extend(utf8_byte_ranges(lo, hi))
    return out


NON_ASCII = _non_ascii_sequences()
"""Every non-ASCII character (no surrogate) as UTF-8 byte-range sequences, a range per byte:
what a character chain's every step takes besides its ASCII set ``O``."""

_MAX_SETS = 64  # byte sets kept per vocabulary (a JSON schema uses one or two)


def column_layout(
    tokens: tuple[bytes, ...], lengths: I32
) -> tuple[
    npt.NDArray[np.int64], list[npt.NDArray[np.uint8]], npt.NDArray[np.uint8], npt.NDArray[np.int64]
]:
    """The walk's column layout of ``tokens``, sorted by non-increasing ``lengths``.

    Returns ``active`` (``active[j]`` tokens have more than ``j`` bytes: a prefix of them),
    ``columns`` (``columns[j]``: byte ``j`` of those tokens), and the tokens end to end as
    ``flat`` bytes with ``offsets`` (token ``k`` is ``flat[offsets[k]:offsets[k + 1]]``: the
    compiled walk's layout).
    """
    flat = np.frombuffer(b"".join(tokens), dtype=np.uint8).copy()  # writable: numba takes it
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    active, columns = _columns(flat, offsets, lengths)
    return active, columns, flat, offsets


def _columns(
    flat: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], lengths: I32
) -> tuple[npt.NDArray[np.int64], list[npt.NDArray[np.uint8]]]:
    """:func:`column_layout`'s ``active`` and ``columns`` of tokens laid out end to end."""
    n = lengths.shape[0]
    max_len = int(lengths[0]) if n else 0
    active = n - np.searchsorted(lengths[::-1], np.arange(max_len + 1), "right")
    columns = [flat[offsets[: int(active[j])] + j] for j in range(max_len)]
    return active, columns


class CharSets:
    """The tokens of whole characters whose ASCII bytes lie in one set ``O``, for one vocabulary.

    Args:
        in_set: ``bool[128]``: the ASCII bytes of ``O``.
        complete: ``bool[n]``: per table position, the token is whole, valid UTF-8 characters.
        ascii_words: ``uint64[2, n]``: the ASCII byte values of each token.
        n_chars: ``int32[n]``: characters of each token.
        ids: ``int32[n]``: token id at each position.
        vocab_size: ``V``.
        layout: The tokens' bytes end to end (:class:`TokenBytes`, the vocabulary's, shared by
            its byte sets).

    Attributes:
        fit_pos: Ascending table positions of the fitting tokens.
        fit_chars: ``int32``: their characters, along ``fit_pos``.
        unfit: ``bool[n]``: positions that do not fit.
        unfit_pos: Ascending positions that do not fit.
        max_chars: The most characters of a fitting token (0 when none fits).
    """

    def __init__(
        self,
        in_set: npt.NDArray[np.bool_],
        complete: npt.NDArray[np.bool_],
        ascii_words: npt.NDArray[np.uint64],
        n_chars: I32,
        ids: I32,
        vocab_size: int,
        layout: TokenBytes,
    ) -> None:
        self._in_set = in_set
        self.layout = layout
        self._ids = ids
        self._suffixes: SuffixTable | None = None
        out = np.packbits(~in_set, bitorder="little").view(np.uint64)
        fits = complete & (((ascii_words[0] & out[0]) | (ascii_words[1] & out[1])) == 0)
        self.fit_pos: npt.NDArray[np.intp] = np.flatnonzero(fits)
        self.fit_chars: I32 = n_chars[self.fit_pos]
        self.unfit: npt.NDArray[np.bool_] = ~fits
        self.unfit_pos: npt.NDArray[np.intp] = np.flatnonzero(self.unfit)
        self.max_chars = int(self.fit_chars.max()) if self.fit_pos.shape[0] else 0
        # characters of each fitting token by token id; a sentinel past any count elsewhere
        by_id = np.full(vocab_size, np.iinfo(np.int32).max, dtype=np.int32)
        by_id[ids[self.fit_pos]] = self.fit_chars
        self._chars_by_id = by_id
        self._masks: dict[int, I32] = {}
        self._body_masks: dict[int, I32] = {}
        self._masks_lock = threading.Lock()
        self._words = (vocab_size + 31) // 32
        self._chain_tails: ChainTails | None = None
        self._longer: dict[int, WalkList] = {}
        # the fitting tokens by characters: mask_upto(k) adds those past a smaller k's mask
        # (16-bit keys: numpy's stable sort is then a radix sort, 0.3 ms instead of 1.7)
        keys = self.fit_chars.astype(np.int16) if self.max_chars < 1 << 15 else self.fit_chars
        by_chars = np.argsort(keys, kind="stable")
        self._ids_by_chars: I32 = ids[self.fit_pos[by_chars]]
        self._chars_sorted: I32 = self.fit_chars[by_chars]

    @property
    def n_fit(self) -> int:
        """How many tokens fit."""
        return int(self.fit_pos.shape[0])

    def mask_upto(self, k: int) -> I32:
        """Packed int32 mask (``ceil(V / 32)`` words) of the fitting tokens of at most ``k`` chars.

        Cached per ``k``; the caller must not write to it.
        """
        k = min(k, self.max_chars)
        mask = self._masks.get(k)
        if mask is not None:
            return mask
        # the sets are shared by every constraint of the vocabulary, in any thread: the masks
        # are read while others are added
        with self._masks_lock:
            return self._mask_upto(k)

    def _mask_upto(self, k: int) -> I32:
        mask = self._masks.get(k)
        if mask is None:
            flip = None
            if self._masks:
                # the nearest k' cached (a bounded string's positions ask for k, k - 1, ...):
                # its mask with the bits of the tokens of k' + 1 .. k characters (or of k + 1
                # .. k' going down) flipped, when they are few
                base = min(self._masks, key=lambda j: (abs(j - k), j))
                lo, hi = np.searchsorted(self._chars_sorted, sorted((base, k)), side="right")
                if hi - lo <= _MAX_FLIPS:
                    flip = self._ids_by_chars[lo:hi]
            if flip is not None:
                mask = _flipped(self._masks[base], flip)
            else:
                bits = np.zeros(self._words * 32, dtype=bool)
                bits[: self._chars_by_id.shape[0]] = self._chars_by_id <= k
                mask = np.packbits(bits, bitorder="little").view(np.int32)
            mask.flags.writeable = False
            self._masks[k] = mask
        return mask

    def body_mask(self, m: int, loop: bool) -> I32:
        """The tokens a compiled chain ``c0 .. cm`` decides alone: :meth:`mask_upto` and more.

        The fitting tokens of at most ``m`` characters (all of them on a ``loop``), and the
        :attr:`ChainTails.partial` ones (a token that ends inside a character) whose prefix
        leaves a step to take: ``pre < m``, or any on a loop. Such a token lives from any chain
        state that steps on, so the boundary walk skips their groups (``group_partial``)
        once this mask has them all. Cached per ``m``; the caller must not write to it.
        """
        tails = self.chain_tails()
        top = max(self.max_chars, int(tails.partial_pre[-1]) + 1 if tails.partial_pre.size else 0)
        key = -1 if loop else min(m, top)  # past ``top`` every m has the same mask
        mask = self._body_masks.get(key)
        if mask is not None:
            return mask
        base = self.mask_upto(self.max_chars if loop else key)
        with self._masks_lock:
            mask = self._body_masks.get(key)
            if mask is None:
                n = tails.partial_ids.shape[0] if loop else np.searchsorted(tails.partial_pre, key)
                ids = tails.partial_ids[:n]
                if ids.shape[0] == 0:  # nothing to add: the same (read-only) mask, no copy
                    mask = base
                else:
                    words = base.view(np.uint32).copy()
                    shifts = np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32))
                    np.bitwise_or.at(words, ids >> 5, shifts)
                    mask = words.view(np.int32)
                    mask.flags.writeable = False
                self._body_masks[key] = mask
            return mask

    def suffixes(self) -> SuffixTable:
        """The unfit tokens from the byte where they leave the lexeme (built once)."""
        sfx = self._suffixes
        if sfx is None:
            sfx = SuffixTable(self.layout, self.unfit_pos, self._ids, self._in_set)
            self._suffixes = sfx
        return sfx

    def chain_tails(self) -> ChainTails:
        """The unfit tokens from where they leave the lexeme, sorted by suffix (built once).

        Their partial characters are those of :data:`NON_ASCII` (see :class:`ChainTails`).
        """
        tails = self._chain_tails
        if tails is None:
            tails = ChainTails.of(self.suffixes(), NON_ASCII)
            self._chain_tails = tails
        return tails

    def longer(self, m: int) -> WalkList:
        """The tokens whose first ``m`` characters all fit and that have more (built per ``m``).

        Fitting tokens, and unfit ones with longer prefixes, each from its character ``m`` on:
        a range of the vocabulary's bytes (:attr:`layout`'s, not copied), to walk from a
        chain's ``cm``. :attr:`WalkList.start` is ``m``.
        """
        walk = self._longer.get(m)
        if walk is None:
            sfx = self.suffixes()
            pos = np.concatenate(
                [self.fit_pos[self.fit_chars > m], sfx.orig_pos[sfx.pre_chars > m]]
            )
            lay = self.layout
            walk = WalkList(
                lay.flat,
                (lay.offsets[pos] + lay.char_offsets(m)[pos]).astype(np.int64),
                lay.offsets[pos + 1].astype(np.int64),
                self._ids[pos].astype(np.int32),
                np.full(pos.shape[0], m, dtype=np.int32),
            )
            self._longer[m] = walk
        return walk


_MAX_FLIPS = 4096  # mask_upto: more tokens to flip than this, and a mask is built afresh
_FEW_FLIPS = 48  # fewer than this: flipped one by one


def _flipped(mask: I32, ids: I32) -> I32:
    """A copy of the packed ``mask`` with the bits of ``ids`` (distinct tokens) flipped."""
    if ids.shape[0] < _FEW_FLIPS:
        data = bytearray(mask.tobytes())  # bit i of the mask: bit i % 8 of byte i // 8
        for t in ids.tolist():
            data[t >> 3] ^= 1 << (t & 7)
        few: I32 = np.frombuffer(data, dtype=np.int32)
        return few
    words = mask.view(np.uint32).copy()
    np.bitwise_xor.at(words, ids >> 5, np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)))
    out: I32 = words.view(np.int32)
    return out


def utf8_valid_prefixes(tokens: tuple[bytes, ...] | list[bytes]) -> npt.NDArray[np.int64]:
    """Per token, the length of its longest prefix that decodes as UTF-8 (its length if whole).

    Where Python's decoder reports the first error: a token that starts inside a character,
    or ends inside one, has a shorter valid prefix.
    """
    valid = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    for p, tok in enumerate(tokens):
        if not tok.isascii():
            try:
                tok.decode("utf-8")
            except UnicodeDecodeError as exc:
                valid[p] = exc.start
    return valid


class TokenBytes:
    """A vocabulary's text tokens end to end, with per-byte facts computed once, in arrays.

    Token ``p`` is ``flat[offsets[p]:offsets[p + 1]]``. A byte starts a character when it is
    not a UTF-8 continuation byte (``10xxxxxx``); ``valid[p]`` is the length of the longest
    prefix of token ``p`` that decodes as UTF-8 (where Python's decoder reports the first
    error). The vocabulary's :class:`~outlines_like.fsm.index.TokenTable` builds it from its own
    arrays; every query is a few numpy passes, no loop over tokens.
    """

    def __init__(
        self,
        flat: npt.NDArray[np.uint8],
        offsets: npt.NDArray[np.int64],
        valid: npt.NDArray[np.int64],
    ) -> None:
        self.flat = flat
        self.offsets = offsets
        self.lengths: npt.NDArray[np.int64] = np.diff(offsets)
        self.valid = valid
        self.starts = (flat & 0xC0) != 0x80
        self.starts_before = np.zeros(flat.shape[0] + 1, dtype=np.int64)
        np.cumsum(self.starts, out=self.starts_before[1:])
        self._char_offsets: dict[int, npt.NDArray[np.int64]] = {}
        self._start_at: npt.NDArray[np.intp] | None = None

    @classmethod
    def of(cls, tokens: tuple[bytes, ...]) -> TokenBytes:
        """The layout of ``tokens``, in their order."""
        offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
        np.cumsum([len(t) for t in tokens], out=offsets[1:])
        flat = np.frombuffer(b"".join(tokens), dtype=np.uint8).copy()
        return cls(flat, offsets, utf8_valid_prefixes(tokens))

    def char_offsets(self, k: int) -> npt.NDArray[np.int64]:
        """Per token, the byte where its character ``k`` (from 0) starts (its length if none)."""
        out = self._char_offsets.get(k)
        if out is None:
            if self._start_at is None:
                self._start_at = np.flatnonzero(self.starts)  # every character start, ascending
            first = self.starts_before[self.offsets[:-1]]  # index of each token's first start
            has = np.flatnonzero(self.starts_before[self.offsets[1:]] - first > k)
            out = self.lengths.copy()
            out[has] = self._start_at[first[has] + k] - self.offsets[has]
            self._char_offsets[k] = out
        return out

    def first_outside(
        self, outside: npt.NDArray[np.bool_], pos: npt.NDArray[np.intp]
    ) -> npt.NDArray[np.int64]:
        """Per token of ``pos``: where its first byte ``b`` with ``outside[b]`` is, else its length.

        Only the bytes of those tokens are read (a new byte set's unfit tokens: ~6,000 of
        llama3's 128,000 for "a JSON string's body but ``@``", 0.3 ms where all the
        vocabulary's bytes took 2.6).
        """
        lengths = self.lengths[pos]
        data, offsets = gather_bytes(self.flat, self.offsets[pos], lengths)
        out: npt.NDArray[np.int64] = lengths.copy()
        at = np.flatnonzero(outside[data])
        if at.shape[0]:
            tok = np.searchsorted(offsets, at, side="right") - 1  # the owner, among ``pos``
            first = np.ones(at.shape[0], dtype=bool)
            first[1:] = tok[1:] != tok[:-1]  # ascending bytes: a token's first hit leads
            out[tok[first]] = at[first] - offsets[tok[first]]
        return out


@dataclasses.dataclass(frozen=True)
class WalkList:
    """Byte strings to walk, each from a state of its own (the compiled walk's list input).

    Attributes:
        flat: ``uint8``: the bytes, end to end.
        begin: ``int64``: where each item starts in ``flat``.
        end: ``int64``: where it ends (item ``q`` is ``flat[begin[q]:end[q]]``).
        ids: ``int32``: the token of each item.
        start: ``int32``: where each item starts (what it indexes is the caller's).
    """

    flat: npt.NDArray[np.uint8]
    begin: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    ids: I32
    start: I32


@dataclasses.dataclass(frozen=True)
class ChainTails:
    """The tokens that leave a lexeme, for the compiled walk from any character chain.

    :class:`SuffixTable`'s suffixes sorted by their bytes (equal ones side by side, so in runs
    of one first byte: the *groups*), each with the characters of its fitting prefix: a chain
    ``c0 .. cm`` walks suffix ``q`` from ``c[pre[q]]``. One table serves every chain on ``O``
    (every length, loop or not).

    Attributes:
        flat, begin, end, ids: the suffixes as a :class:`WalkList`'s.
        pre: ``int32``: characters of each token's fitting prefix.
        same: ``uint8``: 1 where a suffix has the previous one's bytes.
        partial: ``uint8``: 1 where a suffix is a proper prefix of a character of the chain's
            (it lives from any chain state that steps on: every such character does).
        group_byte: ``int32[G]``: the first byte of each group, ...
        group_lo: ``int64[G + 1]``: ... where each starts (group ``g`` is items
            ``group_lo[g] .. group_lo[g + 1] - 1``) ...
        group_pre: ``int32[2 * G]``: ... and the least and the most ``pre`` in it;
        group_partial: ``uint8[G]``: 1 where every item of the group is :attr:`partial`.
        max_pre: The largest of ``pre`` (-1 when there are none).
        partial_ids, partial_pre: ``int32``: the partial items' token ids and ``pre``, by
            ``pre`` (the mask of those that live from a chain: :meth:`CharSets.body_mask`).
    """

    flat: npt.NDArray[np.uint8]
    begin: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    ids: I32
    pre: I32
    same: npt.NDArray[np.uint8]
    partial: npt.NDArray[np.uint8]
    group_byte: I32
    group_lo: npt.NDArray[np.int64]
    group_pre: I32
    group_partial: npt.NDArray[np.uint8]
    max_pre: int
    partial_ids: I32
    partial_pre: I32

    @classmethod
    def of(cls, sfx: SuffixTable, characters: list[list[tuple[int, int]]]) -> ChainTails:
        """Sort ``sfx``'s suffixes by their bytes (by ``pre``, then position, among equal ones).

        ``characters``: the characters every chain step takes, as byte-range sequences (one
        range per byte), for :attr:`partial`.
        """
        n = sfx.lengths.shape[0]
        sfx_len = sfx.lengths.astype(np.int64)
        idx, same_bool, rows = bytes_order(sfx.flat, sfx.offsets[:-1], sfx_len, sfx.pre_chars)
        lengths = sfx_len[idx]
        first = sfx.first[idx].astype(np.int32)
        flat, offsets = gather_bytes(sfx.flat, sfx.offsets[idx], lengths)
        end = offsets[1:]
        rows = rows[idx]
        same = same_bool.view(np.uint8)
        partial = _proper_prefixes(rows, lengths, first, characters)
        pre = sfx.pre_chars[idx].astype(np.int32)
        starts = np.flatnonzero(np.r_[True, first[1:] != first[:-1]]) if n else first
        group_lo = np.r_[starts, n].astype(np.int64)
        group_pre = np.zeros(2 * starts.shape[0], dtype=np.int32)
        group_partial = np.zeros(starts.shape[0], dtype=np.uint8)
        if n:
            group_pre[0::2] = np.minimum.reduceat(pre, starts)
            group_pre[1::2] = np.maximum.reduceat(pre, starts)
            group_partial[:] = np.minimum.reduceat(partial, starts)
        ids = sfx.ids[idx].astype(np.int32)
        by_pre = np.flatnonzero(partial)
        by_pre = by_pre[np.argsort(pre[by_pre], kind="stable")]
        return cls(
            flat,
            end - lengths,
            end,
            ids,
            pre,
            same,
            partial,
            first[starts].astype(np.int32),
            group_lo,
            group_pre,
            group_partial,
            int(pre.max()) if n else -1,
            ids[by_pre],
            pre[by_pre],
        )


def _proper_prefixes(
    rows: npt.NDArray[np.uint8],
    lengths: npt.NDArray[np.int64],
    first: I32,
    characters: list[list[tuple[int, int]]],
) -> npt.NDArray[np.uint8]:
    """1 where byte string ``k`` (``rows[k, :lengths[k]]``) is a proper prefix of a character.

    ``characters``: byte-range sequences (a range per byte). A proper prefix is shorter than
    the longest character and starts with a first byte of a character of two bytes or more:
    most strings are out at once; the rest are checked per sequence, a column at a time.
    """
    partial = np.zeros(lengths.shape[0], dtype=np.uint8)
    longest = max((len(seq) for seq in characters), default=0)
    lowest = min((seq[0][0] for seq in characters if len(seq) > 1), default=256)
    cand = np.flatnonzero((lengths < longest) & (first >= lowest))
    for seq in characters:
        sel = cand[lengths[cand] < len(seq)]
        ok = np.ones(sel.shape[0], dtype=bool)
        for j, (lo, hi) in enumerate(seq[: rows.shape[1]]):
            col = rows[sel, j]
            ok &= (lengths[sel] <= j) | ((col >= lo) & (col <= hi))
        partial[sel[ok]] = 1
    return partial


class LexemeCache:
    """Per-vocabulary :class:`CharSets`, keyed by ``O`` (at most 64, oldest out first)."""

    def __init__(
        self,
        complete: npt.NDArray[np.bool_],
        ascii_words: npt.NDArray[np.uint64],
        n_chars: I32,
        ids: I32,
        vocab_size: int,
        layout: TokenBytes,
    ) -> None:
        self._args = (complete, ascii_words, n_chars, ids, vocab_size, layout)
        self._sets: dict[bytes, CharSets] = {}
        self._lock = threading.Lock()

    def chars(self, o_key: bytes) -> CharSets:
        """The :class:`CharSets` of ``O`` (``o_key``: ``bool[128]`` as bytes), built once."""
        with self._lock:
            sets = self._sets.get(o_key)
            if sets is None:
                sets = CharSets(np.frombuffer(o_key, dtype=np.bool_), *self._args)
                if len(self._sets) >= _MAX_SETS:
                    self._sets.pop(next(iter(self._sets)))
                self._sets[o_key] = sets
            return sets


class SuffixTable:
    r"""The tokens that do not fit a lexeme, cut where they leave it, in the walk's column layout.

    Every token of :attr:`CharSets.unfit_pos` is split into a prefix of whole characters that
    fit ``O`` (``pre_chars`` of them) and the rest, its suffix (at least one byte: the byte
    that leaves the lexeme). From a string-body state the prefix only steps the character
    chain, so a walk starts at the suffix: a token like ``"------\\n"`` dies on its first
    suffix byte instead of being walked byte column by byte column.

    Attributes:
        ids: ``int32``: token id at each position.
        orig_pos: positions in the vocabulary's token table.
        pre_chars: ``int32``: characters of each prefix.
        lengths: ``int32``: suffix lengths, non-increasing.
        first: ``uint8``: first byte of each suffix.
        active: ``active[j]`` positions have suffixes of more than ``j`` bytes.
        columns: ``columns[j]``: byte ``j`` of the suffixes of those positions.
        flat, offsets: the suffixes end to end (suffix ``k`` is
            ``flat[offsets[k]:offsets[k + 1]]``).
        tokens_by_pos: the suffixes as ``bytes``.
    """

    def __init__(
        self,
        layout: TokenBytes,
        unfit_pos: npt.NDArray[np.intp],
        ids: I32,
        in_set: npt.NDArray[np.bool_],
    ) -> None:
        # the cut: the first ASCII byte outside O, or the first byte that is not valid UTF-8
        outside = np.zeros(256, dtype=bool)
        outside[:128] = ~in_set
        cut = np.minimum(layout.first_outside(outside, unfit_pos), layout.valid[unfit_pos])
        start = layout.offsets[unfit_pos]
        pre_chars = layout.starts_before[start + cut] - layout.starts_before[start]
        lens = layout.lengths[unfit_pos] - cut
        order = np.lexsort((unfit_pos, -lens)) if lens.shape[0] else lens
        self.orig_pos: npt.NDArray[np.intp] = unfit_pos[order]
        self.ids: I32 = ids[self.orig_pos]
        self.pre_chars: I32 = pre_chars[order].astype(np.int32)
        self.lengths: I32 = lens[order].astype(np.int32)
        self.flat, self.offsets = gather_bytes(layout.flat, (start + cut)[order], lens[order])
        self.active, self.columns = _columns(self.flat, self.offsets, self.lengths)
        n = self.lengths.shape[0]
        self.first: npt.NDArray[np.uint8] = self.columns[0] if n else np.zeros(0, dtype=np.uint8)

    @property
    def tokens_by_pos(self) -> tuple[bytes, ...]:
        """The suffixes as ``bytes`` (made on each call: for tests and inspection)."""
        data = self.flat.tobytes()
        return tuple(data[a:b] for a, b in itertools.pairwise(self.offsets.tolist()))
