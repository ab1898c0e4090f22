"""Budget-aware closing: masks narrow so a constrained answer ends valid within ``max_tokens``.

A :class:`ClosingMatcher` wraps a regex or grammar matcher and counts the tokens left. Each
state has a *closing path*: the shortest completing byte string (a breadth-first search over
the byte automaton), split into the fewest tokens and checked from that state. Its length,
``need(state)``, is kept at most the tokens left at every step:

* with more tokens left than ``need``, a token is refused if the state it leads to needs more
  than the tokens left after it; only tokens that make closing costlier than from here can be,
  and they are found once per state (the successors of every allowed token) and cached;
* with exactly ``need`` left, the matcher *commits* to its path, token by token.

Generation then stops at ``max_tokens`` with ``finish_reason="length"`` (no room was left for
EOS) on a complete answer. Searches are bounded by a quarter of the constraint's
``Budget.mask_seconds`` per state (wall time, as the engine's mask timeout) and a node limit.
Where one gives up (no closing path found; a grammar state allowing too many tokens to check),
the plain mask stays until the tokens left come within :data:`HORIZON` of the state's need,
and the matcher commits there (or ends, when the text is complete): the answer still closes
unless one token raised the need by more than the horizon. Free text has nothing to close.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from outlines_like.fsm._closing_walk import Walker, walker_of
from outlines_like.fsm._protocols import Compiled, Matcher, RejectedTokenError
from outlines_like.fsm.budget import DEFAULT_BUDGET, Budget
from outlines_like.fsm.vocabulary import Vocabulary

__all__ = [
    "HORIZON",
    "STRIDE",
    "WINDOW",
    "ClosingMatcher",
    "check_max_tokens",
    "closing_matcher",
    "shortest_document_tokens",
    "spend",
]

I32 = npt.NDArray[np.int32]

HORIZON = 16
"""Tokens of slack a state whose successors could not be checked gets before it commits."""

WINDOW = 64
"""Tokens left beyond a state's need past which its successors are not checked.

Checking every allowed token's successor, and even finding a state's own closing path, costs
milliseconds to tens of milliseconds on a state's first visit (json_medium on llama3: a
first pass 38x slower with every state checked). Far from the end the need is looked at
only every :data:`STRIDE` tokens and successors not at all, so the need growing by more than
``WINDOW`` within ``STRIDE`` tokens could still leave too little room (no JSON Schema or
grammar of the tests and benchmarks does)."""

STRIDE = 16
"""Tokens between two looks at the need while the tokens left are far above it."""

_MAX_SEARCH_NODES = 20_000  # states one shortest-completion search may visit
_SEARCH_SHARE = 0.25  # of Budget.mask_seconds, for one state's searches (the mask needs the rest)


class _Closer:
    """The closing paths and successor needs of one compiled constraint (shared, cached)."""

    def __init__(self, compiled: Compiled, walker: Walker) -> None:
        self.compiled = compiled
        self.walker = walker
        vocab: Vocabulary = compiled.vocabulary
        self.vocab = vocab
        budget = getattr(compiled, "budget", DEFAULT_BUDGET)
        mask_seconds = budget.mask_seconds if isinstance(budget, Budget) else 2.0
        self.seconds = _SEARCH_SHARE * mask_seconds  # wall time, as the engine's mask timeout
        self.eos = frozenset(vocab.eos_token_ids)
        skip = set(vocab.special_token_ids) | self.eos
        self.by_bytes: dict[bytes, int] = {}
        for i, tok in enumerate(vocab.tokens):
            if tok and i not in skip:
                self.by_bytes.setdefault(tok, i)
        self.max_len = max((len(t) for t in self.by_bytes), default=1)
        self.paths: dict[Hashable, tuple[int, ...] | None] = {}
        self.completions: dict[Hashable, bytes] = {}  # exact shortest completing bytes
        self.succ: dict[Hashable, tuple[I32, I32] | None] = {}
        own = getattr(compiled, "_lock", None)  # a grammar's tables: share its lock
        self.lock = own if isinstance(own, type(threading.RLock())) else threading.RLock()

    # -- closing paths ---------------------------------------------------------------------

    def path(self, matcher: Matcher) -> tuple[int, ...] | None:
        """The cached closing path of ``matcher``'s state (``None``: none found)."""
        key = self.walker.key(matcher)
        if key in self.paths:
            return self.paths[key]
        with self.lock:
            if key not in self.paths:
                self._find(key, matcher, time.perf_counter() + self.seconds)
            return self.paths[key]

    def need(self, key: Hashable) -> int | None:
        """The length of a cached closing path (``None``: unknown or none)."""
        path = self.paths.get(key)
        return None if path is None else len(path)

    def _find(self, key: Hashable, matcher: Matcher, deadline: float) -> None:
        data = self._shortest_bytes(key, deadline)
        tokens = None if data is None else self._split(data)
        if tokens is None:
            self.paths[key] = None
            return
        self._verify_and_seed(key, matcher, tokens)

    def _shortest_bytes(self, key: Hashable, deadline: float) -> bytes | None:
        """Breadth-first search for the shortest byte string that completes the text.

        Exact, and so is every suffix of a result (a shortest path's tail is a shortest path
        from where it starts): they are memoised for each state on the way, and a search
        stops at a memoised state instead of going through it.
        """
        walker, memo = self.walker, self.completions
        found = memo.get(key)
        if found is not None:
            return found
        if walker.accepting(key):
            memo[key] = b""
            return b""
        parent: dict[Hashable, tuple[Hashable, int] | None] = {key: None}
        frontier = [key]
        depth = 0
        best: tuple[int, Hashable, bytes] | None = None
        while frontier and (best is None or best[0] > depth + 1):
            after: list[Hashable] = []
            for here in frontier:
                if len(parent) > _MAX_SEARCH_NODES or time.perf_counter() > deadline:
                    return None
                for byte in walker.bytes_to_try(here):
                    nxt = walker.step(here, byte)
                    if nxt is None or nxt in parent:
                        continue
                    parent[nxt] = (here, byte)
                    tail = b"" if walker.accepting(nxt) else memo.get(nxt)
                    if tail is None:
                        after.append(nxt)
                    elif best is None or depth + 1 + len(tail) < best[0]:
                        best = (depth + 1 + len(tail), nxt, tail)
            frontier = after
            depth += 1
        if best is None:
            return None
        _, node, tail = best
        path: list[tuple[Hashable, int]] = []
        link = parent[node]
        while link is not None:
            path.append(link)
            link = parent[link[0]]
        path.reverse()
        data = bytes(b for _, b in path) + tail
        for i, (state, _) in enumerate(path):
            memo[state] = data[i:]
        return data

    def _split(self, data: bytes) -> list[int] | None:
        """The fewest vocabulary tokens whose bytes spell ``data`` (``None``: no split)."""
        n = len(data)
        best: list[tuple[int, int] | None] = [None] * (n + 1)  # (tokens to reach i, last token)
        cost = [n + 1] * (n + 1)
        cost[0] = 0
        for i in range(n):
            if cost[i] > n:
                continue
            for k in range(1, min(self.max_len, n - i) + 1):
                tok = self.by_bytes.get(data[i : i + k])
                if tok is not None and cost[i] + 1 < cost[i + k]:
                    cost[i + k] = cost[i] + 1
                    best[i + k] = (i, tok)
        if cost[n] > n:
            return None
        out: list[int] = []
        at = n
        while at:
            link = best[at]
            assert link is not None
            at, tok = link
            out.append(tok)
        return out[::-1]

    def _verify_and_seed(self, key: Hashable, matcher: Matcher, tokens: list[int]) -> None:
        """Check ``tokens`` from ``matcher``; cache the path and its suffixes (never longer)."""
        keys = self.walker.follow(matcher, tokens)
        if keys is None or not self.walker.accepting(keys[-1]):
            self.paths[key] = None
            return
        # a suffix state that already has a shorter path shortens this one
        best_i, best_len = 0, len(tokens)
        for i, k in enumerate(keys):
            known = self.paths.get(k)
            if known is not None and i + len(known) < best_len:
                best_i, best_len = i, i + len(known)
        if best_i:
            tail = self.paths[keys[best_i]]
            assert tail is not None
            tokens = [*tokens[:best_i], *tail]
            keys = keys[: best_i + 1]
        full = tuple(tokens)
        for i, k in enumerate(keys[: len(full) + 1]):
            known = self.paths.get(k)
            if known is None or len(known) > len(full) - i:
                self.paths[k] = full[i:]
                # its costly tokens were measured against the longer need: measure again
                self.succ.pop(k, None)

    # -- successor needs -------------------------------------------------------------------

    def costly(self, matcher: Matcher) -> tuple[I32, I32] | None:
        """The allowed tokens after which closing costs more than from here, and those costs.

        Only they can ever be refused: the wrapper narrows with at least ``need + 1`` tokens
        left (with ``need`` it follows its path), and any other token leads to a state that
        closes in ``need`` tokens or fewer. Cached per state (``None``: not found in time).
        """
        key = self.walker.key(matcher)
        if key in self.succ:
            return self.succ[key]
        with self.lock:
            if key not in self.succ:
                self.succ[key] = self._costly(key, matcher)
            return self.succ[key]

    def _costly(self, key: Hashable, matcher: Matcher) -> tuple[I32, I32] | None:
        deadline = time.perf_counter() + self.seconds
        here = self.need(key)
        if here is None:
            return None
        ids = matcher.allowed_token_ids()
        ids = ids[~np.isin(ids, np.fromiter(self.eos, dtype=np.int32, count=len(self.eos)))]
        nexts = self.walker.successors(key, ids, deadline)
        if nexts is None:
            return None
        big = np.iinfo(np.int32).max
        worse: list[int] = []
        costs: list[int] = []
        for tok, nxt in zip(ids.tolist(), nexts, strict=True):
            if nxt is None:  # cannot happen for an allowed token: refuse it if it does
                worse.append(tok)
                costs.append(big)
                continue
            if nxt not in self.paths:
                if time.perf_counter() > deadline:
                    return None
                probe = matcher.copy()
                probe.advance(tok)
                self._find(nxt, probe, deadline)
            need = self.need(nxt)
            if need is None or need > here:
                worse.append(tok)
                costs.append(big if need is None else need)
        return np.array(worse, dtype=np.int32), np.array(costs, dtype=np.int32)

    def refused(self, matcher: Matcher, left: int) -> I32 | None:
        """The allowed tokens to refuse with ``left`` tokens left (``None``: not known)."""
        found = self.costly(matcher)
        if found is None:
            return None
        ids, costs = found
        out: I32 = ids[costs > left - 1]
        return out


_CLOSERS: weakref.WeakKeyDictionary[Compiled, _Closer] = weakref.WeakKeyDictionary()
_CLOSERS_LOCK = threading.Lock()


def _closer(compiled: Compiled) -> _Closer | None:
    """The shared closer of a regex or grammar constraint (``None`` for anything else)."""
    found = _CLOSERS.get(compiled)
    if found is not None:
        return found
    walker = walker_of(compiled)
    if walker is None:
        return None
    with _CLOSERS_LOCK:
        found = _CLOSERS.get(compiled)
        if found is None:
            found = _CLOSERS[compiled] = _Closer(compiled, walker)
    return found


class ClosingMatcher:
    """A matcher whose masks keep the answer closable within the tokens left.

    Same interface and rejection contract as the matcher it wraps (see the module docstring
    for the rule). ``advance`` counts a token against the budget; :meth:`spend` counts tokens
    generated outside the constraint (a reasoning block before it).

    Args:
        inner: The matcher to wrap (fresh, or in any state).
        closer: The compiled constraint's shared closer.
        max_tokens: Tokens the whole generation may take.
    """

    __slots__ = ("_check_at", "_closer", "_inner", "_plan", "left", "max_tokens")

    def __init__(self, inner: Matcher, closer: _Closer, max_tokens: int) -> None:
        self._inner = inner
        self._closer = closer
        self.max_tokens = max_tokens
        self.left = max_tokens
        self._plan: tuple[int, ...] = ()  # the closing path committed to
        self._check_at = max_tokens  # look at the need again once ``left`` is down to this

    @property
    def inner(self) -> Matcher:
        """The wrapped matcher."""
        return self._inner

    @property
    def closing(self) -> bool:
        """Whether the matcher has committed to its closing path (it had to close early)."""
        return bool(self._plan)

    def _narrow(self) -> tuple[bool, I32] | None:
        """How the plain mask narrows now.

        ``(True, ids)``: only ``ids`` are allowed; ``(False, ids)``: ``ids`` are refused;
        ``None``: the plain mask keeps the answer closable.
        """
        inner, closer = self._inner, self._closer
        if inner.is_finished() or self.left <= 0:
            return None
        if self._plan:
            return True, np.array(self._plan[:1], dtype=np.int32)
        if self.left > self._check_at:
            return None  # far from the end, and the need was looked at a few tokens ago
        path = closer.path(inner)
        if path is None:
            return None
        need = len(path)
        if need and need >= self.left:
            self._plan = path
            return True, np.array(path[:1], dtype=np.int32)
        if self.left > need + WINDOW:
            # far from the end: look again in STRIDE tokens, or when the window opens
            self._check_at = max(need + WINDOW, self.left - STRIDE)
            return None
        refused = closer.refused(inner, self.left)
        if refused is not None:
            return (False, refused) if refused.shape[0] else None
        if need + HORIZON >= self.left:
            # successors not checked in time: plain mask while far from the end, then close
            # (an answer complete already ends here: EOS)
            self._plan = path
            return True, np.array(path[:1] or sorted(closer.eos), dtype=np.int32)
        return None

    def fill_bitmask(self, out: npt.NDArray[np.int32]) -> None:
        """Write the allowed-token bitmask into ``out`` (narrowed near the end)."""
        self._inner.fill_bitmask(out)  # checks ``out``; the plain mask
        narrow = self._narrow()
        if narrow is None:
            return
        only, ids = narrow
        flat = out.reshape(-1)
        bits = np.left_shift(np.uint32(1), (ids & 31).astype(np.uint32)).view(np.int32)
        if only:
            flat[...] = 0
            np.bitwise_or.at(flat, ids >> 5, bits)
        else:
            np.bitwise_and.at(flat, ids >> 5, ~bits)

    def allowed_token_ids(self) -> I32:
        """Return the allowed token ids, sorted."""
        ids = self._inner.allowed_token_ids()
        narrow = self._narrow()
        if narrow is None:
            return ids
        only, chosen = narrow
        out: I32 = np.intersect1d(ids, chosen) if only else np.setdiff1d(ids, chosen)
        return out.astype(np.int32)

    def advance(self, token_id: int) -> None:
        """Consume a token (one of the budget); raise :class:`RejectedTokenError` if not allowed."""
        token_id = int(token_id)
        plan = self._plan
        if plan and token_id != plan[0] and token_id not in self._closer.eos:
            raise RejectedTokenError(
                f"token {token_id} rejected: with {self.left} tokens left the answer must close "
                f"with token {plan[0]}",
                token_id=token_id,
            )
        was_finished = self._inner.is_finished()
        self._inner.advance(token_id)
        if not was_finished:
            self.left -= 1
        if plan:
            self._plan = plan[1:]

    def spend(self, tokens: int = 1) -> None:
        """Count ``tokens`` generated outside the constraint against the budget."""
        self.left -= tokens

    def is_finished(self) -> bool:
        """Return whether EOS has been accepted."""
        return self._inner.is_finished()

    def is_accepting(self) -> bool:
        """Return whether the text so far is complete."""
        inner = self._inner
        return inner.is_finished() or self._closer.walker.accepting(self._closer.walker.key(inner))

    def reset(self) -> None:
        """Go back to the start state with the whole budget."""
        self._inner.reset()
        self.left = self._check_at = self.max_tokens
        self._plan = ()

    def copy(self) -> ClosingMatcher:
        """Return an independent matcher in the same state."""
        other = ClosingMatcher(self._inner.copy(), self._closer, self.max_tokens)
        other.left, other._plan, other._check_at = self.left, self._plan, self._check_at
        return other


def shortest_document_tokens(compiled: Compiled) -> int | None:
    """Tokens of the shortest complete answer the masker can close with (``None``: unknown).

    It is the length of the start state's closing path: the shortest completing text, split
    into the fewest tokens.
    """
    closer = _closer(compiled)
    if closer is None:
        return 0
    path = closer.path(compiled.matcher())
    return None if path is None else len(path)


def check_max_tokens(compiled: Compiled, max_tokens: int) -> None:
    """Raise ``ValueError`` when ``max_tokens`` cannot fit even the shortest answer.

    Raises:
        ValueError: ``max_tokens`` is below :func:`shortest_document_tokens`.
    """
    need = shortest_document_tokens(compiled)
    if need is not None and max_tokens < need:
        raise ValueError(
            f"max_tokens={max_tokens} cannot fit a valid answer: the shortest answer the "
            f"constraint allows takes {need} tokens of this vocabulary"
        )


def closing_matcher(compiled: Compiled, max_tokens: int | None) -> Matcher:
    """A fresh matcher of ``compiled`` that closes the answer within ``max_tokens``.

    Returns the plain matcher when there is nothing to close (free text, or no ``max_tokens``).
    Nothing is searched here: the first mask does it, where mask work runs (the engine's mask
    workers), and a state with no closing path found gets the plain mask.
    """
    matcher = compiled.matcher()
    closer = _closer(compiled) if max_tokens is not None else None
    if closer is None or max_tokens is None:
        return matcher
    return ClosingMatcher(matcher, closer, max_tokens)


def spend(matcher: Matcher | None, tokens: int = 1) -> None:
    """Count ``tokens`` generated outside the constraint (reasoning) against ``matcher``'s budget.

    A no-op for a matcher that does not close (free text, no ``max_tokens``).
    """
    if isinstance(matcher, ClosingMatcher):
        matcher.spend(tokens)
