"""The optional compiled token walk (the ``accel`` extra: numba), its switch and its token trie.

Pure Python with numpy is the default walk (:mod:`outlines_like.fsm.index`). When numba is
importable, a state's mask is instead one walk of the vocabulary's token trie in a compiled
kernel (:mod:`outlines_like.fsm._accel_kernels`): nodes in depth-first order, a dead byte skips
its subtree, allowed tokens set their bits in the packed row directly. Both walks give the same
masks (the tests compare them).

The switch: ``OUTLINES_LIKE_ACCEL=0`` (or ``false``/``off``/``no``) in the environment turns it
off; :func:`set_enabled` overrides both ways (tests). :func:`warm_up` compiles or loads the
kernels, once per process; :func:`~outlines_like.fsm.index.prepare_vocabulary` calls it, so
the JIT never lands in a first mask.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from outlines_like.fsm._grammar_lexer import set_context_kernels
from outlines_like.fsm._grammar_tables import set_table_kernels
from outlines_like.fsm._lexemes import WalkList
from outlines_like.fsm._subset import set_dfa_kernels
from outlines_like.fsm.regex_dfa import LazyByteDFA

__all__ = [
    "ENV_VAR",
    "TokenTrie",
    "add_duplicates",
    "available",
    "enabled",
    "set_enabled",
    "walk_lexer",
    "walk_lexer_list",
    "walk_list",
    "walk_matcher",
    "walk_trie",
    "warm_up",
]

I32 = npt.NDArray[np.int32]
U32 = npt.NDArray[np.uint32]
I64 = npt.NDArray[np.int64]

ENV_VAR = "OUTLINES_LIKE_ACCEL"
_OFF = ("0", "false", "off", "no")

_forced: bool | None = None
_kernels: ModuleType | None = None
_import_failed = False
_lock = threading.Lock()
_trie_run: Any = None  # the trie walk kernel past numba's dispatcher (see _trie_walk_run)


def _load() -> ModuleType | None:
    """The kernels module, imported (so compiled or loaded) on first use; ``None`` without numba."""
    global _kernels, _import_failed
    if _kernels is None and not _import_failed:
        with _lock:
            if _kernels is None and not _import_failed:
                try:
                    from outlines_like.fsm import _accel_kernels
                except ImportError:
                    _import_failed = True
                else:
                    _kernels = _accel_kernels
    return _kernels


def available() -> bool:
    """Whether numba is importable (the ``accel`` extra is installed)."""
    return _load() is not None


def enabled() -> bool:
    """Whether new token indexes use the compiled walk.

    :func:`set_enabled` decides when it was called; else the environment variable
    ``OUTLINES_LIKE_ACCEL`` (``0``, ``false``, ``off`` or ``no`` turn it off); else whether
    numba is installed.
    """
    if _forced is not None:
        return _forced and available()
    if os.environ.get(ENV_VAR, "").strip().lower() in _OFF:
        return False
    return available()


def set_enabled(flag: bool | None) -> None:
    """Force the compiled walk on or off for indexes built from now on; ``None`` resets.

    Forcing it on has no effect without numba (:func:`enabled` stays ``False``).
    """
    global _forced
    _forced = flag


def warm_up() -> float:
    """Load the kernels when the compiled walk is on, once per process.

    The first process compiles them (seconds) and numba keeps them on disk; later ones read
    them from there. Returns the seconds it took (0 when already done, or when it is off).
    """
    t0 = time.perf_counter()
    fresh = "outlines_like.fsm._accel_tables" not in sys.modules  # the last kernels loaded
    if _dfa_kernels() is None:  # the walk and DFA kernels, when the compiled walk is on
        return 0.0
    # the string bodies', the grammar path's, the lexer contexts', small regex DFAs' and the
    # LALR tables' kernels
    from outlines_like.fsm import (  # noqa: F401
        _accel_chain,
        _accel_grammar,
        _accel_lexer,
        _accel_regex,
        _accel_tables,
    )

    return time.perf_counter() - t0 if fresh else 0.0


def _dfa_kernels() -> ModuleType | None:
    """The compiled subset construction (:mod:`._accel_dfa`) while the compiled walk is on."""
    if not enabled():
        return None
    from outlines_like.fsm import _accel_dfa

    return _accel_dfa


set_dfa_kernels(_dfa_kernels)


def _lexer_kernels() -> ModuleType | None:
    """The compiled lexer-context build (:mod:`._accel_lexer`) while the compiled walk is on."""
    if not enabled():
        return None
    from outlines_like.fsm import _accel_lexer

    return _accel_lexer


set_context_kernels(_lexer_kernels)


def _table_kernels() -> ModuleType | None:
    """The compiled LALR(1) table build (:mod:`._accel_tables`) while the compiled walk is on."""
    if not enabled():
        return None
    from outlines_like.fsm import _accel_tables

    return _accel_tables


set_table_kernels(_table_kernels)


class TokenTrie:
    """A vocabulary's text tokens as a trie in depth-first order (the compiled walk's layout).

    Args:
        tokens: The token bytes.
        ids: The token id of each.
        vocab_size: ``V``.

    Attributes:
        byte: ``uint8[n_nodes]``: the byte that leads to each node (node 0: the root).
        depth: ``int32[n_nodes]``: its depth (the root's is 0).
        skip: ``int32[n_nodes]``: the first node past its subtree.
        root_child: ``int32[256]``: the node of each first byte (``-1`` when no token has it).
        node_tok: ``int32[n_nodes]``: the token that ends at each node, else :attr:`sentinel`.
        sentinel: A bit past the vocabulary's words (the walk's masks have one spare word).
        dup_of: ``int32[k, 2]``: ``(id, other id)`` of tokens with the same bytes as another
            (the trie holds one id per node; the other's bit and end state are copied).
        slot_tok: ``int32[n_tokens]``: every token in trie order, those with the same bytes side
            by side (so a subtree's tokens are one contiguous run: the lexer walk's stops).
        slot_first: ``int32[n_nodes + 1]``: the first slot of each node's tokens (node ``i``
            holds ``slot_tok[slot_first[i]:slot_first[i + 1]]``).
        node_one: :attr:`node_tok`, with ``-1`` at the nodes of several tokens (see the slots).
        words: Packed words of a row (``ceil(V / 32)``).
        stack_size: The deepest node's depth plus one.
    """

    def __init__(self, tokens: tuple[bytes, ...], ids: I32, vocab_size: int) -> None:
        kernels = _load()
        assert kernels is not None, "TokenTrie needs numba (the accel extra)"
        order = sorted(range(len(tokens)), key=tokens.__getitem__)
        flat = np.frombuffer(b"".join([tokens[k] for k in order]), dtype=np.uint8).copy()
        lengths = np.array([len(tokens[k]) for k in order], dtype=np.int64)
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        byte, depth, skip, node_of, n_nodes = kernels.build_trie(flat, offsets, flat.shape[0] + 1)
        self.byte = byte[:n_nodes].copy()
        self.depth = depth[:n_nodes].copy()
        self.skip = skip[:n_nodes].copy()
        self.words = (vocab_size + 31) // 32
        self.sentinel = self.words * 32
        sorted_ids = np.asarray(ids, dtype=np.int32)[np.array(order, dtype=np.int64)]
        node_tok = np.full(n_nodes, self.sentinel, dtype=np.int32)
        # tokens are in byte order: a repeated token follows the first with the same bytes
        first = np.ones(node_of.shape[0], dtype=bool)
        first[1:] = node_of[1:] != node_of[:-1]
        node_tok[node_of[first]] = sorted_ids[first]
        again = np.flatnonzero(~first)
        self.dup_of: I32 = np.stack([node_tok[node_of[again]], sorted_ids[again]], axis=1)
        self.node_tok: I32 = node_tok
        self.slot_tok: I32 = np.ascontiguousarray(sorted_ids)
        self.slot_first: I32 = np.searchsorted(node_of, np.arange(n_nodes + 1)).astype(np.int32)
        self.node_one: I32 = node_tok.copy()
        self.node_one[np.flatnonzero(np.diff(self.slot_first) > 1)] = -1
        self.root_child: I32 = np.full(256, -1, dtype=np.int32)
        at_top = np.flatnonzero(self.depth == 1).astype(np.int32)
        self.root_child[self.byte[at_top]] = at_top
        self.stack_size = int(self.depth.max()) + 1 if n_nodes else 1

    @property
    def n_nodes(self) -> int:
        """Nodes, the root included."""
        return int(self.byte.shape[0])

    def new_mask(self) -> U32:
        """A zeroed mask for :func:`walk_trie`: the row's words and a spare one."""
        return np.zeros(self.words + 1, dtype=np.uint32)


def walk_trie(
    trie: TokenTrie,
    trans: I32,
    state: int,
    lazy: LazyByteDFA | None,
    mask: U32,
    ends: I32 | None = None,
) -> None:
    """Set in ``mask`` the bits of the tokens whose every byte is live from ``state``.

    ``mask`` comes from :meth:`TokenTrie.new_mask` (its last, spare word is scratch).
    ``trans`` is the DFA's transition table (ignored for a lazy DFA, whose current table is
    read). For a lazy DFA, the kernel records the subtrees it could not enter (their parent's
    row not built), the rows are built (:meth:`LazyByteDFA.expand`) and those subtrees walked,
    until none is left. ``ends`` (``int32[V + 1]`` at least), when given, receives each
    allowed token's end state.
    """
    run = _trie_walk_run()
    if lazy is not None:
        lazy.expand_one(state)
        trans = lazy.transitions
    trans = np.ascontiguousarray(trans, dtype=np.int32)
    stack = np.empty(trie.stack_size, dtype=np.int32)
    no_ends = np.zeros(0, dtype=np.int32) if ends is None else ends
    # items in, recorded subtrees out: two pairs of buffers, swapped after each round (each
    # subtree is recorded at most once per round, so a round records fewer than n_nodes)
    size = trie.n_nodes if lazy is not None else 1
    nodes, states = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.int32)
    pend_node, pend_state = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.int32)
    nodes[0], states[0] = 0, state  # the root: the whole trie
    n = 1
    while n:
        n = run(
            trans, trie.byte, trie.depth, trie.skip, trie.node_tok, trie.root_child,
            nodes, states, n, stack, mask, no_ends, pend_node, pend_state,
        )  # fmt: skip
        if n:
            assert lazy is not None
            lazy.expand(pend_state[:n])
            trans = np.ascontiguousarray(lazy.transitions)
            nodes, states, pend_node, pend_state = pend_node, pend_state, nodes, states
    add_duplicates(trie, mask, ends)


def _trie_walk_run() -> Any:
    """The trie walk kernel's compiled function, called past numba's dispatcher.

    The dispatcher types the walk's 14 arguments on every call (a few us, against an eager
    DFA's walk of ~20 us); :func:`walk_trie` passes exactly the signature's types, arrays
    C-contiguous (``np.ascontiguousarray`` or fresh), as the compiled function needs.
    """
    global _trie_run
    if _trie_run is None:
        kernels = _load()
        assert kernels is not None
        from outlines_like.fsm._accel_dfa_kernels import entry_point

        _trie_run = entry_point(kernels.trie_walk)
    return _trie_run


def add_duplicates(trie: TokenTrie, mask: U32, ends: I32 | None) -> None:
    """Give each token that repeats another's bytes that token's bit (and end state)."""
    if trie.dup_of.shape[0]:
        first, other = trie.dup_of[:, 0], trie.dup_of[:, 1]
        on = ((mask[first >> 5] >> (first & 31).astype(np.uint32)) & 1).astype(bool)
        np.bitwise_or.at(mask, other[on] >> 5, np.uint32(1) << (other[on] & 31).astype(np.uint32))
        if ends is not None:
            ends[other[on]] = ends[first[on]]


def walk_list(
    trans: I32,
    items: WalkList,
    starts: I32,
    lazy: LazyByteDFA | None,
    mask: U32,
) -> None:
    """Set in ``mask`` the bits of the ``items`` whose every byte is live, each from its start.

    Item ``q`` (token ``items.ids[q]``) is walked from ``starts[q]``. Items that reach a row a
    lazy DFA has not built are resumed where they stopped once it is built.
    """
    kernels = _load()
    assert kernels is not None
    if lazy is not None:
        trans = lazy.transitions
    trans = np.ascontiguousarray(trans, dtype=np.int32)
    begin, end, ids = items.begin, items.end, items.ids
    start = np.ascontiguousarray(starts, dtype=np.int32)
    n = int(begin.shape[0])
    while n:
        pend_item = np.empty(n, dtype=np.int32)
        pend_begin = np.empty(n, dtype=np.int64)
        pend_state = np.empty(n, dtype=np.int32)
        n = kernels.list_walk(
            trans, items.flat, begin, end, ids, start, n, mask, pend_item, pend_begin, pend_state
        )
        if n:
            assert lazy is not None
            lazy.expand(pend_state[:n])
            trans = np.ascontiguousarray(lazy.transitions)
            again = pend_item[:n]
            begin, end, ids, start = pend_begin[:n], end[again], ids[again], pend_state[:n]


class MatcherStops(NamedTuple):
    """What :func:`walk_matcher` found besides the end states (indices into its items).

    Attributes:
        stuck: Items that met a row not built yet, ...
        stuck_pos: ... the byte position they stopped at ...
        stuck_state: ... and the state whose row is missing.
        deep: Items whose next byte needs the stack's bottom, ...
        deep_pos: ... that byte's position ...
        deep_state: ... and the state before it.
    """

    stuck: I32
    stuck_pos: I64
    stuck_state: I32
    deep: I32
    deep_pos: I64
    deep_state: I32


def walk_matcher(
    trans: I32, buf: npt.NDArray[np.uint8], pos: I64, end: I64, states: I32
) -> tuple[I32, MatcherStops]:
    """Walk ``buf[pos[q]:end[q]]`` from ``states[q]`` through a grammar's matcher DFA.

    ``trans`` is its flat table (0: sink, 1: needs the stack's bottom, -2: row not built).
    Returns each item's end state (0: dead or needs the bottom, -1: stuck at an unbuilt row)
    and the items that stopped early (see :class:`MatcherStops`); the caller builds the
    missing rows and walks the stuck items again from where they stopped.
    """
    kernels = _load()
    assert kernels is not None
    n = int(pos.shape[0])
    out = np.empty(n, dtype=np.int32)
    stuck, stuck_pos, stuck_state = (
        np.empty(n, dtype=np.int32),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int32),
    )
    deep, deep_pos, deep_state = (
        np.empty(n, dtype=np.int32),
        np.empty(n, dtype=np.int64),
        np.empty(n, dtype=np.int32),
    )
    n_stuck, n_deep = kernels.matcher_walk(
        trans, buf, pos, end, states, n, out,
        stuck, stuck_pos, stuck_state, deep, deep_pos, deep_state,
    )  # fmt: skip
    return out, MatcherStops(
        stuck[:n_stuck],
        stuck_pos[:n_stuck],
        stuck_state[:n_stuck],
        deep[:n_deep],
        deep_pos[:n_deep],
        deep_state[:n_deep],
    )


def walk_lexer(
    trie: TokenTrie, trans: I32, accepting: npt.NDArray[np.bool_], start: int
) -> tuple[I32, I32, I32, I32, I32]:
    """Walk every token of ``trie`` through a lexer DFA from ``start`` (the grammar masker's walk).

    ``trans`` is the DFA's flat ``int32[n_states * 256]`` table (``-1`` dead). Returns
    ``(end_tok, end_state, stop_tok, stop_off, stop_state)``: the tokens whose every byte is
    live and the state each ends in; the tokens with a dead byte after an accepting state,
    that byte's offset and the state before it (stops after other states are not reported).
    Tokens with the same bytes as another are reported like it.
    """
    kernels = _load()
    assert kernels is not None
    trans = np.ascontiguousarray(trans, dtype=np.int32)
    flags = np.ascontiguousarray(accepting, dtype=np.bool_).view(np.uint8)
    n = trie.slot_tok.shape[0]
    end_tok, end_state = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    stop_tok, stop_off = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    stop_state = np.empty(n, dtype=np.int32)
    stack = np.empty(trie.stack_size, dtype=np.int32)
    n_end, n_stop = kernels.lexer_trie_walk(
        trans, flags, start, trie.byte, trie.depth, trie.skip, trie.node_one, trie.sentinel,
        trie.slot_first, trie.slot_tok, stack, end_tok, end_state, stop_tok, stop_off, stop_state,
    )  # fmt: skip
    return (
        end_tok[:n_end],
        end_state[:n_end],
        stop_tok[:n_stop],
        stop_off[:n_stop],
        stop_state[:n_stop],
    )


def walk_lexer_list(
    trans: I32,
    accepting: npt.NDArray[np.bool_],
    start: int,
    buf: npt.NDArray[np.uint8],
    begin: I64,
    end: I64,
) -> tuple[I32, I32, I32, I64, I32]:
    """Walk ``buf[begin[q]:end[q]]`` through a lexer DFA from ``start`` (a list of items).

    Returns ``(end_item, end_state, stop_item, stop_pos, stop_state)``: the items whose every
    byte is live and the state each ends in; the items with a dead byte after an accepting
    state, that byte's position in ``buf`` and the state before it.
    """
    kernels = _load()
    assert kernels is not None
    trans = np.ascontiguousarray(trans, dtype=np.int32)
    flags = np.ascontiguousarray(accepting, dtype=np.bool_).view(np.uint8)
    n = int(begin.shape[0])
    end_item, end_state = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    stop_item, stop_pos = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int64)
    stop_state = np.empty(n, dtype=np.int32)
    n_end, n_stop = kernels.lexer_list_walk(
        trans, flags, start, buf, begin, end, end_item, end_state, stop_item, stop_pos, stop_state
    )
    return (
        end_item[:n_end],
        end_state[:n_end],
        stop_item[:n_stop],
        stop_pos[:n_stop],
        stop_state[:n_stop],
    )
