"""The interface every compiled constraint and matcher of the masker shares (regex and grammar).

Rejection contract (the same for every matcher):

* ``advance(token_id)`` raises :class:`RejectedTokenError` (a ``ValueError``) when the token is
  not allowed in the current state; the matcher's state is then left unchanged, so the caller
  may try another token.
* A token id outside ``[0, vocab_size)`` raises :class:`RejectedTokenError` too.
* EOS is allowed exactly when the text so far is complete. Advancing with EOS finishes the
  matcher; a finished matcher allows only the EOS tokens (so a batched sampler always has one
  finite logit), and advancing it with EOS again is a no-op. Any other token is rejected.
* Special tokens (``Vocabulary.special_token_ids``) other than EOS are never allowed.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from outlines_like.errors import RejectedTokenError

if TYPE_CHECKING:
    from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["Compiled", "Matcher", "RejectedTokenError"]


@runtime_checkable
class Matcher(Protocol):
    """Per-generation state over a compiled constraint: cheap to create, copy and reset."""

    def fill_bitmask(self, out: npt.NDArray[np.int32]) -> None:
        """Write the allowed-token bitmask of the current state into ``out``.

        ``out`` is an int32 array of ``ceil(V / 32)`` words, or of shape ``(1, words)``, or a row
        view of a larger batch array; bit ``i % 32`` of word ``i // 32`` is set iff token ``i``
        is allowed. Every word is written. The matcher's state does not change.
        """
        ...

    def allowed_token_ids(self) -> npt.NDArray[np.int32]:
        """Return the allowed token ids of the current state, sorted, as an int32 array."""
        ...

    def advance(self, token_id: int) -> None:
        """Consume one token; raise :class:`RejectedTokenError` (state unchanged) if not allowed."""
        ...

    def is_finished(self) -> bool:
        """Return whether EOS has been accepted."""
        ...

    def reset(self) -> None:
        """Go back to the start state (nothing generated yet)."""
        ...

    def copy(self) -> Matcher:
        """Return an independent matcher in the same state (for forking a generation)."""
        ...


class Compiled(abc.ABC):
    """An immutable compiled constraint for one vocabulary; hands out fresh matchers."""

    @property
    @abc.abstractmethod
    def vocabulary(self) -> Vocabulary:
        """The vocabulary the constraint was compiled for."""

    @abc.abstractmethod
    def matcher(self) -> Matcher:
        """Return a fresh matcher at the start state."""
