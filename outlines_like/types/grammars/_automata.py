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
from collections.abc import Iterable, Mapping

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


def unsafe_terminals(
    terminals: Mapping[str, Node],
    contexts: Iterable[frozenset[str]],
    follow: Mapping[str, frozenset[str]],
    *,
    exclusive: bool,
) -> set[str]:
    """The terminals a maximal-munch contextual lexer could read differently from the grammar.

    Args:
        terminals: Each terminal's language (no rule references, never the empty string).
        contexts: The terminal sets the lexer knows at once (one per parser state).
        follow: Per terminal, the terminals that may come right after it in some sentence
            (a superset is fine: it only makes the check stricter).
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
    after: dict[str, frozenset[int]] = {}
    for name in dfas:
        out: set[int] = set()
        for nxt in follow.get(name, ()):
            if nxt in terminals:  # (else the end of the input)
                out |= starts.get(nxt, frozenset(range(256)))
        after[name] = frozenset(out)
    pairs: set[tuple[str, str]] = set()
    for context in contexts:
        names = sorted(n for n in context if n in dfas)
        pairs.update((t, u) for t in names for u in names)
    for t, u in sorted(pairs):
        if t in bad and u in bad:
            continue
        result = check_pair(dfas[t], dfas[u], alphabet)
        if exclusive and t != u and result.overlap:
            bad.update((t, u))
        elif result.extends & after[t]:
            bad.add(u)  # the terminal read on past the end of t's text
    return bad
