r"""EBNF/GBNF for a maximal-munch lexer: the grammar's regular parts become real terminals.

EBNF and GBNF are scannerless: a character class is one character, a rule like
``number ::= [0-9]+`` is a rule. Converted as is (:func:`ebnf_to_lark`), every byte is a
lexeme and a parser step. The local masker lexes with a contextual, maximal-munch lexer
(:mod:`outlines_like.fsm.grammar`): a lexeme goes on while the next byte can extend some
terminal of the parser state, and is then typed as one terminal. This pass writes the
grammar for that lexer, with the same language:

1. A rule that reaches no recursion is *regular*: it is inlined wherever it is used.
2. In the other rules, each maximal run of adjacent regular items (``ws [+-] ws``,
   ``string ws ":" ws``, a lone ``number``) is a *run*. Each run is first written as one
   terminal, or (``merge=False``) one terminal per item (step 5 splits further). A terminal
   that can match the empty string becomes optional, matching the non-empty rest.
3. The result is written in plain BNF (one rule per line, symbols by name, one literal or
   regex per terminal), which the masker reads without Lark. Its lexer contexts come from
   its LALR(1) table (``contexts``, given by the masker, which builds the same table): per
   state, its terminals, what may follow each where it is read there, and which of them are
   interchangeable (:func:`~outlines_like.types.grammars._automata.table_contexts`). A
   grammar with conflicts runs under GLR, where the check assumes the worst context: every
   terminal at once, with the grammar's FOLLOW sets.
4. The check (:func:`~outlines_like.types.grammars._automata.unsafe_terminals`): in every
   context, no text of a terminal followed by a byte that can start the next lexeme may
   begin a text of a terminal of the same context, and, under LALR, no text may match two
   terminals of one context that are not interchangeable. Then every sentence of the
   grammar splits into lexemes exactly where the lexer splits it (or, at a text two
   interchangeable terminals match, into the one the parser goes on with alike), so the
   lexer reads every sentence (and every prefix of one) and nothing else.
5. What fails is split, and the check runs again: a terminal that several kept rules share
   first gets one copy per rule (a clash where one rule uses it, a statement's name beside
   keywords, then splits it there only); else a whole-run terminal becomes one terminal per
   item, and an item's terminal that fails becomes scannerless (one-character terminals
   that never overlap, as ``one_char_terminals`` writes them). Every step splits more, and
   one-character terminals never fail, so the loop ends, at worst with the scannerless
   grammar. Nothing is guessed: a part of the grammar is a lexeme only where the check
   proved it safe.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Sequence

from outlines_like.types._charset import complement
from outlines_like.types.grammars._automata import (
    Context,
    Table,
    table_contexts,
    unsafe_terminals,
)
from outlines_like.types.grammars._ebnf import ebnf_grammar
from outlines_like.types.grammars._ir import (
    EMPTY,
    Alt,
    Class,
    Grammar,
    Lit,
    Node,
    Ref,
    Rep,
    Seq,
    alt,
    rep,
    seq,
)
from outlines_like.types.grammars._passes import (
    _atoms,
    _char_sets,
    _refs,
    prune,
    substitute,
)
from outlines_like.types.grammars._passes import can_be_empty as nullable
from outlines_like.types.grammars._write import _class_body, _lark_char, _rule_names

Contexts = Callable[[str], Table]
"""Plain-BNF Lark text -> its LALR(1) table, as the masker builds it (GLR where it conflicts)."""

_MAX_INLINE = 4_000  # nodes a regular rule may grow to when inlined (else it stays a rule)
_MAX_PRODUCT = 64  # alternatives a sequence may expand to before a group gets its own rule
_MAX_CHOICE = 8  # ... where the group cannot be empty (an own rule then adds no empty reduction)
_RUN = "\x00run"  # placeholder rule names for runs in the skeleton


def _size(node: Node) -> int:
    if isinstance(node, (Seq, Alt)):
        return 1 + sum(_size(i) for i in node.items)
    if isinstance(node, Rep):
        return 1 + _size(node.item)
    return 1


def non_empty(node: Node) -> Node:
    """A rule-free node for the language of ``node`` without the empty string."""
    if not nullable(node):
        return node
    if isinstance(node, Alt):
        return alt(non_empty(i) for i in node.items if i != EMPTY)
    if isinstance(node, Seq):
        if not node.items:
            return EMPTY
        head, rest = node.items[0], seq(node.items[1:])
        # both can be empty: the head is not empty, or it is and the rest is not
        return alt([seq([non_empty(head), rest]), non_empty(rest)])
    if isinstance(node, Rep):
        # x{0,n} without "": a non-empty x first (the empty copies before it dropped)
        if node.high is None and not nullable(node.item):
            return rep(node.item, 1, None)
        high = None if node.high is None else node.high - 1
        return seq([non_empty(node.item), rep(node.item, 0, high)])
    return node


def _kept_rules(grammar: Grammar) -> tuple[set[str], dict[str, Node]]:
    """Rules that stay rules (they reach recursion, or are the start), and the others inlined."""
    edges = {name: set(_refs(body)) for name, body in grammar.rules.items()}
    kept = {grammar.start}
    for name in grammar.rules:  # on a cycle: reaches itself
        seen: set[str] = set()
        todo = list(edges[name])
        while todo:
            nxt = todo.pop()
            if nxt == name:
                kept.add(name)
                break
            if nxt not in seen:
                seen.add(nxt)
                todo.extend(edges[nxt])
    inlined: dict[str, Node] = {}

    def visit(name: str) -> bool:  # True: `name` is inlined
        if name in inlined:
            return True
        if name in kept:
            return False
        for ref in edges[name]:
            visit(ref)
        if any(ref in kept for ref in edges[name]):
            kept.add(name)
            return False
        body = substitute(grammar.rules[name], inlined)
        if _size(body) > _MAX_INLINE:
            kept.add(name)
            return False
        inlined[name] = body
        return True

    for name in grammar.rules:
        visit(name)
    return kept, inlined


@dataclasses.dataclass
class _Skeleton:
    """The kept rules with each run replaced by ``Ref(_RUN + index)``."""

    rules: dict[str, Node]
    runs: list[tuple[Node, ...]]
    rule_of: list[str]
    """The kept rule each run is in."""


def _skeleton(grammar: Grammar, kept: set[str]) -> _Skeleton:
    runs: list[tuple[Node, ...]] = []
    rule_of: list[str] = []
    current = [""]

    def regular(node: Node) -> bool:
        return not any(ref in kept for ref in _refs(node))

    def run(items: Sequence[Node]) -> Node:
        runs.append(tuple(items))
        rule_of.append(current[0])
        return Ref(f"{_RUN}{len(runs) - 1}")

    def split(node: Node) -> Node:
        if regular(node):
            return run([node])
        if isinstance(node, Seq):
            out: list[Node] = []
            pending: list[Node] = []
            for item in node.items:
                if regular(item):
                    pending.append(item)
                    continue
                if pending:
                    out.append(run(pending))
                    pending = []
                out.append(split(item))
            if pending:
                out.append(run(pending))
            return Seq(tuple(out))
        if isinstance(node, Alt):
            return Alt(tuple(split(i) for i in node.items))
        if isinstance(node, Rep):
            return Rep(split(node.item), node.low, node.high)
        return node  # a Ref to a kept rule

    rules: dict[str, Node] = {}
    for name, body in grammar.rules.items():
        if name in kept:
            current[0] = name
            rules[name] = split(body)
    return _Skeleton(rules, runs, rule_of)


Split = frozenset[int] | None
"""How a run is written: None, one terminal; else one terminal per item, except the items
whose indices the set holds, which are scannerless."""


class _Build:
    """The grammar with its runs split so: rule bodies over terminal names, and the terminals."""

    def __init__(
        self,
        skeleton: _Skeleton,
        inlined: dict[str, Node],
        splits: list[Split],
        names: set[str],
        private: frozenset[Node] = frozenset(),
    ) -> None:
        self.inlined = inlined
        self.terminals: dict[str, Node] = {}
        self.by_node: dict[tuple[Node, str], str] = {}
        self._private = private  # terminals each kept rule has its own copy of
        self._rule_of = skeleton.rule_of
        self.owners: dict[str, set[tuple[int, int]]] = {}  # terminal -> (run, item) using it
        self._taken = set(names)
        sets: set[tuple[tuple[int, int], ...]] = set()
        for items, split in zip(skeleton.runs, splits, strict=True):
            for i in split or ():
                _char_sets(substitute(items[i], inlined), sets)
        self._atoms = _atoms(sets)
        table: dict[str, Node] = {}
        for k, (items, split) in enumerate(zip(skeleton.runs, splits, strict=True)):
            table[f"{_RUN}{k}"] = self._run(k, items, split)
        self.rules = {name: substitute(body, table) for name, body in skeleton.rules.items()}

    def _name(self, hint: str) -> str:
        base = (
            "".join(c if c.isascii() and c.isalnum() else "_" for c in hint.upper()).strip("_")
            or "T"
        )
        base = base if base[0].isalpha() else "T_" + base
        for n in itertools.count(1):
            candidate = base if n == 1 else f"{base}_{n}"
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate
        raise AssertionError  # pragma: no cover

    def _terminal(self, node: Node, run: int, item: int, hint: str, shared: bool = False) -> Node:
        """A reference to the terminal for ``node`` (optional when ``node`` can be empty)."""
        if node == EMPTY:
            return EMPTY
        body = non_empty(node)
        key = (body, self._rule_of[run] if body in self._private and not shared else "")
        name = self.by_node.get(key)
        if name is None:
            name = self.by_node[key] = self._name(hint)
            self.terminals[name] = body
        self.owners.setdefault(name, set()).add((run, item))
        return rep(Ref(name), 0, 1) if nullable(node) else Ref(name)

    def _hint(self, items: Sequence[Node]) -> str:
        if len(items) == 1 and isinstance(items[0], Ref):
            return items[0].name
        if len(items) == 1 and isinstance(items[0], Lit) and items[0].text.isascii():
            return items[0].text
        return "T"

    def _run(self, k: int, items: tuple[Node, ...], split: Split) -> Node:
        if split is None:
            return self._terminal(substitute(seq(items), self.inlined), k, -1, self._hint(items))
        return seq(
            self._one_char(substitute(item, self.inlined), k, i)
            if i in split
            else self._terminal(substitute(item, self.inlined), k, i, self._hint([item]))
            for i, item in enumerate(items)
        )

    def _one_char(self, node: Node, k: int, i: int) -> Node:
        if isinstance(node, Lit):
            return seq(self._terminal(Lit(c), k, i, "C", shared=True) for c in node.text)
        if isinstance(node, Class):
            ranges = complement(node.ranges) if node.negated else node.ranges
            return alt(
                self._terminal(
                    Lit(chr(a[0][0])) if a == ((a[0][0], a[0][0]),) else Class(a),
                    k,
                    i,
                    "C",
                    shared=True,
                )
                for a in self._atoms[ranges]
            )
        if isinstance(node, Seq):
            return seq(self._one_char(item, k, i) for item in node.items)
        if isinstance(node, Alt):
            return alt(self._one_char(item, k, i) for item in node.items)
        if isinstance(node, Rep):
            return rep(self._one_char(node.item, k, i), node.low, node.high)
        raise AssertionError(f"a run refers to a rule: {node}")  # pragma: no cover


# ----------------------------------------------------------------------------- plain BNF


class _Bnf:
    """Rule bodies (Refs to rules and terminals only) as plain BNF alternatives."""

    def __init__(self, taken: set[str]) -> None:
        self.rules: dict[str, list[tuple[str, ...]]] = {}
        self._aux: dict[Node, str] = {}
        self._taken = taken

    def add(self, name: str, body: Node) -> None:
        self.rules[name] = self.alts(body)

    def _new(self, hint: str) -> str:
        for n in itertools.count(1):
            candidate = f"{hint}_{n}"
            if candidate not in self._taken:
                self._taken.add(candidate)
                return candidate
        raise AssertionError  # pragma: no cover

    def symbol(self, node: Node) -> str:
        """One symbol for ``node``: itself if a reference, else an auxiliary rule."""
        if isinstance(node, Ref):
            return node.name
        name = self._aux.get(node)
        if name is None:
            name = self._aux[node] = self._new("group")
            self.rules[name] = []  # reserved before recursing
            self.rules[name] = self.alts(node)
        return name

    def _plus(self, item: Node) -> str:
        key = Rep(item, 1, None)
        name = self._aux.get(key)
        if name is None:
            name = self._aux[key] = self._new("repeat")
            self.rules[name] = []
            once = self.alts(item)
            self.rules[name] = once + [(name, *a) for a in once]
        return name

    def alts(self, node: Node) -> list[tuple[str, ...]]:
        if isinstance(node, Ref):
            return [(node.name,)]
        if isinstance(node, Alt):
            out: list[tuple[str, ...]] = []
            for item in node.items:
                out.extend(a for a in self.alts(item) if a not in out)
            return out
        if isinstance(node, Seq):
            result: list[tuple[str, ...]] = [()]
            for item in node.items:
                options = self.alts(item)
                limit = _MAX_PRODUCT if () in options else _MAX_CHOICE
                if len(result) * len(options) > limit:
                    options = [(self.symbol(item),)]
                result = [a + b for a in result for b in options]
            return result
        if isinstance(node, Rep):
            low, high = node.low, node.high
            if (low, high) == (0, 1):
                return [(), *(a for a in self.alts(node.item) if a)]
            if high is None:
                plus = (self._plus(node.item),)
                if low <= 1:
                    return [(), plus] if low == 0 else [plus]
                return self.alts(seq([*[node.item] * (low - 1), Ref(plus[0])]))
            if high > low:
                tail: Node = EMPTY
                for _ in range(high - low):
                    tail = rep(seq([node.item, tail]), 0, 1)
                return self.alts(seq([*[node.item] * low, tail]))
            return self.alts(seq([node.item] * low))
        raise AssertionError(f"not a rule body: {node}")  # pragma: no cover

    def follow(self, terminals: set[str], start: str) -> dict[str, frozenset[str]]:
        """FOLLOW of every terminal ("$END" for the end of the input)."""
        empty: set[str] = set()
        first: dict[str, set[str]] = {t: {t} for t in terminals}
        first.update({r: set() for r in self.rules})
        changed = True
        while changed:
            changed = False
            for origin, alternatives in self.rules.items():
                for symbols in alternatives:
                    for sym in symbols:
                        if not first[sym] <= first[origin]:
                            first[origin] |= first[sym]
                            changed = True
                        if sym not in empty:
                            break
                    else:
                        if origin not in empty:
                            empty.add(origin)
                            changed = True
        follow: dict[str, set[str]] = {s: set() for s in first}
        follow[start].add("$END")
        changed = True
        while changed:
            changed = False
            for origin, alternatives in self.rules.items():
                for symbols in alternatives:
                    after = set(follow[origin])
                    for sym in reversed(symbols):
                        if not after <= follow[sym]:
                            follow[sym] |= after
                            changed = True
                        after = first[sym] | after if sym in empty else set(first[sym])
        return {t: frozenset(follow[t]) for t in terminals}


def _regex(node: Node, prec: int = 0) -> str:
    """A rule-free node as a Python regex inside Lark's ``/.../``."""
    if isinstance(node, Lit):
        text = "".join(_regex_char(ord(c)) for c in node.text)
        return f"(?:{text})" if prec >= 2 and len(node.text) > 1 else text
    if isinstance(node, Class):
        if not node.ranges and node.negated:
            return "[\\s\\S]"
        return "[" + _class_body(node, lambda p: _lark_char(p, True)) + "]"
    if isinstance(node, Seq):
        text = "".join(_regex(i, 1) for i in node.items)
        return f"(?:{text})" if prec >= 2 else text
    if isinstance(node, Alt):
        text = "|".join(_regex(i, 0) for i in node.items)
        return f"(?:{text})" if prec >= 1 else text
    if isinstance(node, Rep):
        low, high = node.low, node.high
        inner = _regex(node.item, 2)
        quant = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((low, high))
        if quant is None:
            quant = f"{{{low},}}" if high is None else f"{{{low},{high}}}"
        return inner + quant
    raise AssertionError(f"a terminal refers to a rule: {node}")  # pragma: no cover


def _regex_char(point: int) -> str:
    ch = chr(point)
    if ch in ".^$*+?()[]{}|/-":
        return "\\" + ch
    return _lark_char(point, True)


def _terminal_line(name: str, node: Node) -> str:
    if isinstance(node, Lit):
        return f'{name}: "' + "".join(_lark_char(ord(c), False) for c in node.text) + '"'
    return f"{name}: /{_regex(node)}/"


def _write(bnf: _Bnf, terminals: dict[str, Node], order: list[str]) -> str:
    lines = []
    for name in order + [n for n in bnf.rules if n not in order]:
        lines.append(f"{name}: " + " | ".join(" ".join(a) for a in bnf.rules[name]))
    lines.extend(_terminal_line(name, node) for name, node in terminals.items())
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _text(
    skeleton: _Skeleton,
    inlined: dict[str, Node],
    splits: list[Split],
    names: dict[str, str],
    private: frozenset[Node] = frozenset(),
) -> tuple[str, _Build, _Bnf]:
    build = _Build(skeleton, inlined, splits, set(names.values()), private)
    renamed = {old: Ref(new) for old, new in names.items()}
    bnf = _Bnf({n.lower() for n in build.terminals} | set(names.values()))
    for name, body in build.rules.items():
        bnf.add(names[name], substitute(body, renamed))
    order = [names[n] for n in build.rules]
    return _write(bnf, build.terminals, order), build, bnf


@functools.lru_cache(maxsize=32)
def _lexeme_lark(text: str, contexts: Contexts | None, merge: bool) -> str:
    grammar = prune(ebnf_grammar(text))
    kept, inlined = _kept_rules(grammar)
    skeleton = _skeleton(grammar, kept)
    names = {k: v for k, v in _rule_names(grammar, "lark").items() if k in kept}
    splits: list[Split] = [
        None if merge and len(items) > 1 else frozenset() for items in skeleton.runs
    ]
    private: frozenset[Node] = frozenset()
    while True:
        lark_text, build, bnf = _text(skeleton, inlined, splits, names, private)
        table = contexts(lark_text) if contexts is not None else None
        if table is not None and not table.conflict:
            states = table_contexts(table, build.terminals)
        else:  # GLR, or no table: one context holding every terminal, the grammar's FOLLOW
            follow = bnf.follow(set(build.terminals), "start")
            states = [Context(frozenset(build.terminals), follow)]
        exclusive = table is None or not table.conflict
        unsafe = unsafe_terminals(build.terminals, states, exclusive=exclusive)
        if not unsafe:
            return lark_text
        uses = {(k, i) for name in unsafe for k, i in build.owners.get(name, ())}
        uses = {(k, i) for k, i in uses if splits[k] is None or i not in (splits[k] or ())}
        # a failing terminal that several rules share: first one copy per rule, so that a
        # clash where one rule uses it (a statement's name beside keywords) does not also
        # split it where the others do (a name inside an expression)
        shared = {
            build.terminals[name]
            for name in unsafe
            if build.terminals[name] not in private
            and len({skeleton.rule_of[k] for k, _ in build.owners.get(name, ()) if (k, _) in uses})
            > 1
        }
        if shared:
            private |= shared
            continue
        if not uses:  # (one-character terminals never fail: not reached)
            every: list[Split] = [frozenset(range(len(items))) for items in skeleton.runs]
            if splits == every:
                raise AssertionError("the scannerless grammar failed the check")  # pragma: no cover
            splits = every  # pragma: no cover
            continue  # pragma: no cover
        for k, i in uses:
            split = splits[k]
            if split is None:  # the whole run: one terminal per item, or a lone item split
                splits[k] = frozenset() if len(skeleton.runs[k]) > 1 else frozenset((0,))
            else:
                splits[k] = split | {i}


def ebnf_to_lexeme_lark(text: str, *, contexts: Contexts | None = None, merge: bool = True) -> str:
    """Convert GBNF/EBNF to plain-BNF Lark whose terminals are the grammar's regular parts.

    The text means the EBNF's language under a contextual maximal-munch lexer (the local
    masker's), and under Earley; see the module docstring for how and when a part stays
    scannerless.

    Args:
        text: The EBNF or GBNF grammar.
        contexts: The LALR(1) table of a plain-BNF Lark text, as the masker builds it
            (:func:`outlines_like.fsm._grammar_tables.lexer_contexts`). Without it, the check
            assumes every terminal is in one context (safe, but fewer lexemes pass).
        merge: Start from whole runs of adjacent regular items as one terminal (else one
            terminal per item).

    Raises:
        InvalidConstraintError: The EBNF is invalid (the message gives line and column).
        UnsupportedConstraintError: xgrammar lookahead assertions ``(= ...)``.
    """
    return _lexeme_lark(text, contexts, merge)
