"""A string's body in the grammar masker's lexical walks: the tokens that fit it, unwalked.

Inside a JSON string (or any lexeme whose state loops on most ASCII bytes and on every UTF-8
character) a token of whole characters whose ASCII bytes all loop ends where it started: that
set depends on the vocabulary and the looping bytes only, and the vocabulary keeps it
(:class:`~outlines_like.fsm._lexemes.CharSets`, JSON's built by ``prepare_vocabulary``).
:func:`~outlines_like.fsm._grammar_walk.lexeme_walk` then walks only the few thousand tokens
that do not fit (a quote, an escape, a control byte, a split character).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from outlines_like.fsm._grammar_walk import ByteTable

__all__ = ["BodySets", "body_key", "body_sets"]

IntArray = npt.NDArray[np.int64]

_MIN_BODY_BYTES = 64  # a start state that loops on this many ASCII bytes: a string's body
# the UTF-8 characters of 2 to 4 bytes: lead bytes, then each continuation byte (ranges)
_UTF8 = (
    ((0xC2, 0xDF), ((0x80, 0xBF),)),
    ((0xE0, 0xE0), ((0xA0, 0xBF), (0x80, 0xBF))),
    ((0xE1, 0xEC), ((0x80, 0xBF), (0x80, 0xBF))),
    ((0xED, 0xED), ((0x80, 0x9F), (0x80, 0xBF))),
    ((0xEE, 0xEF), ((0x80, 0xBF), (0x80, 0xBF))),
    ((0xF0, 0xF0), ((0x90, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    ((0xF1, 0xF3), ((0x80, 0xBF), (0x80, 0xBF), (0x80, 0xBF))),
    ((0xF4, 0xF4), ((0x80, 0x8F), (0x80, 0xBF), (0x80, 0xBF))),
)

#: A string body's token sets: given the ASCII bytes that loop on it (``bool[128]`` as bytes),
#: the packed row of the tokens of whole characters whose ASCII bytes all loop, and the ids
#: of the other text tokens (the vocabulary's :class:`~outlines_like.fsm._lexemes.CharSets`).
BodySets = Callable[[bytes], tuple[npt.NDArray[np.uint8], npt.NDArray[np.integer[Any]]]]


def body_key(canon: npt.NDArray[np.int32]) -> bytes | None:
    """The ASCII bytes that loop on state 0 (as ``bool[128]`` bytes) when it is a string's body.

    That is: many ASCII bytes loop on it, and every UTF-8 character of 2 to 4 bytes walks
    from it back to it. A token of whole characters whose ASCII bytes loop then ends in state
    0, unwalked. None otherwise.
    """
    loops = canon[0, :128] == 0
    if int(np.count_nonzero(loops)) < _MIN_BODY_BYTES:
        return None
    rows: list[list[int]] = canon.tolist()  # (sets of a few states: Python's, not np.unique)
    for (lead_lo, lead_hi), rest in _UTF8:
        states = set(rows[0][lead_lo : lead_hi + 1])
        for lo, hi in rest:
            if min(states) < 0:
                return None
            states = {target for state in states for target in rows[state][lo : hi + 1]}
        if states != {0}:
            return None
    key: bytes = loops.tobytes()
    return key


def body_sets(
    table: ByteTable, body: BodySets, key: bytes
) -> tuple[npt.NDArray[np.uint8] | None, IntArray | None]:
    """``body(key)``, with the tokens that do not fit longest first.

    Checked to split the text tokens of ``table`` in two; else ``(None, None)``: the caller
    walks them all.
    """
    fit, given = body(key)
    unfit: IntArray = np.asarray(given, dtype=np.int64)
    text = np.zeros(table.size, dtype=np.bool_)
    text[table.text_ids] = True
    fits = np.unpackbits(fit, bitorder="little")[: table.size].view(np.bool_)
    n_fit = int(np.count_nonzero(fits))
    if (
        len(fit) * 8 < table.size
        or n_fit + len(unfit) != len(table.text_ids)
        or (fits & ~text).any()
        or not text[unfit].all()
        or fits[unfit].any()
    ):
        return None, None
    return fit, unfit[np.argsort(-table.lengths[unfit], kind="stable")]  # longest first
