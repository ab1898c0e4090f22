"""``compile_constraint``: any output type -> a compiled constraint, with in-memory and disk caches.

Regex-shaped types (``Regex``, predefined types, ``int``, ``Literal``, ``Enum`` ...) go through
:func:`outlines_like.types.to_regex` and the byte DFA; grammars (``CFG``) and any JSON object
(``dict``) go to :func:`outlines_like.fsm.grammar.compile_grammar`; free text (``None``,
``str``) allows every text token.

A JSON Schema takes the regex path while it is small and flat, and the grammar path
(:func:`~outlines_like.types.json_schema_grammar.json_schema_to_grammar`, linear in the schema)
otherwise, chosen by measured size: a schema with a reachable ``$ref`` cycle goes to the grammar
(recursion without a depth limit); any other is first written as a regex under a budget of
:data:`JSON_REGEX_BUDGET` characters, checked after every sub-schema, and goes to the grammar as
soon as the regex passes it (milliseconds, never the seconds a multi-megabyte regex would take).
The two paths accept the same documents up to the regex path's depth limits.

Budgets: every compile runs under a :class:`~outlines_like.fsm.budget.Budget` (``budget=``;
:data:`~outlines_like.fsm.budget.DEFAULT_BUDGET` when none is given): the JSON Schema's depth
and conversion, the regex's automata (with an up-front estimate of the DFA's size), the
grammar's size, tables and lexer DFAs, and the first mask, all checked where the work happens.
The compiled constraint keeps the budget, and its later masks run under it. Past a limit:
:class:`~outlines_like.errors.ConstraintTooLargeError` (an ``InvalidConstraintError``). A
constraint whose mask ran out of budget is dropped from the caches, with its DFA.

Caches:

* the byte DFA of a regex, per (regex, ``max_states``), in memory (the vocabulary plays no
  part in it);
* the compiled constraint, per (constraint, vocabulary hash, budget), in memory, so repeated
  compiles reuse the per-state token rows already computed (at most 128 entries and 1 GiB of
  mask rows together, least recently used out first);
* optionally the byte DFA on disk, as ``.npz`` files under ``cache_dir=`` or the
  ``OUTLINES_LIKE_CACHE_DIR`` environment variable (off by default).
"""

from __future__ import annotations

import collections
import hashlib
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from outlines_like.fsm import _accel
from outlines_like.fsm._context_products import clear_context_products
from outlines_like.fsm._grammar_lexer import clear_terminal_dfas
from outlines_like.fsm._grammar_tables import gc_paused, plain_from_parts
from outlines_like.fsm._protocols import Compiled
from outlines_like.fsm._regex_estimate import clear_estimates
from outlines_like.fsm._row_tables import refill as refill_row_tables
from outlines_like.fsm.budget import DEFAULT_BUDGET, Budget, check
from outlines_like.fsm.grammar import (
    clear_compiled_grammars,
    clear_terminal_checks,
    compile_grammar,
    compile_json_object,
)
from outlines_like.fsm.matcher import DEFAULT_PRECOMPUTE, FreeTextCompiled, RegexCompiled
from outlines_like.fsm.regex_dfa import (
    DEFAULT_MAX_STATES,
    EAGERNFA_LIMIT,
    ByteDFA,
    LazyByteDFA,
    compile_regex_auto,
)
from outlines_like.fsm.vocabulary import Vocabulary
from outlines_like.types import CFG, JsonObject, JsonSchema, to_regex, to_term
from outlines_like.types._regex import clear_group_memos
from outlines_like.types.json_schema._base import clear_member_keys
from outlines_like.types.json_schema_grammar import GrammarParts, json_schema_path

__all__ = [
    "CACHE_DIR_ENV",
    "JSON_REGEX_BUDGET",
    "clear_caches",
    "compile_constraint",
    "compile_regex_cached",
]

JSON_REGEX_BUDGET = 16_000
"""Longest JSON Schema regex (characters) the masker compiles; larger schemas use the grammar.

Measured on llama3 (compile + first mask, regex path vs grammar path): regexes up to ~12k
characters compile in 40-150 ms; at 35k the lazy DFA's compile takes ~0.8 s and at 105k 2.2 s,
while the grammar of the same schema compiles in ~130 ms.
"""

JSON_EAGER_NFA_LIMIT = 300
"""Largest NFA of a JSON Schema's regex whose DFA is built whole at compile time (else lazily).

A JSON Schema's DFA has many states a document never visits (members it leaves out, other
branches). Measured on the real-world corpus (llama3, 160 schemas on the regex path, compile +
first mask, then their documents' walks): built lazily past 300 NFA states rather than
:data:`~outlines_like.fsm.regex_dfa.EAGERNFA_LIMIT`, compile + first mask p75 10.6 -> 4.4 ms
and compile + walks 1.75 -> 1.24 s in all; small regexes stay eager, whose minimal DFA makes
their first walk cheaper.
"""

CACHE_DIR_ENV = "OUTLINES_LIKE_CACHE_DIR"
_DISK_FORMAT = "ol-bytedfa-v1"
_MAX_COMPILED = 128
_MAX_COMPILED_BYTES = 1 << 30  # mask rows of all cached compiled constraints together
_MAX_DFAS = 512

_lock = threading.Lock()
_compiled: collections.OrderedDict[tuple[Any, ...], Compiled] = collections.OrderedDict()
_dfas: collections.OrderedDict[tuple[str, int, int], ByteDFA | LazyByteDFA] = (
    collections.OrderedDict()
)


def clear_caches() -> None:
    """Empty the in-memory caches.

    DFAs, grammar terminals' DFAs, their lexer contexts' products and the terminal regexps
    checked, compiled constraints (and the compiled grammars kept on each vocabulary), the
    regex reader's and size estimates' memos, the regex programs' shared nodes and the JSON
    Schema translation's member names.
    """
    with _lock:
        _compiled.clear()
        _dfas.clear()
        _byte_sums.clear()
    clear_terminal_dfas()
    clear_context_products()
    clear_terminal_checks()
    clear_compiled_grammars()
    clear_estimates()
    clear_group_memos()
    clear_member_keys()
    if "outlines_like.fsm._accel_program" in sys.modules:  # loaded with the kernels only
        sys.modules["outlines_like.fsm._accel_program"].clear_programs()


def _lru_get(cache: collections.OrderedDict[Any, Any], key: Any) -> Any:
    with _lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _lru_put(
    cache: collections.OrderedDict[Any, Any], key: Any, value: Any, limit: int, max_bytes: int = 0
) -> None:
    """Insert; evict the least recently used past ``limit`` entries or ``max_bytes`` bytes.

    Compiled constraints grow after they are cached (rows are computed as generation reaches
    their states), so their bytes are summed again, every :data:`_RESUM_EVERY` insertions: a
    sum over a full cache reads 128 entries' ``nbytes`` (~0.1 ms, as long as compiling a small
    regex). In between, the last sum plus the bytes of the entries inserted since, less those
    evicted, is checked; past half of ``max_bytes`` the bytes are summed at every insertion,
    so growth that is not seen yet would have to exceed half the bound to pass it.
    """
    with _lock:
        old = cache.get(key)
        cache[key] = value
        cache.move_to_end(key)
        evicted = 0
        while len(cache) > limit:
            _, gone = cache.popitem(last=False)
            evicted += int(getattr(gone, "nbytes", 0))
        if max_bytes:
            total, since = _byte_sums.get(id(cache), (0, _RESUM_EVERY))
            if since + 1 >= _RESUM_EVERY or total > max_bytes // 2:
                total, since = sum(int(getattr(v, "nbytes", 0)) for v in cache.values()), 0
            else:
                total += int(getattr(value, "nbytes", 0)) - int(getattr(old, "nbytes", 0))
                total -= evicted
                since += 1
            while total > max_bytes and len(cache) > 1:
                _, gone = cache.popitem(last=False)
                total -= int(getattr(gone, "nbytes", 0))
            _byte_sums[id(cache)] = (max(total, 0), since)


_RESUM_EVERY = 16
"""Insertions into a byte-bounded cache between two sums of its entries' bytes."""
_byte_sums: dict[int, tuple[int, int]] = {}
"""``id(cache)`` -> its bytes at the last sum plus those inserted since, and the insertions."""


def _disk_path(cache_dir: Path, pattern: str, max_states: int) -> Path:
    digest = hashlib.sha256(f"{_DISK_FORMAT}\0{max_states}\0{pattern}".encode()).hexdigest()
    return cache_dir / f"dfa-{digest[:32]}.npz"


def _load_dfa(path: Path, pattern: str) -> ByteDFA | None:
    try:
        with np.load(path, allow_pickle=False) as data:
            if str(data["pattern"]) != pattern or str(data["format"]) != _DISK_FORMAT:
                return None
            classes = data["byte_classes"].astype(np.int32)
            class_t = data["class_transitions"].astype(np.int32)
            return ByteDFA(
                start=int(data["start"]),
                transitions=np.ascontiguousarray(class_t[:, classes]),
                accepting=data["accepting"].astype(bool),
                byte_classes=classes,
                class_transitions=class_t,
                pattern=pattern,
            )
    except (OSError, KeyError, ValueError):
        return None


def _save_dfa(path: Path, dfa: ByteDFA) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp.npz")
        np.savez(
            tmp,
            format=np.array(_DISK_FORMAT),
            pattern=np.array(dfa.pattern),
            start=np.array(dfa.start),
            accepting=dfa.accepting,
            byte_classes=dfa.byte_classes,
            class_transitions=dfa.class_transitions,
        )
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full disk only costs the cache


def compile_regex_cached(
    pattern: str,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    cache_dir: str | Path | None = None,
    eager_nfa_limit: int = EAGERNFA_LIMIT,
) -> ByteDFA | LazyByteDFA:
    """Return the DFA of ``pattern`` (:func:`compile_regex_auto`), from the caches if present.

    Small regexes get a minimal eager :class:`ByteDFA`, large ones a :class:`LazyByteDFA`
    (only eager DFAs go to the disk cache). A regex whose DFA is estimated to need more than
    ``max_states`` states is refused at once.

    Args:
        pattern: The regex.
        max_states: DFA size limit.
        cache_dir: Folder of the on-disk cache; ``None`` reads ``OUTLINES_LIKE_CACHE_DIR``
            (unset: no disk cache).
        eager_nfa_limit: Largest NFA whose DFA is built eagerly (see
            :func:`~outlines_like.fsm.regex_dfa.compile_regex_auto`).
    """
    key = (pattern, max_states, eager_nfa_limit)
    dfa: ByteDFA | LazyByteDFA | None = _lru_get(_dfas, key)
    if dfa is not None and dfa.lazy and dfa.n_states >= max_states:
        with _lock:  # it ran out of states once: rebuild rather than keep its tables
            _dfas.pop(key, None)
        dfa = None
    if dfa is not None:
        return dfa
    folder = cache_dir if cache_dir is not None else os.environ.get(CACHE_DIR_ENV) or None
    path = _disk_path(Path(folder), pattern, max_states) if folder else None
    if path is not None and path.exists():
        dfa = _load_dfa(path, pattern)
    if dfa is None:
        dfa = compile_regex_auto(
            pattern, max_states=max_states, refuse_blowup=True, eager_nfa_limit=eager_nfa_limit
        )
        if path is not None and isinstance(dfa, ByteDFA):
            _save_dfa(path, dfa)
    _lru_put(_dfas, key, dfa, _MAX_DFAS)
    return dfa


def compile_constraint(
    output_type: object,
    vocab: Vocabulary,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    cache_dir: str | Path | None = None,
    budget: Budget | None = None,
) -> Compiled:
    """Compile any output type into a constraint over ``vocab``'s tokens.

    Args:
        output_type: What the output must be: ``None``/``str`` (free text), a term
            (``Regex``, ``JsonSchema``, ``CFG``, ``Choice`` ...), a predefined type, or a Python
            type the type system maps (``int``, ``bool``, ``Literal``, ``Enum``, pydantic
            models, ``dict`` ...).
        vocab: The model's vocabulary.
        max_states: Limit on the regex DFA's size (the budget's ``max_states`` also applies).
        cache_dir: On-disk cache folder for DFAs (default: ``OUTLINES_LIKE_CACHE_DIR``, unset =
            no disk cache).
        budget: Limits on the work (:class:`~outlines_like.fsm.budget.Budget`: compile time
            including the first mask, time per later mask, automaton states, bytes of mask
            rows, grammar size, JSON Schema depth). ``None`` is
            :data:`~outlines_like.fsm.budget.DEFAULT_BUDGET` (10 s of CPU to compile, 2 s per
            later mask, 20,000 states, 256 MiB, 1,000,000 grammar characters, depth 64). The
            compiled constraint keeps it: its matchers' ``fill_bitmask``/``advance`` raise
            :class:`~outlines_like.errors.ConstraintTooLargeError` when a later mask passes
            it. A server passes one per request, e.g. ``budget=Budget(seconds=5)``; equal
            budgets share cache entries.

    Returns:
        A :class:`Compiled`; ``.matcher()`` gives per-generation matchers. Results are cached
        per (constraint, vocabulary hash, budget).

    Raises:
        UnsupportedConstraintError: The type has no local constraint.
        ConstraintTooLargeError: Compiling passed a limit of ``budget`` (the message names the
            limit and where it ran out).
        InvalidConstraintError: The regex, schema or grammar is invalid.
    """
    if not isinstance(vocab, Vocabulary):
        raise TypeError(
            f"compile_constraint needs a Vocabulary, got {type(vocab).__name__}; build one with "
            "Vocabulary(tokens, eos_token_ids) or Vocabulary.from_transformers(tokenizer)"
        )
    if budget is None:
        budget = DEFAULT_BUDGET
    elif not isinstance(budget, Budget):
        raise TypeError(f"budget must be an outlines_like.fsm.Budget, got {type(budget).__name__}")
    max_states = min(max_states, budget.max_states)
    term = to_term(output_type)
    key: tuple[Any, ...]
    pattern = ""
    if isinstance(term, JsonSchema):
        key = ("json", term, max_states, vocab.hash, budget)
    elif term is None:
        key = ("free", vocab.hash)
    elif isinstance(term, (CFG, JsonObject)):
        key = ("cfg", term, vocab.hash, budget)
    else:
        pattern = to_regex(term)
        key = ("regex", pattern, max_states, vocab.hash, budget)
    cached: Compiled | None = _lru_get(_compiled, key)
    if cached is not None and getattr(cached, "failed", None) is None:
        return cached
    # the compiled kernels load (or, on a machine's first run, compile: seconds) before the
    # meter starts: that is the process's set-up, not this constraint's work
    _accel.warm_up()
    # a compile allocates tens of thousands of containers, none of them garbage (merged
    # schemas, rules, tables): the collector's passes over them would only slow it (a
    # quarter of a 620 KB schema's time to its verdict)
    with budget.meter("compile"), gc_paused():
        compiled = _compile(term, pattern, vocab, max_states, cache_dir, budget)
    _lru_put(_compiled, key, compiled, _MAX_COMPILED, _MAX_COMPILED_BYTES)
    refill_row_tables()  # (a lazy DFA's table taken: the next one is backed in the background)
    return compiled


def _compile(
    term: object,
    pattern: str,
    vocab: Vocabulary,
    max_states: int,
    cache_dir: str | Path | None,
    budget: Budget,
) -> Compiled:
    """Compile under the running meter; the first mask is computed here too."""
    compiled: Compiled
    if isinstance(term, JsonSchema):
        parts: list[GrammarParts] = []
        pattern, grammar = json_schema_path(
            term.schema,
            whitespace_pattern=term.whitespace_pattern,
            lenient=term.lenient,
            regex_budget=JSON_REGEX_BUDGET,
            max_depth=budget.max_depth,
            check=check,
            grammar_parts=parts,
        )
        if grammar is not None:
            budget.check_grammar_size(len(grammar), "the grammar of the JSON Schema")
            # (its rules as the converter built them: the text is not read back)
            plain = plain_from_parts(parts[-1]) if parts else None
            compiled = compile_grammar(CFG(grammar, "lark"), vocab, budget=budget, plain=plain)
        else:
            compiled = _regex(
                pattern,
                vocab,
                max_states,
                cache_dir,
                budget,
                precompute=0.0,
                eager_nfa_limit=JSON_EAGER_NFA_LIMIT,
            )
    elif term is None:
        return FreeTextCompiled(vocab)
    elif isinstance(term, CFG):
        budget.check_grammar_size(len(term.definition), "the grammar")
        compiled = compile_grammar(term, vocab, budget=budget)
    elif isinstance(term, JsonObject):
        compiled = compile_json_object(vocab, budget=budget)
    else:
        compiled = _regex(pattern, vocab, max_states, cache_dir, budget)
    compiled.matcher().fill_bitmask(np.zeros(vocab.mask_words, dtype=np.int32))
    return compiled


def _regex(
    pattern: str,
    vocab: Vocabulary,
    max_states: int,
    cache_dir: str | Path | None,
    budget: Budget,
    precompute: float = DEFAULT_PRECOMPUTE,
    eager_nfa_limit: int = EAGERNFA_LIMIT,
) -> RegexCompiled:
    """The regex's constraint; ``precompute``: see :class:`RegexCompiled`.

    A JSON Schema's regex passes ``precompute=0``: its DFA has tens to hundreds of cheap
    states (punctuation, member names), whose rows cost ~20 ms to compute up front while a
    document visits few of them; computed on first visit, they cost the walk less than that
    (json_small: compile 11 -> 4 ms, the first walk ~1 ms more in all). It passes
    :data:`JSON_EAGER_NFA_LIMIT` as ``eager_nfa_limit`` too.
    """
    dfa = compile_regex_cached(
        pattern, max_states=max_states, cache_dir=cache_dir, eager_nfa_limit=eager_nfa_limit
    )
    return RegexCompiled(dfa, vocab, budget=budget, precompute=precompute)
