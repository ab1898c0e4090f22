"""The grammar IR every reader builds and every writer reads, with its simplifying constructors."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final, TypeAlias

from outlines_like.types._charset import complement, normalize


@dataclasses.dataclass(frozen=True, slots=True)
class Lit:
    """A literal string (never empty: the empty sequence stands for the empty string)."""

    text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Class:
    """One character from ``ranges`` (inclusive code point pairs, sorted, disjoint)."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Ref:
    """A reference to a rule by its source name."""

    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class Seq:
    """The items one after another; ``Seq(())`` is the empty string."""

    items: tuple[Node, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Alt:
    """Any one of the items."""

    items: tuple[Node, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Rep:
    """The item between ``low`` and ``high`` times (``high=None``: unbounded)."""

    item: Node
    low: int
    high: int | None


Node: TypeAlias = Lit | Class | Ref | Seq | Alt | Rep
EMPTY: Final = Seq(())


@dataclasses.dataclass(slots=True)
class Grammar:
    """Rules by source name, in order; ``start`` names the start rule."""

    rules: dict[str, Node]
    start: str


def seq(items: Iterable[Node]) -> Node:
    """A sequence, flattened, with adjacent literals merged."""
    flat: list[Node] = []
    for item in items:
        parts = item.items if isinstance(item, Seq) else (item,)
        for part in parts:
            if isinstance(part, Lit) and flat and isinstance(flat[-1], Lit):
                flat[-1] = Lit(flat[-1].text + part.text)
            else:
                flat.append(part)
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(items: Iterable[Node]) -> Node:
    """An alternation, flattened and deduplicated; an empty branch makes the rest optional."""
    flat: list[Node] = []
    has_empty = False
    for item in items:
        for part in item.items if isinstance(item, Alt) else (item,):
            if part == EMPTY:
                has_empty = True
            elif part not in flat:
                flat.append(part)
    if not flat:
        return EMPTY
    body = flat[0] if len(flat) == 1 else Alt(tuple(flat))
    return rep(body, 0, 1) if has_empty else body


def rep(item: Node, low: int, high: int | None) -> Node:
    """A repetition, simplified where that keeps the language."""
    if high == 0 or item == EMPTY:
        return EMPTY
    if low == 1 and high == 1:
        return item
    if isinstance(item, Rep) and item.low == 0 and item.high == 1 and low == 0:
        # (x?)? == x?, (x?)* == x*, (x?){0,n} == x{0,n}
        return Rep(item.item, 0, high)
    if isinstance(item, Rep) and item.high is None and item.low <= 1 and low == 0:
        # (x*)? == (x+)? == (x*)* == x*
        return Rep(item.item, 0, None)
    return Rep(item, low, high)


def make_class(ranges: Iterable[tuple[int, int]], negated: bool = False) -> Class:
    """A class in its shorter form: positive, or negated when that needs fewer ranges."""
    base = normalize(ranges)
    other = complement(base)
    if negated:  # keep the writer's negation unless the positive form is shorter
        return Class(other) if len(other) < len(base) else Class(base, negated=True)
    return Class(other, negated=True) if base and len(other) < len(base) else Class(base)
