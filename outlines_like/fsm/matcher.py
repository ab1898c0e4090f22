"""Compiled regex constraints and their matchers; also the free-text (unconstrained) case.

The rejection contract is the one written in :mod:`outlines_like.fsm._protocols`: a disallowed
token raises :class:`RejectedTokenError` and leaves the matcher unchanged; EOS is allowed
exactly in accepting states; a finished matcher allows only EOS.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from outlines_like.errors import ConstraintTooLargeError
from outlines_like.fsm._protocols import Compiled, RejectedTokenError
from outlines_like.fsm.budget import DEFAULT_BUDGET, Budget
from outlines_like.fsm.index import TokenIndex, pack_ids, token_table
from outlines_like.fsm.regex_dfa import ByteDFA, LazyByteDFA
from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["FreeTextCompiled", "FreeTextMatcher", "RegexCompiled", "RegexMatcher"]

I32 = npt.NDArray[np.int32]

# Compile time computes the rows of the cheapest DFA states whose candidate tokens add up to
# half the vocabulary: ~0.5-3 ms on 128k-152k vocabularies, and most regex walks then never
# compute a row during generation.
DEFAULT_PRECOMPUTE = 0.5


@functools.lru_cache(maxsize=16)
def _eos_row(eos_ids: tuple[int, ...], words: int) -> I32:
    """The packed row of the EOS ids, shared by a vocabulary's constraints (read-only).

    Packing a 128k-bit row costs ~10 us, a tenth of a small regex's first mask.
    """
    row = pack_ids(list(eos_ids), words)
    row.flags.writeable = False
    return row


def _check_out(out: npt.NDArray[np.int32], words: int) -> None:
    if out.dtype != np.int32 or out.size != words or out.shape[-1] != words:
        raise ValueError(
            f"fill_bitmask needs an int32 array of {words} words (shape ({words},) or "
            f"(1, {words})), got dtype {out.dtype} shape {out.shape}"
        )


class RegexCompiled(Compiled):
    """A regex compiled for one vocabulary: its byte DFA and lazily built token index.

    Args:
        dfa: The byte DFA.
        vocab: The vocabulary.
        lookahead: See :class:`TokenIndex`.
        eager_limit: See :class:`TokenIndex`.
        precompute: See :class:`TokenIndex`.
        budget: Limits on every later mask (time, lazy DFA states, bytes of rows); past them
            ``fill_bitmask``/``advance`` raise :class:`ConstraintTooLargeError`.
    """

    def __init__(
        self,
        dfa: ByteDFA | LazyByteDFA,
        vocab: Vocabulary,
        *,
        lookahead: int = 0,
        eager_limit: int = 0,
        precompute: float = DEFAULT_PRECOMPUTE,
        budget: Budget = DEFAULT_BUDGET,
    ) -> None:
        self.dfa = dfa
        self._vocab = vocab
        self.budget = budget
        self.index = TokenIndex(
            dfa,
            vocab,
            lookahead=lookahead,
            eager_limit=eager_limit,
            precompute=precompute,
            budget=budget,
        )
        words = vocab.mask_words
        self.eos_row: I32 = _eos_row(tuple(vocab.eos_token_ids), words)
        self.eos_ids = frozenset(vocab.eos_token_ids)
        self.words = words

    @property
    def vocabulary(self) -> Vocabulary:
        """The vocabulary the constraint was compiled for."""
        return self._vocab

    @property
    def pattern(self) -> str:
        """The regex."""
        return self.dfa.pattern

    @property
    def failed(self) -> ConstraintTooLargeError | None:
        """The budget error a mask raised, if any (the caches drop such a constraint)."""
        return self.index.failed

    @property
    def nbytes(self) -> int:
        """Bytes of the mask rows computed so far (what the compile cache bounds)."""
        return self.index.nbytes

    def matcher(self) -> RegexMatcher:
        """Return a fresh matcher at the start state."""
        return RegexMatcher(self)

    def __repr__(self) -> str:
        return f"RegexCompiled(states={self.dfa.n_states}, pattern={self.dfa.pattern[:60]!r})"


class RegexMatcher:
    """Walks a :class:`RegexCompiled` token by token (see the module's rejection contract)."""

    __slots__ = ("_c", "_finished", "_state")

    def __init__(self, compiled: RegexCompiled) -> None:
        self._c = compiled
        self._state = compiled.dfa.start
        self._finished = False

    @property
    def state(self) -> int:
        """The current DFA state."""
        return self._state

    def fill_bitmask(self, out: npt.NDArray[np.int32]) -> None:
        """Write the allowed-token bitmask into ``out`` (``(W,)``, ``(1, W)`` or a row view)."""
        c = self._c
        if out.size != c.words or out.dtype != np.int32:
            _check_out(out, c.words)
        out[...] = c.eos_row if self._finished else c.index.row(self._state).mask

    def allowed_token_ids(self) -> I32:
        """Return the allowed token ids, sorted (EOS included when the text is complete)."""
        c = self._c
        if self._finished:
            return np.array(sorted(c.eos_ids), dtype=np.int32)
        return c.index.row(self._state).ids(c.vocabulary.size)

    def advance(self, token_id: int) -> None:
        """Consume a token; raise :class:`RejectedTokenError` (state unchanged) if not allowed."""
        c = self._c
        if token_id in c.eos_ids:
            if self._finished or c.index.is_accepting(self._state):
                self._finished = True
                return
            raise RejectedTokenError(
                f"EOS token {token_id} rejected: the text is not complete for "
                f"{c.dfa.pattern[:80]!r}",
                token_id=token_id,
            )
        if self._finished:
            raise RejectedTokenError(
                f"token {token_id} rejected: the matcher is finished (only EOS is allowed)",
                token_id=token_id,
            )
        ns = c.index.row(self._state).next_state(int(token_id))
        if ns < 0:
            raise RejectedTokenError(
                f"token {token_id} ({_show(c.vocabulary, token_id)}) is not allowed here",
                token_id=token_id,
            )
        self._state = ns

    def is_finished(self) -> bool:
        """Return whether EOS has been accepted."""
        return self._finished

    def is_accepting(self) -> bool:
        """Return whether the text so far is complete (EOS would be accepted)."""
        return self._finished or self._c.index.is_accepting(self._state)

    def reset(self) -> None:
        """Go back to the start state."""
        self._state = self._c.dfa.start
        self._finished = False

    def copy(self) -> RegexMatcher:
        """Return an independent matcher in the same state."""
        m = RegexMatcher(self._c)
        m._state = self._state
        m._finished = self._finished
        return m


def _show(vocab: Vocabulary, token_id: int) -> str:
    if not 0 <= token_id < vocab.size:
        return f"outside the vocabulary of {vocab.size}"
    if token_id in vocab.special_token_ids:
        return "a special token"
    return repr(vocab.tokens[token_id])


class FreeTextCompiled(Compiled):
    """No constraint: every text token is allowed, EOS at any time, special tokens never."""

    def __init__(self, vocab: Vocabulary) -> None:
        self._vocab = vocab
        table = token_table(vocab)
        self.text_ids: I32 = np.sort(table.ids)
        self.all_ids: I32 = np.union1d(self.text_ids, table.eos_ids).astype(np.int32)
        self.row: I32 = pack_ids(self.all_ids, vocab.mask_words)
        self.eos_row: I32 = _eos_row(tuple(vocab.eos_token_ids), vocab.mask_words)
        self.eos_ids = frozenset(vocab.eos_token_ids)
        self.allowed = np.zeros(vocab.size, dtype=bool)
        self.allowed[self.text_ids] = True

    @property
    def vocabulary(self) -> Vocabulary:
        """The vocabulary."""
        return self._vocab

    def matcher(self) -> FreeTextMatcher:
        """Return a fresh matcher."""
        return FreeTextMatcher(self)


class FreeTextMatcher:
    """Matcher of :class:`FreeTextCompiled` (same rejection contract)."""

    __slots__ = ("_c", "_finished")

    def __init__(self, compiled: FreeTextCompiled) -> None:
        self._c = compiled
        self._finished = False

    def fill_bitmask(self, out: npt.NDArray[np.int32]) -> None:
        """Write the allowed-token bitmask into ``out``."""
        _check_out(out, self._c.vocabulary.mask_words)
        out[...] = self._c.eos_row if self._finished else self._c.row

    def allowed_token_ids(self) -> I32:
        """Return the allowed token ids, sorted."""
        if self._finished:
            return np.array(sorted(self._c.eos_ids), dtype=np.int32)
        ids: I32 = self._c.all_ids.copy()
        return ids

    def advance(self, token_id: int) -> None:
        """Consume a token; raise :class:`RejectedTokenError` if it is special or out of range."""
        c = self._c
        if token_id in c.eos_ids:
            self._finished = True
            return
        if self._finished or not 0 <= token_id < c.allowed.shape[0] or not c.allowed[token_id]:
            why = "the matcher is finished" if self._finished else _show(c.vocabulary, token_id)
            raise RejectedTokenError(f"token {token_id} rejected: {why}", token_id=token_id)

    def is_finished(self) -> bool:
        """Return whether EOS has been accepted."""
        return self._finished

    def reset(self) -> None:
        """Start again."""
        self._finished = False

    def copy(self) -> FreeTextMatcher:
        """Return an independent copy."""
        m = FreeTextMatcher(self._c)
        m._finished = self._finished
        return m
