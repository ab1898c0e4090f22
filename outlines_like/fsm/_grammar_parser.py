"""The grammar masker's parsers: an LALR(1) table as a stack machine, and a GLR variant.

Both work on immutable, hashable configurations, so that masks can be cached per configuration:

* :class:`LALRParser`: a configuration is the tuple of LALR states (no values, no callbacks);
  exactly Lark's ``parser="lalr"`` (shift/reduce conflicts resolved as shift by Lark).
* :class:`GLRParser`: for grammars that are not LALR(1). It uses the LALR(1) automaton with every
  conflicting action kept; a configuration is the frozenset of the stacks still alive, so it
  accepts the grammar's whole language (what ``lark.Lark(..., parser="earley")`` parses).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from outlines_like.fsm._grammar_tables import END, Tables, lalr_tables

__all__ = ["END", "GLRParser", "LALRParser", "Stack", "build_glr"]

Stack = tuple[int, ...]

# Bounds on the GLR search, so that a highly ambiguous grammar degrades (some continuations
# dropped) instead of hanging: stacks kept per configuration, and stacks explored per feed.
_MAX_STACKS = 64
_MAX_EXPLORED = 512


class _Automaton:
    """What both parsers keep of an LALR(1) table, and their memo tables."""

    def __init__(self, tables: Tables) -> None:
        self.start = tables.start
        self.end = tables.end
        self.rule_size = tables.rule_size
        self.rule_origin = tables.rule_origin
        self._feed: dict[tuple[Hashable, str], Hashable | None] = {}
        self._accepts_end: dict[Hashable, bool] = {}


class LALRParser(_Automaton):
    """A conflict-free LALR(1) table as a stack machine over state tuples."""

    def __init__(self, tables: Tables) -> None:
        super().__init__(tables)
        # action: >= 0 shift to that state; < 0 reduce by rule ~action
        self.actions: dict[int, dict[str, int]] = tables.actions
        self.initial: Hashable = (self.start,)

    @classmethod
    def from_lark(cls, parse_table: Any) -> LALRParser:
        """The parser of Lark's ``IntParseTable``."""
        from lark.parsers.lalr_analysis import Shift

        rule_ids: dict[int, int] = {}
        rule_size: list[int] = []
        rule_origin: list[str] = []
        actions: dict[int, dict[str, int]] = {}
        for state, table in parse_table.states.items():
            row: dict[str, int] = {}
            for symbol, (action, arg) in table.items():
                if action is Shift:
                    row[symbol] = int(arg)
                else:
                    rid = rule_ids.get(id(arg))
                    if rid is None:
                        rid = rule_ids[id(arg)] = len(rule_size)
                        rule_size.append(len(arg.expansion))
                        rule_origin.append(arg.origin.name)
                    row[symbol] = ~rid
            actions[int(state)] = row
        start = int(parse_table.start_states["start"])
        end = int(parse_table.end_states["start"])
        return cls(Tables(actions, {}, start, end, rule_size, rule_origin))

    def feed(self, config: Hashable, terminal: str) -> Hashable | None:
        """Return the configuration after shifting ``terminal`` (reducing first), or None."""
        key = (config, terminal)
        try:
            return self._feed[key]
        except KeyError:
            pass
        result = self._run(config, terminal)  # type: ignore[arg-type]
        self._feed[key] = result
        return result

    def accepts_end(self, config: Hashable) -> bool:
        """Return whether the input may end here (``$END`` reduces to the accepting state)."""
        result = self._accepts_end.get(config)
        if result is None:
            result = self._run(config, END) is not None  # type: ignore[arg-type]
            self._accepts_end[config] = result
        return result

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
        self._expected: dict[Hashable, frozenset[str]] = {}

    def feed(self, config: Hashable, terminal: str) -> Hashable | None:
        """Return the configuration after ``terminal`` on every stack, or None if none survive."""
        key = (config, terminal)
        try:
            return self._feed[key]
        except KeyError:
            pass
        out: set[Stack] = set()
        for stack in config:  # type: ignore[attr-defined]
            out.update(self._stack_feed(stack, terminal))
            if len(out) >= _MAX_STACKS:
                break
        result = frozenset(out) if out else None
        self._feed[key] = result
        return result

    def accepts_end(self, config: Hashable) -> bool:
        """Return whether some stack accepts the end of input here."""
        result = self._accepts_end.get(config)
        if result is None:
            result = any(self._stack_feed(s, END) for s in config)  # type: ignore[attr-defined]
            self._accepts_end[config] = result
        return result

    def trim(self, limit: int) -> None:
        """Clear the memo tables that grew past ``limit`` entries."""
        for memo in (self._feed, self._feed_stack, self._accepts_end, self._expected):
            if len(memo) >= limit:
                memo.clear()

    def expected(self, config: Hashable) -> frozenset[str]:
        """Return the symbols some stack has an action for (terminals are upper-case-ish)."""
        result = self._expected.get(config)
        if result is None:
            names: set[str] = set()
            for stack in config:  # type: ignore[attr-defined]
                names.update(self.actions[stack[-1]])
            result = self._expected[config] = frozenset(names)
        return result

    def _stack_feed(self, stack: Stack, terminal: str) -> tuple[Stack, ...]:
        key = (stack, terminal)
        found = self._feed_stack.get(key)
        if found is not None:
            return found
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
                goto = self.actions[base[-1]].get(self.rule_origin[rule])
                if not goto:
                    continue
                reduced = (*base, goto[0])
                if terminal == END and goto[0] == self.end:
                    results.append(reduced)
                else:
                    work.append(reduced)
        found = self._feed_stack[key] = tuple(results)
        return found


def hidden_left_recursion(rules: list[Any]) -> str | None:
    """Return a rule left-recursive through a nullable prefix (``a: b a "x"``, ``b:`` empty).

    Such a rule needs unboundedly many empty reductions before the first token, which a GLR
    parser on an LR automaton cannot enumerate; None when there is none.
    """
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule in rules:
            name = rule.origin.name
            if name not in nullable and all(
                not sym.is_term and sym.name in nullable for sym in rule.expansion
            ):
                nullable.add(name)
                changed = True
    # edges origin -> nonterminal at the left edge, marked hidden when a nullable precedes it
    edges: dict[str, set[tuple[str, bool]]] = {}
    for rule in rules:
        for i, sym in enumerate(rule.expansion):
            if sym.is_term:
                break
            edges.setdefault(rule.origin.name, set()).add((sym.name, i > 0))
            if sym.name not in nullable:
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


def build_glr(rules: list[Any]) -> tuple[GLRParser, bool]:
    """Build the LALR(1) automaton of ``rules`` (start rule ``start``), keeping conflicts.

    Returns:
        The parser, and whether the table has any conflict (shift/reduce or reduce/reduce).
    """
    tables = lalr_tables([(r.origin.name, tuple(s.name for s in r.expansion)) for r in rules])
    return GLRParser(tables), tables.conflict
