r"""Token masks for context-free grammars: Lark's LALR tables plus a byte-level contextual lexer.

How it works:

* The grammar (Lark syntax; EBNF/GBNF arrives converted by ``CFG.lark``) is loaded by Lark,
  start rule ``start``; a grammar in plain BNF (what JSON Schemas compile to) is read, and its
  LALR(1) table built, by :mod:`~outlines_like.fsm._grammar_tables` instead, the same table in
  a fraction of Lark's time. When it is LALR(1), the table drives our own parser
  (:class:`~outlines_like.fsm._grammar_parser.LALRParser`), which keeps only the stack of LALR
  states, so a parser configuration is a hashable tuple. Otherwise (shift/reduce or
  reduce/reduce conflicts) a GLR parser runs the LALR(1) automaton with the conflicting actions
  kept, and a configuration is the set of the stacks alive: the matcher then accepts the
  grammar's whole language, as Lark's Earley parser does.
* Lexing follows Lark's contextual lexer: in LALR state ``s`` the lexer knows only the terminals
  of ``s`` plus the ``%ignore`` ones. Each such terminal set gets a product byte DFA
  (:mod:`outlines_like.fsm._grammar_lexer`). Under GLR the set is the terminals some stack can
  shift next, plus ``%ignore``.
* A matcher state is ``(configuration, lexer DFA state)``. Its mask is computed once and cached,
  so the steady state is a 4·ceil(V/32)-byte row copy. Computing it takes two numpy walks over
  the vocabulary: (1) every token through the lexer DFA alone, shared by all configurations
  with the same lexer context, and, where the part of the DFA left is small (inside a JSON
  string, a number), by every context, grammar and schema of the vocabulary; (2) the tokens that
  ran past the end of the lexeme, from the byte that did not fit, through a lazily built DFA
  over whole matcher states whose rows fold in the parser's steps at lexeme ends, so that a
  token finishing any number of terminals (``%ignore`` ones included) is still one walk. With
  the ``accel`` extra, an LALR grammar's walk (2) runs instead in a compiled kernel with the
  parser inside (:mod:`~outlines_like.fsm._grammar_kernel`): same decisions, no DFA rows; and
  a whole row is first tried as one walk of the token trie in that kernel (a dead byte skips
  its subtree), within a budget of nodes. Past it, or in a lexer state most bytes extend (a
  string's inside, where every token goes on), the row of the whole stack is walk (1), whose
  rows the vocabulary shares, plus the tokens that ran past the lexeme's end: their rests,
  a few hundred distinct, as one trie walk in the kernel (``CompiledGrammar._lexeme_row``).
  A kernel trie walk reports the lowest stack position it read, and its result is kept by
  the states from there up (:class:`_TopCache`): a later stack with that top takes it without
  a walk. (Most JSON walks read to the bottom: a token closing many brackets does.)
* Without the kernel (or under GLR), rows are computed for the top of the stack first (LALR):
  the configuration truncated to its top 1, 2, 4 ... states decides every token whose walk
  stays above the cut, once for every stack with that top (inside a JSON string at any depth,
  say); the tokens that reach below are left pending and decided level by level down to the
  whole stack (``CompiledGrammar._mask`` says why a shared key is sound).

Lexing semantics (maximal munch without backtracking): a lexeme goes on as long as the next
byte can extend it (some terminal of the context can still match); it ends only when the next
byte cannot extend it, and then it must fully match a terminal. The terminal it becomes is
Lark's choice: the first terminal in Lark's scanner order (priority, then longest possible
match) matching the whole lexeme, retyped to an equal string terminal as Lark does for
keywords. This is what Lark's lexer does on every input where its regex alternation finds the
longest match, so the texts the matcher accepts parse with ``lark.Lark(grammar,
parser="lalr")``. Where Lark's lexer would backtrack (a lexeme that runs into a dead end, such
as ``1.`` followed by ``x`` for a number terminal ``[0-9]+(\.[0-9]+)?``), the matcher is
stricter: it never splits a lexeme that could still grow. Terminal priorities act as in
Lark, whose scanner tries terminals by priority first: once a terminal has matched, the lexeme
does not grow into terminals of lower priority only (with ``IF.2: "if"`` and a ``NAME``,
``ifx`` reads as ``IF`` then ``x``), and a lexeme that grew on past such a match cannot end as
a lower-priority terminal (Lark would go back to the shorter match; the matcher rejects).
Under GLR a lexeme becomes every terminal of the context that matches it (each is tried).
As in Lark, ``%ignore`` text may come before the first and after the last token.

Rejection contract: see :mod:`outlines_like.fsm._protocols` (``advance`` raises
:class:`~outlines_like.fsm._protocols.RejectedTokenError` and leaves the state unchanged; EOS is
allowed exactly when the text so far is a complete sentence; special tokens never are; a
finished matcher allows only EOS).


One cohesive algorithm (the grammar matcher: parser configurations, contextual lexing and the
two shared walks, and the rows keyed by the top of the stack), kept in one module of some 1,600
lines so its invariants read in one place.
"""

from __future__ import annotations

import importlib
import itertools
import re
import threading
import weakref
from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

import numpy as np
import numpy.typing as npt

from outlines_like.errors import (
    ConstraintTooLargeError,
    InvalidConstraintError,
    UnsupportedConstraintError,
)
from outlines_like.fsm import _accel
from outlines_like.fsm._grammar_actions import END, ActionRows, action_arrays
from outlines_like.fsm._grammar_kernel import (
    LALRKernel,
    Pending,
    RestTrie,
    rest_trie,
    shared_rest_tries,
    trie_layout,
)
from outlines_like.fsm._grammar_lexer import (
    ContextDFA,
    TerminalDFAs,
    build_context,
    terminal_dfa,
)
from outlines_like.fsm._grammar_parser import (
    BOTTOM,
    GLRParser,
    LALRParser,
    NeedsBottom,
    hidden_left_recursion,
)
from outlines_like.fsm._grammar_tables import (
    PlainGrammar,
    gc_paused,
    lalr_tables,
    lexer_contexts,
    read_lark,
    read_plain,
)
from outlines_like.fsm._grammar_walk import (
    ByteTable,
    LexemeWalk,
    byte_table,
    groups_by_key,
    lexeme_walk,
    matcher_walk,
    rest_order,
    rows_by_state,
    sub_dfa,
    walk,
)
from outlines_like.fsm._grammar_walk import pack as _pack
from outlines_like.fsm._protocols import Compiled, RejectedTokenError
from outlines_like.fsm.budget import DEFAULT_BUDGET, Budget, check, metered
from outlines_like.fsm.index import body_token_sets, token_trie
from outlines_like.types import CFG
from outlines_like.types.grammars import ebnf_to_lexeme_lark

if TYPE_CHECKING:
    from outlines_like.fsm.vocabulary import Vocabulary

__all__ = [
    "JSON_OBJECT_GRAMMAR",
    "CompiledGrammar",
    "GrammarMatcher",
    "compile_grammar",
    "compile_json_object",
]

JSON_OBJECT_GRAMMAR = r"""
start: object
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
STRING: /"([^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*"/
NUMBER: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/
%ignore /[ \t\n\r]+/
"""
"""Any JSON object (the ``dict`` output type), in Lark syntax; whitespace between tokens."""

_COMPILED_KEY = "fsm.grammar.compiled"
_MAX_CACHED_GRAMMARS = 8
_MAX_CACHED_MASKS = 2048  # 4·ceil(V/32) bytes each: 32 MB on llama3
_PYTHON_TAIL = 24  # walk this few tokens byte by byte rather than column by column
_MAX_DFA_STATES = 65_536  # the matcher-state DFA is cleared past this (256 int32 per state)
_MAX_MEMO = 500_000  # parser and lexer memo tables are cleared past this many entries
_LEXICAL_GROUP = 512  # tokens ending a lexeme go on lexically (cached) in groups this large
_LEXICAL_DEPTH = 16  # ... up to this many lexemes into the token
_MAX_LEXICAL_NODES = 2048  # ... while the lexical trees hold fewer walks (a few rows each)

# A parser configuration: an LALR stack (tuple of states) or, for GLR, a frozenset of stacks.
Config = Hashable
Row = npt.NDArray[np.int32]


def compile_grammar(
    cfg: CFG,
    vocab: Vocabulary,
    *,
    budget: Budget = DEFAULT_BUDGET,
    plain: PlainGrammar | None = None,
) -> CompiledGrammar:
    """Compile a context-free grammar for a vocabulary.

    Compiling builds the parse tables and the terminals' DFAs only; token masks are computed
    lazily, per matcher state, and cached in the returned object. The result is cached on the
    vocabulary too, keyed by the grammar text, so compiling it again is a dictionary lookup.

    Args:
        cfg: The grammar (``CFG``), start rule ``start``. EBNF/GBNF is converted with its
            regular parts as lexemes where that keeps its language
            (:func:`~outlines_like.types.grammars.ebnf_to_lexeme_lark`).
        vocab: The model's vocabulary.
        budget: Limits on later masks (time per mask); the compile's own time is the caller's
            meter (``compile_constraint`` runs one).
        plain: The grammar's rules and terminals, when its writer has them (a JSON Schema's:
            ``compile_constraint``), instead of reading its Lark text back; they must say what
            the text says.

    Returns:
        An immutable :class:`CompiledGrammar`; ``.matcher()`` gives per-generation matchers.

    Raises:
        InvalidConstraintError: The grammar is malformed (Lark's message says where).
        UnsupportedConstraintError: A terminal uses a regex feature the byte lexer lacks (flags
            on a regex, lookarounds), or a grammar that is not LALR(1) is left-recursive through
            an optional prefix (which the GLR parser cannot run).
    """
    if not isinstance(cfg, CFG):
        raise TypeError(
            f"compile_grammar takes a CFG, got {type(cfg).__name__}; wrap text in CFG()"
        )
    if cfg.syntax == "ebnf":  # the grammar's regular parts become the masker's lexemes
        text = ebnf_to_lexeme_lark(cfg.definition, contexts=lexer_contexts)
    else:
        text = cfg.lark
    key = (text, budget)
    with _grammars_lock:
        cache = vocab._cache.get(_COMPILED_KEY)
        if cache is None:
            cache = vocab._cache[_COMPILED_KEY] = _CompiledGrammars()
            _grammar_caches[:] = [ref for ref in _grammar_caches if ref() is not None]
            _grammar_caches.append(weakref.ref(cache))
        compiled = cache.get(key)
    if compiled is None or compiled.failed is not None:
        compiled = CompiledGrammar(  # (two threads may both build)
            text, vocab, budget=budget, plain=plain if cfg.syntax == "lark" else None
        )
        with _grammars_lock:
            cache.pop(key, None)
            while len(cache) >= _MAX_CACHED_GRAMMARS:
                cache.pop(next(iter(cache)))
            cache[key] = compiled
    return compiled


class _CompiledGrammars(dict[tuple[str, Budget], "CompiledGrammar"]):
    """A vocabulary's compiled grammars, oldest first (a class: a plain dict has no weak ref)."""


_grammars_lock = threading.Lock()
# every vocabulary's table of compiled grammars, so that clear_compiled_grammars finds them
_grammar_caches: list[weakref.ref[_CompiledGrammars]] = []


def clear_compiled_grammars() -> None:
    """Drop the compiled grammars cached on every vocabulary (see :func:`compile_grammar`)."""
    with _grammars_lock:
        for ref in _grammar_caches:
            cache = ref()
            if cache is not None:
                cache.clear()


def compile_json_object(vocab: Vocabulary, *, budget: Budget = DEFAULT_BUDGET) -> CompiledGrammar:
    """Compile :data:`JSON_OBJECT_GRAMMAR` (any JSON object) for a vocabulary."""
    return compile_grammar(CFG(JSON_OBJECT_GRAMMAR, "lark"), vocab, budget=budget)


def _refuse_hidden_left_recursion(rules: list[tuple[str, tuple[str, ...]]]) -> None:
    """Refuse a grammar (not LALR(1)) with a rule the GLR parser cannot run."""
    looping = hidden_left_recursion(rules)
    if looping is not None:
        raise UnsupportedConstraintError(
            f"the grammar is not LALR(1) and rule '{looping}' is left-recursive through a "
            "prefix that can be empty (e.g. `a: ws a x` with `ws` optional); the token masker "
            "cannot run it. Move the optional part after the recursion (`a: a ws x`) or make "
            "it non-empty."
        )


def _validate_terminals(terminals: list[Any]) -> None:
    """Check the terminals as Lark's lexer would, with Lark's messages.

    Lark's own validation (in its lexer) also looks for colliding terminals with interegular,
    only to log warnings, at 10-130 ms a grammar; the matcher skips it.
    """
    for terminal in terminals:
        if terminal.pattern.type == "str" and terminal.pattern.value:
            continue  # an escaped literal: it compiles, and is as wide as its text
        try:
            _compile_terminal(terminal.pattern)
        except re.error as exc:
            raise InvalidConstraintError(
                f"invalid grammar: cannot compile terminal {terminal.name} "
                f"({terminal.pattern}): {exc}"
            ) from exc
        if terminal.pattern.min_width == 0:
            raise InvalidConstraintError(
                f"invalid grammar: terminal {terminal.name} ({terminal.pattern}) is zero-width "
                "(matches the empty string); terminals must match at least one character"
            )


# Python's regex parser and compiler, the two halves of ``re.compile`` (3.10: sre_*)
try:
    _sre_parser: Any = importlib.import_module("re._parser")
    _sre_compiler: Any = importlib.import_module("re._compiler")
except ImportError:  # pragma: no cover - Python 3.10
    _sre_parser = importlib.import_module("sre_parse")
    _sre_compiler = importlib.import_module("sre_compile")
# Lark's pattern of a Unicode category (its width reader rewrites them first)
_CATEGORY = re.compile(r"\\p{[A-Za-z_]+}")
# terminal regexps that compiled (a fresh schema's: few), with Lark's width where known
_compiled_regexps: dict[str, list[int] | None] = {}
_MAX_COMPILED_REGEXPS = 4096


def clear_terminal_checks() -> None:
    """Empty the memo of terminal regexps that compiled."""
    _compiled_regexps.clear()


def _compile_terminal(pattern: Any) -> None:
    """``re.compile`` a terminal's regexp (raising its ``re.error``), once per regexp.

    Lark reads the regexp's width (``min_width``) with the parser of ``re`` over again; where
    Lark's reading would be that same parse (no Unicode category in the text), one parse
    serves both, and the width (a function of the text) is stored where Lark keeps it.
    """
    regexp = pattern.to_regexp()
    if regexp in _compiled_regexps:
        width = _compiled_regexps[regexp]
    elif getattr(pattern, "_width", None) is not None or _CATEGORY.search(regexp):
        re.compile(regexp)
        width = None
    else:
        parsed = _sre_parser.parse(regexp)
        width = [int(x) for x in parsed.getwidth()]  # (Lark's get_regexp_width)
        _sre_compiler.compile(parsed)  # (the rest of re.compile, as it runs on the parse)
    if width is not None and getattr(pattern, "_width", 0) is None:  # (Lark's PatternRE)
        pattern._width = list(width)
    if len(_compiled_regexps) >= _MAX_COMPILED_REGEXPS:
        _compiled_regexps.clear()
    _compiled_regexps[regexp] = width


class _Lexed:
    """Tokens walked through one lexer context from one state: the lexical part of a mask.

    It depends on the lexer context and state only, so every parser configuration with that
    context shares it (inside a JSON string, say, at any depth). ``children`` caches the walks
    of the tokens that ended a lexeme here, through the next lexeme (also lexical), by
    ``(class, next context)``.

    Attributes:
        end_rows: The tokens that stay inside the lexeme: one packed row per lexer state they
            end in.
        groups: Per class of the lexeme's end, the tokens that ended it and the offset of
            their next byte, longest rest first (the matcher-state walk then slices instead
            of filtering).
        children: The walks of the groups on, by ``(class, next context)``.
        stops: The tokens of ``groups`` again, all classes together, with the lexer state each
            stopped in: ``(ids, offsets, states)`` (what the compiled walk takes on from a
            whole stack, :meth:`CompiledGrammar._lexeme_row`); None for a restricted walk.
    """

    __slots__ = (
        "bases",
        "children",
        "end_rows",
        "groups",
        "reach_terms",
        "rests",
        "shared_from",
        "stops",
        "union",
    )

    def __init__(
        self,
        end_rows: list[tuple[int, npt.NDArray[np.uint8]]],
        groups: dict[int, tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]],
        stops: tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], npt.NDArray[np.int32]]
        | None = None,
    ) -> None:
        self.end_rows = end_rows
        self.groups = groups
        self.stops = stops
        self.rests: list[tuple[int, RestTrie]] | None = None  # (stops by state: _lexeme_row)
        self.union: npt.NDArray[np.uint8] | None = None  # (end_rows OR-ed: _lexeme_row)
        # (_lexeme_row) the terminals the end states can become, the lexical part of the row
        # per tuple of which of them the parser takes
        self.reach_terms: list[int] | None = None
        self.bases: dict[tuple[bool, ...], npt.NDArray[np.uint8]] = {}
        self.shared_from: tuple[LexemeWalk, list[int]] | None = None  # (the vocabulary's walk)
        self.children: dict[tuple[int, int], _Lexed] = {}

    @classmethod
    def walked(
        cls,
        context: ContextDFA,
        lex: int,
        table: ByteTable,
        ids: npt.NDArray[np.integer[Any]] | None = None,
        offsets: npt.NDArray[np.int32] | None = None,
        trie: _accel.TokenTrie | None = None,
    ) -> _Lexed:
        """Walk tokens ``ids`` (default: all) from ``offsets`` (default: 0) in state ``lex``."""
        if ids is None:
            ids = table.text_ids  # as is: the walk knows it
        res = walk(table, context.flat, lex, ids, offsets, accepting=context.accepting, trie=trie)
        end_rows = rows_by_state(ids[res.end_items], res.end_states, table.size)
        classes = context.winner[res.stop_states]
        stop_ids = ids[res.stop_items]
        stops = groups_by_key(classes, stop_ids, res.stop_offsets, table.lengths)
        return cls(
            end_rows,
            {klass: (k_ids, k_offsets) for klass, k_ids, k_offsets in stops},
            (
                stop_ids.astype(np.int32),
                res.stop_offsets.astype(np.int32),
                res.stop_states.astype(np.int32),
            ),
        )

    @classmethod
    def shared(
        cls, shared: LexemeWalk, order: list[int], context: ContextDFA, table: ByteTable
    ) -> _Lexed:
        """A walk shared by the vocabulary (:func:`lexeme_walk`), in this context's states."""
        end_rows = [(order[state], row) for state, row in shared.end_rows]
        by_class: dict[int, list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]]] = {}
        for state, ids, offsets in shared.stops:
            by_class.setdefault(int(context.winner[order[state]]), []).append((ids, offsets))
        stops = (
            np.concatenate([np.zeros(0, dtype=np.int32), *(p[1] for p in shared.stops)]),
            np.concatenate([np.zeros(0, dtype=np.int32), *(p[2] for p in shared.stops)]),
            np.repeat(
                np.asarray([order[p[0]] for p in shared.stops], dtype=np.int32),
                [len(p[1]) for p in shared.stops],
            ),
        )
        groups: dict[int, tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]] = {}
        for klass, parts in by_class.items():
            if len(parts) == 1:  # (sorted already, longest rest first)
                groups[klass] = parts[0]
                continue
            ids = np.concatenate([p[0] for p in parts])
            offsets = np.concatenate([p[1] for p in parts])
            order_ = rest_order(offsets - table.lengths[ids])
            groups[klass] = (ids[order_], offsets[order_])
        lexed = cls(end_rows, groups, stops)
        lexed.shared_from = (shared, order)
        return lexed

    def restricted(self, ids: npt.NDArray[np.int32], size: int) -> _Lexed:
        """This walk, for the tokens ``ids`` only (a walk from byte 0 of a subset of tokens)."""
        member = np.zeros(size, dtype=np.bool_)
        member[ids] = True
        packed = _pack(member)
        end_rows = [(state, row & packed) for state, row in self.end_rows]
        groups = {}
        for klass, (cls_ids, cls_offsets) in self.groups.items():
            sel = member[cls_ids]
            if sel.any():
                groups[klass] = (cls_ids[sel], cls_offsets[sel])
        return _Lexed([(s, r) for s, r in end_rows if r.any()], groups)


def _distinct_targets(row: npt.NDArray[Any]) -> tuple[list[int], npt.NDArray[np.intp]]:
    """The distinct targets (>= 0) of a row of 256, and per byte the index of its (-1: none)."""
    values, inverse = np.unique(row, return_inverse=True)
    index = inverse.reshape(-1).astype(np.intp)
    if len(values) and values[0] < 0:  # -1 sorts first: map it to the last slot
        values = values[1:]
        index = np.where(index == 0, -1, index - 1)
    return [int(v) for v in values], index


def _set_bits(words: npt.NDArray[np.uint32], ids: npt.NDArray[np.integer[Any]]) -> None:
    """Set the bits of token ``ids`` (distinct) in a packed row of uint32 ``words``.

    Distinct bits of a word add up to their OR: one ``bincount`` (exact in float64 below
    2**53) instead of ``bitwise_or.at``, which costs ten times more per token.
    """
    if len(ids) <= 8:  # (EOS, say)
        for token in ids.tolist():
            words[token >> 5] |= np.uint32(1 << (token & 31))
        return
    ids = ids.astype(np.int64)
    bits = np.bincount(ids >> 5, weights=np.left_shift(1, ids & 31), minlength=len(words))
    np.bitwise_or(words, bits.astype(np.uint32), out=words)


class _MatcherDFA:
    """A lazily built DFA over whole matcher states ``(parser configuration, lexer state)``.

    A row (256 next states) is built the first time a walk needs it, with the parser steps at
    lexeme ends folded in, so a token crossing any number of lexemes is one numpy walk.
    ``-2`` marks a row not built yet; state 0 is the sink (no transition). A state may hold a
    truncated configuration (see :meth:`CompiledGrammar._mask`): where its step at a lexeme
    end would read the cut-off bottom, the row leads to state 1, :data:`_DEEP_STATE`, and the
    walk sets the item aside (pending) at the byte that led there.
    """

    def __init__(self, owner: CompiledGrammar) -> None:
        self._owner = owner
        self._accel = _accel.enabled()  # walk in the compiled kernel (same results)
        self.clear()

    def clear(self) -> None:
        """Forget every state (bounds memory; masks already cached stay valid)."""
        # state 0 is the sink: no transition leads anywhere else, and it is not viable
        # state 1 stands for "needs the bottom" (no row; walks set such items aside)
        self.states: list[tuple[Config, int]] = [((), -1), ((), -2)]
        self._ids: dict[Config, dict[int, int]] = {}
        self.trans = np.full(256 * 256, -2, dtype=np.int32)
        self.trans[:512] = 0
        # -1: not known yet; 0: not viable; 1: viable; 2: unknown without the stack's bottom
        self._viable = np.full(256, -1, dtype=np.int8)
        self._viable[:2] = 0
        self._templates: dict[
            tuple[int, int, int], tuple[list[int], list[int], npt.NDArray[np.intp]]
        ] = {}

    def state(self, config: Config, lex: int) -> int:
        """Return the id of a matcher state, creating it."""
        return self.states_of(config, (lex,))[0]

    def states_of(self, config: Config, lexes: Iterable[int]) -> list[int]:
        """Return the ids of the matcher states ``(config, lex)`` for each of ``lexes``.

        States are found per configuration, then per lexer state: a deep configuration is
        hashed once for a whole row, not once per target.
        """
        by_lex = self._ids.get(config)
        if by_lex is None:
            by_lex = self._ids[config] = {}
        out = []
        for lex in lexes:
            sid = by_lex.get(lex)
            if sid is None:
                sid = by_lex[lex] = len(self.states)
                self.states.append((config, lex))
                if sid >= len(self._viable):
                    self._grow()
            out.append(sid)
        return out

    def _grow(self) -> None:
        self._viable = np.concatenate([self._viable, np.full_like(self._viable, -1)])
        grown = np.empty(len(self.trans) * 2, dtype=np.int32)
        grown[: len(self.trans)] = self.trans
        grown[len(self.trans) :] = -2
        self.trans = grown

    def viable(
        self, states: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_] | None]:
        """Per state: can the text go on to a complete sentence (computed on first ask).

        Returns the states known viable, and those that need the stack's bottom to tell (None
        when there are none; only truncated configurations have such states).
        """
        known = self._viable[states]
        unknown = known < 0
        if unknown.any():
            owner = self._owner
            present = np.zeros(len(self.states), dtype=np.bool_)
            present[states[unknown]] = True
            for sid in np.flatnonzero(present).tolist():
                config, lex = self.states[sid]
                ok, deep = owner._viable3(config, owner._context_id(config))
                self._viable[sid] = 1 if ok[lex] else 2 if deep is not None and deep[lex] else 0
            known = self._viable[states]
        deep_states = known == 2
        return known == 1, deep_states if deep_states.any() else None

    def _expand(self, sid: int) -> None:
        owner = self._owner
        config, lex = self.states[sid]
        cid = owner._context_id(config)
        cls = int(owner._contexts[cid].winner[lex])
        after: Config | None = None
        deep = False
        if cls >= 0:
            try:
                after = owner._after(config, cls)
            except NeedsBottom:  # every byte that ends the lexeme needs the bottom
                deep = True
        next_cid = owner._context_id(after) if after is not None else -1
        extend, start, index = self._template(cid, lex, next_cid)
        targets = self.states_of(config, extend)
        if start and after is not None:
            targets += self.states_of(after, start)
        targets.append(_DEEP_STATE if deep else 0)
        self.trans[sid * 256 : sid * 256 + 256] = np.array(targets, dtype=np.int32)[index]

    def _walk_tail(
        self,
        ids: npt.NDArray[np.int32],
        positions: npt.NDArray[np.int64],
        states: npt.NDArray[np.int64],
        pending: list[tuple[int, int, int]],
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
        """Finish a few items byte by byte in Python.

        Rows already built are followed; past the first row not built, the item goes on by
        the parser's steps directly (``_step_byte``), which costs a few dictionary lookups a
        byte instead of a row of 256 a state (long runs such as ``((((`` or ``----`` in an
        expression grammar reach a new configuration at every byte). Only the state each
        item ends in joins the DFA. Items whose step needs the stack's bottom go to
        ``pending`` as ``(token, offset, state)`` and end in the sink.
        """
        owner = self._owner
        table = owner._table
        tokens = owner._vocab.tokens
        out_states = []
        trans = self.trans  # (grows in state(): read again after a state is created)
        for token_id, position, state in zip(
            ids.tolist(), positions.tolist(), states.tolist(), strict=True
        ):
            offset = position - int(table.starts[token_id])
            rest = tokens[token_id][offset:]
            i, n = 0, len(rest)
            while i < n and state:
                byte = rest[i]
                nxt = int(trans[state * 256 + byte])
                if nxt == _DEEP_STATE:
                    pending.append((token_id, offset + i, state))
                    state = 0
                    break
                if nxt >= 0:
                    # a byte that loops on the state loops on the whole run of it
                    i = n - len(rest[i:].lstrip(rest[i : i + 1])) if nxt == state else i + 1
                    state = nxt
                    continue
                where = self.states[state]
                try:
                    while i < n:
                        byte = rest[i]
                        step = owner._step_byte(where[0], where[1], byte)
                        if step is None:
                            state = 0
                            break
                        # (a step back to the same matcher state: the run of this byte loops)
                        i = n - len(rest[i:].lstrip(rest[i : i + 1])) if step == where else i + 1
                        where = step
                    else:
                        state = self.state(*where)
                        trans = self.trans
                except NeedsBottom:
                    pending.append((token_id, offset + i, self.state(*where)))
                    trans = self.trans
                    state = 0
                break
            out_states.append(state)
        return ids, np.asarray(out_states, dtype=np.int64)

    def _template(
        self, cid: int, lex: int, next_cid: int
    ) -> tuple[list[int], list[int], npt.NDArray[np.intp]]:
        """Return a row's template: the lexer states it leads to, and per byte its target.

        The bytes that extend the lexeme lead to states of context ``cid`` (the first list);
        with ``next_cid >= 0``, the bytes that end it and start one in context ``next_cid``
        lead to states of that context (the second list). Per byte, the index of its target
        in the two lists one after the other, or -1 (the last slot: the sink, or the deep
        state). Rows of all configurations with these contexts share the template.
        """
        key = (cid, lex, next_cid)
        found = self._templates.get(key)
        if found is None:
            row = self._owner._contexts[cid].transitions[lex]
            extend, index = _distinct_targets(row)
            start: list[int] = []
            if next_cid >= 0:
                first = self._owner._contexts[next_cid].transitions[0]
                start, start_index = _distinct_targets(np.where(row >= 0, -1, first))
                index = np.where(start_index >= 0, start_index + len(extend), index)
            found = self._templates[key] = (extend, start, index)
        return found

    def walk(
        self,
        ids: npt.NDArray[np.int32],
        offsets: npt.NDArray[np.int32],
        starts: npt.NDArray[np.int64],
        pending: list[tuple[int, int, int]],
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
        """Walk token ``ids[i]`` from byte ``offsets[i]``, from state ``starts[i]``.

        The items must be ordered by remaining length, longest first: the items still walking
        are then always a prefix, and a dead item just sits in the sink until it is dropped.
        All the items of one mask go in one walk, whatever state they start from: the cost of
        a walk is mostly per column, not per item.

        Returns:
            The tokens that consumed all their bytes, and the state each ended in (0: dead).
            Items whose next byte needs the stack's bottom (from truncated states only) go
            to ``pending`` as ``(token, offset of that byte, state before it)``, not here.
        """
        table = self._owner._table
        if self._accel:
            pos = table.starts[ids] + offsets
            tail = self._walk_tail
            return ids, matcher_walk(self, table, ids, pos, starts, pending, _PYTHON_TAIL, tail)
        buf = table.buf
        pos = table.starts[ids] + offsets
        neg_remaining = offsets - table.lengths[ids]
        states = starts
        end_ids: list[npt.NDArray[np.int32]] = []
        end_states: list[npt.NDArray[np.int64]] = []
        column = 0
        while len(ids):
            cut = int(np.searchsorted(neg_remaining, -column, side="left"))
            if cut < len(ids):
                end_ids.append(ids[cut:])
                end_states.append(states[cut:])
                ids, pos, neg_remaining, states = (
                    ids[:cut],
                    pos[:cut],
                    neg_remaining[:cut],
                    states[:cut],
                )
                if not cut:
                    break
            if len(ids) <= _PYTHON_TAIL:  # a few long tokens left: numpy calls cost more
                tail_ids, tail_states = self._walk_tail(ids, pos + column, states, pending)
                end_ids.append(tail_ids)
                end_states.append(tail_states)
                break
            flat = states * 256 + buf.take(pos + column)
            nxt = self.trans.take(flat)
            unbuilt = nxt < 0
            if unbuilt.any():
                present = np.zeros(len(self.states), dtype=np.bool_)
                present[states[unbuilt]] = True
                for sid in np.flatnonzero(present).tolist():
                    self._expand(sid)
                nxt[unbuilt] = self.trans.take(flat[unbuilt])
            deep = nxt == _DEEP_STATE
            if deep.any():
                where = np.flatnonzero(deep)
                pending.extend(
                    zip(
                        ids[where].tolist(),
                        (pos[where] + column - table.starts[ids[where]]).tolist(),
                        states[where].tolist(),
                        strict=True,
                    )
                )
                nxt[where] = 0
            states = nxt.astype(np.int64)
            column += 1
            if column % 4 == 1:  # now and then, drop the dead (a filter costs a few gathers)
                live = states > 0
                if np.count_nonzero(live) < len(live) // 2:
                    ids, pos, neg_remaining, states = (
                        ids[live],
                        pos[live],
                        neg_remaining[live],
                        states[live],
                    )
        if not end_ids:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
        return np.concatenate(end_ids), np.concatenate(end_states)


class _RowWalk:
    """One row's walk: the lexical tree as far as it is cached, then the matcher DFA.

    Tokens that ended the lexeme go on in the next lexeme: a lexical walk again, cached in
    the tree under the static walk and so shared by every configuration whose steps lead to
    the same contexts, while a group is large (tokens starting with a space, say, which
    mostly die on their next byte). Small groups, and whatever crosses more lexemes, walk on
    in the lazy DFA over whole matcher states, each from the state its terminals lead to.
    What needs the stack's bottom (truncated configurations only) goes to ``partial``.
    """

    def __init__(self, owner: CompiledGrammar, partial: _Partial) -> None:
        self.owner = owner
        self.partial = partial
        self.todo: list[tuple[_Lexed, Config, int, int]] = []
        self.rows: list[tuple[_Lexed, npt.NDArray[np.bool_]]] = []
        self.parts: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], Config, int]] = []

    def node(self, lexed: _Lexed, here: Config, cid: int, depth: int) -> None:
        """Queue a walk of the tree (tokens in a lexeme of context ``cid``, at ``here``)."""
        self.todo.append((lexed, here, cid, depth))

    def group(self, lexed: _Lexed, cls: int, here: Config, depth: int) -> None:
        """The tokens of ``lexed`` that ended a lexeme of class ``cls`` at ``here``: go on."""
        owner = self.owner
        ids, offsets = lexed.groups[cls]
        try:
            after = owner._after(here, cls)
            if after is None:
                return
            next_cid = owner._context_id(after)
        except NeedsBottom:
            self.partial.groups.append((lexed, cls, here, depth))
            return
        if depth == 0 or (
            depth < _LEXICAL_DEPTH
            and len(ids) >= owner._lexical_group
            and owner._lexical_nodes < _MAX_LEXICAL_NODES
        ):
            self.todo.append((owner._child(lexed, cls, next_cid), after, next_cid, depth + 1))
        else:
            self.parts.append((ids, offsets, after, 0))

    def run(self) -> npt.NDArray[np.bool_]:
        """Walk everything queued; return the tokens allowed by the DFA part (unpacked)."""
        owner = self.owner
        partial = self.partial
        while self.todo:
            lexed, here, here_cid, depth = self.todo.pop()
            viable, unknown = owner._viable3(here, here_cid)
            self.rows.append((lexed, viable))
            if unknown is not None:
                partial.rows.extend(
                    (row, here, here_cid, state) for state, row in lexed.end_rows if unknown[state]
                )
            for cls in lexed.groups:
                self.group(lexed, cls, here, depth)
        table = owner._table
        allowed = np.zeros(table.size, dtype=np.bool_)
        parts = self.parts
        kernel = owner._lalr_kernel()
        if parts and kernel is not None:  # the compiled walk, the parser inside (LALR)
            configs: dict[Config, int] = {}
            cfg = [configs.setdefault(p[2], len(configs)) for p in parts]
            sizes = [len(p[0]) for p in parts]
            found, pending_items = kernel.walk(
                table,
                np.concatenate([p[0] for p in parts]),
                np.concatenate([p[1] for p in parts]),
                list(configs),
                np.repeat(np.asarray(cfg, dtype=np.int32), sizes),
                np.repeat(np.asarray([p[3] for p in parts], dtype=np.int32), sizes),
            )
            allowed[found] = True
            partial.set_items(pending_items, table.lengths)
        elif parts:  # one walk for all the groups: merged, longest rest first
            ids = np.concatenate([p[0] for p in parts])
            offsets = np.concatenate([p[1] for p in parts])
            dfa = owner._dfa
            starts = np.repeat(
                np.array([dfa.state(p[2], p[3]) for p in parts], dtype=np.int64),
                [len(p[0]) for p in parts],
            )
            neg_rest = offsets - table.lengths[ids]
            if len(ids) > 1 and (neg_rest[1:] < neg_rest[:-1]).any():  # (groups of any order)
                order = rest_order(neg_rest)
                ids, offsets, starts = ids[order], offsets[order], starts[order]
            pending: list[tuple[int, int, int]] = []
            end_ids, end_states = dfa.walk(ids, offsets, starts, pending)
            ok, deep = dfa.viable(end_states)
            allowed[end_ids[ok]] = True
            if deep is not None:
                pending.extend(
                    zip(
                        end_ids[deep].tolist(),
                        table.lengths[end_ids[deep]].tolist(),
                        end_states[deep].tolist(),
                        strict=True,
                    )
                )
            states = dfa.states
            partial.set_items([(t, o, *states[s]) for t, o, s in pending], table.lengths)
        return allowed

    def pack(self, allowed: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
        """The packed row: ``allowed`` and the lexical rows of the viable lexer states."""
        packed = _pack(allowed)
        for lexed, viable in self.rows:
            for state, row in lexed.end_rows:
                if viable[state]:
                    np.bitwise_or(packed, row, out=packed)
        return packed


class _Partial:
    """The row of a (truncated) configuration: the tokens it decides, and those left pending.

    Attributes:
        config: The configuration (truncated, or whole when nothing is pending).
        lex: The lexer state.
        row: The packed row of the tokens allowed whatever the stack's bottom.
        eos: Whether EOS needs the bottom.
        rows: Lexical rows whose lexeme end needs the bottom: ``(row, config, context,
            lexer state)``.
        groups: Tokens that ended a lexeme whose step needs the bottom: ``(walk, class,
            config, depth in the tree)``.
        items: Tokens stopped in the matcher DFA: ``(ids, offsets, config, lexer state)``.
        children: The partial rows of the deeper configurations: what this one left pending,
            decided with the next part of the stack, by that part (see :meth:`deeper`).
    """

    __slots__ = ("children", "config", "eos", "groups", "items", "lex", "row", "rows")

    def __init__(self, config: Config, lex: int) -> None:
        self.config = config
        self.lex = lex
        self.row = np.zeros(0, dtype=np.uint8)
        self.eos = False
        self.rows: list[tuple[npt.NDArray[np.uint8], Config, int, int]] = []
        self.groups: list[tuple[_Lexed, int, Config, int]] = []
        self.items: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.int32], Config, int]] = []
        self.children: dict[tuple[int, ...], _Partial] = {}

    def set_items(self, pending: list[Pending], lengths: npt.NDArray[np.int64]) -> None:
        """Keep the items a walk set aside, by the matcher state they stopped in."""
        by_state: dict[tuple[Config, int], tuple[list[int], list[int]]] = {}
        for token_id, offset, config, lex in pending:
            found = by_state.setdefault((config, lex), ([], []))
            found[0].append(token_id)
            found[1].append(offset)
        for (config, lex), (id_list, offset_list) in by_state.items():
            ids = np.asarray(id_list, dtype=np.int32)
            offsets = np.asarray(offset_list, dtype=np.int32)
            order = np.argsort(offsets - lengths[ids], kind="stable")  # longest rest first
            self.items.append((ids[order], offsets[order], config, lex))

    @property
    def pending(self) -> bool:
        """Whether some token (or EOS) needs the stack below this configuration."""
        return bool(self.eos or self.rows or self.groups or self.items)

    def deeper(self, owner: CompiledGrammar, middle: tuple[int, ...]) -> _Partial:
        """The pending tokens decided with ``middle`` put under the configuration.

        ``middle`` is the next part of the stack down: a truncated one (it starts with
        :data:`BOTTOM`), whose own pending tokens the result keeps, or the whole bottom.
        """
        join = owner._parser.join
        deeper = _Partial(join(self.config, middle), self.lex)
        walk = _RowWalk(owner, deeper)
        for lexed, cls, config, depth in self.groups:
            walk.group(lexed, cls, join(config, middle), depth)
        for ids, offsets, config, lex in self.items:
            joined = join(config, middle)
            try:
                owner._context_id(joined)
            except NeedsBottom:  # (GLR) its lexer context needs more of the stack still
                deeper.items.append((ids, offsets, joined, lex))
                continue
            walk.parts.append((ids, offsets, joined, lex))
        allowed = walk.run()
        if self.eos:
            try:
                if owner._eos_ok(deeper.config, self.lex):
                    allowed[owner._eos] = True
            except NeedsBottom:
                deeper.eos = True
        packed = walk.pack(allowed)
        for row, config, cid, state in self.rows:
            joined = join(config, middle)
            ok, unknown = owner._viable3(joined, cid)
            if ok[state]:
                np.bitwise_or(packed, row, out=packed)
            elif unknown is not None and unknown[state]:
                deeper.rows.append((row, joined, cid, state))
        deeper.row = packed
        return deeper


# LALR with the accel extra: a row is one trie walk in the kernel while it visits fewer nodes
# than this (~1 ms); past it (inside a string, all the tokens go on), that lexer state takes
# the shared lexical walk and the trie of the rests past the lexeme's end from then on
_TRIE_BUDGET = 16_384
_WIDE_LEXEME = 128  # ... and one that this many bytes extend takes them at once
_MAX_RESTS = 8192  # ... unless more tokens than this run past the lexeme's end (keyed rows)
_UNKNOWN = object()  # a memo's miss (its values may be None)
_MAX_REST_ROWS = 256  # rows kept per outcome of a rest trie's walk (a row each)
_DEEP_STATE = 1  # the matcher DFA's "needs the stack's bottom" state
# Rows are keyed by this many top states, then deeper (LALR; a GLR configuration's stacks part
# near the top, and its partial rows cost more than they save on the benchmark's grammars).
_KEY_DEPTHS = (1, 2, 4, 8, 16, 32)
_WIDEN_CANDIDATES = 64  # a scanner is widened only when its rarest terminal is this rare


class _ScannerIndex:
    """Per terminal symbol of an LALR table's rows, the states with an action on it."""

    def __init__(self, actions: ActionRows, is_terminal: npt.NDArray[np.bool_]) -> None:
        bounds = np.asarray(actions.bounds, dtype=np.int64)
        symbols = np.asarray(actions.symbols)
        keep = is_terminal[symbols]
        terms = symbols[keep]
        counted = np.zeros(len(symbols) + 1, dtype=np.int64)
        np.cumsum(keep, out=counted[1:])
        n_terms = counted[bounds]  # where each state's terminal actions begin among `terms`
        state_of = np.repeat(np.arange(len(bounds) - 1, dtype=np.int32), np.diff(n_terms))
        order = np.argsort(terms, kind="stable")
        self._states = state_of[order]
        self._first: list[int] = np.searchsorted(
            terms[order], np.arange(len(actions.names) + 1)
        ).tolist()
        self._terms = terms.tolist()  # (slices of a list make the sets: no numpy per state)
        self._term_bounds = n_terms.tolist()
        # sets of terminal ids as ints, a bit per id (ints: the collector tracks no set)
        self._sets: dict[int, int] = {}
        self._tops: dict[int, int | None] = {}  # per terminal (`widest`)

    def row(self, state: int) -> tuple[int, ...]:
        """The terminal symbols of ``state``'s actions, in the table's order."""
        bounds = self._term_bounds
        return tuple(self._terms[bounds[state] : bounds[state + 1]])

    def terminals(self, state: int) -> int:
        """The terminal symbols of ``state``'s actions, a bit per id (memoised)."""
        found = self._sets.get(state)
        if found is None:
            found = self._sets[state] = _bits(self.row(state))
        return found

    def widest(self, ids: tuple[int, ...]) -> int | None:
        """The one largest set of terminals among the states' that hold ``ids``, if wider.

        None unless the states whose terminals include ``ids`` (found through its rarest
        terminal, when fewer than :data:`_WIDEN_CANDIDATES` states have it) have one set that
        holds all the others, larger than ``ids``. Sets are ints, a bit per terminal id.
        """
        if not ids:
            return None
        first = self._first
        rare = min(ids, key=lambda i: first[i + 1] - first[i])
        if first[rare + 1] - first[rare] > _WIDEN_CANDIDATES:
            return None
        want = _bits(ids)
        if rare in self._tops:
            top = self._tops[rare]
        else:  # the largest set holding `rare`, if it holds all the others
            sets = [self.terminals(c) for c in self._candidates(rare)]
            largest = max(sets, key=int.bit_count)
            top = self._tops[rare] = largest if all(got & ~largest == 0 for got in sets) else None
        if top is not None and want & ~top == 0:  # (then it is the answer: it holds every holder)
            best = top
        else:
            holding = [g for g in map(self.terminals, self._candidates(rare)) if want & ~g == 0]
            best = max(holding, key=int.bit_count)
            if not all(got & ~best == 0 for got in holding):
                return None
        return None if best == want else best

    def _candidates(self, rare: int) -> list[int]:
        """The states with an action on terminal ``rare``."""
        found: list[int] = self._states[self._first[rare] : self._first[rare + 1]].tolist()
        return found


def _bits(ids: Iterable[int]) -> int:
    """The set ``ids`` as an int, bit ``i`` set for each ``i``."""
    out = 0
    for i in ids:
        out |= 1 << i
    return out


def _members(bits: int) -> tuple[int, ...]:
    """The ids of the set bits of ``bits``, ascending."""
    out = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return tuple(out)


_MAX_PARTIALS = 2048  # partial rows kept (all levels; a row each); all are dropped past this


_Kept = TypeVar("_Kept")


class _TopCache(Generic[_Kept]):
    """Results of the compiled walk kept by the top of the stack they read, not the whole.

    A kernel trie walk from a whole stack reports the lowest position of the stack it read
    (:meth:`LALRKernel.row`); any stack with the same states from there up, walked with the
    same key (lexer state, tokens), gives the same result. Entries are found by the sizes of
    the tops stored under the same top state and key (a handful).
    """

    __slots__ = ("_sizes", "_values")

    def __init__(self) -> None:
        self._values: dict[tuple[Hashable, tuple[int, ...]], _Kept] = {}
        # (tuples of ints, not lists: the collector stops tracking them)
        self._sizes: dict[tuple[Hashable, int], tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: Hashable, stack: tuple[int, ...]) -> _Kept | None:
        """The value kept for ``key`` under a top of ``stack``, or None."""
        for size in self._sizes.get((key, stack[-1]), ()):
            if size <= len(stack):
                found = self._values.get((key, stack[-size:]))
                if found is not None:
                    return found
        return None

    def put(self, key: Hashable, stack: tuple[int, ...], deepest: int, value: _Kept) -> None:
        """Keep ``value`` under ``stack[deepest:]`` (``deepest`` < 0: the bottom was read)."""
        if deepest < 0:
            return
        if len(self._values) >= _MAX_CACHED_MASKS:
            self._values.clear()
            self._sizes.clear()
        self._values[(key, stack[deepest:])] = value
        sizes = self._sizes.get((key, stack[-1]), ())
        if len(stack) - deepest not in sizes:
            self._sizes[(key, stack[-1])] = (*sizes, len(stack) - deepest)


class CompiledGrammar(Compiled):
    """A grammar compiled for one vocabulary: LALR tables, lexer DFAs and the mask cache.

    Immutable from the outside; masks and the lazy tables behind them fill in on first use,
    under a lock, so matchers of one compiled grammar may run in several threads. Create with
    :func:`compile_grammar`.

    Attributes:
        grammar: The grammar in Lark syntax.
        is_lalr: Whether the grammar is LALR(1) (else the matcher runs a GLR parser).
        terminal_names: Lark's terminal names, by terminal id.
    """

    def __init__(
        self,
        grammar: str,
        vocab: Vocabulary,
        *,
        budget: Budget = DEFAULT_BUDGET,
        plain: PlainGrammar | None = None,
    ) -> None:
        self._vocab = vocab
        self.grammar = grammar
        self.budget = budget
        self.failed: ConstraintTooLargeError | None = None  # a mask ran out of budget
        self._parser: LALRParser | GLRParser
        with gc_paused():
            # plain BNF (what JSON Schemas compile to, when not handed over as `plain`): our
            # own reader; any other grammar: Lark's loader. The LALR(1) table is ours either
            # way, the same automaton as Lark's in a fraction of its time
            if plain is None:
                plain = read_plain(grammar)
            if plain is not None:
                rules = plain.rules
                lark_terminals = list(plain.terminals)
                ignore = set(plain.ignore)
            else:
                rules, lark_terminals, ignored = read_lark(grammar)
                ignore = set(ignored)
            tables = lalr_tables(rules)
        if tables.conflict:
            # (overlapping alternatives, a lenient schema's oneOf): the same table runs in the
            # GLR parser
            _refuse_hidden_left_recursion(rules)
            self._parser = GLRParser(tables)
        else:
            self._parser = LALRParser(tables)
        _validate_terminals(lark_terminals)
        self.is_lalr = isinstance(self._parser, LALRParser)
        self._unless_pairs: dict[tuple[str, str], bool] = {}  # (Lark's retyping: _scanner)
        self.terminal_names: list[str] = [t.name for t in lark_terminals]
        self._terminal_defs = {t.name: t for t in lark_terminals}
        self._ignore_names = frozenset(n for n in ignore if n in self._terminal_defs)
        self._term_id = {name: i for i, name in enumerate(self.terminal_names)}
        self._term_names = frozenset(self._term_id)
        self._priorities = [int(t.priority) for t in lark_terminals]
        self._term_sort = {
            t.name: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name)
            for t in lark_terminals
        }
        self._ignore_ids = frozenset(self._term_id[n] for n in ignore if n in self._term_id)
        self._dfas = TerminalDFAs(len(lark_terminals))
        for i, t in enumerate(lark_terminals):
            pattern = t.pattern
            if pattern.type == "str" and not pattern.flags and pattern.value:
                self._dfas.literal(i, pattern.value.encode("utf-8"))
                continue
            check(f"grammar terminal {t.name}")
            try:
                dfa = terminal_dfa(t.name, pattern.type, pattern.value, tuple(pattern.flags))
            except InvalidConstraintError as exc:
                raise InvalidConstraintError(
                    f"grammar terminal {t.name} ({pattern}): {exc}"
                ) from exc
            if dfa.accepting[dfa.start]:
                raise InvalidConstraintError(
                    f"grammar terminal {t.name} ({pattern}) matches the empty string; terminals "
                    "must match at least one character"
                )
            self._dfas.set(i, dfa)
        self._table = byte_table(vocab)
        self._trie = token_trie(vocab) if _accel.enabled() else None  # compiled lexer walks
        self._eos = np.asarray(vocab.eos_token_ids, dtype=np.int64)
        self._eos_set = frozenset(vocab.eos_token_ids)
        self._classes: list[tuple[int, ...]] = []
        self._class_ids: dict[tuple[int, ...], int] = {}
        self._contexts: list[ContextDFA] = []
        self._context_by_key: dict[Hashable, int] = {}
        self._context_of: dict[Hashable, int] = {}
        # contexts by the terminal symbols of a state's actions (`_scanner_key`), and (LALR,
        # compiled tables) the index those symbols are read from (`_index`)
        self._context_by_terms: dict[Hashable, int] = {}
        self._scanner_index: _ScannerIndex | None = None
        self._apart_memo: dict[tuple[str, str], bool] = {}
        self._wide_keys: dict[int, tuple[int, ...]] = {}  # by the terminals' bits
        self._static: dict[tuple[int, int], _Lexed] = {}
        self._after_memo: dict[tuple[Config, int], Config | None] = {}
        self._ok_terms: dict[
            tuple[Config, int], tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_] | None]
        ] = {}
        self._masks: dict[tuple[Config, int], Row] = {}
        # (LALR, compiled walk) trie rows and the rests' outcomes past a lexeme's end, by the
        # top states their walk read (`_top_row`, `_rest_row`)
        self._top_rows: _TopCache[npt.NDArray[np.uint32]] = _TopCache()
        self._rest_outcomes: _TopCache[bytes] = _TopCache()  # (a mask over the rests, packed)
        # the tokens allowed per outcome of a rest trie's walk (`_rest_row`)
        self._rest_rows: dict[tuple[RestTrie, bytes], npt.NDArray[np.uint32]] = {}
        self._partials: dict[tuple[Config, int], _Partial] = {}
        self._partial_count = 0  # partial rows kept, all levels
        # lexical parts kept by the lexer states of ``_static`` (their ``union`` and ``bases``)
        self._lexical_rows = 0
        # the levels of partial rows; tests set () to compute every row whole, or set GLR's
        self._key_depths: tuple[int, ...] = _KEY_DEPTHS if self.is_lalr else ()
        self._steps: dict[tuple[Config, int, int], tuple[Config, int]] = {}
        self._ends: tuple[list[bool], list[bool]] | None = None  # (LALR: `_end_filter`)
        self._dfa = _MatcherDFA(self)
        # LALR with the accel extra: the tokens past a lexeme's end walk in the compiled
        # kernel, the parser inside it, instead of the matcher DFA (built on first use)
        self._kernel: LALRKernel | None = None
        self._use_kernel = self.is_lalr and _accel.enabled()
        self._trie_over: set[tuple[int, int]] = set()  # lexer states whose trie walks run long
        self._trie_rows = True  # tests set False to run the keyed rows (and the items' kernel)
        _accel.warm_up()  # (the kernels load here, never in a mask; a no-op once done)
        if self._use_kernel and self._trie is not None:  # (the trie's layout, once per vocabulary)
            trie_layout(self._trie)
        self._lexical_group = _LEXICAL_GROUP  # tests lower it to run the lexical tree deep
        self._lexical_nodes = 0  # walks cached in the lexical trees below `_static`
        self._lock = threading.RLock()
        self.initial_config: Config = self._parser.initial
        finished = np.zeros(self._table.size, dtype=np.bool_)
        finished[self._eos] = True
        self._finished_row: Row = _pack(finished).view(np.int32)
        self._finished_row.flags.writeable = False

    # ------------------------------------------------------------------ public
    @property
    def nbytes(self) -> int:
        """Bytes of the cached masks and partial rows (what the compile cache bounds).

        The trie rows kept by their top (:class:`_TopCache`) count too, though most are the
        same arrays as the masks', and so do the lexical parts of the rows of a lexer state
        most bytes extend (``_Lexed.bases`` and ``union``, :meth:`_lexeme_row`), some of them
        the same array; an upper bound.
        """
        rows = len(self._masks) + self._partial_count + len(self._top_rows) + len(self._rest_rows)
        # (counted as they are kept, not summed over the lexer states here: the compile cache
        # reads every entry's bytes every 16 insertions; 1.5-2.8 us a grammar this way)
        return (rows + self._lexical_rows) * int(self._finished_row.nbytes)

    @property
    def vocabulary(self) -> Vocabulary:
        """The vocabulary the grammar was compiled for."""
        return self._vocab

    def matcher(self) -> GrammarMatcher:
        """Return a fresh matcher at the start of the grammar."""
        return GrammarMatcher(self)

    def accepts_text(self, data: bytes) -> bool:
        """Return whether ``data`` is a complete sentence under the matcher's lexing semantics.

        A byte-level check without the vocabulary (tests and debugging).
        """
        state: tuple[Config, int] | None = (self.initial_config, 0)
        for byte in data:
            if state is None:
                return False
            state = self._step_byte(state[0], state[1], byte)
        return state is not None and self._eos_ok(state[0], state[1])

    # --------------------------------------------------------------- contexts
    def _classify(self, terms: tuple[int, ...]) -> int:
        cls = self._class_ids.get(terms)
        if cls is None:
            cls = self._class_ids[terms] = len(self._classes)
            self._classes.append(terms)
        return cls

    def _context_id(self, config: Config) -> int:
        """Return the lexer context of a configuration (building its DFA on first use)."""
        if self.is_lalr:  # (the stack's top state: LALRParser.top, inline)
            state: int = config[-1]  # type: ignore[index]
            cid = self._context_of.get(state)
            if cid is None:
                cid = self._context_of[state] = self._lark_context(state)
            return cid
        cid = self._context_of.get(config)
        if cid is None:
            cid = self._context_of[config] = self._glr_context(config)
        return cid

    def _scanner(
        self, state: int, terms: Hashable | None = None
    ) -> tuple[list[str], dict[str, list[str]]]:
        """Lark's contextual-lexer scanner of one LALR state: its terminals, order, retyping.

        As Lark's ``ContextualLexer`` builds it (the state's terminals plus ``%ignore``, sorted
        by ``BasicLexer``; a string terminal that a regex terminal of the same priority
        matches whole is retyped from it, and left out when its flags allow, as Lark's
        ``_create_unless`` does), without compiling the scanner's regexes (a second for 5,000
        terminals, and the matcher never runs them): which pairs match is kept across states.

        ``terms``: the state's :meth:`_scanner_key`, when the caller has it: its terminals are
        read from it, not from the state's dict of actions (made on first use: ~10-20 us of a
        first visit that builds a context).

        Returns:
            The terminal names in order, and per regex terminal the string terminals it
            retypes (in order; only those that retype some).
        """
        assert isinstance(self._parser, LALRParser)
        by_name = self._terminal_defs
        actions = self._parser.actions
        names: set[str]
        if isinstance(terms, tuple) and isinstance(actions, ActionRows):
            ids = terms
            names = set(map(actions.names.__getitem__, ids)) | self._ignore_names
        elif isinstance(terms, frozenset):
            names = set(terms) | self._ignore_names
        else:
            names = {n for n in actions[state] if n in by_name} | self._ignore_names
        terminals = sorted(
            (by_name[n] for n in names),
            key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name),
        )
        strings = [t for t in terminals if t.pattern.type == "str"]
        embedded: set[str] = set()
        unless: dict[str, list[str]] = {}
        for regex in terminals:
            if regex.pattern.type != "re":
                continue
            found = [t.name for t in strings if self._retypes(regex, t)]
            if found:
                unless[regex.name] = found
                embedded.update(
                    t.name
                    for t in strings
                    if t.name in found and t.pattern.flags <= regex.pattern.flags
                )
        return [t.name for t in terminals if t.name not in embedded], unless

    def _retypes(self, regex: Any, string: Any) -> bool:
        """Whether Lark retypes terminal ``string`` from ``regex`` (``_create_unless``; kept)."""
        key = (regex.name, string.name)
        found = self._unless_pairs.get(key)
        if found is None:
            text = string.pattern.value
            match = (
                re.match(regex.pattern.to_regexp(), text)
                if string.priority == regex.priority
                else None
            )
            found = self._unless_pairs[key] = match is not None and match.group(0) == text
        return found

    def _lark_context(self, state: int) -> int:
        """Lark's contextual lexer of one LALR state: its terminals, order and retyping.

        A state may take a wider state's context instead (:meth:`_wider_scanner`): the one set
        of terminals among the states that hold all of its own that holds every other such
        set, when those terminals lex apart (:meth:`_wide_key`). The terminals the state does
        not take then end no lexeme it would have read and begin none that one of its own
        matches a prefix of, and the parser refuses them: the same masks. The member
        positions of a JSON Schema object (each takes the names still to come) share the
        context of the state after its ``{``, built once rather than once per position:
        Kubernetes' pod, with 38 members in one object, built 38 contexts of up to 450 states.
        """
        terms = self._scanner_key(state)
        found = self._context_by_terms.get(terms)
        if found is None:
            key = self._wider_scanner(terms) or terms
            found = self._context_by_terms.get(key)
            if found is None:
                found = self._lark_context_of(state, key)
            self._context_by_terms[terms] = found
        return found

    def _lark_context_of(self, state: int, terms: Hashable) -> int:
        names, retyped = self._scanner(state, terms)
        term_id = self._term_id
        order = tuple(term_id[name] for name in names)
        unless = {
            term_id[name]: tuple(term_id[s] for s in found) for name, found in retyped.items()
        }
        key = (order, tuple(sorted(unless.items())))
        cid = self._context_by_key.get(key)
        if cid is None:
            cid = self._context_by_key[key] = len(self._contexts)
            self._contexts.append(
                build_context(
                    order, unless, self._dfas, self._classify, priorities=self._priorities
                )
            )
        self._context_by_terms[terms] = cid
        return cid

    def _wider_scanner(self, terms: Hashable) -> tuple[int, ...] | None:
        """The key of the wider scanner a state with terminals ``terms`` takes, or None.

        See :meth:`_lark_context`. With the compiled tables only (whose rows are arrays); the
        Python tables keep a context per scanner, which tests compare masks with.
        """
        actions = self._parser.actions
        if not isinstance(terms, tuple) or not isinstance(actions, ActionRows):
            return None
        best = self._index(actions).widest(terms)
        if best is None:
            return None
        wide = self._wide_keys.get(best)
        if wide is None:
            wide = self._wide_keys[best] = self._wide_key(best)
        return wide or None

    def _wide_key(self, terminal_bits: int) -> tuple[int, ...]:
        """The scanner key of ``terminal_bits``' terminals if its subsets may lex as they do.

        ``terminal_bits`` has a bit per terminal id; the key is their ids ascending, else ().

        They may when every terminal is :meth:`_apart` from every other (and ``%ignore``)
        and all have one priority: then a lexeme of any of them never meets a text that
        another one matches, so the ones a state does not take change no lexeme of those it
        does (see :meth:`_lark_context`).
        """
        actions = self._parser.actions
        assert isinstance(actions, ActionRows)
        terminals = _members(terminal_bits)
        names = [actions.names[i] for i in terminals]
        names.extend(self._ignore_names)
        defs = self._terminal_defs
        if len({defs[name].priority for name in names}) > 1:
            return ()
        texts = {name: self._literal_of(name) for name in names}
        literals = sorted(text for text in texts.values() if text is not None)
        if any(b.startswith(a) for a, b in itertools.pairwise(literals)):  # (sorted: neighbours)
            return ()
        for name in [name for name, text in texts.items() if text is None]:  # the regexes
            for other in names:
                if other != name and not (self._apart(name, other) and self._apart(other, name)):
                    return ()
        return terminals  # (ascending)

    def _literal_of(self, name: str) -> bytes | None:
        """A plain literal terminal's bytes, else None."""
        pattern = self._terminal_defs[name].pattern
        if pattern.type == "str" and not pattern.flags:
            return pattern.value.encode("utf-8")  # type: ignore[no-any-return]
        return None

    def _apart(self, added: str, other: str) -> bool:
        """Whether no text that ``other`` matches begins a text of ``added`` (memoised).

        One of them at least is a regex (:meth:`_wide_key` compares two literals itself).
        Exact where one is a literal; two regexes are apart only when no first byte is
        common to both (conservative: a refusal keeps the state's own context).
        """
        key = (added, other)
        found = self._apart_memo.get(key)
        if found is not None:
            return found
        a_lit, o_lit = self._literal_of(added), self._literal_of(other)
        if a_lit is not None:  # does the regex `other` match a prefix of the literal?
            dfa = self._dfas[self._term_id[other]]
            q = dfa.start
            found = True
            for byte in a_lit:
                q = int(dfa.transitions[q, byte])
                if q < 0:
                    break
                if dfa.accepting[q]:
                    found = False
                    break
        elif o_lit is not None:  # can the regex `added` go on past the literal?
            dfa = self._dfas[self._term_id[added]]
            q = dfa.start
            for byte in o_lit:
                q = int(dfa.transitions[q, byte])
                if q < 0:
                    break
            found = q < 0
        else:
            a_dfa = self._dfas[self._term_id[added]]
            o_dfa = self._dfas[self._term_id[other]]
            a_first = a_dfa.transitions[a_dfa.start] >= 0
            found = not bool((a_first & (o_dfa.transitions[o_dfa.start] >= 0)).any())
        self._apart_memo[key] = found
        return found

    def _scanner_key(self, state: int) -> Hashable:
        """The terminals of LALR state ``state``'s actions: all its scanner depends on.

        Most states share theirs with others: a context found by them skips the scanner
        (:meth:`_scanner`) and, with the compiled tables, the state's dict of actions (~40-100
        us a state on the 2-core VM, at a mask's first visit). With the compiled tables they
        are the symbols' ids (a tuple, from :class:`_ScannerIndex`), else their names.
        """
        actions = self._parser.actions
        if not isinstance(actions, ActionRows):
            return frozenset(actions[state].keys() & self._terminal_defs.keys())
        return self._index(actions).row(state)

    def _index(self, actions: ActionRows) -> _ScannerIndex:
        """The compiled tables' :class:`_ScannerIndex` (made on first use)."""
        index = self._scanner_index
        if index is None:
            by_name = self._terminal_defs
            is_terminal = np.fromiter(
                (name in by_name for name in actions.names),
                dtype=np.bool_,
                count=len(actions.names),
            )
            index = self._scanner_index = _ScannerIndex(actions, is_terminal)
        return index

    def _glr_context(self, config: Config) -> int:
        """The terminals some stack can shift next (plus ``%ignore``); a lexeme becomes each."""
        assert isinstance(self._parser, GLRParser)
        names = self._parser.shiftable(config, self._term_names)
        terms = {self._term_id[n] for n in names} | self._ignore_ids
        key = frozenset(terms)
        cid = self._context_by_key.get(key)
        if cid is None:
            order = sorted(terms, key=lambda t: self._term_sort[self.terminal_names[t]])
            cid = self._context_by_key[key] = len(self._contexts)
            self._contexts.append(
                build_context(order, {}, self._dfas, self._classify, all_matches=True)
            )
        return cid

    def _lalr_kernel(self) -> LALRKernel | None:
        """The compiled walk past lexeme ends (LALR with the accel extra; built on first use)."""
        if self._kernel is None and self._use_kernel:
            assert isinstance(self._parser, LALRParser)
            self._kernel = LALRKernel(
                self._parser,
                self._term_id,
                self._ignore_ids,
                self._contexts,
                self._classes,
                self._state_context,
            )
        return self._kernel

    def _state_context(self, state: int) -> int:
        """The lexer context of LALR state ``state`` (the kernel's; a method, so it pickles)."""
        return self._context_id((state,))

    def _context(self, config: Config) -> ContextDFA:
        return self._contexts[self._context_id(config)]

    # ------------------------------------------------------------------ parser
    def _after_term(self, config: Config, term: int) -> Config | None:
        if term in self._ignore_ids:
            return config
        return self._parser.feed(config, self.terminal_names[term])

    def _after(self, config: Config, cls: int) -> Config | None:
        """Return the configuration after a lexeme of class ``cls``, or None if rejected."""
        key = (config, cls)
        found = self._after_memo.get(key, _UNKNOWN)
        if found is not _UNKNOWN:  # (a miss raised no KeyError: most lookups miss)
            return found
        terms = self._classes[cls]
        result: Config | None
        if len(terms) == 1:
            result = self._after_term(config, terms[0])
        else:  # GLR: every reading of the lexeme, on every stack
            stacks: set[Hashable] = set()
            for term in terms:
                after = self._after_term(config, term)
                if after is not None:
                    stacks.update(cast("frozenset[Hashable]", after))
            result = frozenset(stacks) if stacks else None
        self._after_memo[key] = result
        return result

    def _viable(self, config: Config, cid: int) -> npt.NDArray[np.bool_]:
        """Per lexer state of context ``cid``: can the lexeme become a terminal the parser takes."""
        return self._viable3(config, cid)[0]

    def _viable3(
        self, config: Config, cid: int
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_] | None]:
        """:meth:`_viable`, and the lexer states that need the stack's bottom to tell.

        The second array is None when no state does (always, for a whole configuration).
        """
        key = (config, cid)
        viable = self._ok_terms.get(key)
        if viable is None:
            context = self._contexts[cid]
            ok = np.zeros(len(self._dfas), dtype=np.bool_)
            deep: npt.NDArray[np.bool_] | None = None
            for term in np.flatnonzero(context.reach.any(axis=0)).tolist():
                try:
                    ok[term] = self._after_term(config, term) is not None
                except NeedsBottom:
                    if deep is None:
                        deep = np.zeros(len(self._dfas), dtype=np.bool_)
                    deep[term] = True
            computed = np.asarray((context.reach & ok).any(axis=1), dtype=np.bool_)
            unknown: npt.NDArray[np.bool_] | None = None
            if deep is not None:
                unknown = ~computed & (context.reach & deep).any(axis=1)
                if not unknown.any():
                    unknown = None
            self._ok_terms[key] = viable = (computed, unknown)
        return viable

    def _eos_ok(self, config: Config, lex: int) -> bool:
        ends = self._end_filter() if self.is_lalr else None
        if lex == 0:
            if ends is not None and not ends[0][config[-1]]:  # type: ignore[index]
                return False
            return self._parser.accepts_end(config)
        cls = int(self._context(config).winner[lex])
        if cls < 0:
            return False
        if ends is not None:
            term = self._classes[cls][0]
            if term in self._ignore_ids:
                if not ends[0][config[-1]]:  # type: ignore[index]
                    return False
            elif not ends[1][term]:
                return False
        after = self._after(config, cls)
        return after is not None and self._parser.accepts_end(after)

    def _end_filter(self) -> tuple[list[bool], list[bool]]:
        """(LALR) Two necessary conditions of :meth:`_eos_ok`, read off the table once.

        Per state: whether it has an action on ``$END`` (the parser refuses the end at once
        where the top state has none). Per terminal: whether a state its shift goes to has
        one (a lexeme's terminal fed before the end leaves such a state on top). Most states
        of a document's middle fail the first (JSON: all but the closing ones), so the
        parser's walk down a deep stack is skipped there; where both hold, it runs as before.
        """
        found = self._ends
        if found is None:
            bounds, symbols, codes, names = action_arrays(cast("LALRParser", self._parser).actions)
            n_states = len(bounds) - 1
            owner = np.repeat(np.arange(n_states), np.diff(bounds))
            has_end = np.zeros(n_states, dtype=np.bool_)
            if END in names:
                has_end[owner[symbols == names.index(END)]] = True
            shifts = codes >= 0
            reach = np.zeros(len(names), dtype=np.bool_)
            reach[symbols[shifts][has_end[codes[shifts]]]] = True
            index = {name: i for i, name in enumerate(names)}
            after = [name in index and bool(reach[index[name]]) for name in self.terminal_names]
            found = self._ends = (cast("list[bool]", has_end.tolist()), after)
        return found

    def _step_byte(self, stack: Config, lex: int, byte: int) -> tuple[Config, int] | None:
        context = self._context(stack)
        nxt = context.rows[lex][byte]
        if nxt >= 0:
            return stack, nxt
        return self._cross(stack, context, lex, byte)

    def _cross(
        self, stack: Config, context: ContextDFA, lex: int, byte: int
    ) -> tuple[Config, int] | None:
        """``byte`` where lexeme ``lex`` (of ``stack``'s ``context``) cannot go on.

        The lexeme's winning terminal is fed to the parser and ``byte`` starts the next
        lexeme; ``None`` when the lexeme is not a whole terminal or either step is refused.
        """
        term = int(context.winner[lex])
        if term < 0:
            return None
        after = self._after(stack, term)
        if after is None:
            return None
        nxt = self._context(after).rows[0][byte]
        if nxt < 0:
            return None
        return after, nxt

    def _step_token(self, stack: Config, lex: int, token_id: int) -> tuple[Config, int] | None:
        key = (stack, lex, token_id)
        found = self._steps.get(key)
        if found is not None:
            return found
        with self._lock:  # (_step_byte's steps, the context looked up once per lexeme)
            context = self._context(stack)
            rows = context.rows
            for byte in self._vocab.tokens[token_id]:
                nxt = rows[lex][byte]
                if nxt < 0:
                    crossed = self._cross(stack, context, lex, byte)
                    if crossed is None:
                        return None
                    stack, nxt = crossed
                    context = self._context(stack)
                    rows = context.rows
                lex = nxt
            state = (stack, lex)
            if len(self._steps) >= _MAX_MEMO:
                self._steps.clear()
            self._steps[key] = state
            return state

    # ------------------------------------------------------------------- masks
    def _mask(self, stack: Config, lex: int) -> Row:
        """The mask of a matcher state: cached by the whole state, computed from a partial one.

        A row is keyed by what it depends on: the top few states of the stack (for GLR, of the
        stacks' shared part, with what lies above it). The row of the truncated configuration
        (``split`` in :mod:`~outlines_like.fsm._grammar_parser`) is computed once, as a
        :class:`_Partial`: every token whose walk reads only those states is decided there,
        for every stack with that top, since the parser does on the truncated stack exactly
        what it does on the whole one (the argument is in the parser module's docstring),
        the lexer context depends on the top state (LALR) or on such steps (GLR), and the
        lexer walks the tokens' bytes alone. Two configurations with the same key therefore
        get the same decisions, and the same matcher states after each token, up to the
        bottom, which the matcher keeps (it steps whole stacks). The tokens whose walk needs
        a state below the top (a ``)`` closing deeper than the top holds, say) are kept
        pending, each at the byte and matcher state where it stopped, and decided with the
        next states down (``_KEY_DEPTHS``: 1, 2, 4 ... states, each level cached under the
        one above, by the states it adds), then with the whole stack. The test comparing
        keyed rows with rows computed from scratch, over random configurations of the
        grammar corpus, is in ``tests/fsm/test_grammar_keys.py``.
        """
        key = (stack, lex)
        row = self._masks.get(key)
        if row is None:
            with self._lock:  # the lazy tables below are shared by every matcher
                if len(self._dfa.states) > _MAX_DFA_STATES:
                    self._dfa.clear()
                # (under GLR, configurations key the contexts too; a cleared entry comes back
                # with the same context id, from `_context_by_key`)
                for memo in (self._after_memo, self._ok_terms, self._context_of):
                    if len(memo) >= _MAX_MEMO:
                        memo.clear()
                if self._partial_count >= _MAX_PARTIALS:
                    self._partials.clear()
                    self._partial_count = 0
                self._parser.trim(_MAX_MEMO)
                try:
                    with metered(self.budget, "mask"):
                        row = self._compute_row(stack, lex)
                except ConstraintTooLargeError as exc:
                    self.failed = exc
                    raise
                if len(self._masks) >= _MAX_CACHED_MASKS:
                    self._masks.pop(next(iter(self._masks)))
                self._masks[key] = row
        return row

    def _compute_row(self, stack: Config, lex: int) -> Row:
        """The row of a whole stack: partial rows from the top down, shared where they can be.

        (LALR with the accel extra: one walk of the token trie in the kernel instead.)
        """
        kernel = self._lalr_kernel() if self._trie_rows else None
        state_key = (self._context_id(stack), lex) if kernel is not None else (-1, lex)
        if kernel is not None and state_key[1] and state_key not in self._trie_over:
            # a lexeme most bytes extend (a string's inside): most tokens go on, past the budget
            row_of = self._contexts[state_key[0]].transitions[lex]
            if np.count_nonzero(row_of >= 0) > _WIDE_LEXEME:
                self._trie_over.add(state_key)
        if kernel is not None and self._trie is not None and state_key not in self._trie_over:
            words = self._top_row(kernel, cast("tuple[int, ...]", stack), lex)
            if words is not None:
                if self._eos_ok(stack, lex):
                    words = words.copy()
                    _set_bits(words, self._eos)
                row: Row = words[:-1].view(np.int32)
                row.flags.writeable = False
                return row
            self._trie_over.add(state_key)  # (inside a string, say): the shared walks cost less
        if kernel is not None:
            found = self._lexeme_row(kernel, stack, lex, state_key[0])
            if found is not None:
                return found
        parser = self._parser
        levels: list[tuple[Config, tuple[int, ...]]] = []
        for depth in self._key_depths:
            split = parser.split(stack, depth)
            if split is None:
                break
            levels.append(split)
        partial = None
        if levels:
            key = (levels[0][0], lex)
            partial = self._partials.get(key)
            if partial is None:
                try:
                    partial = self._compute_mask(levels[0][0], lex)
                except NeedsBottom:  # (GLR) the lexer context itself needs the bottom
                    partial = None
                else:
                    self._partials[key] = partial
                    self._partial_count += 1
        if partial is None:
            partial = self._compute_mask(stack, lex)
            levels = []
        packed = partial.row
        for i, (_, bottom) in enumerate(levels):
            if not partial.pending:
                break
            if i + 1 < len(levels):  # the states between this level and the next one
                middle = (BOTTOM, *bottom[len(levels[i + 1][1]) :])
                child = partial.children.get(middle)
                if child is None:
                    child = partial.children[middle] = partial.deeper(self, middle)
                    self._partial_count += 1
            else:  # the whole stack
                child = partial.deeper(self, bottom)
            packed = packed | child.row
            partial = child
        assert not partial.pending, "a whole stack leaves nothing pending"
        mask: Row = packed.view(np.int32)
        mask.flags.writeable = False
        return mask

    def _top_row(
        self, kernel: LALRKernel, stack: tuple[int, ...], lex: int
    ) -> npt.NDArray[np.uint32] | None:
        """The kernel's trie row of a whole stack (EOS not set: read-only, shared), or None.

        The walk reads the stack from the top down to some position and no further
        (:meth:`LALRKernel.row`), so its row is kept under the states it read: a later stack
        with the same states on top (an array's third element after its second, an
        expression two parentheses deeper) takes it without a walk. None: the walk would
        visit more than its budget of nodes.
        """
        found = self._top_rows.get(lex, stack)
        if found is not None:
            return found
        walked = kernel.row(self._trie, stack, lex, _TRIE_BUDGET)  # type: ignore[arg-type]
        if walked is None:
            return None
        words, deepest = walked
        words.flags.writeable = False
        self._top_rows.put(lex, stack, deepest, words)
        return words

    def _lexeme_row(self, kernel: LALRKernel, stack: Config, lex: int, cid: int) -> Row | None:
        """The row of a whole stack in a lexer state most bytes extend (a string's inside).

        The lexical walk from ``(cid, lex)`` (shared by the vocabulary when the lexeme's part
        of the DFA is small) splits the tokens: those that stay inside the lexeme are allowed
        by the viability of the state they end in (one packed row per state), and only those
        that run past its end (a closing quote and what follows: a thousand or so) walk on
        in the compiled walk from the whole stack, their distinct rests as a trie from the
        state they stopped in (:class:`~outlines_like.fsm._grammar_kernel.RestTrie`). None
        when too many tokens run past the lexeme's end (their tries would cost more than the
        keyed rows: an identifier's start in a large context, say).
        """
        lexed = self._static_lexed(cid, lex)
        if lexed.stops is not None and len(lexed.stops[0]) > _MAX_RESTS:
            return None
        if lexed.rests is None:
            lexed.rests = self._rest_tries(lexed)
            self._lexical_rows += lexed.union is None
            lexed.union = np.bitwise_or.reduce(
                [np.zeros(self._finished_row.nbytes, dtype=np.uint8)]
                + [lexical for _, lexical in lexed.end_rows]
            )
            # the terminals the states tokens end in can still become
            reach = self._contexts[cid].reach[[state for state, _ in lexed.end_rows]]
            lexed.reach_terms = np.flatnonzero(reach.any(axis=0)).tolist()
        assert lexed.union is not None
        assert lexed.reach_terms is not None
        # the states tokens end in: viable as in _viable, from their own terminals only; the
        # lexical part of the row is kept per set of those terminals the parser takes
        taken = tuple(self._after_term(stack, term) is not None for term in lexed.reach_terms)
        lexical_part = lexed.bases.get(taken)
        if lexical_part is None:
            reach = self._contexts[cid].reach[[state for state, _ in lexed.end_rows]]
            ok_terms = np.zeros(reach.shape[1], dtype=np.bool_)
            ok_terms[lexed.reach_terms] = taken
            viable = np.asarray((reach & ok_terms).any(axis=1), dtype=np.bool_)
            if viable.all():  # (inside a string: every state it ends in can close it)
                lexical_part = lexed.union
            else:
                lexical_part = np.zeros(self._finished_row.nbytes, dtype=np.uint8)
                for (_, lexical), ok in zip(
                    lexed.end_rows, cast("list[bool]", viable.tolist()), strict=True
                ):
                    if ok:
                        np.bitwise_or(lexical_part, lexical, out=lexical_part)
            lexical_part.flags.writeable = False
            lexed.bases[taken] = lexical_part
            self._lexical_rows += 1
        packed = lexical_part.copy()
        words = packed.view(np.uint32)
        for state, rests in lexed.rests:
            np.bitwise_or(
                words,
                self._rest_row(kernel, rests, cast("tuple[int, ...]", stack), state),
                out=words,
            )
        if self._eos_ok(stack, lex):
            _set_bits(words, self._eos)
        row: Row = packed.view(np.int32)
        row.flags.writeable = False
        return row

    def _rest_row(
        self, kernel: LALRKernel, rests: RestTrie, stack: tuple[int, ...], lex: int
    ) -> npt.NDArray[np.uint32]:
        """The tokens of ``rests`` allowed from ``(stack, lex)``, as a packed row (read-only).

        The walk's outcome over the rests is kept by the top of the stack it read
        (:class:`_TopCache`), and the row of each outcome by the outcome: a string's rests
        past its closing quote have a few outcomes (a key's, a value's in an object, in an
        array) however deep the string.
        """
        key = (rests, lex)
        outcome = self._rest_outcomes.get(key, stack)
        if outcome is None:
            mask, deepest = kernel.rests(rests, stack, lex)
            outcome = mask.tobytes()
            self._rest_outcomes.put(key, stack, deepest, outcome)
        found = self._rest_rows.get((rests, outcome))
        if found is None:
            bits = np.unpackbits(np.frombuffer(outcome, dtype=np.uint8), bitorder="little")
            found = np.zeros(self._finished_row.size, dtype=np.uint32)
            _set_bits(found, rests.ids[bits.view(np.bool_)[rests.rest_of]])
            found.flags.writeable = False
            if len(self._rest_rows) >= _MAX_REST_ROWS:
                self._rest_rows.clear()
            self._rest_rows[(rests, outcome)] = found
        return found

    def _body_sets(self, key: bytes) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.integer[Any]]]:
        """A string body's token sets (:data:`~outlines_like.fsm._grammar_walk.BodySets`)."""
        return body_token_sets(self._vocab, key)

    def _rest_tries(self, lexed: _Lexed) -> list[tuple[int, RestTrie]]:
        """The tokens that ran past the lexeme's end in ``lexed``, as a trie per lexer state.

        Built once per vocabulary when the walk is the vocabulary's (:func:`lexeme_walk`).
        """
        if lexed.shared_from is not None:
            shared, order = lexed.shared_from
            return [(order[state], trie) for state, trie in shared_rest_tries(shared, self._table)]
        assert lexed.stops is not None
        ids, offsets, states = lexed.stops
        return [
            (state, rest_trie(self._table, ids[states == state], offsets[states == state]))
            for state in np.unique(states).tolist()
        ]

    def _static_lexed(self, cid: int, lex: int) -> _Lexed:
        """The whole vocabulary walked in context ``cid`` from lexer state ``lex`` (cached)."""
        found = self._static.get((cid, lex))
        if found is None:
            context = self._contexts[cid]
            order = sub_dfa(context.rows, lex)
            if order is None:  # a large lexer context (many literals): its own walk
                found = _Lexed.walked(context, lex, self._table, trie=self._trie)
            else:  # a small one (inside a string, a number ...): shared by the vocabulary
                shared = lexeme_walk(
                    self._vocab,
                    self._table,
                    context.transitions,
                    context.accepting,
                    order,
                    self._trie,
                    self._body_sets,
                )
                found = _Lexed.shared(shared, order, context, self._table)
            self._static[(cid, lex)] = found
        return found

    def _child(self, lexed: _Lexed, cls: int, cid: int) -> _Lexed:
        """The tokens that ended a lexeme of class ``cls`` in ``lexed``, walked on in ``cid``."""
        found = lexed.children.get((cls, cid))
        if found is None:
            ids, offsets = lexed.groups[cls]
            if offsets.any():
                context = self._contexts[cid]
                found = _Lexed.walked(context, 0, self._table, ids, offsets, self._trie)
            else:  # tokens that start a lexeme at their first byte: the start state's walk
                start = self._static_lexed(cid, 0)
                if len(ids) == len(self._table.text_ids):
                    found = start
                else:
                    found = start.restricted(ids, self._table.size)
            lexed.children[(cls, cid)] = found
            self._lexical_nodes += 1
        return found

    def _compute_mask(self, config: Config, lex: int) -> _Partial:
        """The mask of ``(config, lex)``; for a truncated configuration, a partial one.

        Raises:
            NeedsBottom: (GLR) The configuration's own lexer context needs the bottom.
        """
        cid = self._context_id(config)
        partial = _Partial(config, lex)
        walk = _RowWalk(self, partial)
        walk.node(self._static_lexed(cid, lex), config, cid, 0)
        allowed = walk.run()
        try:
            if self._eos_ok(config, lex):
                allowed[self._eos] = True
        except NeedsBottom:
            partial.eos = True
        partial.row = walk.pack(allowed)
        return partial


class GrammarMatcher:
    """Per-generation state over a :class:`CompiledGrammar` (see the module's rejection contract).

    The state is ``(LALR stack, lexer state, finished)``; copying is O(1).
    """

    __slots__ = ("_compiled", "_finished", "_lex", "_stack")

    def __init__(self, compiled: CompiledGrammar) -> None:
        self._compiled = compiled
        self._stack: Config = compiled.initial_config
        self._lex = 0
        self._finished = False

    def _row(self) -> Row:
        if self._finished:
            return self._compiled._finished_row
        return self._compiled._mask(self._stack, self._lex)

    def fill_bitmask(self, out: npt.NDArray[np.int32]) -> None:
        """Write the allowed-token bitmask into ``out`` (``ceil(V/32)`` int32 words, any shape)."""
        row = self._row()
        if out.size != row.size:
            raise ValueError(
                f"bitmask has {out.size} words, the vocabulary needs {row.size} (ceil(V / 32))"
            )
        out[...] = row.reshape(out.shape)

    def allowed_token_ids(self) -> npt.NDArray[np.int32]:
        """Return the allowed token ids, sorted, as int32."""
        bits = np.unpackbits(self._row().view(np.uint8), bitorder="little")
        return np.flatnonzero(bits[: self._compiled._table.size]).astype(np.int32)

    def is_allowed(self, token_id: int) -> bool:
        """Return whether ``token_id`` is allowed now (without computing a mask not cached)."""
        compiled = self._compiled
        if not 0 <= token_id < compiled._table.size:
            return False
        if self._finished:
            return token_id in compiled._eos_set
        row = compiled._masks.get((self._stack, self._lex))
        if row is not None:
            return bool((int(row[token_id >> 5]) >> (token_id & 31)) & 1)
        with compiled._lock:  # lexes the token alone: cheaper than a whole mask
            if token_id in compiled._eos_set:
                return compiled._eos_ok(self._stack, self._lex)
            if not compiled._table.lengths[token_id]:  # special or empty: never text
                return False
            nxt = compiled._step_token(self._stack, self._lex, token_id)
            return nxt is not None and bool(
                compiled._viable(nxt[0], compiled._context_id(nxt[0]))[nxt[1]]
            )

    def advance(self, token_id: int) -> None:
        """Consume one token; raise ``RejectedTokenError`` (state unchanged) if not allowed."""
        token_id = int(token_id)
        if not self.is_allowed(token_id):
            raise RejectedTokenError(
                f"token {token_id} is not allowed by the grammar here", token_id=token_id
            )
        if token_id in self._compiled._eos_set:
            self._finished = True
            return
        nxt = self._compiled._step_token(self._stack, self._lex, token_id)
        if nxt is None:  # the mask said yes: a disagreement is a bug, not bad input
            raise RuntimeError(f"grammar matcher: mask allows token {token_id} but lexing fails")
        self._stack, self._lex = nxt

    def is_finished(self) -> bool:
        """Return whether EOS has been accepted."""
        return self._finished

    def reset(self) -> None:
        """Go back to the start of the grammar."""
        self._stack = self._compiled.initial_config
        self._lex = 0
        self._finished = False

    def copy(self) -> GrammarMatcher:
        """Return an independent matcher in the same state."""
        other = GrammarMatcher(self._compiled)
        other._stack, other._lex, other._finished = self._stack, self._lex, self._finished
        return other
