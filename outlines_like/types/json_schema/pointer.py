"""JSON pointers (RFC 6901) inside one document: the one resolver for ``$ref`` users."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["PointerError", "resolve_pointer"]


class PointerError(LookupError):
    """A pointer that names nothing in the document (the message says which token)."""


_PERCENT = re.compile(r"%([0-9a-fA-F]{2})")


def _decoded(match: re.Match[str]) -> str:
    return chr(int(match.group(1), 16))


def resolve_pointer(root: Any, pointer: str) -> Any:
    """Return the value ``pointer`` (``""`` or ``"/a/0/b"``, percent-decoded) names in ``root``.

    Raises:
        PointerError: A token names no member or index.
    """
    node: Any = root
    for raw in pointer.split("/")[1:]:
        # most tokens are plain names: no substitution call for them (every $ref of every
        # schema compiled comes here, once per converter)
        token = _PERCENT.sub(_decoded, raw) if "%" in raw else raw
        if "~" in token:
            token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise PointerError(token)
    return node
