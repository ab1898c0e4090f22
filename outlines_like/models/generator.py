"""``Generator``: a model bound to one output type, validated and compiled once.

```python
pick = Generator(model, Literal["red", "green", "blue"])
pick("Favourite colour?")            # -> "green"
pick.parse("Favourite colour?")      # same, typed
await Generator(amodel, int)("How many legs has a spider?")
```
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, overload

from outlines_like.models._core import Constraint
from outlines_like.models.remote import DEFAULT_MAX_CONCURRENCY, AsyncModel, Model

__all__ = ["AsyncModelGenerator", "Generator", "ModelGenerator"]


class Generator:
    """A model and an output type: call it like the model, without the type argument.

    ``Generator(model, T)`` returns a ``ModelGenerator`` for a sync model and an
    ``AsyncModelGenerator`` (methods to ``await``) for an ``AsyncModel``. The type is turned
    into a constraint once, here, so a bad type fails at construction; the server's
    constraint fields are built at the first call and reused.

    Other model objects (e.g. a local model) are wrapped by calling their public methods
    with the output type.

    Raises:
        UnsupportedConstraintError: ``output_type`` cannot be constrained to.
        InvalidConstraintError: its regex, schema or grammar is wrong.
    """

    model: Any
    output_type: object
    _constraint: Constraint

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
        self._constraint = Constraint.of(output_type)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r}, {self.output_type!r})"


class ModelGenerator(Generator):
    """``Generator`` over a sync model."""

    def __call__(self, prompt: object, **inference_kwargs: Any) -> Any:
        """Generate the answer text; see ``Model.__call__``."""
        if isinstance(self.model, Model):
            return self.model._text(self._constraint, prompt, inference_kwargs, 2)
        return self.model(prompt, self.output_type, **inference_kwargs)

    def parse(self, prompt: object, **inference_kwargs: Any) -> Any:
        """Generate and return the typed value; see ``Model.parse``."""
        if isinstance(self.model, Model):
            return self.model._parse(self._constraint, prompt, inference_kwargs)
        return self.model.parse(prompt, self.output_type, **inference_kwargs)

    def complete(self, prompt: object, **inference_kwargs: Any) -> Any:
        """Generate and return the rich result; see ``Model.complete``."""
        if isinstance(self.model, Model):
            call, completions = self.model._completions(self._constraint, prompt, inference_kwargs)
            return self.model.rich(call, completions)
        return self.model.complete(prompt, self.output_type, **inference_kwargs)

    def stream(self, prompt: object, **inference_kwargs: Any) -> Iterator[str]:
        """Yield answer text deltas; see ``Model.stream``."""
        if isinstance(self.model, Model):
            call = self.model.prepare(prompt, self._constraint, inference_kwargs, stream=True)
            return self.model._stream(call)
        return self.model.stream(prompt, self.output_type, **inference_kwargs)  # type: ignore[no-any-return]

    def stream_parse(self, prompt: object, **inference_kwargs: Any) -> Iterator[Any]:
        """Yield partial values as the JSON grows, then the validated one; see ``Model``."""
        from outlines_like.streaming import iter_partial

        return iter_partial(self.stream(prompt, **inference_kwargs), self.output_type)

    def batch(
        self,
        prompts: Iterable[object],
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        return_exceptions: bool = False,
        **inference_kwargs: Any,
    ) -> list[Any]:
        """Generate for many prompts concurrently; see ``Model.batch``."""
        if isinstance(self.model, Model):
            return self.model._batch(
                self._constraint,
                prompts,
                inference_kwargs,
                max_concurrency=max_concurrency,
                return_exceptions=return_exceptions,
            )
        if max_concurrency != DEFAULT_MAX_CONCURRENCY:  # passed on only when asked for: a
            inference_kwargs["max_concurrency"] = max_concurrency  # model that lacks them
        if return_exceptions:  # then says so instead of ignoring them
            inference_kwargs["return_exceptions"] = return_exceptions
        return self.model.batch(prompts, self.output_type, **inference_kwargs)  # type: ignore[no-any-return]


class AsyncModelGenerator(Generator):
    """``Generator`` over an ``AsyncModel``: every method is awaited (``stream`` iterated)."""

    model: AsyncModel

    async def __call__(self, prompt: object, **inference_kwargs: Any) -> Any:
        """Generate the answer text; see ``AsyncModel.__call__``."""
        return await self.model._text(self._constraint, prompt, inference_kwargs, 2)

    async def parse(self, prompt: object, **inference_kwargs: Any) -> Any:
        """Generate and return the typed value; see ``AsyncModel.parse``."""
        return await self.model._parse(self._constraint, prompt, inference_kwargs)

    async def complete(self, prompt: object, **inference_kwargs: Any) -> Any:
        """Generate and return the rich result; see ``AsyncModel.complete``."""
        call, completions = await self.model._completions(
            self._constraint, prompt, inference_kwargs
        )
        return self.model.rich(call, completions)

    def stream(self, prompt: object, **inference_kwargs: Any) -> AsyncIterator[str]:
        """Yield answer text deltas: ``async for d in gen.stream(...)``."""
        call = self.model.prepare(prompt, self._constraint, inference_kwargs, stream=True)
        return self.model._stream(call)

    def stream_parse(self, prompt: object, **inference_kwargs: Any) -> AsyncIterator[Any]:
        """Async twin of ``ModelGenerator.stream_parse``."""
        from outlines_like.streaming import aiter_partial

        return aiter_partial(self.stream(prompt, **inference_kwargs), self.output_type)

    async def batch(
        self,
        prompts: Iterable[object],
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        return_exceptions: bool = False,
        **inference_kwargs: Any,
    ) -> list[Any]:
        """Generate for many prompts concurrently; see ``AsyncModel.batch``."""
        return await self.model._batch(
            self._constraint,
            prompts,
            inference_kwargs,
            max_concurrency=max_concurrency,
            return_exceptions=return_exceptions,
        )
