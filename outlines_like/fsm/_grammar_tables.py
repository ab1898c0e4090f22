"""LALR(1) tables for the grammar masker, built without Lark's analysis, and a plain-BNF reader.

Lark's own LALR construction (FIRST/FOLLOW by fixpoint over rule objects, then DeRemer and
Pennello's lookaheads over sets of Python objects) costs seconds on the grammar of a large JSON
Schema (a Kubernetes Deployment: ~1,100 rules, 4.7 s), and loading the grammar text through
Lark's own parser another second. This module does both for the grammars that need neither:

* :func:`read_plain` reads a grammar written in plain BNF with Lark's syntax, which is what
  :mod:`outlines_like.types.json_schema_grammar` emits: one rule per line (``name: a B | c |``,
  symbols by name only), terminals that are one string literal or one regex each, and
  ``%ignore NAME``. Anything else (EBNF operators, inline literals, templates, imports, rule
  or terminal priorities, modifiers) returns ``None`` and the grammar goes through Lark. The
  terminals are Lark's own :class:`lark.lexer.TerminalDef` objects, made by Lark's literal
  reader (a string whose only escapes are quotes gets the same pattern made directly), so the
  lexer contexts built from them are Lark's.
* :func:`lalr_tables` builds the LALR(1) automaton (LR(0) item sets with precomputed closures,
  lookaheads by DeRemer and Pennello's relations, with terminal sets as int bitsets). The
  LALR(1) table of a grammar is unique up to the numbering of its states, so where Lark's
  strict mode accepts a grammar, this table drives the parser to the same decisions; any
  conflict is reported, and the caller then goes through Lark (which rejects or resolves it).
  The build checks the running compile budget (:func:`~outlines_like.fsm.budget.check`) as
  its state and lookahead loops grow. With the ``accel`` extra, the same automaton comes from
  a numba kernel (:mod:`outlines_like.fsm._accel_tables`, registered by
  :func:`set_table_kernels`; states numbered in another order), except where it has a
  conflict or too many states.

One cohesive algorithm (LR(0) states, then the digraph passes), kept in one module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from outlines_like.errors import InvalidConstraintError
from outlines_like.fsm._grammar_actions import END, Tables, compiled_tables
from outlines_like.fsm.budget import check

if TYPE_CHECKING:
    from outlines_like.types.json_schema_grammar import GrammarParts

__all__ = [
    "PlainGrammar",
    "gc_paused",
    "lalr_tables",
    "lexer_contexts",
    "read_lark",
    "read_plain",
    "set_table_kernels",
]

_ROOT = "$root_start"

# Lark's own token regexes for its grammar language (lark/load_grammar.py), so a literal is
# cut where Lark's lexer cuts it.
_STRING = re.compile(r'"(\\"|\\\\|[^"\n])*?"i?')
_REGEXP = re.compile(r"/(?!/)(\\/|\\\\|[^/])*?/[imslux]*")
# a string literal whose only escapes are quotes (printable ASCII otherwise, no flags): Lark's
# escape evaluation (``ast.literal_eval``, most of a grammar's reading) unescapes the quotes
_PLAIN_STRING = re.compile(r'"(?:[ !#-&(-\[\]-~]|\\")+"')
_TERM_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
_RULE_LINE = re.compile(r"([a-z][a-z0-9_]*)\s*:(.*)")
_TERM_LINE = re.compile(r"([A-Z][A-Z0-9_]*)\s*:\s*(.*?)\s*")
# Lark's pattern of a terminal's literal text, shared by every grammar that writes it: Lark
# computes a regex pattern's width (with ``sre_parse``, ~0.1-1 ms) once per pattern object.
_patterns: dict[str, Any] = {}
_MAX_PATTERNS = 4096


_kernels_hook: Callable[[], ModuleType | None] | None = None


def set_table_kernels(hook: Callable[[], ModuleType | None]) -> None:
    """Register where the compiled table build comes from (:mod:`._accel` does).

    ``hook()`` returns :mod:`outlines_like.fsm._accel_tables` while the compiled path is on,
    else ``None``; without a hook the tables are built in Python.
    """
    global _kernels_hook
    _kernels_hook = hook


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building tables (restored after).

    Building the tables of a large grammar allocates a few hundred thousand small containers,
    none of them garbage; each allocation burst would trigger collections that scan every
    object of the process (a third of the build here, more in a process holding a model).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@dataclasses.dataclass(frozen=True, eq=False)
class PlainGrammar:
    """A grammar in plain BNF, as Lark would compile it.

    Attributes:
        rules: ``(origin, expansion)`` per alternative, in the order written (empty
            alternatives once per rule, as Lark removes their duplicates).
        terminals: Lark ``TerminalDef`` objects of the terminals the rules (or ``%ignore``)
            use, in the order defined.
        ignore: The ``%ignore`` terminals' names.
    """

    rules: list[tuple[str, tuple[str, ...]]]
    terminals: list[Any]
    ignore: list[str]


LARK_LOCK = threading.Lock()
"""Held while Lark reads a grammar (:func:`lark_quietly`)."""


@contextlib.contextmanager
def lark_quietly() -> Iterator[None]:
    """Let Lark read grammars without its terminal-collision check (under :data:`LARK_LOCK`).

    Lark's first grammar in a process builds its own meta-grammar parser, whose lexer checks
    Lark's terminals pairwise for collisions with interegular (about 120 ms, to log warnings
    nobody reads). The check is switched off meanwhile; it changes no table, and the lock
    keeps two threads from racing on the flag.
    """
    import lark.lexer

    with LARK_LOCK:
        saved = lark.lexer.has_interegular
        lark.lexer.has_interegular = False
        try:
            yield
        finally:
            lark.lexer.has_interegular = saved


def load_lark() -> None:
    """Import what a grammar's compile takes from Lark, and build Lark's grammar reader.

    Imported on first use, so that ``import outlines_like`` stays light; the first import
    costs ~50 ms (Lark's modules, with ``regex`` and ``interegular``), and Lark's parser of
    grammar text and its lexer (built once per process, on the first grammar it reads) ~45 ms
    more, which a process's first grammar compile would otherwise pay
    (:func:`~outlines_like.fsm.index.prepare_vocabulary` calls this in setup).
    """
    read_lark('start: A\nA: "a"\n%ignore " "')  # (the first read builds Lark's reader)


def read_lark(text: str) -> tuple[list[tuple[str, tuple[str, ...]]], list[Any], list[str]]:
    """Lark's reading of a grammar (EBNF, imports, templates...) as plain BNF.

    Returns its rules as ``(origin, expansion)`` pairs, its terminals and its ignored
    terminals' names.

    Only Lark's grammar loader runs: no parser is built. The tables come from
    :func:`lalr_tables` (the same LALR(1) automaton as Lark's, up to the numbering of its
    states, with the budget checked as it is built), run by the LALR parser or, with
    conflicts, the GLR parser. Lark's own analyses (its LALR
    table, then Earley's sets where the table has a conflict) took 4-25 ms on the harness's
    grammars and tens of seconds on a large one, with no budget checked inside.
    """
    import lark
    import lark.load_grammar

    load_grammar: Any = lark.load_grammar.load_grammar  # (untyped)
    with lark_quietly():
        try:
            loaded, _ = load_grammar(text, "<string>", None, False)
            terminals, rules, ignore = loaded.compile(["start"], set())
        except lark.exceptions.LarkError as exc:
            raise InvalidConstraintError(f"invalid grammar: {str(exc).strip()}") from exc
    pairs = [(str(r.origin.name), tuple(str(sym.name) for sym in r.expansion)) for r in rules]
    if not any(origin == "start" for origin, _ in pairs):
        raise InvalidConstraintError("invalid grammar: it has no rule 'start' (the start rule)")
    return pairs, list(terminals), list(ignore)


def read_plain(text: str, start: str = "start") -> PlainGrammar | None:
    """Read ``text`` when it is plain BNF in Lark syntax (see the module docstring), else None.

    None also for a grammar Lark would reject (undefined symbols, a rule defined twice, the
    same non-empty alternative twice), so that Lark reports it.
    """
    from lark.lexer import TerminalDef

    rules: dict[str, list[tuple[str, ...]]] = {}
    term_defs: dict[str, Any] = {}
    ignore: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if raw[0].isspace() or line.startswith(("//", "|")):
            return None
        if line.startswith("%"):
            parts = line.split()
            if len(parts) != 2 or parts[0] != "%ignore" or not _TERM_NAME.fullmatch(parts[1]):
                return None
            ignore.append(parts[1])
            continue
        match = _RULE_LINE.fullmatch(line)
        if match is not None:
            name, body = match.groups()
            if name in rules:
                return None
            # (the body's symbols are names: each must be defined, below)
            alternatives = [tuple(alternative.split()) for alternative in body.split("|")]
            if len(set(alternatives)) != len(alternatives):
                if alternatives.count(()) > 1:  # empty ones once: Lark removes their duplicates
                    first = alternatives.index(())
                    alternatives = [a for i, a in enumerate(alternatives) if a or i == first]
                if len(set(alternatives)) != len(alternatives):
                    return None  # Lark: "Rules defined twice"
            rules[name] = alternatives
            continue
        match = _TERM_LINE.fullmatch(line)
        if match is None:
            return None
        name, body = match.groups()
        if name in term_defs:
            return None
        pattern = _terminal_pattern(body)
        if pattern is None:
            return None
        term_defs[name] = TerminalDef(name, pattern)
    if start not in rules:
        return None
    used: set[str] = set(ignore)
    for alternatives in rules.values():
        for symbols in alternatives:
            used.update(symbols)
    if not used <= rules.keys() | term_defs.keys():
        return None  # undefined (or not a name): Lark says so
    flat = [(name, symbols) for name, alts in rules.items() for symbols in alts]
    terminals = [t for name, t in term_defs.items() if name in used]
    return PlainGrammar(flat, terminals, ignore)


def _terminal_pattern(body: str) -> Any:
    """Lark's pattern of a terminal's definition (``"..."`` or ``/.../``), or None.

    None where Lark would not read it as one. Memoised: grammars share their terminals.
    """
    pattern = _patterns.get(body)  # (a literal read before)
    if pattern is not None:
        return pattern
    from lark.exceptions import GrammarError
    from lark.lexer import PatternStr, Token
    from lark.load_grammar import _literal_to_pattern

    kind = "STRING" if body.startswith('"') else "REGEXP" if body.startswith("/") else ""
    literal = (_STRING if kind == "STRING" else _REGEXP).match(body) if kind else None
    if literal is None or literal.end() != len(body):
        return None
    if kind == "STRING" and _PLAIN_STRING.fullmatch(body):
        # what Lark's reader makes of it, without its escape evaluation (an
        # ``ast.literal_eval`` per literal; tests/fsm compare the two)
        pattern = PatternStr(body[1:-1].replace('\\"', '"'), (), raw=body)
    else:
        try:
            pattern = _literal_to_pattern(Token(kind, body))  # type: ignore[no-untyped-call]
        except (GrammarError, AssertionError):
            return None
    if len(_patterns) >= _MAX_PATTERNS:
        _patterns.clear()
    _patterns[body] = pattern
    return pattern


def plain_from_parts(parts: GrammarParts) -> PlainGrammar | None:
    """The :class:`PlainGrammar` of a JSON Schema's grammar from its converter's data.

    What :func:`read_plain` gives for the grammar's text, without reading it back (~3 us a
    line: 0.2-0.65 ms for a Kubernetes schema's grammar); None where a terminal would not read
    as one, or an alternative repeats (then the text is read, as before).
    """
    from lark.lexer import TerminalDef

    seen: set[tuple[str, tuple[str, ...]]] = set()
    for rule in parts.rules:
        if rule in seen:
            return None
        seen.add(rule)
    terminals = []
    for name, body in parts.terminals:
        pattern = _terminal_pattern(body)
        if pattern is None:
            return None
        terminals.append(TerminalDef(name, pattern))
    return PlainGrammar(list(parts.rules), terminals, [])


def lalr_tables(rules: Sequence[tuple[str, tuple[str, ...]]], start: str = "start") -> Tables:
    """Build the LALR(1) table of ``rules`` (symbols not among the origins are terminals).

    Rule ``i`` of ``rules`` is rule ``i`` of the table (its reductions are ``~i``).
    """
    # ---- symbols: nonterminals 0..n_nt-1 (the root last), terminals after
    origins: dict[str, int] = {}
    for origin, _ in rules:
        origins.setdefault(origin, len(origins))
    root = origins[_ROOT] = len(origins)
    n_nt = len(origins)
    names = list(origins)
    sym_id = dict(origins)
    flat = list(itertools.chain.from_iterable(e for _, e in rules))
    for name in dict.fromkeys(flat):
        if name not in sym_id:  # a terminal, numbered as first met
            sym_id[name] = len(names)
            names.append(name)
    # productions as flat lists, the root's last
    origin_of = [origins[o] for o, _ in rules]
    origin_of.append(root)
    sizes = [len(e) for _, e in rules]
    sizes.append(1)
    rhs_flat = list(map(sym_id.__getitem__, flat))
    rhs_flat.append(origins[start])
    compiled = _kernels_hook() if _kernels_hook is not None else None
    if compiled is not None:
        built = compiled_tables(compiled, origin_of, sizes, rhs_flat, names, n_nt, origins[start])
        if built is not None:
            return built
    term_names = [END, *names[n_nt:]]  # by bit index in lookahead sets
    term_bit = {tid: tid - n_nt + 1 for tid in range(n_nt, len(names))}  # symbol id -> bit
    offsets = list(itertools.accumulate(sizes, initial=0))
    prods = [
        (origin_of[p], tuple(rhs_flat[offsets[p] : offsets[p + 1]])) for p in range(len(origin_of))
    ]
    root_prod = len(prods) - 1
    prods_of: list[list[int]] = [[] for _ in range(n_nt)]
    for p, (lhs, _) in enumerate(prods):
        prods_of[lhs].append(p)
    # items: base[p] + dot; item_sym -1 when the dot is at the end
    base: list[int] = []
    item_sym: list[int] = []
    item_prod: list[int] = []
    for p, (_, rhs) in enumerate(prods):
        base.append(len(item_sym))
        item_sym.extend(rhs)
        item_sym.append(-1)
        item_prod.extend([p] * (len(rhs) + 1))

    nullable = [False] * n_nt
    # only productions of nonterminals alone can make their origin nullable
    candidates = [(lhs, rhs) for lhs, rhs in prods if all(s < n_nt for s in rhs)]
    changed = True
    while changed:
        changed = False
        for lhs, rhs in candidates:
            if not nullable[lhs] and all(nullable[s] for s in rhs):
                nullable[lhs] = changed = True

    # left corners: the nonterminals whose items a closure over A adds (A included)
    first_nt: list[list[int]] = [
        sorted({rhs[0] for p in prods_of[a] for rhs in (prods[p][1],) if rhs and rhs[0] < n_nt})
        for a in range(n_nt)
    ]
    corner: list[frozenset[int]] = [frozenset()] * n_nt
    for a in range(n_nt):
        seen = {a}
        todo = [a]
        while todo:
            for b in first_nt[todo.pop()]:
                if b not in seen:
                    seen.add(b)
                    todo.append(b)
        corner[a] = frozenset(seen)
    # per nonterminal: (first symbol, item after it) of its productions, and its empty ones
    starts_of: list[list[tuple[int, int]]] = [
        [(prods[p][1][0], base[p] + 1) for p in prods_of[a] if prods[p][1]] for a in range(n_nt)
    ]
    empty_of: list[list[int]] = [[p for p in prods_of[a] if not prods[p][1]] for a in range(n_nt)]

    # ---- LR(0) states (kernels as frozensets: no item is reached twice within a group, as
    # only the root's kernel holds an item with the dot at 0, and the root is on no right side)
    kernels: list[frozenset[int]] = []
    state_of: dict[frozenset[int], int] = {}
    goto: list[dict[int, int]] = []
    reductions: list[list[int]] = []  # per state, the productions completed there
    # the part of a closure that depends on the kernel's nonterminals only, cached by them:
    # its groups of items by symbol, its completed productions, and the states its groups
    # lead to where the kernel adds no item to them
    closed: dict[frozenset[int], tuple[dict[int, list[int]], list[int], dict[int, int]]] = {}

    root_kernel = frozenset((base[root_prod],))
    state_of[root_kernel] = start_state = 0
    kernels.append(root_kernel)
    k = 0
    while k < len(kernels):
        kernel = kernels[k]
        k += 1
        if not k & 1023:
            check("the grammar's LALR(1) table")
        wanted = frozenset(item_sym[item] for item in kernel if 0 <= item_sym[item] < n_nt)
        found = closed.get(wanted)
        if found is None:
            part: dict[int, list[int]] = {}
            part_done: list[int] = []
            closure: set[int] = set()
            for a in wanted:
                closure |= corner[a]
            for a in closure:
                for s, nxt in starts_of[a]:
                    if s in part:
                        part[s].append(nxt)
                    else:
                        part[s] = [nxt]
                part_done.extend(empty_of[a])
            found = closed[wanted] = (part, part_done, {})
        part, done, part_target = found
        own: dict[int, list[int]] = {}  # the kernel's items by symbol after the dot
        for item in kernel:
            s = item_sym[item]
            if s < 0:
                if done is found[1]:
                    done = list(done)
                done.append(item_prod[item])
            elif s in own:
                own[s].append(item + 1)
            else:
                own[s] = [item + 1]
        targets: dict[int, int] = {}
        for s, items in part.items():
            extra = own.pop(s, None)
            if extra is None:
                sid = part_target.get(s)
                if sid is not None:
                    targets[s] = sid
                    continue
                key = frozenset(items)
            else:
                key = frozenset(items + extra)
            sid = state_of.get(key)
            if sid is None:
                sid = state_of[key] = len(kernels)
                kernels.append(key)
            if extra is None:
                part_target[s] = sid
            targets[s] = sid
        for s, items in own.items():
            key = frozenset(items)
            sid = state_of.get(key)
            if sid is None:
                sid = state_of[key] = len(kernels)
                kernels.append(key)
            targets[s] = sid
        goto.append(targets)
        reductions.append(done)
    n_states = len(kernels)
    end_state = goto[start_state][origins[start]]

    # ---- lookaheads (DeRemer & Pennello): nonterminal transitions x = (state, A)
    x_of: list[dict[int, int]] = []  # per state, its nonterminal transitions' x by A
    nt_trans: list[tuple[int, int]] = []
    term_bits = [0] * n_states
    for s in range(n_states):
        xs: dict[int, int] = {}
        bits = 0
        for a in goto[s]:
            if a < n_nt:
                xs[a] = len(nt_trans)
                nt_trans.append((s, a))
            else:
                bits |= 1 << term_bit[a]
        x_of.append(xs)
        term_bits[s] = bits
    n_x = len(nt_trans)
    direct = [term_bits[goto[s][a]] for s, a in nt_trans]
    direct[x_of[start_state][origins[start]]] |= 1  # $END after the start symbol
    reads_of: dict[int, list[int]] = {}  # by target state
    reads: list[list[int]] = []
    for s, a in nt_trans:
        t = goto[s][a]
        out = reads_of.get(t)
        if out is None:
            out = reads_of[t] = [x for c, x in x_of[t].items() if nullable[c]]
        reads.append(out)
    # per production, from which position on the rest is nullable
    null_from: list[int] = []
    for _, rhs in prods:
        i = len(rhs)
        while i > 0 and rhs[i - 1] < n_nt and nullable[rhs[i - 1]]:
            i -= 1
        null_from.append(i)
    includes: list[list[int]] = [[] for _ in range(n_x)]
    lookback: dict[tuple[int, int], list[int]] = {}
    for x, (p_state, a) in enumerate(nt_trans):
        if not x & 1023:
            check("the grammar's LALR(1) lookaheads")
        for p in prods_of[a]:
            rhs = prods[p][1]
            here = p_state
            tail = null_from[p] - 1
            for i, s in enumerate(rhs):
                if s < n_nt and i >= tail:
                    includes[x_of[here][s]].append(x)
                here = goto[here][s]
            lookback.setdefault((here, p), []).append(x)
    read_sets = _digraph(n_x, reads, direct)
    follow = _digraph(n_x, includes, read_sets)

    # ---- the table
    rule_size = [len(rhs) for _, rhs in prods]
    rule_origin = [names[lhs] for lhs, _ in prods]
    actions: dict[int, dict[str, int]] = {}
    conflicts: dict[int, dict[str, tuple[int, ...]]] = {}
    for s in range(n_states):
        row = {names[sym]: t for sym, t in goto[s].items()}
        for p in reductions[s]:
            if p == root_prod:
                continue
            la = 0
            for x in lookback.get((s, p), ()):
                la |= follow[x]
            while la:
                low = la & -la
                name = term_names[low.bit_length() - 1]
                la ^= low
                if name in row:
                    both = conflicts.setdefault(s, {})
                    both[name] = (*both.get(name, (row[name],)), ~p)
                else:
                    row[name] = ~p
        actions[s] = row
    return Tables(actions, conflicts, start_state, end_state, rule_size, rule_origin)


def lexer_contexts(text: str) -> Tables:
    """The LALR(1) table the grammar masker builds for plain-BNF ``text`` (its lexer contexts).

    Where it has conflicts the masker runs GLR over it: a lexeme is every terminal it matches.

    Raises:
        InvalidConstraintError: ``text`` is not plain BNF (a bug of the EBNF converter).
    """
    plain = read_plain(text)
    if plain is None:
        raise InvalidConstraintError(
            "the EBNF grammar converted for the masker is not plain BNF; please report this"
        )
    return lalr_tables(plain.rules)


def _digraph(n: int, edges: list[list[int]], init: list[int]) -> list[int]:
    """DeRemer and Pennello's digraph: ``F(x) = init(x) | F(y) for every edge x -> y``.

    Iterative (no recursion limit); each strongly connected component gets one set.
    """
    result = list(init)
    depth = [0] * n
    low = [0] * n
    done = n + 1  # depth of a node whose component is finished
    stack: list[int] = []
    for root in range(n):
        if depth[root]:
            continue
        if not edges[root]:  # a component of its own, with nothing to merge
            depth[root] = done
            continue
        stack.append(root)
        depth[root] = low[root] = len(stack)
        work: list[tuple[int, int]] = [(root, 0)]
        while work:
            x, i = work[-1]
            out = edges[x]
            if i < len(out):
                work[-1] = (x, i + 1)
                y = out[i]
                if not depth[y]:
                    if not edges[y]:
                        depth[y] = done
                    else:
                        stack.append(y)
                        depth[y] = low[y] = len(stack)
                        work.append((y, 0))
                        continue
                elif depth[y] != done and low[y] < low[x]:
                    low[x] = low[y]
                result[x] |= result[y]
                continue
            work.pop()
            if low[x] == depth[x]:
                while True:
                    z = stack.pop()
                    depth[z] = done
                    result[z] = result[x]
                    if z == x:
                        break
            if work:
                parent = work[-1][0]
                if depth[x] != done and low[x] < low[parent]:
                    low[parent] = low[x]
                result[parent] |= result[x]
    return result
