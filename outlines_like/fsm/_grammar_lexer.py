"""The grammar masker's lexer: one byte DFA per terminal, and their product per lexer context.

A lexer context is the terminal set Lark's contextual lexer uses in one LALR state (the state's
terminals plus the ``%ignore`` ones), in Lark's scanner order. Its :class:`ContextDFA` is the
product of the terminals' DFAs: a state is live while any terminal can still match, and it
records which terminal a lexeme ending there becomes (Lark's choice: the first terminal in
scanner order that matches the whole lexeme, retyped to an equal string terminal, as Lark's
``UnlessCallback`` does). States are numbered breadth first, a state's new successors in the
order of the first byte reaching them. A context without priorities or GLR matches (every
context of a JSON Schema's grammar) is built by the compiled kernel of
:mod:`outlines_like.fsm._accel_lexer` when the ``accel`` extra is on, to the same table (with
retyping, where the string terminals can be placed in the scanner order: :func:`_retyped_order`).

One cohesive module of some 630 lines: the terminals' DFAs and the two builds of a context
(Python and compiled), which must give the same tables.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType

import numpy as np
import numpy.typing as npt

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.fsm._context_products import context_product
from outlines_like.fsm.budget import check
from outlines_like.fsm.regex_dfa import compile_regex

__all__ = [
    "ContextDFA",
    "TerminalDFA",
    "TerminalDFAs",
    "build_context",
    "clear_terminal_dfas",
    "literal_dfa",
    "set_context_kernels",
    "terminal_dfa",
]

_kernels_hook: Callable[[], ModuleType | None] | None = None


def set_context_kernels(hook: Callable[[], ModuleType | None]) -> None:
    """Register where the compiled context build comes from (:mod:`._accel` does).

    ``hook()`` returns :mod:`outlines_like.fsm._accel_lexer` while the compiled path is on,
    else ``None``; without a hook the contexts are built in Python.
    """
    global _kernels_hook
    _kernels_hook = hook


@dataclasses.dataclass(frozen=True, eq=False)
class TerminalDFA:
    """One terminal's byte DFA; every state can reach an accepting one.

    Attributes:
        transitions: ``int32[n_states + 1, 256]``; row ``-1`` (the last) is the dead state,
            all ``-1``, so that ``transitions[-1]`` needs no special case.
        accepting: ``bool[n_states + 1]`` (the dead row is not accepting).
        start: The start state.
        literal: The bytes of a plain literal's DFA (a chain: state ``i`` reads
            ``literal[i]``), else ``None``.
    """

    transitions: npt.NDArray[np.int32]
    accepting: npt.NDArray[np.bool_]
    start: int
    literal: bytes | None = None

    @functools.cached_property
    def _edges(self) -> dict[int, list[tuple[int, int]]]:
        return {}

    @functools.cached_property
    def _groups(self) -> dict[int, list[tuple[int, int]]]:
        return {}

    def edges(self, state: int) -> list[tuple[int, int]]:
        """The ``(byte, next state)`` pairs of ``state``, memoised (lexer contexts read them)."""
        if self.literal is not None:  # most terminals of a JSON Schema's grammar, seen once
            return [(self.literal[state], state + 1)] if 0 <= state < len(self.literal) else []
        out = self._edges.get(state)
        if out is None:
            row = self.transitions[state]
            live = np.flatnonzero(row >= 0)
            out = self._edges[state] = list(zip(live.tolist(), row[live].tolist(), strict=True))
        return out

    def groups(self, state: int) -> list[tuple[int, int]]:
        """The ``(next state, bytes)`` pairs of ``state``, by next state, memoised.

        ``bytes`` is a 256-bit int, bit ``b`` set where byte ``b`` leads to that state.
        """
        if self.literal is not None:
            return [(state + 1, 1 << self.literal[state])] if 0 <= state < len(self.literal) else []
        out = self._groups.get(state)
        if out is None:
            by_target: dict[int, int] = {}
            for byte, target in self.edges(state):
                by_target[target] = by_target.get(target, 0) | 1 << byte
            out = self._groups[state] = sorted(by_target.items())
        return out


def _with_dead_row(
    transitions: npt.NDArray[np.int32], accepting: npt.NDArray[np.bool_], start: int
) -> TerminalDFA:
    trans = np.vstack([transitions, np.full((1, 256), -1, dtype=np.int32)]).astype(np.int32)
    acc = np.concatenate([accepting, np.zeros(1, dtype=np.bool_)])
    trans.flags.writeable = acc.flags.writeable = False  # shared through the memo
    return TerminalDFA(trans, acc, start)


def literal_dfa(data: bytes) -> TerminalDFA:
    """Return the DFA of exactly ``data``: a chain of ``len(data) + 1`` states, and the dead row."""
    n = len(data) + 1
    trans = np.full((n + 1, 256), -1, dtype=np.int32)
    trans[np.arange(n - 1), np.frombuffer(data, dtype=np.uint8)] = np.arange(1, n, dtype=np.int32)
    acc = np.zeros(n + 1, dtype=np.bool_)
    acc[n - 1] = True
    trans.flags.writeable = acc.flags.writeable = False  # shared through the memo
    return TerminalDFA(trans, acc, 0, data)


class TerminalDFAs:
    """Every terminal's DFA by terminal id; plain literals are built on first use.

    A JSON Schema's grammar has a literal per property name and enum value (hundreds), most of
    them in lexer contexts a generation never reaches; a literal cannot fail to compile, so
    it waits. Regexes are compiled up front (by the caller), where their errors belong.
    """

    def __init__(self, n: int) -> None:
        self._dfas: list[TerminalDFA | None] = [None] * n
        self._literals: dict[int, bytes] = {}

    def __len__(self) -> int:
        return len(self._dfas)

    def __getitem__(self, terminal: int) -> TerminalDFA:
        dfa = self._dfas[terminal]
        if dfa is None:  # through the memo: grammars share member names and enum values
            text = self._literals.pop(terminal).decode("utf-8")
            dfa = self._dfas[terminal] = terminal_dfa("", "str", text, ())
        return dfa

    def set(self, terminal: int, dfa: TerminalDFA) -> None:
        """Give a terminal its DFA."""
        self._dfas[terminal] = dfa

    def literal(self, terminal: int, data: bytes) -> None:
        """Make a terminal the literal ``data`` (its DFA is built when first asked for)."""
        self._literals[terminal] = data


_REGEX_SPECIALS = frozenset("\\.^$*+?{}[]|()-")


def _escape(ch: str) -> str:
    if ch in _REGEX_SPECIALS:
        return "\\" + ch
    return {"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, ch)


# Lark's common.lark terminals that use lookarounds, with the language Lark's lexer reads for
# them written without (ESCAPED_STRING: its lazy ``.*?`` stops at the first quote not escaped
# by an odd number of backslashes).
_LOOKAROUND_FREE = {
    r'".*?(?<!\\)(\\\\)*?"': r'"([^"\\\n]|\\[^\n])*"',
}


_MEMO_BYTES = 64 << 20
"""Most bytes of transition tables the terminal DFA memo keeps (least recently used out)."""
_memo: collections.OrderedDict[tuple[str, str, tuple[str, ...]], TerminalDFA] = (
    collections.OrderedDict()
)
_memo_bytes = 0
_memo_lock = threading.Lock()


def terminal_dfa(name: str, kind: str, value: str, flags: Sequence[str]) -> TerminalDFA:
    """Compile one Lark terminal to a byte DFA, or take it from the process's memo.

    Grammars share most of their lexemes (a JSON Schema's grammars: the JSON string, numbers,
    punctuation with its whitespace, ``format`` regexes), so the DFAs are memoised by
    ``(kind, value, flags)`` (a DFA is immutable), up to :data:`_MEMO_BYTES` of tables.

    Args:
        name: The terminal's name (for error messages).
        kind: ``"str"`` (a literal) or ``"re"`` (a regex).
        value: The literal text or the regex.
        flags: Lark's pattern flags; ``i`` is supported on literals, none on regexes.

    Raises:
        UnsupportedConstraintError: A flag the byte DFA cannot express.
        InvalidConstraintError: The regex does not compile.
    """
    key = (kind, value, tuple(flags))
    with _memo_lock:
        dfa = _memo.get(key)
        if dfa is not None:
            _memo.move_to_end(key)
            return dfa
    dfa = _terminal_dfa(name, kind, value, flags)
    with _memo_lock:
        global _memo_bytes
        if key not in _memo:
            _memo[key] = dfa
            _memo_bytes += dfa.transitions.nbytes
            while _memo_bytes > _MEMO_BYTES and len(_memo) > 1:
                _memo_bytes -= _memo.popitem(last=False)[1].transitions.nbytes
    return dfa


def clear_terminal_dfas() -> None:
    """Empty the memo of terminal DFAs."""
    global _memo_bytes
    with _memo_lock:
        _memo.clear()
        _memo_bytes = 0


def _terminal_dfa(name: str, kind: str, value: str, flags: Sequence[str]) -> TerminalDFA:
    """Build one terminal's DFA (see :func:`terminal_dfa`)."""
    flag_set = set(flags)
    if kind == "str":
        if not flag_set:
            return literal_dfa(value.encode("utf-8"))
        if flag_set == {"i"}:
            parts = []
            for ch in value:
                variants = sorted({ch, ch.lower(), ch.upper()})
                if len(variants) == 1:
                    parts.append(_escape(ch))
                else:
                    parts.append("(" + "|".join(_escape(v) for v in variants) + ")")
            dfa = compile_regex("".join(parts))
            return _with_dead_row(dfa.transitions, dfa.accepting, dfa.start)
    elif not flag_set:
        try:
            dfa = compile_regex(_LOOKAROUND_FREE.get(value, value))
        except InvalidConstraintError as exc:
            if "not supported" in str(exc):  # a valid Python regex the byte DFA cannot express
                raise UnsupportedConstraintError(
                    f"grammar terminal {name}: {exc}; rewrite the pattern without it"
                ) from exc
            raise
        return _with_dead_row(dfa.transitions, dfa.accepting, dfa.start)
    raise UnsupportedConstraintError(
        f"grammar terminal {name} uses the regex flags {''.join(sorted(flag_set))!r}, which the "
        "token masker does not support; write the pattern without flags (e.g. [aA] for /a/i)"
    )


@dataclasses.dataclass(frozen=True, eq=False)
class ContextDFA:
    """The product DFA of one lexer context.

    State 0 is the start (no byte of the lexeme read yet); it is never accepting, since Lark
    forbids zero-width terminals, and no transition leads back to it.

    Attributes:
        terminals: The context's terminal ids (global numbering).
        transitions: ``int32[n_states, 256]``, ``-1`` = the lexeme cannot go on with that byte.
        winner: ``int64[n_states]``: the class (see ``classify``) of the terminals a lexeme
            ending here becomes, or -1.
        accepting: ``winner >= 0``.
        reach_local: ``bool[n_states, k]``: the terminals ``reach_terms`` (global ids) a
            lexeme going through this state can still become (the columns of :attr:`reach`
            that can be set: the compiled build's are its components, a few of a grammar's
            hundreds of terminals).
        reach_terms: ``int[k]``.
        n_terminals: The grammar's number of terminals.
    """

    terminals: tuple[int, ...]
    transitions: npt.NDArray[np.int32]
    winner: npt.NDArray[np.int64]
    accepting: npt.NDArray[np.bool_]
    reach_local: npt.NDArray[np.bool_]
    reach_terms: npt.NDArray[np.intp]
    n_terminals: int

    @property
    def n_states(self) -> int:
        """Number of states."""
        return int(self.transitions.shape[0])

    @functools.cached_property
    def reach(self) -> npt.NDArray[np.bool_]:
        """``bool[n_states, n_terminals]``: what a lexeme through a state can still become.

        Made on first use (the Python parts of a mask read it; the compiled walk does not).
        """
        terms = self.reach_terms
        if len(terms) == self.n_terminals and (terms == np.arange(len(terms))).all():
            return self.reach_local
        out = np.zeros((self.n_states, self.n_terminals), dtype=np.bool_)
        out[:, self.reach_terms] = self.reach_local
        return out

    @functools.cached_property
    def flat(self) -> npt.NDArray[np.int32]:
        """``transitions`` raveled, for :func:`~outlines_like.fsm._grammar_walk.walk`."""
        return np.ascontiguousarray(self.transitions.reshape(-1))

    @functools.cached_property
    def rows(self) -> tuple[tuple[int, ...], ...]:
        """``transitions`` as Python tuples (fast scalar lookups while advancing).

        Tuples of ints, which the cyclic garbage collector stops tracking once it has seen
        them: as lists, a large schema's contexts kept ~25,000 lists of 256 items in its
        reach, and a full collection during a mask took ~100 ms traversing them.
        """
        return tuple(map(tuple, self.transitions.tolist()))


_DEAD_ROW = np.full(256, -1, dtype=np.int32)
_KERNEL_MAX_STATES = 1 << 13
"""Most states of a context the compiled build makes; a larger one is built in Python, which
checks the compile budget as it goes."""
_ALL_BYTES = (1 << 256) - 1
_REFINE_MAX = 64
"""Most live terminals of a state whose row is built by refining byte partitions; more (a
context of thousands of literals, at its start) take one ``np.unique`` over their rows."""


@functools.lru_cache(maxsize=4096)
def _byte_indices(mask: int) -> npt.NDArray[np.intp]:
    """The bytes set in a 256-bit int, ascending (memoised: contexts share their masks)."""
    bits = np.unpackbits(
        np.frombuffer(mask.to_bytes(32, "little"), dtype=np.uint8), bitorder="little"
    )
    out = np.flatnonzero(bits)
    out.flags.writeable = False
    return out


def build_context(
    order: Sequence[int],
    unless: Mapping[int, Sequence[int]],
    dfas: TerminalDFAs | Sequence[TerminalDFA],
    classify: Callable[[tuple[int, ...]], int],
    *,
    all_matches: bool = False,
    priorities: Sequence[int] | None = None,
) -> ContextDFA:
    """Build the product DFA of a lexer context.

    Args:
        order: The scanner's terminals (global ids), in Lark's priority order.
        unless: For a regex terminal, the string terminals a lexeme it matched is retyped to
            when equal to one of them, in order (Lark's ``UnlessCallback``).
        dfas: The DFA of every terminal, by global id.
        classify: Maps the terminals a lexeme ending in a state becomes (a non-empty tuple)
            to the id stored in ``winner``.
        all_matches: A lexeme becomes every terminal matching it (the GLR parser tries each),
            instead of Lark's single choice.
        priorities: Lark's terminal priorities, by global id. Lark's scanner tries terminals
            by priority first, so once a terminal has matched, the lexeme cannot grow into
            one of lower priority only, and it cannot end as one of lower priority either
            (Lark would have cut it at the earlier match; the matcher, which never goes back,
            rejects that text instead).
    """
    live = list(order)
    tracked: list[int] = []
    for targets in unless.values():
        for t in targets:
            if t not in tracked:
                tracked.append(t)
    prio = [0] * len(live) if priorities is None else [priorities[t] for t in live]
    by_priority = not all_matches and len(set(prio)) > 1
    kernels = None if _kernels_hook is None else _kernels_hook()
    if kernels is not None and live and not (all_matches or by_priority):
        components = _retyped_order(live, unless, tracked, dfas) if tracked else live
        if components is not None:
            check("grammar lexer context")
            built = _compiled_context(
                kernels, live, components, [dfas[t] for t in components], len(dfas), classify
            )
            if built is not None:
                return built
    comps = live + tracked
    n_live = len(live)
    comp_trans = [dfas[t].transitions for t in comps]
    comp_acc = [dfas[t].accepting for t in comps]
    comp_dfas = [dfas[t] for t in comps]
    unless_pos = {
        live.index(t): [n_live + tracked.index(u) for u in targets]
        for t, targets in unless.items()
        if t in live
    }

    # A state keeps only its live components, as (component, state) pairs in component
    # order: a context of thousands of literal terminals (`a: "w1" | "w2" | ...`) has all of
    # them live at its start only, and a few after the first byte.
    Sparse = tuple[tuple[int, int], ...]

    def matched(tup: Sparse) -> int | None:
        """The highest priority among the terminals matching the lexeme now."""
        found = [prio[i] for i, q in tup if i < n_live and comp_acc[i][q]]
        return max(found) if found else None

    def label(state: tuple[Sparse, int | None]) -> tuple[int, ...]:
        tup, best = state
        if all_matches:
            return tuple(sorted({comps[i] for i, q in tup if i < n_live and comp_acc[i][q]}))
        at = dict(tup)
        for i, q in tup:
            if i >= n_live:
                break
            if comp_acc[i][q]:
                if best is not None and prio[i] < best:
                    return ()  # a higher-priority terminal matched a shorter lexeme
                for j in unless_pos.get(i, ()):
                    qj = at.get(j)
                    if qj is not None and comp_acc[j][qj]:
                        return (comps[j],)
                return (comps[i],)
        return ()

    start_tuple: Sparse = tuple((i, dfas[t].start) for i, t in enumerate(comps))
    # a state: (live component states, highest priority matched so far when priorities matter)
    states: list[tuple[Sparse, int | None]] = [(start_tuple, None)]
    index: dict[tuple[Sparse, int | None], int] = {}  # the start is never returned to
    # the transitions, written into one table at the end: single cells, and runs of bytes
    cell_state: list[int] = []
    cell_byte: list[int] = []
    cell_next: list[int] = []
    runs: list[tuple[int, int, int]] = []
    succ: list[list[int]] = []

    def intern(nxt: Sparse, best: int | None) -> int:
        """The id of the state after ``nxt`` (numbered on first sight), or -1 where cut."""
        key: tuple[Sparse, int | None] = (nxt, None)
        if by_priority:
            if best is not None and all(prio[i] < best for i, _ in nxt if i < n_live):
                return -1  # only lower-priority terminals could go on: cut here
            now = matched(nxt)
            key = (nxt, now if best is None else best if now is None else max(best, now))
        sid = index.get(key)
        if sid is None:
            sid = index[key] = len(states)
            states.append(key)
        return sid

    k = -1
    while k + 1 < len(states):
        k += 1
        tup, best = states[k]
        if not k & 255:
            check("grammar lexer context")
        nexts: list[int] = []
        succ.append(nexts)
        if not tup:  # nothing can be lexed here (the end of the input)
            continue
        if (
            len(tup) == 1
            and tup[0][0] < n_live
            and not by_priority
            and comp_dfas[tup[0][0]].literal is not None
        ):
            # one literal left (its tail): one byte goes on, no product to take
            ((i, q),) = tup
            for byte, target in comp_dfas[i].edges(q):
                key1: tuple[Sparse, int | None] = (((i, target),), None)
                sid = index.get(key1)
                if sid is None:
                    sid = index[key1] = len(states)
                    states.append(key1)
                cell_state.append(k)
                cell_byte.append(byte)
                cell_next.append(sid)
                nexts.append(sid)
            continue
        if len(tup) > _REFINE_MAX:
            members = [i for i, _ in tup]
            block = np.stack([comp_trans[i][q] for i, q in tup])
            n_members_live = sum(1 for i in members if i < n_live)
            live_bytes = np.flatnonzero((block[:n_members_live] >= 0).any(axis=0))
            if len(live_bytes):
                cols, first, inverse = np.unique(
                    block[:, live_bytes].T, axis=0, return_index=True, return_inverse=True
                )
                ids = np.full(len(cols), -1, dtype=np.int32)
                col_list = cols.tolist()
                for c in np.argsort(first).tolist():  # in the order of the first byte, as above
                    ids[c] = intern(
                        tuple((i, q) for i, q in zip(members, col_list[c], strict=True) if q >= 0),
                        best,
                    )
                by_byte = ids[inverse.reshape(-1)]
                cell_state.extend([k] * len(live_bytes))
                cell_byte.extend(live_bytes.tolist())
                cell_next.extend(by_byte.tolist())
                nexts.extend(ids[ids >= 0].tolist())
            continue
        # Refine the members' partitions of the bytes by next state: a few parts (a literal
        # goes on with one byte, the inside of a JSON string with most), each a 256-bit int.
        parts: list[tuple[int, Sparse]] = [(_ALL_BYTES, ())]
        for i, q in tup:
            groups = comp_dfas[i].groups(q)
            refined: list[tuple[int, Sparse]] = []
            for m, nxt in parts:
                rest = m
                for target, g in groups:
                    x = rest & g
                    if x:
                        refined.append((x, (*nxt, (i, target))))
                        rest ^= x
                        if not rest:
                            break
                if rest:
                    refined.append((rest, nxt))
            parts = refined
        if len(parts) > 1:  # new states in the order of the first byte reaching them
            parts.sort(key=lambda part: part[0] & -part[0])
        for m, nxt in parts:
            if nxt and nxt[0][0] < n_live:  # else no live terminal goes on with these bytes
                sid = intern(nxt, best)
                if sid >= 0:
                    if m & (m - 1):
                        runs.append((k, m, sid))
                    else:
                        cell_state.append(k)
                        cell_byte.append(m.bit_length() - 1)
                        cell_next.append(sid)
                    nexts.append(sid)
    n = len(states)
    transitions = np.full((n, 256), -1, dtype=np.int32)
    transitions[cell_state, cell_byte] = cell_next
    for k, m, sid in runs:
        transitions[k, _byte_indices(m)] = sid
    labels: list[tuple[int, ...]] = []
    for key in states:
        tup, best = key
        if len(tup) == 1 and best is None:  # nothing to retype, no priority to compare
            ((i, q),) = tup
            labels.append((comps[i],) if i < n_live and comp_acc[i][q] else ())
        else:
            labels.append(label(key))
    winner = np.array([classify(lab) if lab else -1 for lab in labels], dtype=np.int64)
    # backward closure over terminal sets as int bitsets: states come in breadth-first order,
    # so one pass from the last state settles every loop-free part; loops take a few more
    bits = [
        (1 << lab[0] if lab else 0) if len(lab) < 2 else sum(1 << t for t in set(lab))
        for lab in labels
    ]
    changed = True
    while changed:
        changed = False
        for q in range(n - 1, -1, -1):
            merged = bits[q]
            for x in succ[q]:
                merged |= bits[x]
            if merged != bits[q]:
                bits[q] = merged
                changed = True
    n_terms = len(dfas)
    width = (n_terms + 7) // 8
    packed = np.frombuffer(b"".join(b.to_bytes(width, "little") for b in bits), dtype=np.uint8)
    reach = np.unpackbits(
        packed.reshape(n, width), axis=1, count=n_terms, bitorder="little"
    ).astype(np.bool_)
    return ContextDFA(
        terminals=tuple(order),
        transitions=transitions,
        winner=winner,
        accepting=winner >= 0,
        reach_local=reach,
        reach_terms=np.arange(n_terms),
        n_terminals=n_terms,
    )


def _retyped_order(
    live: list[int],
    unless: Mapping[int, Sequence[int]],
    tracked: list[int],
    dfas: TerminalDFAs | Sequence[TerminalDFA],
) -> list[int] | None:
    """The components of a context with retyping, in an order where the first match wins.

    Lark retypes a lexeme its regex terminal ``i`` matched to the string terminal ``j`` equal
    to it (``unless[i]``); ``j`` itself is not among the scanner's terminals. With ``j`` placed
    just before the first such ``i`` of the scanner order, the first component matching a
    lexeme is the terminal Lark gives it: where ``j`` matches (the lexeme is ``j``'s text),
    ``i`` matches too, so the terminals before ``j`` are those before ``i``, and ``j`` wins
    exactly where ``i`` would have won and been retyped. Each ``j`` must be a literal that
    ``i``'s DFA accepts whole (then ``j`` is never live without ``i``: the product has the
    same states as the Python build's, which tracks ``j`` beside the live terminals), and no
    ``j`` may be live itself or tracked for a regex terminal outside the scanner; else
    ``None`` (the Python build).
    """
    before: dict[int, list[int]] = {}
    placed: set[int] = set()
    for i in live:
        for j in unless.get(i, ()):
            literal = dfas[j].literal
            if literal is None or not _accepts(dfas[i], literal):
                return None
            if j not in placed:
                placed.add(j)
                before.setdefault(i, []).append(j)
    if len(placed) != len(tracked) or not placed.isdisjoint(live):
        return None
    return [t for i in live for t in (*before.get(i, ()), i)]


def _accepts(dfa: TerminalDFA, data: bytes) -> bool:
    state = dfa.start
    rows = dfa.transitions
    for byte in data:
        state = int(rows[state, byte])  # (the dead row, -1, reads -1 everywhere)
    return bool(dfa.accepting[state])


def _compiled_context(
    kernels: ModuleType,
    order: list[int],
    components: list[int],
    comp_dfas: list[TerminalDFA],
    n_terms: int,
    classify: Callable[[tuple[int, ...]], int],
) -> ContextDFA | None:
    """:func:`build_context` in the compiled kernel, for a context of plain terminals.

    ``components``: the terminals of the product, ``order`` with the retyping targets placed
    (:func:`_retyped_order`). No priorities or GLR matches; ``None`` past
    :data:`_KERNEL_MAX_STATES` states. The product comes from the process's memo when another
    context (of any grammar) had the same components in the same order; only the class and
    terminal ids are this grammar's.
    """
    product = context_product(kernels, comp_dfas, _KERNEL_MAX_STATES)
    if product is None:
        return None
    # the terminals' classes, asked for in the order of the states (as the Python build does)
    classes = [classify((components[c],)) for c in product.labels]
    classes.append(-1)
    winner_array = np.array(classes, dtype=np.int64)[product.label_at]
    return ContextDFA(
        terminals=tuple(order),
        transitions=product.transitions,
        winner=winner_array,
        accepting=winner_array >= 0,
        reach_local=product.reach,  # its components' columns, as this grammar's ids
        reach_terms=np.array(components, dtype=np.intp),
        n_terminals=n_terms,
    )
