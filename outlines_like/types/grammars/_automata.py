"""Small automata over a grammar's terminals: the checks that make a terminal safe to lex.

A scannerless grammar (EBNF/GBNF) turned into one with multi-character terminals keeps its
language under a maximal-munch lexer only if the lexer never has to choose. This module
answers the two questions :mod:`~outlines_like.types.grammars._lexemes` asks of every pair
of terminals ``t, u`` that one lexer context holds:

* **overlap**: can one text match both ``t`` and ``u``? (A lexer types it as one of them.)
* **extension**: can a text ``w`` of ``t``, followed by a byte that may start the next
  lexeme, be the beginning of a text of ``u``? (A maximal-munch lexer then reads on past
  the end of ``w`` and never comes back.)

The automata run over the grammar's *atoms* (the classes of code points no character set of
the terminals tells apart), with Thompson NFAs made deterministic on demand. Extension is
decided at the byte level the masker lexes at: a code point extends a lexeme as soon as its
first UTF-8 byte does, so the atoms are compared by their first bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol

from outlines_like.types._charset import complement, utf8_byte_ranges
from outlines_like.types.grammars._ir import Alt, Class, Lit, Node, Rep, Seq
from outlines_like.types.grammars._passes import _atoms, _char_sets

Ranges = tuple[tuple[int, int], ...]

MAX_STATES = 20_000
"""NFA states one terminal may have before it is not checked (and so not made a lexeme)."""


class TooLarge(Exception):
    """A terminal's automaton would be larger than :data:`MAX_STATES`."""


def _ranges(node: Lit | Class) -> Ranges:
    if isinstance(node, Lit):
        return ((ord(node.text), ord(node.text)),)
    return complement(node.ranges) if node.negated else node.ranges


class Alphabet:
    """The atoms of a set of IR nodes, each with the first UTF-8 bytes of its code points."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        sets: set[Ranges] = set()
        for node in nodes:
            _char_sets(node, sets)
        split = _atoms(sets)
        atoms = sorted({atom for pieces in split.values() for atom in pieces})
        self.index = {atom: i for i, atom in enumerate(atoms)}
        self.of_set: dict[Ranges, tuple[int, ...]] = {
            ranges: tuple(sorted(self.index[a] for a in pieces)) for ranges, pieces in split.items()
        }
        self.lead: list[frozenset[int]] = []
        for atom in atoms:
            lead: set[int] = set()
            for lo, hi in atom:
                for seq in utf8_byte_ranges(lo, hi):
                    lead.update(range(seq[0][0], seq[0][1] + 1))
            self.lead.append(frozenset(lead))

    def atoms(self, node: Lit | Class) -> tuple[int, ...]:
        return self.of_set[_ranges(node)]


@dataclasses.dataclass
class _Nfa:
    eps: list[list[int]] = dataclasses.field(default_factory=list)
    edges: list[list[tuple[tuple[int, ...], int]]] = dataclasses.field(default_factory=list)

    def new(self) -> int:
        if len(self.eps) >= MAX_STATES:
            raise TooLarge
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1

    def build(self, node: Node, start: int, alphabet: Alphabet) -> int:
        """Add ``node`` from state ``start``; return its end state."""
        if isinstance(node, Lit):
            state = start
            for ch in node.text:
                nxt = self.new()
                self.edges[state].append((alphabet.atoms(Lit(ch)), nxt))
                state = nxt
            return state
        if isinstance(node, Class):
            end = self.new()
            self.edges[start].append((alphabet.atoms(node), end))
            return end
        if isinstance(node, Seq):
            state = start
            for item in node.items:
                state = self.build(item, state, alphabet)
            return state
        if isinstance(node, Alt):
            end = self.new()
            for item in node.items:
                branch = self.new()
                self.eps[start].append(branch)
                self.eps[self.build(item, branch, alphabet)].append(end)
            return end
        if isinstance(node, Rep):
            state = start
            for _ in range(node.low):
                state = self.build(node.item, state, alphabet)
            end = self.new()
            self.eps[state].append(end)
            if node.high is None:
                loop = self.new()
                self.eps[state].append(loop)
                back = self.build(node.item, loop, alphabet)
                self.eps[back].append(loop)
                self.eps[back].append(end)
            else:
                for _ in range(node.high - node.low):
                    state = self.build(node.item, state, alphabet)
                    self.eps[state].append(end)
            return end
        raise TypeError(f"a terminal cannot refer to a rule ({node})")


class Dfa:
    """One terminal's automaton over atoms, determinized on demand (dead states pruned)."""

    def __init__(self, node: Node, alphabet: Alphabet) -> None:
        nfa = _Nfa()
        start = nfa.new()
        accept = nfa.build(node, start, alphabet)
        self._nfa = nfa
        self._accept = accept
        # states that can still reach the accepting state
        back: list[list[int]] = [[] for _ in nfa.eps]
        for state in range(len(nfa.eps)):
            for nxt in nfa.eps[state]:
                back[nxt].append(state)
            for _, nxt in nfa.edges[state]:
                back[nxt].append(state)
        alive = {accept}
        todo = [accept]
        while todo:
            for prev in back[todo.pop()]:
                if prev not in alive:
                    alive.add(prev)
                    todo.append(prev)
        self._alive = alive
        self.start = self._closure([start])
        self._moves: dict[frozenset[int], dict[int, frozenset[int]]] = {}

    def _closure(self, states: Iterable[int]) -> frozenset[int]:
        out = {s for s in states if s in self._alive}
        todo = list(out)
        while todo:
            for nxt in self._nfa.eps[todo.pop()]:
                if nxt in self._alive and nxt not in out:
                    out.add(nxt)
                    todo.append(nxt)
        return frozenset(out)

    def moves(self, state: frozenset[int]) -> dict[int, frozenset[int]]:
        """The live successors of ``state`` by atom."""
        found = self._moves.get(state)
        if found is None:
            targets: dict[int, set[int]] = {}
            for s in state:
                for atoms, nxt in self._nfa.edges[s]:
                    if nxt in self._alive:
                        for atom in atoms:
                            targets.setdefault(atom, set()).add(nxt)
            found = {a: self._closure(t) for a, t in targets.items()}
            found = {a: t for a, t in found.items() if t}
            self._moves[state] = found
        return found

    def accepts(self, state: frozenset[int]) -> bool:
        return self._accept in state


@dataclasses.dataclass(frozen=True)
class PairCheck:
    """What one ordered pair ``(t, u)`` of terminals does in one lexer context."""

    overlap: bool
    extends: frozenset[int]
    """First bytes that, after some text of ``t``, continue a text of ``u``."""


def check_pair(t: Dfa, u: Dfa, alphabet: Alphabet) -> PairCheck:
    """Walk ``t`` and ``u`` side by side over every text both can begin with."""
    overlap = False
    extends: set[int] = set()
    seen = {(t.start, u.start)}
    todo = [(t.start, u.start)]
    while todo:
        a, b = todo.pop()
        moves_b = u.moves(b)
        if t.accepts(a):
            overlap = overlap or u.accepts(b)
            for atom in moves_b:
                extends |= alphabet.lead[atom]
        for atom, next_a in t.moves(a).items():
            next_b = moves_b.get(atom)
            if next_b is not None and (next_a, next_b) not in seen:
                seen.add((next_a, next_b))
                todo.append((next_a, next_b))
    return PairCheck(overlap, frozenset(extends))


def first_bytes(dfa: Dfa, alphabet: Alphabet) -> frozenset[int]:
    """The first bytes of the terminal's texts."""
    out: set[int] = set()
    for atom in dfa.moves(dfa.start):
        out |= alphabet.lead[atom]
    return frozenset(out)


class Table(Protocol):
    """An LALR(1) table, as :func:`outlines_like.fsm._grammar_tables.lexer_contexts` gives it."""

    @property
    def conflict(self) -> bool:
        """Whether some state has several actions on a symbol (the masker runs GLR)."""

    @property
    def rule_size(self) -> Sequence[int]:
        """Per rule, the length of its expansion."""

    @property
    def rule_origin(self) -> Sequence[str]:
        """Per rule, its origin's name."""

    def all_actions(self) -> Mapping[int, Mapping[str, tuple[int, ...]]]:
        """Per state, per symbol: each state to shift or go to (``>= 0``), or ``~rule``."""


class Context(NamedTuple):
    """A lexer context (the terminals the lexer knows at once)."""

    names: frozenset[str]
    follow: Mapping[str, frozenset[str]]
    """Per terminal, the terminals that may come right after it when it is read here (a
    superset is fine: it only makes the check stricter)."""
    same: Mapping[str, Hashable] = {}
    """Terminals with equal values here are interchangeable: read as either, the parser
    goes on the same way (see :func:`table_contexts`), so a text matching both is safe."""


def table_contexts(table: Table, terminals: Collection[str]) -> list[Context]:
    """The lexer contexts of an LALR(1) table, each terminal with what may follow it there.

    The lexer of state ``s`` knows the terminals of ``s``'s row. A terminal
    ``t`` read there is shifted after the reductions ``t`` triggers: from a state ``q``
    reducing ``A -> x`` on ``t``, the stack loses ``len(x)`` states and goes to
    ``goto(p, A)``, where ``p`` is some state ``len(x)`` transitions before ``q`` (every
    stack holding ``q`` is such a path, so taking all of them is a superset). What may
    follow ``t`` is the row of each state ``t`` is shifted to: far fewer terminals than the
    grammar's FOLLOW set, which merges every place ``t`` occurs (an identifier followed by
    ``(`` in a call, by a required space where a statement starts).

    Two terminals ``t`` and ``u`` of state ``s`` are interchangeable there (``same``) when
    ``s`` shifts each into a state that only reduces, by a rule of length one, the same
    nonterminal ``A``, on the same lookaheads (``value: TRUE | WORD``, where a word may be
    ``true``): whichever the lexer makes of a text matching both, the next lexeme is lexed
    in the same context, and on it the parser reduces to the same stack (``s``, then
    ``goto(s, A)``), or fails in both readings. The language read is the same.
    """
    actions = table.all_actions()
    pred: dict[int, set[int]] = {}
    for state, row in actions.items():
        for targets in row.values():
            for target in targets:
                if target >= 0:
                    pred.setdefault(target, set()).add(state)
    back_cache: dict[tuple[int, int], frozenset[int]] = {}

    def back(state: int, n: int) -> frozenset[int]:
        found = back_cache.get((state, n))
        if found is None:
            if n == 0:
                found = frozenset((state,))
            else:
                found = frozenset(p for q in back(state, n - 1) for p in pred.get(q, ()))
            back_cache[(state, n)] = found
        return found

    shift_cache: dict[tuple[int, str], frozenset[int]] = {}

    def shifts(state: int, t: str) -> frozenset[int]:
        """The states a stack with top ``state`` shifts ``t`` into (after its reductions)."""
        found = shift_cache.get((state, t))
        if found is None:
            out: set[int] = set()
            seen = {state}
            todo = [state]
            while todo:
                here = todo.pop()
                for act in actions[here].get(t, ()):
                    if act >= 0:
                        out.add(act)
                        continue
                    origin = table.rule_origin[~act]
                    for p in back(here, table.rule_size[~act]):
                        for goto in actions[p].get(origin, ()):
                            if goto not in seen:
                                seen.add(goto)
                                todo.append(goto)
            found = shift_cache[(state, t)] = frozenset(out)
        return found

    names = set(terminals)
    rows = {s: frozenset(n for n in row if n in names) for s, row in actions.items()}
    unit: dict[int, Hashable] = {}  # states that only reduce one rule of length one
    for state, row in actions.items():
        acts = {a for targets in row.values() for a in targets}
        if len(acts) == 1 and (act := next(iter(acts))) < 0 and table.rule_size[~act] == 1:
            unit[state] = (table.rule_origin[~act], frozenset(row))

    def follow_in(state: int) -> Callable[[str], frozenset[str]]:
        return lambda t: frozenset(n for q in shifts(state, t) for n in rows[q])

    out: list[Context] = []
    for state, row_names in rows.items():
        follow = _Lazy(row_names, follow_in(state))
        same: dict[str, Hashable] = {}
        for t in row_names:
            targets = actions[state][t]
            if len(targets) == 1 and targets[0] in unit:
                same[t] = unit[targets[0]]
        out.append(Context(row_names, follow, same))
    return out


class _Lazy(Mapping[str, frozenset[str]]):
    """A mapping over ``keys`` whose values are computed when first read."""

    def __init__(self, keys: frozenset[str], compute: Callable[[str], frozenset[str]]) -> None:
        self._keys = keys
        self._compute = compute
        self._done: dict[str, frozenset[str]] = {}

    def __getitem__(self, key: str) -> frozenset[str]:
        found = self._done.get(key)
        if found is None:
            if key not in self._keys:
                raise KeyError(key)
            found = self._done[key] = self._compute(key)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _same(same: Mapping[str, Hashable], t: str, u: str) -> bool:
    return t in same and u in same and same[t] == same[u]


def unsafe_terminals(
    terminals: Mapping[str, Node],
    contexts: Iterable[Context],
    *,
    exclusive: bool,
) -> set[str]:
    """The terminals a maximal-munch contextual lexer could read differently from the grammar.

    Args:
        terminals: Each terminal's language (no rule references, never the empty string).
        contexts: The terminal sets the lexer knows at once (one per parser state), each
            terminal with the terminals that may come right after it when read there.
        exclusive: Whether a lexeme matching two terminals of a context becomes one of them
            only (LALR, so overlap is unsafe) or each of them (GLR, overlap is harmless).

    Returns:
        The terminals to split: both of a pair that overlaps, the longer one (``u``) of a
        pair where it extends ``t``'s text (a one-character terminal never extends one), and
        every terminal too large to check. An empty set: the lexer reads the grammar exactly.
    """
    alphabet = Alphabet(terminals.values())
    dfas: dict[str, Dfa] = {}
    bad: set[str] = set()
    for name, node in terminals.items():
        try:
            dfas[name] = Dfa(node, alphabet)
        except TooLarge:
            bad.add(name)
    starts = {name: first_bytes(dfa, alphabet) for name, dfa in dfas.items()}
    every = frozenset(range(256))
    pairs: dict[tuple[str, str], PairCheck] = {}
    after: dict[frozenset[str], frozenset[int]] = {}
    for context, follow, same in contexts:
        names = sorted(n for n in context if n in dfas)
        for t in names:
            bytes_after: frozenset[int] | None = None
            for u in names:
                if t in bad and u in bad:
                    continue
                result = pairs.get((t, u))
                if result is None:
                    result = pairs[(t, u)] = check_pair(dfas[t], dfas[u], alphabet)
                if exclusive and t != u and result.overlap and not _same(same, t, u):
                    bad.update((t, u))
                    continue
                if not result.extends:
                    continue
                if bytes_after is None:
                    nxt = follow.get(t, frozenset())
                    bytes_after = after.get(nxt)
                    if bytes_after is None:
                        out: set[int] = set()
                        for v in nxt:
                            if v in terminals:  # (else the end of the input)
                                out |= starts.get(v, every)
                        bytes_after = after[nxt] = frozenset(out)
                if result.extends & bytes_after:
                    bad.add(u)  # the terminal read on past the end of t's text
    return bad
