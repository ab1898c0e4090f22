"""``Generator``: a model bound to one output type, validated and compiled once.

```python
pick = Generator(model, Literal["red", "green", "blue"])
pick("Favourite colour?")            # -> "green"
pick.parse("Favourite colour?")      # same, typed
await Generator(amodel, int)("How many legs has a spider?")
```
"""

from __future__ import annotations

import functools
from typing import Any, overload

from outlines_like.models._call import Constraint
from outlines_like.models._core import ModelCore
from outlines_like.models.remote import AsyncModel

__all__ = ["AsyncModelGenerator", "Generator", "ModelGenerator"]


class _Bound:
    """A generator method: the model's method of the same name with the output type bound.

    ``functools.partial`` (C code) adds no Python frame, so the model's warnings still point
    at the caller's line.
    """

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, generator: Generator | None, owner: type | None = None) -> Any:
        if generator is None:
            return self
        method = getattr(generator.model, self.name)
        return functools.partial(method, output_type=generator._bound)


class Generator:
    """A model and an output type: call it like the model, without the type argument.

    ``Generator(model, T)`` returns a ``ModelGenerator`` for a sync model and an
    ``AsyncModelGenerator`` (methods to ``await``) for an ``AsyncModel``. The type is turned
    into a ``Constraint`` once, here, so a bad type fails at construction; the model's public
    methods take that constraint in place of the type (no second compilation), and the
    server's constraint fields are built at the first call and reused.

    Each method is the model's own public method with the output type bound
    (``functools.partial``): no frame of ours sits between the caller and the model, so
    warnings point at the caller's line. Other model objects (e.g. a local model) get the
    output type itself.

    Raises:
        UnsupportedConstraintError: ``output_type`` cannot be constrained to.
        InvalidConstraintError: its regex, schema or grammar is wrong.
    """

    model: Any
    output_type: object
    constraint: Constraint
    """The output type, validated and compiled once (what the model's methods receive)."""
    _bound: object

    @overload
    def __new__(  # type: ignore[overload-overlap]  # AsyncModel first: it wins
        cls, model: AsyncModel, output_type: object = None
    ) -> AsyncModelGenerator: ...
    @overload
    def __new__(cls, model: object, output_type: object = None) -> ModelGenerator: ...
    def __new__(cls, model: object, output_type: object = None) -> Generator:
        """Pick the sync or async generator for ``model`` and validate ``output_type``."""
        if cls is Generator:
            cls = AsyncModelGenerator if isinstance(model, AsyncModel) else ModelGenerator
        self = object.__new__(cls)
        self.model = model
        self.output_type = output_type
        self.constraint = Constraint.of(output_type)
        self._bound = self.constraint if isinstance(model, ModelCore) else output_type
        return self

    __call__ = _Bound(
        "``gen(prompt, **inference_kwargs)``: the answer text; see ``Model.__call__``."
    )
    parse = _Bound(
        "``gen.parse(prompt, **inference_kwargs)``: the typed value; see ``Model.parse``."
    )
    complete = _Bound("``gen.complete(prompt, **kw)``: the rich result; see ``Model.complete``.")
    stream = _Bound("``gen.stream(prompt, **kw)``: answer text deltas; see ``Model.stream``.")
    batch = _Bound(
        "``gen.batch(prompts, *, max_concurrency=..., return_exceptions=False, **kw)``; see "
        "``Model.batch``. Options not given are not passed on (a model that lacks them then "
        "says so instead of ignoring them)."
    )
    stream_parse = _Bound(
        "``gen.stream_parse(prompt, **kw)``: partial values, then the validated one (``async "
        "for`` on an ``AsyncModel``); see ``Model.stream_parse``."
    )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, {self.output_type!r})"


class ModelGenerator(Generator):
    """``Generator`` over a sync model."""


class AsyncModelGenerator(Generator):
    """``Generator`` over an ``AsyncModel``: every method is awaited (``stream`` iterated)."""

    model: AsyncModel
