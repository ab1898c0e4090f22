r"""Chains that stay the same for a token's length: states inside a long counted repetition.

A bounded string (``"[^"\\]{0,200}"``) becomes one NFA copy of its character per position
(:attr:`~outlines_like.fsm._regex_nfa.NFA.repeats`), so the lazy DFA has a state per position
and a string body's chain (:mod:`outlines_like.fsm._accel_chain`) steps through them one by
one, as far as the vocabulary's longest token: ~9 new states a step, ~800 us for the 128
steps of llama3 at a 200-character string's first position, and ~100 us more at each later
one. Far from the repetition's last copy, though, one more position changes nothing a token
can see: no token is long enough to reach the end.

Let ``sigma`` move each NFA state of the repetition's copies to the same state one copy on
(``+ width``) and leave every other state where it is. When the chain steps ``c1 -> c2`` with
``c2 = sigma(c1)`` (as sets of NFA states), the states outside the copies in ``c1`` take no
byte a chain character can start or continue with, and ``c1``'s copies end at least one
token's length (in bytes; every copy takes a byte at least) plus two before the last copy,
then the chain goes on ``c(p+1) = sigma(cp)`` as far as any token reaches, and a byte string
of at most that length lives from ``cp`` exactly when it lives from ``c1``: a path from
``cp`` is a path from ``c1`` moved ``p - 1`` copies on up to where it leaves the copies
(every copy's start may leave them, to one end state), and the same after. So ``c1`` is a
*loop* as far as tokens can tell (:meth:`RepeatShift.loops`): the chain stops there, every
token of the chain's characters fits, and the boundary tokens are walked from ``c1`` alone.
The masks are the ones the full chain gives (the tests compare them on real vocabularies).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from outlines_like.fsm._regex_nfa import NFA

__all__ = ["RepeatShift"]

I32 = npt.NDArray[np.int32]


class RepeatShift:
    """The long repetitions of one NFA, and the loop test over its DFA's states.

    Args:
        nfa: The NFA (its :attr:`~outlines_like.fsm._regex_nfa.NFA.repeats`).
        reach: The longest token, in bytes.
    """

    def __init__(self, nfa: NFA, reach: int) -> None:
        reps = nfa.repeats
        reps = reps[reps[:, 2] >= reach + 3]  # (shorter ones: every copy is near the last)
        self.reach = reach
        self._nfa = nfa
        # per long repetition (plain ints: read per first visit of a string-body state)
        self._base: list[int] = reps[:, 0].tolist()
        self._width: list[int] = reps[:, 1].tolist()
        self._k: list[int] = reps[:, 2].tolist()
        self._span = [w * k for w, k in zip(self._width, self._k, strict=True)]
        self._of: array[int] | None = None  # each NFA state's innermost one (-1: none)

    @classmethod
    def of(cls, nfa: NFA, reach: int) -> RepeatShift | None:
        """The test for ``nfa``, or ``None`` when it has no repetition long enough for it."""
        shift = cls(nfa, reach)
        return shift if shift._base else None

    def _owner(self) -> array[int]:
        of = self._of
        if of is None:
            owner = np.full(self._nfa.n, -1, dtype=np.int32)
            spans = self._span
            for r in sorted(range(len(spans)), key=lambda r: -spans[r]):  # outer ones first
                owner[self._base[r] : self._base[r] + spans[r]] = r
            of = self._of = array("i", owner.tobytes())
        return of

    def _place(self, states: Sequence[int]) -> tuple[int, int, int, int] | None:
        """Where ``states`` sit: ``(base, width, end, first)``, else ``None``.

        The innermost long repetition with states of ``states`` in its copies (the others'
        states are left in place): its blocks ``base .. end - 1`` of ``width`` states, and
        the first copy ``states`` are in; ``None`` when there is none, or a token could reach
        its last copies from them.
        """
        of, spans = self._owner(), self._span
        r = -1
        for s in states:
            x = of[s]
            if x >= 0 and x != r and (r < 0 or spans[x] < spans[r]):
                r = x
        if r < 0:
            return None
        base, width, k = self._base[r], self._width[r], self._k[r]
        end = base + spans[r]
        first, last = k, -1
        for s in states:
            if base <= s < end:
                j = (s - base) // width
                first, last = min(first, j), max(last, j)
        if last + self.reach + 2 > k - 1:
            return None  # a token could reach the last copies
        return base, width, end, first

    def key(self, states: Sequence[int]) -> tuple[int, ...] | None:
        """A key equal for two DFA states whose masks are equal by the shift, else ``None``.

        ``states``: the DFA state's NFA states, sorted. Two states with the same key are one
        ``sigma`` power apart, both with their copies a token's length and more before the
        repetition's last copy: every byte string of at most :attr:`reach` bytes lives from
        both or from neither (the module's argument), and both are accepting or neither
        (the final state is outside the copies).
        """
        place = self._place(states)
        if place is None:
            return None
        base, width, end, first = place
        shift = first * width
        return (base, *sorted(s - shift if base <= s < end else s for s in states))

    def loops(
        self, subset: Callable[[int], Sequence[int]], c1: int, c2: int, step_bytes: bytes
    ) -> bool:
        """Whether DFA state ``c1`` of a chain is a loop as tokens can tell.

        ``subset``: a DFA state's NFA states, sorted; ``c2``: the state the chain steps to
        from ``c1``; ``step_bytes``: the ASCII bytes that step it (``bool[128]`` as bytes;
        every non-ASCII character does too).
        """
        first = subset(c1)
        place = self._place(first)
        if place is None:
            return False
        base, width, end, _ = place
        moved: list[int] = []
        outside: list[int] = []
        for s in first:
            if base <= s < end:
                moved.append(s + width)
            else:
                outside.append(s)
        if sorted(moved + outside) != list(subset(c2)):
            return False
        nfa = self._nfa
        for s in outside:  # no chain byte may lead anywhere from outside the copies
            for e in range(nfa.off[s], nfa.off[s + 1]):
                lo, hi = nfa.lo[e], nfa.hi[e]
                if hi >= 0x80 or any(step_bytes[lo : hi + 1]):
                    return False
        return True
