"""The grammar masker's parsers: an LALR(1) table as a stack machine, and a GLR variant.

Both work on immutable, hashable configurations, so that masks can be cached per configuration:

* :class:`LALRParser`: a configuration is the tuple of LALR states (no values, no callbacks);
  exactly Lark's ``parser="lalr"`` (shift/reduce conflicts resolved as shift by Lark).
* :class:`GLRParser`: for grammars that are not LALR(1). It uses the LALR(1) automaton with every
  conflicting action kept; a configuration is the frozenset of the stacks still alive, so it
  accepts the grammar's whole language (what ``lark.Lark(..., parser="earley")`` parses).

Truncated configurations (what the masker keys its rows by): ``split(config, depth)`` replaces
the bottom of every stack, below its top ``depth`` shared states, by the marker state
:data:`BOTTOM` (-1), and returns the bottom cut off; ``join`` puts it back. Every operation on a
truncated configuration either raises :class:`NeedsBottom` (it would read a state below the
top ones kept) or reads the kept states only, in which case it does on the truncated stacks
exactly what it does on the whole ones, with the bottom left as it is: the step-by-step
argument is that each step of the stack machine reads the top state, pops, and pushes, and
the marker is never read (a pop that uncovers it raises). So for ``S = join(T, B)``,
``op(S) = join(op(T), B)`` whenever ``op(T)`` does not raise; and because ``join(., B)`` is
injective, two truncated results are equal exactly when their joins are. GLR's cap on the
stacks kept depends on the order of a set, so a truncated configuration that reaches the cap
raises :class:`NeedsBottom` too (the whole configuration then decides, as before).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from outlines_like.fsm._grammar_actions import END, Tables

__all__ = ["BOTTOM", "END", "GLRParser", "LALRParser", "NeedsBottom", "Stack"]

Stack = tuple[int, ...]
BOTTOM = -1
"""The state standing for the cut-off bottom of a truncated stack (never read)."""


class NeedsBottom(Exception):
    """An operation on a truncated configuration would read the stack's cut-off bottom."""


class _Deep:
    """Memo value: the operation raised :class:`NeedsBottom` on this truncated configuration."""


_DEEP: Any = _Deep()

# Bounds on the GLR search, so that a highly ambiguous grammar degrades (some continuations
# dropped) instead of hanging: stacks kept per configuration, and stacks explored per feed.
_MAX_STACKS = 64
_MAX_EXPLORED = 512
# A GLR stack's step is first explored on its top states only (the rest cut off as in a
# truncated configuration), memoised per top: deep stacks (``((((`` runs) share their tops.
_TOP_DEPTH = 8


class _Automaton:
    """What both parsers keep of an LALR(1) table, and their memo tables."""

    def __init__(self, tables: Tables) -> None:
        self.start = tables.start
        self.end = tables.end
        self.rule_size = tables.rule_size
        self.rule_origin = tables.rule_origin
        self._feed: dict[tuple[Hashable, str], Hashable | None] = {}
        self._accepts_end: dict[Hashable, Any] = {}

    def feed(self, config: Hashable, terminal: str) -> Hashable | None:
        """Return the configuration after ``terminal`` (reducing first), or None if rejected.

        Raises:
            NeedsBottom: On a truncated configuration, the step reads the cut-off bottom.
        """
        key = (config, terminal)
        try:
            result = self._feed[key]
        except KeyError:
            try:
                result = self._feed_all(config, terminal)
            except NeedsBottom:
                result = _DEEP
            self._feed[key] = result
        if result is _DEEP:
            raise NeedsBottom
        return result

    def accepts_end(self, config: Hashable) -> bool:
        """Return whether the input may end here (``$END`` reduces to the accepting state).

        Raises:
            NeedsBottom: On a truncated configuration, the answer reads the cut-off bottom.
        """
        result = self._accepts_end.get(config)
        if result is None:
            try:
                result = self._ends(config)
            except NeedsBottom:
                result = _DEEP
            self._accepts_end[config] = result
        if result is _DEEP:
            raise NeedsBottom
        return bool(result)

    def _feed_all(self, config: Hashable, terminal: str) -> Hashable | None:
        raise NotImplementedError

    def _ends(self, config: Hashable) -> bool:
        raise NotImplementedError


class LALRParser(_Automaton):
    """A conflict-free LALR(1) table as a stack machine over state tuples."""

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        # action: >= 0 shift to that state; < 0 reduce by rule ~action
        self.actions: Mapping[int, dict[str, int]] = tables.actions
        self.initial: Hashable = (self.start,)

    def _feed_all(self, config: Hashable, terminal: str) -> Hashable | None:
        return self._run(config, terminal)  # type: ignore[arg-type]

    def _ends(self, config: Hashable) -> bool:
        return self._run(config, END) is not None  # type: ignore[arg-type]

    def split(self, config: Hashable, depth: int) -> tuple[Hashable, Stack] | None:
        """Return the stack truncated to its top ``depth`` states, and the bottom cut off.

        None when the stack is no deeper than that (nothing to cut).
        """
        stack: Stack = config  # type: ignore[assignment]
        if len(stack) <= depth:
            return None
        return (BOTTOM, *stack[-depth:]), stack[:-depth]

    def join(self, config: Hashable, bottom: Stack) -> Hashable:
        """Put the bottom cut off by :meth:`split` back under a truncated configuration."""
        return bottom + config[1:]  # type: ignore[index,no-any-return]

    def trim(self, limit: int) -> None:
        """Clear the memo tables that grew past ``limit`` entries."""
        for memo in (self._feed, self._accepts_end):
            if len(memo) >= limit:
                memo.clear()

    def top(self, config: Hashable) -> int:
        """Return the LALR state on top of the stack (it selects Lark's lexer context)."""
        return config[-1]  # type: ignore[index,no-any-return]

    def _run(self, stack: Stack, terminal: str) -> Stack | None:
        states = list(stack)
        actions = self.actions
        while True:
            action = actions[states[-1]].get(terminal)
            if action is None:
                return None
            if action >= 0:
                if terminal == END:
                    return None
                states.append(action)
                return tuple(states)
            rule = ~action
            size = self.rule_size[rule]
            if size:
                del states[-size:]
                if not states or states[-1] < 0:  # the truncated stack's bottom
                    raise NeedsBottom
            goto = actions[states[-1]][self.rule_origin[rule]]
            states.append(goto)
            if terminal == END and goto == self.end:
                return tuple(states)


class GLRParser(_Automaton):
    """An LALR(1) automaton with conflicts kept, run on every alive stack at once."""

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        self.actions: dict[int, dict[str, tuple[int, ...]]] = tables.all_actions()
        self.initial: Hashable = frozenset({(self.start,)})
        self._feed_stack: dict[tuple[Stack, str], tuple[Stack, ...]] = {}
        self._feed_top: dict[tuple[Stack, str], tuple[Stack, ...]] = {}
        self._shiftable: dict[Stack, frozenset[str]] = {}

    def _feed_all(self, config: Hashable, terminal: str) -> Hashable | None:
        out: set[Stack] = set()
        for stack in config:  # type: ignore[attr-defined]
            out.update(self._stack_feed(stack, terminal))
            if len(out) >= _MAX_STACKS:
                if stack[0] < 0:  # which stacks the cap drops depends on the set's order
                    raise NeedsBottom
                break
        return frozenset(out) if out else None

    def _ends(self, config: Hashable) -> bool:
        return any(self._stack_feed(s, END) for s in config)  # type: ignore[attr-defined]

    def split(self, config: Hashable, depth: int) -> tuple[Hashable, Stack] | None:
        """Cut the stacks' shared bottom below their top ``depth`` shared states.

        Returns the truncated configuration and the bottom, or None when the stacks share
        no more than ``depth`` states (nothing to cut).
        """
        stacks: frozenset[Stack] = config  # type: ignore[assignment]
        low, high = min(stacks), max(stacks)  # the shared prefix of all is theirs
        shared = 0
        for a, b in zip(low, high, strict=False):
            if a != b:
                break
            shared += 1
        cut = shared - depth
        if cut <= 0:
            return None
        return frozenset((BOTTOM, *s[cut:]) for s in stacks), low[:cut]

    def join(self, config: Hashable, bottom: Stack) -> Hashable:
        """Put the bottom cut off by :meth:`split` back under every truncated stack."""
        return frozenset(bottom + s[1:] for s in config)  # type: ignore[attr-defined]

    def trim(self, limit: int) -> None:
        """Clear the memo tables that grew past ``limit`` entries."""
        for memo in (
            self._feed,
            self._feed_stack,
            self._feed_top,
            self._accepts_end,
            self._shiftable,
        ):
            if len(memo) >= limit:
                memo.clear()

    def shiftable(self, config: Hashable, names: frozenset[str]) -> frozenset[str]:
        """Return the symbols of ``names`` that some stack can take: ``feed`` is not None.

        Computed per stack and cached there, so a new configuration made of stacks already
        seen costs a union. A truncated configuration goes through :meth:`feed` (which may
        raise :class:`NeedsBottom`, and where the cap on the stacks decides).
        """
        stacks: frozenset[Stack] = config  # type: ignore[assignment]
        if next(iter(stacks))[0] < 0:
            return frozenset(n for n in names if self.feed(config, n) is not None)
        out: set[str] = set()
        for stack in stacks:
            # memoised per top (as _explore_top): a stack whose top alone decides shares it
            key = stack if len(stack) <= _TOP_DEPTH + 1 else (BOTTOM, *stack[-_TOP_DEPTH:])
            found = self._shiftable.get(key)
            if found is None:
                try:
                    found = self._shiftable[key] = self._shiftable_stack(key, names)
                except NeedsBottom:
                    found = self._shiftable[key] = _DEEP
            if found is _DEEP:
                found = self._shiftable_stack(stack, names)
            out.update(found)
        return frozenset(out)

    def _shiftable_stack(self, stack: Stack, names: frozenset[str]) -> frozenset[str]:
        return frozenset(
            n for n in self.actions[stack[-1]] if n in names and self._stack_feed(stack, n)
        )

    def _stack_feed(self, stack: Stack, terminal: str) -> tuple[Stack, ...]:
        key = (stack, terminal)
        found = self._feed_stack.get(key)
        if found is not None:
            if found is _DEEP:
                raise NeedsBottom
            return found
        try:
            found = self._feed_stack[key] = self._explore_top(stack, terminal)
        except NeedsBottom:
            self._feed_stack[key] = _DEEP
            raise
        return found

    def _explore_top(self, stack: Stack, terminal: str) -> tuple[Stack, ...]:
        """:meth:`_explore`, done on the stack's top :data:`_TOP_DEPTH` states where it can be.

        The exploration of the truncated top either raises :class:`NeedsBottom` (then the whole
        stack is explored) or does exactly what the whole stack's does, with the bottom left as
        it is (the argument of the module docstring; the explored stacks correspond one to one,
        in the same order, so the cap :data:`_MAX_EXPLORED` cuts at the same point).
        """
        if len(stack) <= _TOP_DEPTH + 1:
            return self._explore(stack, terminal)
        cut = len(stack) - _TOP_DEPTH
        key = ((BOTTOM, *stack[cut:]), terminal)
        found = self._feed_top.get(key)
        if found is None:
            try:
                found = self._feed_top[key] = self._explore(key[0], terminal)
            except NeedsBottom:
                found = self._feed_top[key] = _DEEP
        if found is _DEEP:
            return self._explore(stack, terminal)
        bottom = stack[:cut]
        return tuple(bottom + s[1:] for s in found)

    def _explore(self, stack: Stack, terminal: str) -> tuple[Stack, ...]:
        results: list[Stack] = []
        work = [stack]
        seen: set[Stack] = set()
        while work and len(seen) < _MAX_EXPLORED:
            current = work.pop()
            if current in seen:
                continue
            seen.add(current)
            for action in self.actions[current[-1]].get(terminal, ()):
                if action >= 0:
                    if terminal != END:
                        results.append((*current, action))
                    continue
                rule = ~action
                size = self.rule_size[rule]
                base = current[:-size] if size else current
                if not base or base[-1] < 0:  # the truncated stack's bottom
                    raise NeedsBottom
                goto = self.actions[base[-1]].get(self.rule_origin[rule])
                if not goto:
                    continue
                reduced = (*base, goto[0])
                if terminal == END and goto[0] == self.end:
                    results.append(reduced)
                else:
                    work.append(reduced)
        return tuple(results)


def hidden_left_recursion(rules: Sequence[tuple[str, Sequence[str]]]) -> str | None:
    """Return a rule left-recursive through a nullable prefix (``a: b a "x"``, ``b:`` empty).

    ``rules``: ``(origin, expansion)`` per alternative; symbols that are no rule's origin are
    terminals. Such a rule needs unboundedly many empty reductions before the first token,
    which a GLR parser on an LR automaton cannot enumerate; None when there is none.
    """
    origins = {origin for origin, _ in rules}
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, expansion in rules:
            if name not in nullable and all(sym in nullable for sym in expansion):
                nullable.add(name)
                changed = True
    # edges origin -> nonterminal at the left edge, marked hidden when a nullable precedes it
    edges: dict[str, set[tuple[str, bool]]] = {}
    for name, expansion in rules:
        for i, sym in enumerate(expansion):
            if sym not in origins:
                break
            edges.setdefault(name, set()).add((sym, i > 0))
            if sym not in nullable:
                break
    for start in edges:
        # search for a path back to `start` that uses at least one hidden edge
        seen: set[tuple[str, bool]] = set()
        stack = [(start, False)]
        while stack:
            node, hidden = stack.pop()
            for nxt, edge_hidden in edges.get(node, ()):
                state = (nxt, hidden or edge_hidden)
                if nxt == start and state[1]:
                    return start
                if state not in seen:
                    seen.add(state)
                    stack.append(state)
    return None
