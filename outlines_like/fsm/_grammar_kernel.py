"""The grammar masker's compiled walk past a lexeme's end (LALR grammars, ``accel`` extra).

The tokens of a mask that run past the end of a lexeme go on, byte by byte, through the lexer
contexts and the LALR parser's steps, in the kernel of :mod:`outlines_like.fsm._accel_grammar`
(the parser runs inside the walk, as llguidance and xgrammar do), instead of through the lazily
built matcher DFA of :class:`~outlines_like.fsm.grammar._MatcherDFA`, whose rows cost Python
parser steps each. Both give the same decisions: :class:`LALRKernel` keeps the parser table
and the contexts' DFAs as flat arrays, builds a lexer context the kernel met missing (the item
is walked again), and hands back the items whose step needs the stack's bottom (truncated
configurations) with the configuration and lexer state they stopped in, as the DFA walk does.
The same kernel computes a whole row as one depth-first walk of the vocabulary's token trie
from a whole stack (:meth:`LALRKernel.row`), llguidance's way: no lexical walk, no keyed rows.
GLR grammars keep the DFA walk.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from outlines_like.fsm._accel import add_duplicates
from outlines_like.fsm._byte_strings import bytes_order, gather_bytes
from outlines_like.fsm._grammar_actions import action_arrays

if TYPE_CHECKING:
    from outlines_like.fsm._accel import TokenTrie
    from outlines_like.fsm._grammar_lexer import ContextDFA
    from outlines_like.fsm._grammar_parser import LALRParser
    from outlines_like.fsm._grammar_walk import ByteTable, LexemeWalk

__all__ = ["LALRKernel", "Pending", "RestTrie", "rest_trie", "shared_rest_tries", "trie_layout"]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U32 = npt.NDArray[np.uint32]

#: An item set aside because its step needs the stack's bottom: ``(token, offset of the byte,
#: configuration, lexer state)`` (offset = the token's length: its end state's viability).
Pending = tuple[int, int, Hashable, int]

_SCRATCH = 4096  # room for the states an item pushes (grown on overflow)
_UNBOUNDED = 1 << 62  # a trie walk's budget of nodes when it has none


_CHILDREN: weakref.WeakKeyDictionary[TokenTrie, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def trie_layout(trie: TokenTrie) -> tuple[Any, ...]:
    """The trie as the kernel walks it: each node's children side by side (once per trie).

    ``(byte, first, node, token)``: node ``x``'s children are ``node[first[x]:first[x + 1]]``,
    reached by ``byte[...]``; ``token[x]`` ends at ``x`` (-1: none). A few milliseconds on a
    large vocabulary: the grammar's compile builds it, never a mask.
    """
    found = _CHILDREN.get(trie)
    if found is None:
        first, node = _load().trie_children(trie.depth)
        tok = np.where(trie.node_tok == trie.sentinel, -1, trie.node_tok).astype(np.int32)
        found = _CHILDREN[trie] = (trie.byte[node], first, node, tok)
    return found


@dataclasses.dataclass(frozen=True, eq=False)
class RestTrie:
    """Tokens that ran past a lexeme's end, their rests (from the byte that ended it) as a trie.

    Every item stopped in the same lexer state, so what follows depends on the rest's bytes
    and the parser configuration only: the kernel walks each distinct rest once, as a trie
    (the lexeme's end fed once for all), and the items take their rest's outcome.

    Attributes:
        ids: The items' tokens.
        rest_of: Per item, the index of its rest (the trie's "token").
        arrays: The trie as the kernel walks it (see :func:`trie_layout`).
        stack_size: The longest rest plus one.
        words: Words of a mask over the rests (a spare one included).
    """

    ids: I32
    rest_of: I32
    arrays: tuple[Any, ...]
    stack_size: int
    words: int


def rest_trie(table: ByteTable, ids: I32, offsets: I32) -> RestTrie:
    """The :class:`RestTrie` of the items ``(ids[q], offsets[q])`` (rests non-empty).

    The rests are told apart and sorted (bytes order) in numpy
    (:func:`~outlines_like.fsm._byte_strings.bytes_order`) rather than as a Python bytes object each
    (a string's 1,151 rests on llama3: ~2 -> ~1 ms on first use, paid once per vocabulary in
    a document's first masks).
    """
    from outlines_like.fsm._accel_kernels import build_trie

    k = _load()
    n = len(ids)
    begin = np.asarray(table.starts[ids] + offsets, dtype=np.int64)
    lengths = np.asarray(table.lengths[ids] - offsets, dtype=np.int64)
    order, same, _ = bytes_order(table.buf, begin, lengths)
    rest_of = np.empty(n, dtype=np.int32)
    rest_of[order] = np.cumsum(~same) - 1
    firsts = order[~same]
    flat, bounds = gather_bytes(table.buf, begin[firsts], lengths[firsts])
    n_distinct = len(firsts)
    byte, depth, _, node_of, n_nodes = build_trie(flat, bounds, flat.shape[0] + 1)
    first, node = k.trie_children(np.ascontiguousarray(depth[:n_nodes]))
    tok = np.full(n_nodes, -1, dtype=np.int32)
    tok[node_of] = np.arange(n_distinct, dtype=np.int32)
    arrays = (np.ascontiguousarray(byte[node]), first, node, tok)
    size = int(depth[:n_nodes].max()) + 1
    return RestTrie(ids.astype(np.int32), rest_of, arrays, size, n_distinct // 32 + 2)


def shared_rest_tries(walk: LexemeWalk, table: ByteTable) -> list[tuple[int, RestTrie]]:
    """Per state of a shared lexical walk where tokens stop, the trie of their rests.

    Built on first use and kept on the walk (:attr:`LexemeWalk.rests
    <outlines_like.fsm._grammar_walk.LexemeWalk>`), so that every grammar whose lexeme has
    that walk (the vocabulary's) shares them. States are the walk's own (canonical) numbers.
    """
    out = []
    for state, ids, offsets in walk.stops:
        found = walk.rests.get(state)
        if found is None:
            found = walk.rests[state] = rest_trie(table, ids, offsets)
        out.append((state, found))
    return out


def _load() -> Any:
    from outlines_like.fsm import _accel_grammar

    return _accel_grammar


_ENTRY: list[Callable[..., int]] = []


def _walk_entry() -> Callable[..., int]:
    """The compiled function of the walk's kernel, called past numba's dispatcher.

    The kernel has one signature (given at its definition), and the dispatcher types all of
    its 35 arguments at every call to pick it (~3 us a call, paid per trie row); the compiled
    function only unboxes them. Every argument is passed as that signature says: C-contiguous
    arrays of its dtypes (fresh arrays, ``ascontiguousarray`` or prefixes of buffers).
    """
    if not _ENTRY:
        from outlines_like.fsm._accel_dfa_kernels import entry_point

        _ENTRY.append(entry_point(_load().grammar_walk))
    return _ENTRY[0]


def _no_contexts() -> dict[str, Any]:
    """A kernel's context arrays before any context: empty views of fresh buffers."""
    buffers = {name: np.zeros(1, dtype=np.int32) for name in _CONTEXT_ARRAYS}
    views = {name: buffers[name][: 1 if name == "reach_first" else 0] for name in _CONTEXT_ARRAYS}
    return {"_n_contexts": 0, "_buffers": buffers, **views}


_CONTEXT_ARRAYS = ("ctx_base", "trans", "term_of", "reach_first", "reach_term")


class LALRKernel:
    """An LALR grammar's parser table and lexer contexts as the compiled walk's arrays.

    Args:
        parser: The LALR parser.
        term_id: Terminal names to ids (the contexts' numbering).
        ignore_ids: The ``%ignore`` terminals.
        contexts: The grammar's lexer contexts (a list that grows; read, never written).
        classes: The terminal tuple of each lexeme class (LALR: one terminal each).
        state_context: Builds (or finds) the context id of an LALR state.
    """

    def __init__(
        self,
        parser: LALRParser,
        term_id: dict[str, int],
        ignore_ids: frozenset[int],
        contexts: list[ContextDFA],
        classes: list[tuple[int, ...]],
        state_context: Callable[[int], int],
    ) -> None:
        self._k = _load()
        symbols = dict(term_id)
        bounds, table_symbols, values, names = action_arrays(parser.actions)
        for name in names:  # the nonterminals and $END after the terminals
            symbols.setdefault(name, len(symbols))
        remap = np.fromiter(map(symbols.__getitem__, names), dtype=np.int32, count=len(names))
        n_states = len(bounds) - 1
        # per state its pairs sorted by symbol: one sort of all of them by (state, symbol),
        # a key each pair holds alone (a state has one action per symbol)
        sym = remap[table_symbols]
        counts = np.diff(bounds)
        key = np.repeat(np.arange(n_states, dtype=np.int64) * len(symbols), counts)
        key += sym
        order = np.argsort(key)
        self.first: I32 = bounds.astype(np.int32)
        self.sym: I32 = sym[order]
        self.val: I32 = values[order].astype(np.int32)
        self.rule_size: I32 = np.asarray(parser.rule_size, dtype=np.int32)
        origins = parser.rule_origin
        for name in dict.fromkeys(origins):
            symbols.setdefault(name, len(symbols))
        self.rule_goto: I32 = np.fromiter(
            map(symbols.__getitem__, origins), dtype=np.int32, count=len(origins)
        )
        self.ignore = np.zeros(max(len(term_id), 1), dtype=np.uint8)
        self.ignore[list(ignore_ids)] = 1
        self.ctx_of_state: I32 = np.full(n_states, -1, dtype=np.int32)
        self._contexts = contexts
        self._classes = classes
        self._state_context = state_context
        self._n_contexts = 0
        # the contexts' flat arrays (views of buffers that double when full: _append)
        self.ctx_base: I32
        self.trans: I32
        self.term_of: I32
        self.reach_first: I32
        self.reach_term: I32
        self._buffers: dict[str, I32]
        self.__dict__.update(_no_contexts())
        self._scratch = _SCRATCH
        self._no_trie = (
            np.zeros(0, dtype=np.uint8),
            *[np.zeros(0, dtype=np.int32)] * 3,
            np.zeros(0, dtype=np.uint32),
            *[np.zeros(0, dtype=np.int32)] * 2,
            np.zeros(0, dtype=np.int32),
        )
        self._none64 = np.zeros(0, dtype=np.int64)
        self._trie_arrays: tuple[Any, ...] | None = None
        self._scratches: dict[str, npt.NDArray[Any]] = {}  # the trie walk's, kept between rows
        self._small: tuple[npt.NDArray[Any], ...] | None = None  # (_walk_trie's)
        self._class_terms: I32 | None = None  # (_class_terms_upto's)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without what it copies (contexts' arrays, the trie's; rebuilt on first use)."""
        state = dict(self.__dict__)
        state["_trie_arrays"] = None
        state["_scratches"] = {}
        state["_small"] = None
        state["_class_terms"] = None
        state.update(_no_contexts())
        return state

    def _scratch_array(self, name: str, size: int, dtype: type[np.generic]) -> npt.NDArray[Any]:
        """A buffer of at least ``size`` items, kept for the next walk (contents undefined)."""
        found = self._scratches.get(name)
        if found is None or len(found) < size:
            found = self._scratches[name] = np.empty(max(size, 64), dtype=dtype)
        return found

    def _sync(self) -> None:
        """Append the contexts built since the last call to the flat arrays.

        It runs while a mask's first visit waits for a new context: each array is written in
        place (no pieces joined) with array methods rather than numpy's functions, whose
        Python wrappers cost several us each on a small context.
        """
        contexts = self._contexts
        if len(contexts) == self._n_contexts:
            return
        class_terms = self._class_terms_upto(len(self._classes))
        for context in contexts[self._n_contexts :]:
            n = context.n_states
            base = len(self.term_of)
            self._extend("ctx_base", 1)[0] = base
            self._extend("trans", n * 256)[:] = context.transitions.reshape(-1)
            # a state's terminal: its class's first (-1, the last item, where none wins)
            self._extend("term_of", n)[:] = class_terms[context.winner]
            # the reach's set cells in row-major order: per state, the end of its terms
            reach = context.reach_local
            width = reach.shape[1]
            cells = reach.reshape(-1).nonzero()[0]  # (a 2-D nonzero costs ~7x more)
            ends = self._extend("reach_first", n)
            ends[:] = cells.searchsorted(np.arange(1, n + 1) * width)
            ends += self.reach_first[base]
            terms = self._extend("reach_term", len(cells))
            terms[:] = context.reach_terms[cells % width] if width else cells
        self._n_contexts = len(contexts)

    def _class_terms_upto(self, n: int) -> I32:
        """Each lexeme class's first terminal for classes ``0..n-1``, then -1 (kept, grown)."""
        found = self._class_terms
        if found is not None and len(found) == n + 1:
            return found
        out = np.empty(n + 1, dtype=np.int32)
        known = 0 if found is None else len(found) - 1
        if known:
            assert found is not None
            out[:known] = found[:known]
        out[known:n] = [c[0] for c in self._classes[known:n]]
        out[n] = -1
        self._class_terms = out
        return out

    def _extend(self, name: str, size: int) -> I32:
        """Lengthen array ``name`` by ``size`` items; returns the new items' view to fill.

        The array is a view of a buffer that doubles when full (contexts arrive one or a few
        at a time over a document's first masks, a hundred on a large schema grammar:
        copying the arrays whole at each would cost the square of their size).
        """
        buffers = self._buffers
        used = len(getattr(self, name))
        need = used + size
        buf = buffers[name]
        if need > len(buf):
            grown = np.empty(max(need, 2 * len(buf)), dtype=np.int32)
            grown[:used] = buf[:used]
            buf = buffers[name] = grown
        setattr(self, name, buf[:need])
        return buf[used:need]

    def walk(
        self,
        table: ByteTable,
        ids: I32,
        offsets: I32,
        configs: Sequence[Hashable],
        item_cfg: I32,
        item_lex: I32,
    ) -> tuple[I32, list[Pending]]:
        """Walk token ``ids[q]`` from byte ``offsets[q]``, from ``(configs[item_cfg[q]], lex)``.

        Returns the tokens allowed (their walk ends in a state that can still become a
        terminal the parser takes) and the items set aside because a step needs the stack's
        bottom (see :data:`Pending`).
        """
        k = self._k
        stacks = [np.asarray(c, dtype=np.int32) for c in configs]
        cfg_first = np.zeros(len(stacks) + 1, dtype=np.int64)
        np.cumsum([len(s) for s in stacks], out=cfg_first[1:])
        cfg_states = np.concatenate(stacks) if len(stacks) > 1 else stacks[0]
        longest = 0
        for c in configs:  # the tops' contexts are needed first: build them now
            self._context(c[-1])  # type: ignore[index]
            longest = max(longest, len(c))  # type: ignore[arg-type]
        starts = table.starts[ids]
        pos = starts + offsets
        end = starts + table.lengths[ids]
        lex = np.ascontiguousarray(item_lex, dtype=np.int32)
        cfg = np.ascontiguousarray(item_cfg, dtype=np.int32)
        allowed: list[I32] = []
        pending: list[Pending] = []
        while True:
            self._sync()
            n = len(ids)
            cap = longest + self._scratch
            tmp, tmp2 = np.empty(cap, dtype=np.int32), np.empty(cap, dtype=np.int32)
            status = np.empty(n, dtype=np.uint8)
            out_pos = np.empty(n, dtype=np.int64)
            out_lex = np.empty(n, dtype=np.int32)
            out_low = np.empty(n, dtype=np.int32)
            out_first = np.empty(n + 1, dtype=np.int64)
            out_stack = np.empty(self._scratch, dtype=np.int32)
            used = _walk_entry()(
                self.first, self.sym, self.val, self.rule_size, self.rule_goto, self.ignore,
                self.ctx_of_state, self.ctx_base, self.trans, self.term_of, self.reach_first,
                self.reach_term, cfg_first, cfg_states, table.buf, pos, end, cfg, lex,
                tmp, tmp2, status, out_pos, out_lex, out_low, out_first, out_stack, *self._no_trie,
            )  # fmt: skip
            allowed.append(ids[status == k.OK])
            pend = np.flatnonzero(status == k.PENDING)
            if len(pend):
                tokens = ids[pend]
                flat = out_stack[:used].tolist()
                for token, offset, c, low, a, b, lexeme in zip(
                    tokens.tolist(),
                    (out_pos[pend] - table.starts[tokens]).tolist(),
                    cfg[pend].tolist(),
                    out_low[pend].tolist(),
                    out_first[pend].tolist(),
                    out_first[pend + 1].tolist(),
                    out_lex[pend].tolist(),
                    strict=True,
                ):
                    stack: tuple[int, ...] = configs[c][:low]
                    pending.append((token, offset, stack + tuple(flat[a:b]), lexeme))
            again = status >= k.STUCK
            if not again.any():
                break
            stuck = status == k.STUCK
            for state in np.unique(out_lex[stuck]).tolist():
                self._context(state)
            if (status == k.OVERFLOW).any():
                self._scratch = 2 * self._scratch + 64
            ids, pos, end, cfg, lex = ids[again], pos[again], end[again], cfg[again], lex[again]
        return np.concatenate(allowed) if len(allowed) > 1 else allowed[0], pending

    def row(
        self, trie: TokenTrie, stack: tuple[int, ...], lex: int, budget: int
    ) -> tuple[U32, int] | None:
        """The row of a whole stack: every text token of ``trie`` walked from ``(stack, lex)``.

        One depth-first walk of the trie in the kernel (a dead byte skips its subtree), the
        parser inside; returns the mask's words (a spare one last), EOS not included, with the
        lowest position of ``stack`` the walk read (-1: it reached below the bottom), or None
        when the walk would visit more than ``budget`` nodes (it stops there). The walk reads
        the stack only there and above, by positions counted from the top, so every stack
        with the same states from that position up, under the same lexer state, has the
        same row.
        """
        if self._trie_arrays is None:
            self._trie_arrays = trie_layout(trie)
        found = self._walk_trie(
            self._trie_arrays, trie.stack_size, trie.words + 1, stack, lex, budget
        )
        if found is not None:
            add_duplicates(trie, found[0], None)
        return found

    def rests(self, rests: RestTrie, stack: tuple[int, ...], lex: int) -> tuple[U32, int]:
        """The rests of ``rests`` allowed, walked from ``(stack, lex)``: a mask over the rests.

        With the lowest position of ``stack`` read, as :meth:`row` returns it.
        """
        found = self._walk_trie(rests.arrays, rests.stack_size, rests.words, stack, lex, _UNBOUNDED)
        assert found is not None
        return found

    def _walk_trie(
        self,
        arrays: tuple[Any, ...],
        stack_size: int,
        words: int,
        stack: tuple[int, ...],
        lex: int,
        budget: int,
    ) -> tuple[U32, int] | None:
        """The kernel's trie walk (``arrays``: see :func:`trie_layout`) from ``(stack, lex)``.

        Returns the mask and the lowest position of ``stack`` read (-1: below its bottom).
        """
        k = self._k
        states = np.asarray(stack, dtype=np.int32)
        none64, none32 = self._none64, self._no_trie[1]
        small = self._small
        if small is None:  # (the one-item arrays of a trie walk, kept between walks)
            small = self._small = (
                np.zeros(2, dtype=np.int64),
                np.zeros(1, dtype=np.int32),
                np.zeros(1, dtype=np.int64),
                np.zeros(1, dtype=np.uint8),
                np.zeros(2, dtype=np.int32),
            )
        # out_lex: a missing context's state, then the lowest position of the stack read
        cfg_first, lexes, limit, status, out_lex = small
        cfg_first[1] = len(states)
        lexes[0] = lex
        limit[0] = budget
        status[0] = 0
        saved = self._scratch_array("saved", k.SAVED * (stack_size + 2), np.int32)
        top = stack[-1]
        if self.ctx_of_state[top] < 0:
            self.ctx_of_state[top] = self._state_context(top)
        scratches = self._scratches
        walk = _walk_entry()
        while True:
            if len(self._contexts) != self._n_contexts:
                self._sync()
            cap = len(states) + self._scratch
            tmp, tmp2 = scratches.get("tmp"), scratches.get("tmp2")
            if tmp is None or tmp2 is None or len(tmp) < cap or len(tmp2) < cap:
                tmp = self._scratch_array("tmp", cap, np.int32)
                tmp2 = self._scratch_array("tmp2", cap, np.int32)
            undo = self._scratch_array("undo", 2 * self._scratch, np.int32)
            memo = self._scratch_array("memo", len(self.term_of), np.int32)
            memo.fill(-1)
            mask = np.zeros(words, dtype=np.uint32)
            walk(
                self.first, self.sym, self.val, self.rule_size, self.rule_goto, self.ignore,
                self.ctx_of_state, self.ctx_base, self.trans, self.term_of, self.reach_first,
                self.reach_term, cfg_first, states, self._no_trie[0],
                limit, none64, none32, lexes, tmp, tmp2, status, none64, out_lex, none32,
                none64, none32, *arrays, mask, undo, saved, memo,
            )  # fmt: skip
            if status[0] == k.OK:
                return mask, int(out_lex[1])
            if status[0] == k.OVER_BUDGET:
                return None
            if status[0] == k.STUCK:
                self._context(int(out_lex[0]))
            else:
                self._scratch = 2 * self._scratch + 64

    def _context(self, state: int) -> None:
        if self.ctx_of_state[state] < 0:
            self.ctx_of_state[state] = self._state_context(state)
