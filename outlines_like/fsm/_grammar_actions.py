"""An LALR(1) parse table as the grammar masker keeps it: rows by name, or flat arrays.

:class:`Tables` is what :func:`~outlines_like.fsm._grammar_tables.lalr_tables` returns. Its
``actions`` are a dict per state (the Python build, Lark's tables) or, from the compiled build
(:mod:`outlines_like.fsm._accel_tables`), :class:`ActionRows`: the flat arrays the compiled
walk takes as they are, with a state's dict made on first use (a document's first masks read
a few of the thousands of states of a large schema's grammar). :func:`action_arrays` gives
either as arrays.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["END", "ActionRows", "Tables", "action_arrays", "compiled_tables"]

END = "$END"
I32 = npt.NDArray[np.int32]
_MAX_COMPILED_STATES = 1 << 18  # past these, the Python build (it checks the budget)


class ActionRows(Mapping[int, dict[str, int]]):
    """Per state, its actions by symbol name, from flat arrays (each dict made on first use).

    Args:
        bounds: State ``s``'s entries are ``bounds[s]:bounds[s + 1]`` of the other two.
        symbols: Per entry, the symbol's index in ``names``.
        values: Per entry, the action (as in :attr:`Tables.actions`): ``codes``.
        names: The symbols' names.
    """

    def __init__(self, bounds: I32, symbols: I32, values: I32, names: list[str]) -> None:
        self.bounds = bounds
        self.symbols = symbols
        self.codes = values
        self.names = names
        self._rows: list[dict[str, int] | None] = [None] * (len(bounds) - 1)

    def __getitem__(self, state: int) -> dict[str, int]:
        if state < 0:
            raise KeyError(state)
        try:
            row = self._rows[state]
        except IndexError:
            raise KeyError(state) from None
        if row is None:
            lo, hi = int(self.bounds[state]), int(self.bounds[state + 1])
            names = map(self.names.__getitem__, self.symbols[lo:hi].tolist())
            row = self._rows[state] = dict(zip(names, self.codes[lo:hi].tolist(), strict=True))
        return row

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self._rows)))


@dataclasses.dataclass(frozen=True, eq=False)
class Tables:
    """An LALR(1) parse table.

    Attributes:
        actions: Per state, per symbol name: the state to shift (or go) to, ``>= 0``, or the
            rule to reduce by, ``~rule``: the first action where there are several.
        conflicts: Per state with a conflict, per symbol with several actions: all of them.
        start: The start state.
        end: The state reached from ``start`` by ``start`` (the input may end there).
        rule_size: Per rule, the length of its expansion.
        rule_origin: Per rule, its origin's name.
    """

    actions: Mapping[int, dict[str, int]]
    conflicts: dict[int, dict[str, tuple[int, ...]]]
    start: int
    end: int
    rule_size: list[int]
    rule_origin: list[str]

    @property
    def conflict(self) -> bool:
        """Whether some state has more than one action on a terminal."""
        return bool(self.conflicts)

    def all_actions(self) -> dict[int, dict[str, tuple[int, ...]]]:
        """Every action, conflicting ones included (what a GLR parser runs)."""
        out = {}
        for state, row in self.actions.items():
            both = self.conflicts.get(state, {})
            out[state] = {sym: both.get(sym, (act,)) for sym, act in row.items()}
        return out


def action_arrays(actions: Mapping[int, dict[str, int]]) -> tuple[I32, I32, I32, list[str]]:
    """The actions of states ``0 .. max`` as :class:`ActionRows`' arrays and names.

    Unsorted within a state; a dict's symbols are named in the order met.
    """
    if isinstance(actions, ActionRows):
        return actions.bounds, actions.symbols, actions.codes, actions.names
    n_states = max(actions) + 1
    rows = [actions.get(state, {}) for state in range(n_states)]
    index: dict[str, int] = {}
    keys = list(itertools.chain.from_iterable(rows))
    for name in keys:
        index.setdefault(name, len(index))
    symbols = np.fromiter(map(index.__getitem__, keys), dtype=np.int32, count=len(keys))
    values = np.array(list(itertools.chain.from_iterable(map(dict.values, rows))), dtype=np.int32)
    bounds = np.zeros(n_states + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, rows), dtype=np.int32, count=n_states), out=bounds[1:])
    return bounds, symbols, values.reshape(-1), list(index)


def compiled_tables(
    kernels: ModuleType,
    lhs: list[int],
    sizes: list[int],
    rhs: list[int],
    names: list[str],
    n_nt: int,
    start: int,
) -> Tables | None:
    """The table from the compiled build (:mod:`._accel_tables`), or None where it declines.

    It declines a grammar with a conflict (the Python build reports them) or with more than
    :data:`_MAX_COMPILED_STATES` states (the Python build checks the budget as it goes).

    Args:
        kernels: :mod:`outlines_like.fsm._accel_tables`.
        lhs: Per production (the root's last), its origin's symbol id.
        sizes: Per production, the length of its right side.
        rhs: The right sides' symbol ids, one after the other.
        names: The symbols' names by id: the ``n_nt`` nonterminals (the root last) first.
        n_nt: The number of nonterminals.
        start: The start symbol's id.
    """
    rhs_off = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(sizes, out=rhs_off[1:])
    found: tuple[Any, ...] = kernels.tables(
        n_nt,
        len(names),
        np.array(lhs, dtype=np.int32),
        rhs_off,
        np.array(rhs, dtype=np.int32),
        start,
        _MAX_COMPILED_STATES,
    )
    code, bounds, symbols, values, end = found
    if code != kernels.OK:
        return None
    actions = ActionRows(bounds, symbols, values, [*names, END])
    return Tables(actions, {}, 0, int(end), sizes, [names[o] for o in lhs])
