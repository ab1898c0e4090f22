"""The compatibility report: how a server would enforce an output type, keyword by keyword.

```python
report = check(Character, server="llamacpp")
print(report)          # one line per JSON pointer: native / compiled / rejected, then the fields
report.ok              # False when the request would be refused before sending
```

Pure: it builds what the adapter would send and never talks to a server.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Literal

from outlines_like.adapters.base import ConstraintFields, Endpoint
from outlines_like.adapters.capabilities import keyword_uses
from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types import CFG, JsonObject, JsonSchema, Term, to_term

__all__ = ["CompatibilityReport", "Enforcement", "Row", "check"]

Enforcement = Literal["native", "compiled", "rejected"]
"""``native``: the server's own engine enforces it; ``compiled``: we send our own compiled
form (regex or grammar) in a field the server reads; ``rejected``: refused before sending."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One part of the constraint and how it is enforced."""

    pointer: str
    what: str
    enforcement: Enforcement


@dataclasses.dataclass(frozen=True)
class CompatibilityReport:
    """How ``server`` would enforce an output type.

    Attributes:
        server: The server kind (and version, when given).
        endpoint: ``chat`` or ``completions``.
        rows: One row per constraining keyword (JSON Schema) or per term (regex, grammar).
        fields: The request fields that would be sent, or ``None`` when refused.
        error: Why the request would be refused, or ``None``.
    """

    server: str
    endpoint: Endpoint
    rows: tuple[Row, ...]
    fields: ConstraintFields | None
    error: str | None

    @property
    def ok(self) -> bool:
        """Whether a request would go out (every part enforced natively or compiled)."""
        return self.error is None

    def __str__(self) -> str:
        width = max((len(r.pointer) for r in self.rows), default=1)
        lines = [f"{self.server} ({self.endpoint}):"]
        lines += [f"  {r.pointer:<{width}}  {r.enforcement:<8}  {r.what}" for r in self.rows]
        if self.error is not None:
            lines.append(f"refused before sending: {self.error}")
        else:
            lines.append("sends: " + json.dumps(self.fields, sort_keys=True)[:2000])
        return "\n".join(lines)


def _term_label(term: Term) -> str:
    if isinstance(term, CFG):
        return f"grammar ({term.syntax})"
    if isinstance(term, JsonObject):
        return "any JSON object"
    return f"regex ({type(term).__name__})"


def check(
    output_type: object,
    server: str,
    *,
    version: str | None = None,
    endpoint: Endpoint = "chat",
) -> CompatibilityReport:
    """Say how ``server`` would enforce ``output_type``, without sending anything.

    Args:
        output_type: Anything ``model(prompt, output_type)`` takes.
        server: A server kind (``"llamacpp"``, ``"vllm"``, ``"sglang"``...).
        version: The server's version, where the dialect depends on it (vLLM).
        endpoint: ``"chat"`` or ``"completions"``.

    Raises:
        ValueError: ``server`` is not a known kind.
        InvalidConstraintError: the output type's regex, schema or grammar is wrong.
    """
    from outlines_like.adapters import get_adapter_for

    adapter = get_adapter_for(server, version)
    label = server + (f" {version}" if version else "")
    term = to_term(output_type)
    if term is None:
        return CompatibilityReport(label, endpoint, (), {}, None)
    fields: ConstraintFields | None
    try:
        fields = adapter.constraint_fields(term, endpoint=endpoint)
        error = None
    except UnsupportedConstraintError as exc:
        fields, error = None, str(exc)
    if not isinstance(term, JsonSchema):
        status: Enforcement = "rejected" if error else "native"
        return CompatibilityReport(
            label, endpoint, (Row("#", _term_label(term), status),), fields, error
        )
    dropped_by_server = {u.pointer for u in _dropped(adapter, term)}
    rows = []
    for use in keyword_uses(term.schema):
        status = "native"
        if use.pointer in dropped_by_server:
            status = "rejected" if error else "compiled"
        elif error and not dropped_by_server:
            status = "rejected"
        rows.append(Row(use.pointer, f"{use.keyword}: {_short(use.value)}", status))
    return CompatibilityReport(label, endpoint, tuple(rows), fields, error)


def _dropped(adapter: object, term: JsonSchema) -> list[Any]:
    dropped = getattr(adapter, "dropped_keywords", None)
    if dropped is None:
        return []
    try:
        return list(dropped(term))
    except InvalidConstraintError:
        return []


def _short(value: object, limit: int = 40) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
