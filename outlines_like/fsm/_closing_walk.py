"""The byte-level view of a compiled constraint that budget-aware closing searches.

One walker per kind of compiled constraint (:mod:`outlines_like.fsm.closing` uses them): a
matcher's state as a hashable key, one byte's step, acceptance, the bytes worth trying, a token
path checked from a state, and the state after each allowed token. The regex walker reads the
DFA; the grammar walker reads the grammar's own byte steps (``CompiledGrammar._step_byte``,
``_step_token``, ``_eos_ok`` and ``GrammarMatcher._stack``/``_lex``: the only place outside
``fsm/grammar.py`` that does).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from outlines_like.fsm._protocols import Compiled, Matcher, RejectedTokenError
from outlines_like.fsm.grammar import CompiledGrammar, GrammarMatcher
from outlines_like.fsm.index import token_table
from outlines_like.fsm.matcher import RegexCompiled, RegexMatcher

__all__ = ["BYTE_ORDER", "MAX_GRAMMAR_SUCCESSORS", "Walker", "walker_of"]

I32 = npt.NDArray[np.int32]

MAX_GRAMMAR_SUCCESSORS = 20_000  # allowed tokens a grammar state's successor check may step

BYTE_ORDER = [*range(0x61, 0x7B), *range(0x30, 0x3A), *range(0x21, 0x7F), *range(0x80)]
BYTE_ORDER += [b for b in range(256) if b not in set(BYTE_ORDER)]  # ASCII letters first


class Walker(Protocol):
    """The byte-level view of a compiled constraint the searches need."""

    def key(self, matcher: Matcher) -> Hashable:
        """The matcher's state (hashable); the same key means the same future."""
        ...

    def step(self, key: Hashable, byte: int) -> Hashable | None:
        """The state after one byte, or ``None`` if the byte is not allowed."""
        ...

    def bytes_to_try(self, key: Hashable) -> Sequence[int]:
        """Bytes to search from ``key``: one per group of bytes that act alike, preferred first."""
        ...

    def follow(self, matcher: Matcher, tokens: Sequence[int]) -> list[Hashable] | None:
        """The states along ``tokens`` from ``matcher``'s state (``None``: one is refused)."""
        ...

    def accepting(self, key: Hashable) -> bool:
        """Whether the text is complete in ``key``."""
        ...

    def successors(self, key: Hashable, ids: I32, deadline: float) -> list[Hashable] | None:
        """The state after each token of ``ids`` (all allowed), or ``None`` past ``deadline``."""
        ...


class _RegexWalker:
    """A regex constraint's DFA."""

    def __init__(self, compiled: RegexCompiled) -> None:
        self.dfa = compiled.dfa
        self.tokens = compiled.vocabulary.tokens
        classes = compiled.dfa.byte_classes.tolist()
        first: dict[int, int] = {}  # class -> its preferred byte
        for b in BYTE_ORDER:
            first.setdefault(classes[b], b)
        self.representatives = list(first.values())
        self.table = token_table(compiled.vocabulary)
        pos = np.zeros(compiled.vocabulary.size, dtype=np.int64)
        pos[self.table.ids] = np.arange(self.table.ids.shape[0])
        self.pos_of_id = pos

    def key(self, matcher: Matcher) -> Hashable:
        assert isinstance(matcher, RegexMatcher)
        return matcher.state

    def step(self, key: Hashable, byte: int) -> Hashable | None:
        assert isinstance(key, int)
        nxt = self.dfa.step(key, bytes((byte,)))
        return None if nxt < 0 else nxt

    def accepting(self, key: Hashable) -> bool:
        assert isinstance(key, int)
        return self.dfa.is_accepting(key)

    def bytes_to_try(self, key: Hashable) -> Sequence[int]:
        return self.representatives

    def follow(self, matcher: Matcher, tokens: Sequence[int]) -> list[Hashable] | None:
        """A DFA walk: a token whose bytes survive is allowed (every state can still accept).

        No matcher is advanced, so no mask row is computed for states generation may never
        reach.
        """
        state = self.key(matcher)
        assert isinstance(state, int)
        keys: list[Hashable] = [state]
        for token in tokens:
            state = self.dfa.step(state, self.tokens[token])
            if state < 0:
                return None
            keys.append(state)
        return keys

    def successors(self, key: Hashable, ids: I32, deadline: float) -> list[Hashable] | None:
        """One vectorised DFA walk of the allowed tokens (positions sorted longest first)."""
        table, dfa = self.table, self.dfa
        unsorted = self.pos_of_id[ids]
        order = np.argsort(unsorted, kind="stable")
        pos = unsorted[order]
        cur = np.full(pos.shape[0], key, dtype=np.int64)
        for j in range(table.max_len):
            k = int(np.searchsorted(pos, int(table.active[j]), "left"))
            if not k:
                break
            here = cur[:k]
            live = here >= 0
            if dfa.lazy:
                dfa.expand(here[live])
            trans = dfa.transitions
            col = table.columns[j][pos[:k]]
            cur[:k] = np.where(live, trans[np.where(live, here, 0), col], -1)
        ends = np.empty_like(cur)
        ends[order] = cur  # back from position order to the order of ``ids``
        return [None if e < 0 else e for e in ends.tolist()]


class _GrammarWalker:
    """A grammar constraint's parser and lexer, byte by byte (the matcher's own step)."""

    def __init__(self, compiled: CompiledGrammar) -> None:
        self.compiled = compiled
        self.tokens = compiled.vocabulary.tokens

    def key(self, matcher: Matcher) -> Hashable:
        assert isinstance(matcher, GrammarMatcher)
        return (matcher._stack, matcher._lex)

    def step(self, key: Hashable, byte: int) -> Hashable | None:
        stack, lex = cast("tuple[Any, int]", key)
        return self.compiled._step_byte(stack, lex, byte)

    def accepting(self, key: Hashable) -> bool:
        stack, lex = cast("tuple[Any, int]", key)
        return self.compiled._eos_ok(stack, lex)

    def bytes_to_try(self, key: Hashable) -> Sequence[int]:
        return BYTE_ORDER

    def follow(self, matcher: Matcher, tokens: Sequence[int]) -> list[Hashable] | None:
        """The matcher's own steps, on a copy (they check each token as generation would)."""
        probe = matcher.copy()
        keys = [self.key(probe)]
        try:
            for token in tokens:
                probe.advance(token)
                keys.append(self.key(probe))
        except RejectedTokenError:
            return None
        return keys

    def successors(self, key: Hashable, ids: I32, deadline: float) -> list[Hashable] | None:
        if ids.shape[0] > MAX_GRAMMAR_SUCCESSORS:
            return None
        stack, lex = cast("tuple[Any, int]", key)
        out: list[Hashable] = []
        for i, token in enumerate(ids.tolist()):
            if not i & 255 and time.perf_counter() > deadline:
                return None
            out.append(self.compiled._step_token(stack, lex, token))
        return out


def walker_of(compiled: Compiled) -> Walker | None:
    """The walker of a regex or grammar constraint (``None`` for anything else)."""
    if isinstance(compiled, RegexCompiled):
        return _RegexWalker(compiled)
    if isinstance(compiled, CompiledGrammar):
        return _GrammarWalker(compiled)
    return None
