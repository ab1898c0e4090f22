"""JSON pointers (RFC 6901) inside one document: the one resolver for ``$ref`` users."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["PointerError", "resolve_pointer"]


class PointerError(LookupError):
    """A pointer that names nothing in the document (the message says which token)."""


def resolve_pointer(root: Any, pointer: str) -> Any:
    """Return the value ``pointer`` (``""`` or ``"/a/0/b"``, percent-decoded) names in ``root``.

    Raises:
        PointerError: A token names no member or index.
    """
    node: Any = root
    for raw in pointer.split("/")[1:]:
        token = re.sub(r"%([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), raw)
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            raise PointerError(token)
    return node
