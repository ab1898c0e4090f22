"""JSON pointers (RFC 6901): escapes, percent-encoding, indexes and misses."""

from __future__ import annotations

from typing import Any

import pytest

from outlines_like.types.json_schema.pointer import PointerError, resolve_pointer

DOCUMENT: dict[str, Any] = {
    "$defs": {
        "a/b": 1,
        "m~n": 2,
        "~1": 3,
        "%": 4,
        "p q": 5,
        "plain": {"items": [10, 11, {"deep": 12}]},
    }
}


@pytest.mark.parametrize(
    ("pointer", "value"),
    [
        ("", DOCUMENT),
        ("/$defs/a~1b", 1),
        ("/$defs/m~0n", 2),
        ("/$defs/~01", 3),  # ~0 then 1: the name "~1", not "/"
        ("/$defs/%25", 4),
        ("/$defs/p%20q", 5),
        ("/$defs/plain/items/1", 11),
        ("/$defs/plain/items/2/deep", 12),
    ],
)
def test_pointer_names_its_value(pointer: str, value: Any) -> None:
    assert resolve_pointer(DOCUMENT, pointer) == value


@pytest.mark.parametrize(
    ("pointer", "token"),
    [
        ("/$defs/a/b", "a"),
        ("/$defs/missing", "missing"),
        ("/$defs/plain/items/3", "3"),
        ("/$defs/plain/items/x", "x"),
        ("/$defs/p q%21", "p q!"),
    ],
)
def test_pointer_to_nothing_names_the_token(pointer: str, token: str) -> None:
    with pytest.raises(PointerError) as info:
        resolve_pointer(DOCUMENT, pointer)
    assert info.value.args[0] == token
