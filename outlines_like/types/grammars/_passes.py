"""Passes over the IR: one-character terminals, substitution, pruning, left recursion."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Collection, Iterable, Iterator, Mapping

from outlines_like.errors import UnsupportedConstraintError
from outlines_like.types._charset import complement, normalize
from outlines_like.types.grammars._ir import (
    Alt,
    Class,
    Grammar,
    Lit,
    Node,
    Ref,
    Rep,
    Seq,
    alt,
    make_class,
    rep,
    seq,
)


def _char_sets(node: Node, out: set[tuple[tuple[int, int], ...]]) -> None:
    """Collect every character set the grammar reads (each literal character is one)."""
    if isinstance(node, Lit):
        out.update(((ord(c), ord(c)),) for c in node.text)
    elif isinstance(node, Class):
        out.add(complement(node.ranges) if node.negated else node.ranges)
    elif isinstance(node, (Seq, Alt)):
        for item in node.items:
            _char_sets(item, out)
    elif isinstance(node, Rep):
        _char_sets(node.item, out)


def _atoms(
    sets: Iterable[tuple[tuple[int, int], ...]],
) -> dict[tuple[tuple[int, int], ...], list[tuple[tuple[int, int], ...]]]:
    """Split the sets into disjoint atoms: each set -> the atoms whose union it is.

    Two characters share an atom when exactly the same sets contain them (partition
    refinement over the sets' range boundaries).
    """
    unique = sorted(set(sets))
    bounds = sorted({b for ranges in unique for lo, hi in ranges for b in (lo, hi + 1)})
    starts = [[lo for lo, _ in ranges] for ranges in unique]
    by_signature: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for lo, nxt in itertools.pairwise(bounds):
        signature = tuple(
            k
            for k, ranges in enumerate(unique)
            if (i := bisect.bisect_right(starts[k], lo) - 1) >= 0 and ranges[i][1] >= lo
        )
        if signature:
            by_signature.setdefault(signature, []).append((lo, nxt - 1))
    result: dict[tuple[tuple[int, int], ...], list[tuple[tuple[int, int], ...]]] = {
        ranges: [] for ranges in unique
    }
    for signature, pieces in by_signature.items():
        atom = normalize(pieces)
        for k in signature:
            result[unique[k]].append(atom)
    return result


def one_char_terminals(grammar: Grammar) -> Grammar:
    """Rewrite the grammar so that every terminal is one character and no two overlap.

    A lexer then has nothing to choose: every lexeme is one character and exactly one
    terminal matches it. So the Lark text means the same under Earley, under LALR with
    Lark's contextual lexer, and under any maximal-munch lexer (the local masker's): EBNF is
    scannerless, and ``"ab" | [a-z]{3}`` must accept ``abc`` whatever a lexer would prefer.
    """
    sets: set[tuple[tuple[int, int], ...]] = set()
    for body in grammar.rules.values():
        _char_sets(body, sets)
    atoms = _atoms(sets)

    def atom_node(atom: tuple[tuple[int, int], ...]) -> Node:
        if len(atom) == 1 and atom[0][0] == atom[0][1]:
            return Lit(chr(atom[0][0]))
        return make_class(atom)

    def rewrite(node: Node) -> Node:
        if isinstance(node, Lit):
            chars = tuple(Lit(c) for c in node.text)
            return chars[0] if len(chars) == 1 else Seq(chars)
        if isinstance(node, Class):
            ranges = complement(node.ranges) if node.negated else node.ranges
            pieces = [atom_node(a) for a in atoms[ranges]]
            return pieces[0] if len(pieces) == 1 else Alt(tuple(pieces))
        if isinstance(node, Seq):
            return Seq(tuple(rewrite(i) for i in node.items))
        if isinstance(node, Alt):
            return Alt(tuple(rewrite(i) for i in node.items))
        if isinstance(node, Rep):
            return Rep(rewrite(node.item), node.low, node.high)
        return node

    return Grammar({n: rewrite(b) for n, b in grammar.rules.items()}, grammar.start)


def _refs(node: Node) -> Iterator[str]:
    if isinstance(node, Ref):
        yield node.name
    elif isinstance(node, (Seq, Alt)):
        for item in node.items:
            yield from _refs(item)
    elif isinstance(node, Rep):
        yield from _refs(node.item)


def substitute(node: Node, table: Mapping[str, Node]) -> Node:
    if isinstance(node, Ref):
        return table.get(node.name, node)
    if isinstance(node, Seq):
        return seq(substitute(i, table) for i in node.items)
    if isinstance(node, Alt):
        return alt(substitute(i, table) for i in node.items)
    if isinstance(node, Rep):
        return rep(substitute(node.item, table), node.low, node.high)
    return node


def prune(grammar: Grammar) -> Grammar:
    """Drop the rules the start rule cannot reach."""
    seen = {grammar.start}
    todo = [grammar.start]
    while todo:
        for ref in _refs(grammar.rules[todo.pop()]):
            if ref not in seen:
                seen.add(ref)
                todo.append(ref)
    return Grammar({k: v for k, v in grammar.rules.items() if k in seen}, grammar.start)


def remove_immediate_left_recursion(grammar: Grammar) -> Grammar:
    """Rewrite ``a: a x | a y | b | c`` as ``a: (b | c) (x | y)*``: same language."""
    rules = dict(grammar.rules)
    for name, body in rules.items():
        branches = body.items if isinstance(body, Alt) else (body,)
        tails: list[Node] = []
        heads: list[Node] = []
        for branch in branches:
            parts = branch.items if isinstance(branch, Seq) else (branch,)
            if parts and parts[0] == Ref(name):
                if len(parts) > 1:
                    tails.append(seq(parts[1:]))
            else:
                heads.append(branch)
        if tails and heads:
            rules[name] = seq([alt(heads), rep(alt(tails), 0, None)])
    return Grammar(rules, grammar.start)


def can_be_empty(node: Node, nullable: Collection[str] = ()) -> bool:
    """Whether ``node`` matches the empty string, given the rules that can (``nullable``)."""
    if isinstance(node, Ref):
        return node.name in nullable
    if isinstance(node, Seq):
        return all(can_be_empty(i, nullable) for i in node.items)
    if isinstance(node, Alt):
        return any(can_be_empty(i, nullable) for i in node.items)
    if isinstance(node, Rep):
        return node.low == 0 or can_be_empty(node.item, nullable)
    return False


def _nullable(grammar: Grammar) -> set[str]:
    nullable: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, body in grammar.rules.items():
            if name not in nullable and can_be_empty(body, nullable):
                nullable.add(name)
                changed = True
    return nullable


def _left_refs(node: Node, nullable: set[str]) -> tuple[set[str], bool]:
    """Rules that can start ``node``, and whether ``node`` can match the empty string."""
    if isinstance(node, Ref):
        return {node.name}, node.name in nullable
    if isinstance(node, Seq):
        out: set[str] = set()
        for item in node.items:
            refs, empty = _left_refs(item, nullable)
            out |= refs
            if not empty:
                return out, False
        return out, True
    if isinstance(node, Alt):
        out, any_empty = set(), False
        for item in node.items:
            refs, empty = _left_refs(item, nullable)
            out |= refs
            any_empty = any_empty or empty
        return out, any_empty
    if isinstance(node, Rep):
        refs, empty = _left_refs(node.item, nullable)
        return refs, empty or node.low == 0
    return set(), False


def find_left_recursion(grammar: Grammar) -> list[str] | None:
    """A left-recursive cycle of rule names, or None."""
    nullable = _nullable(grammar)
    edges = {n: _left_refs(body, nullable)[0] for n, body in grammar.rules.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for nxt in sorted(edges.get(name, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[name] = 2
        return None

    for name in grammar.rules:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def reject_left_recursion(grammar: Grammar) -> None:
    cycle = find_left_recursion(grammar)
    if cycle:
        raise UnsupportedConstraintError(
            "GBNF (llama.cpp) cannot take left recursion, found through the rules "
            + " -> ".join(cycle)
            + '; rewrite it with repetition, e.g. `expr: term ("+" term)*`'
        )
