"""What one call is made of: the output type's constraint, the prepared call, the request.

Plain immutable values shared by ``ModelCore`` (``_core.py``), the drivers (``remote.py``) and
``Generator``: ``Constraint`` (an output type validated once, cached by identity), ``Call``
(everything about a call that does not depend on the server), ``Target`` (a resolved server
and its adapter), ``Request`` (what goes to the SDK), and ``ListModels`` (a flow step).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

from outlines_like.adapters.base import Adapter, ConstraintFields, Endpoint, ServerInfo
from outlines_like.messages import Usage
from outlines_like.models._reader import Verify
from outlines_like.types import Term, to_term

__all__ = [
    "FREE_TEXT",
    "Call",
    "Constraint",
    "ListModels",
    "Request",
    "Target",
    "UsageMeter",
    "label",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ListModels:
    """Flow step: list the served model ids (``GET /v1/models``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Constraint:
    """An output type and the term it became (``None``: free text)."""

    output_type: object
    term: Term | None

    @staticmethod
    def of(output_type: object) -> Constraint:
        """Validate ``output_type`` once.

        Raises:
            UnsupportedConstraintError: ``output_type`` is not something we can constrain to.
            InvalidConstraintError: its regex, schema or grammar is wrong.
        """
        if isinstance(output_type, Constraint):
            return output_type
        if output_type is None:
            return FREE_TEXT
        # By identity first: hashing a typing form such as Literal[...] costs microseconds.
        hit = _BY_ID.get(id(output_type))
        if hit is not None and hit.output_type is output_type:
            return hit
        constraint = Constraint(output_type, to_term(output_type))
        if not isinstance(output_type, (dict, list)):  # mutable values are not cached
            if len(_BY_ID) >= 1024:
                _BY_ID.clear()
            _BY_ID[id(output_type)] = constraint  # holds output_type: its id stays unique
        return constraint


FREE_TEXT = Constraint(None, None)
_BY_ID: dict[int, Constraint] = {}


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    """What goes to ``client.chat.completions.create`` (or ``client.completions.create``)."""

    endpoint: Endpoint
    params: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """A resolved server: what it is, its adapter, and the fields built for it so far."""

    info: ServerInfo
    adapter: Adapter
    fields: dict[Term, ConstraintFields] = dataclasses.field(default_factory=dict, compare=False)


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One prepared call: everything that does not depend on the server."""

    prompt_key: str  # "messages" or "prompt"
    prompt: object
    kwargs: Mapping[str, Any]  # the caller's, never mutated
    constraint: Constraint
    n: int
    stream: bool
    model: str | None
    verify: Verify = True


def label(constraint: Constraint) -> str:
    """How to name the output type in messages (``Hero``, ``Literal[...]``)."""
    tp = constraint.output_type
    name = getattr(tp, "__name__", None)
    return name if isinstance(name, str) else repr(tp)[:80]


class UsageMeter:
    """Thread-safe running total of token usage."""

    __slots__ = ("_lock", "total")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = Usage()

    def add(self, usage: Usage | None) -> None:
        if usage is not None:
            with self._lock:
                self.total = self.total + usage
