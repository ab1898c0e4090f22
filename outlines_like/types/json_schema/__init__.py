"""JSON Schema -> regex: one regular expression for the documents a schema accepts.

The regex matches the JSON text of every valid document written in one whitespace policy
(compact by default, as ``json.dumps(value, separators=(",", ":"), ensure_ascii=False)``),
with object properties in schema order. It uses only what the token masker's regex engine
(and ``interegular``) reads: no lookarounds, no backreferences, no lazy quantifiers, character
classes written out. ``docs/json_schema.md`` lists every keyword and what happens to it.

A keyword that narrows the valid documents but cannot be enforced raises
:class:`~outlines_like.errors.InvalidConstraintError` naming the keyword and where it sits; with
``lenient=True`` it warns (:class:`UnenforcedKeywordWarning`) and is dropped. Nothing is
dropped silently.
"""

from outlines_like.errors import UnenforcedKeywordWarning
from outlines_like.types.json_schema._driver import json_schema_to_regex

__all__ = ["UnenforcedKeywordWarning", "json_schema_to_regex"]
