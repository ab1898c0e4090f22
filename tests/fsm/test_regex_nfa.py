"""The Python NFA build copies a node met again, and the estimates read shared nodes once.

The reader shares the node of a group text it read before; the NFA build copies that node's
first fragment (states shifted) instead of building it again, and ``nfa_states`` and
``dfa_blowup`` look at it once. Each must give what a tree without any sharing gives.
"""

from __future__ import annotations

import dataclasses

import pytest

from outlines_like.fsm._regex_estimate import dfa_blowup, nfa_states
from outlines_like.fsm._regex_nfa import NFA
from outlines_like.types import JsonSchema, to_regex
from outlines_like.types._regex import Alt, Chars, Concat, Node, Repeat, parse_regex

SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"type": "string"},
        "b": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "c": {"type": "array", "items": {"type": "number"}},
        "d": {"type": "string", "maxLength": 3},
    },
}
PATTERNS = [
    "(?:ab|c)(?:ab|c){3}(?:ab|c)*",
    "(?:[0-9]+x)?(?:[0-9]+x)?(?:[0-9]+x){2,4}",
    "(?:é|日[^a])+(?:é|日[^a]){0,2}",
    "[0-9]*1(?:[0-9]*1[0-9]{3})",
    "(?:a[^\\x00-\\U0010FFFF]?)(?:a[^\\x00-\\U0010FFFF]?)b",
    to_regex(JsonSchema(SCHEMA)),
]


class _NoMemo(dict[int, object]):
    """A memo that never finds anything: every node is built from scratch."""

    def get(self, key: int, default: object = None) -> object:
        return default


def arrays(nfa: NFA) -> list[list[int]]:
    return [list(a) for a in (nfa.off, nfa.lo, nfa.hi, nfa.dst, nfa.eps_off, nfa.eps_dst)]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_copied_fragments_are_the_built_ones(pattern: str) -> None:
    tree = parse_regex(pattern, strip_anchors=True)
    fresh = NFA()
    fresh._built = _NoMemo()  # type: ignore[assignment]
    copied = NFA()
    assert copied.build(tree) == fresh.build(tree)
    assert (copied.n, copied.shared, copied.has_empty_set) == (
        fresh.n,
        fresh.shared,
        fresh.has_empty_set,
    )
    copied.freeze()
    fresh.freeze()
    assert arrays(copied) == arrays(fresh)


def test_large_fragments_are_copied_whole() -> None:
    # a fragment past the Python copy's size is shifted in numpy: same arrays
    body = '(?:[^"\\\\\\x00-\\x1f]|\\\\["\\\\/bfnrt]|\\\\u[0-9a-fA-F]{4}){0,6}'
    test_copied_fragments_are_the_built_ones(f"(?:{body}x)(?:{body}x){{3}}")


def _unshared(node: Node) -> Node:
    """``node`` with every node its own object (a copy wherever the reader shared one)."""
    if isinstance(node, Chars):
        return Chars(node.ranges, node.negated)
    if isinstance(node, (Concat, Alt)):
        return type(node)(tuple(_unshared(item) for item in node.items))
    if isinstance(node, Repeat):
        return dataclasses.replace(node, item=_unshared(node.item))
    return node


def _visits(node: Node, seen: set[int]) -> int:
    """Nodes met walking the tree (each time), recording their ids in ``seen``."""
    seen.add(id(node))
    if isinstance(node, (Concat, Alt)):
        return 1 + sum(_visits(item, seen) for item in node.items)
    if isinstance(node, Repeat):
        return 1 + _visits(node.item, seen)
    return 1


@pytest.mark.parametrize("pattern", PATTERNS)
def test_estimates_read_shared_nodes_as_copies(pattern: str) -> None:
    tree = parse_regex(pattern, strip_anchors=True)
    seen: set[int] = set()
    visits = _visits(tree, seen)
    assert len(seen) < visits  # the reader shares nodes
    plain = _unshared(tree)
    seen.clear()
    visits = _visits(plain, seen)
    assert len(seen) == visits
    assert nfa_states(tree) == nfa_states(plain)
    assert dfa_blowup(tree) == dfa_blowup(plain)


def test_blowup_reads_the_rest_of_a_concatenation_in_place() -> None:
    # the loop's threads: 2 ** 3 after the 1 (and the same with the text inside a group)
    assert dfa_blowup(parse_regex("[0-9]*1[0-9]{3}")) == dfa_blowup(
        parse_regex("[0-9]*(?:1[0-9]{3})")
    )
    assert dfa_blowup(parse_regex("[0-9]*1[0-9]{3}")) > 0


def test_blowup_kept_per_node_across_patterns() -> None:
    """A node's worst is kept for later trees: the same answers as from scratch."""
    from outlines_like.fsm import _regex_estimate

    patterns = ["[0-9]*1[0-9]{3}", "(?:[0-9]*1[0-9]{3})x", "(?:(?:[0-9]*1[0-9]{3})x)*y", *PATTERNS]
    warm = [dfa_blowup(parse_regex(p, strip_anchors=True)) for p in patterns]
    cold = []
    for p in patterns:
        _regex_estimate._WORST.clear()
        cold.append(dfa_blowup(_unshared(parse_regex(p, strip_anchors=True))))
    assert warm == cold
    assert warm[0] == warm[1] == warm[2] > 0
