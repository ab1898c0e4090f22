"""``Model`` and ``AsyncModel``: remote OpenAI-compatible servers, sync and async.

They share every decision with ``ModelCore`` (``_core.py``); what is written twice here is
only the I/O: ``client...create(...)`` vs ``await client...create(...)``, threads vs tasks.

```python
model = from_server(openai.OpenAI(base_url="http://localhost:8000/v1", api_key="-"))
model("Pick a colour.", Literal["red", "green"])          # -> "green"
model.parse("Describe a hero.", Character)                 # -> Character(...)
for delta in model.stream("Tell me a story."):
    print(delta, end="")
```
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import openai

from outlines_like.adapters.base import ServerInfo
from outlines_like.models._core import (
    Call,
    Constraint,
    ListModels,
    ModelCore,
    Request,
    Target,
)
from outlines_like.models._errors import translate_errors
from outlines_like.models.detection import Probe, aprobe, probe
from outlines_like.models.retry import Send, adrive, drive

if TYPE_CHECKING:
    from outlines_like.models.result import Completion

__all__ = ["AsyncModel", "Model"]

DEFAULT_MAX_CONCURRENCY = 16


def _check_concurrency(max_concurrency: int) -> int:
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise TypeError(f"max_concurrency must be an int, got {max_concurrency!r}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    return max_concurrency


def _model_ids(page: Any) -> tuple[str, ...]:
    return tuple(m.id for m in getattr(page, "data", page) if isinstance(m.id, str))


class Model(ModelCore[openai.OpenAI]):
    """A model behind an OpenAI-compatible server, called synchronously.

    Create it with ``from_server(openai.OpenAI(...))`` (or ``from_vllm``, ``from_sglang``...).
    Thread-safe: one model may serve many threads.

    ``__call__``, ``parse``, ``complete``, ``stream`` and ``batch`` also take a ``Constraint``
    (``Constraint.of(T)``) as ``output_type``: the type is then not validated and compiled
    again (``Generator`` passes one).
    ``model.server`` is the kind given or detected (``None`` before detection; never a
    request); ``model.detect()`` probes now (see ``ModelCore`` for when detection runs).
    """

    # -- I/O (the twinned part)

    def _execute(self, step: object) -> Any:
        with translate_errors():
            if isinstance(step, Send):
                request: Request = step.request
                if request.endpoint == "chat":
                    return self._client.chat.completions.create(**request.params)
                return self._client.completions.create(**request.params)
            if isinstance(step, Probe):
                return probe(self._client, step)
            if isinstance(step, ListModels):
                return _model_ids(self._client.models.list())
        raise TypeError(f"unknown flow step {step!r}")

    def _ready(self, model: str | None) -> tuple[Target, str]:
        ready = self.ready_now(model)
        if ready is None:
            with self._lock:
                ready = drive(self.resolve_flow(model), self._execute, self._policy)
        return ready

    def _send(self, call: Call) -> Any:
        return drive(self.send_flow(call, *self._ready(call.model)), self._execute, self._policy)

    def _completions(
        self, constraint: Constraint, prompt: object, kw: dict[str, Any]
    ) -> tuple[Call, list[Completion]]:
        call = self.prepare(prompt, constraint, kw, stream=False)
        return call, self.read(call, self._send(call))

    # -- the public face

    def detect(self, *, refresh: bool = False) -> ServerInfo:
        """What the server is (kind, version, served models), probed now if not known yet.

        The answer is kept on this model (``model.server`` then gives its kind).

        Args:
            refresh: Probe again even when the server is known (a server detected, not
                named, may have been replaced behind the same URL).
        """
        info = self._info
        if info is None or refresh:
            with self._lock:
                info = drive(self.server_flow(refresh=refresh), self._execute, self._policy)
        return info

    def __call__(self, prompt: object, output_type: object = None, **inference_kwargs: Any) -> Any:
        """Generate the answer text (a list of texts when ``n > 1``).

        Args:
            prompt: A str, a list of str and ``Image``, or a ``Chat``.
            output_type: What the text must look like (``int``, a ``Literal``, a pydantic
                model, a ``Regex``, a ``CFG``...); ``None`` for free text.
            **inference_kwargs: Sent to the server unchanged (``max_tokens``,
                ``temperature``, ``n``, ``seed``, ``extra_body``, ``model``...).

        Warns:
            TruncatedOutputWarning: constrained output was cut at ``max_tokens``.
        """
        return self._text(Constraint.of(output_type), prompt, inference_kwargs, 2)

    def _text(self, constraint: Constraint, prompt: object, kw: dict[str, Any], level: int) -> Any:
        call, completions = self._completions(constraint, prompt, kw)
        return self.texts(call, completions, stacklevel=level + 1)

    def complete(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> Completion | list[Completion]:
        """Generate and return everything the server said: a ``Completion`` (a list if ``n > 1``).

        Unlike ``model(...)``, truncation is not warned about: check ``finish_reason``.
        """
        call, completions = self._completions(Constraint.of(output_type), prompt, inference_kwargs)
        return self.rich(call, completions)  # type: ignore[no-any-return]

    def parse(self, prompt: object, output_type: object, **inference_kwargs: Any) -> Any:
        """Generate and read the answer as ``output_type`` (a list of values when ``n > 1``).

        Raises:
            GenerationError: the output was cut at ``max_tokens`` (``reason="length"``),
                refused, or filtered.
            ParseError: the text does not fit ``output_type``.
        """
        return self._parse(Constraint.of(output_type), prompt, inference_kwargs)

    def _parse(self, constraint: Constraint, prompt: object, kw: dict[str, Any]) -> Any:
        call, completions = self._completions(constraint, prompt, kw)
        return self.values(call, completions)

    def stream(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> Iterator[str]:
        """Yield the answer as it is generated, in text deltas (reasoning is never included).

        Arguments are checked at once; the request goes out at the first ``next()``.
        Only opening the stream is retried: an error mid-stream is raised as it comes.

        Raises:
            ValueError: ``n > 1`` (a stream carries one answer).
        """
        call = self.prepare(prompt, Constraint.of(output_type), inference_kwargs, stream=True)
        return self._stream(call)

    def _stream(self, call: Call) -> Iterator[str]:
        reader = self.stream_reader(call)
        stream = self._send(call)
        with translate_errors():
            try:
                for chunk in stream:
                    delta = reader.feed(chunk)
                    if delta:
                        yield delta
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        tail = reader.finish(stacklevel=2)
        if tail:
            yield tail

    def stream_parse(
        self, prompt: object, output_type: object, **inference_kwargs: Any
    ) -> Iterator[Any]:
        """Yield partial values as the JSON answer grows, then the fully validated value.

        For a pydantic model each partial value is an instance holding the fields complete so
        far (see ``outlines_like.streaming.iter_partial``); the last item is what ``parse``
        would return.
        """
        from outlines_like.streaming import iter_partial

        return iter_partial(self.stream(prompt, output_type, **inference_kwargs), output_type)

    def batch(
        self,
        prompts: Iterable[object],
        output_type: object = None,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        return_exceptions: bool = False,
        **inference_kwargs: Any,
    ) -> list[Any]:
        """Generate for many prompts at once, at most ``max_concurrency`` requests in flight.

        Results keep the order of ``prompts``. A failing item raises its exception (the
        other requests are cancelled or awaited), unless ``return_exceptions=True``: then
        the exception object takes the item's place in the list.
        """
        return self._batch(
            Constraint.of(output_type),
            prompts,
            inference_kwargs,
            max_concurrency=max_concurrency,
            return_exceptions=return_exceptions,
        )

    def _batch(
        self,
        constraint: Constraint,
        prompts: Iterable[object],
        kw: dict[str, Any],
        *,
        max_concurrency: int,
        return_exceptions: bool,
    ) -> list[Any]:
        items = list(prompts)
        workers = min(_check_concurrency(max_concurrency), len(items))
        if not items:
            return []
        self._ready(kw.get("model"))  # detect once, not once per thread

        def one(prompt: object) -> Any:
            return self._text(constraint, prompt, kw, 3)

        pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="outlines-batch")
        try:
            futures = [pool.submit(one, p) for p in items]
            if return_exceptions:
                concurrent.futures.wait(futures)
                return [f.exception() or f.result() for f in futures]
            done, _ = concurrent.futures.wait(
                futures, return_when=concurrent.futures.FIRST_EXCEPTION
            )
            for future in futures:  # the first failure in prompt order
                error = future.exception() if future in done else None
                if error is not None:
                    raise error
            return [f.result() for f in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


class AsyncModel(ModelCore[openai.AsyncOpenAI]):
    """A model behind an OpenAI-compatible server, called with ``await``.

    Create it with ``from_server(openai.AsyncOpenAI(...))``. Safe to share between tasks.
    ``amodel.server`` and ``await amodel.detect()`` behave as on ``Model``.
    """

    # -- I/O (the twinned part)

    async def _execute(self, step: object) -> Any:
        with translate_errors():
            if isinstance(step, Send):
                request: Request = step.request
                if request.endpoint == "chat":
                    return await self._client.chat.completions.create(**request.params)
                return await self._client.completions.create(**request.params)
            if isinstance(step, Probe):
                return await aprobe(self._client, step)
            if isinstance(step, ListModels):
                return _model_ids(await self._client.models.list())
        raise TypeError(f"unknown flow step {step!r}")

    async def _ready(self, model: str | None) -> tuple[Target, str]:
        ready = self.ready_now(model)
        if ready is None:
            async with self._alock:
                ready = await adrive(self.resolve_flow(model), self._execute, self._policy)
        return ready

    async def _send(self, call: Call) -> Any:
        flow = self.send_flow(call, *(await self._ready(call.model)))
        return await adrive(flow, self._execute, self._policy)

    async def _completions(
        self, constraint: Constraint, prompt: object, kw: dict[str, Any]
    ) -> tuple[Call, list[Completion]]:
        call = self.prepare(prompt, constraint, kw, stream=False)
        return call, self.read(call, await self._send(call))

    # -- the public face

    async def detect(self, *, refresh: bool = False) -> ServerInfo:
        """What the server is, probed now if not known yet; see ``Model.detect``."""
        info = self._info
        if info is None or refresh:
            async with self._alock:
                info = await adrive(self.server_flow(refresh=refresh), self._execute, self._policy)
        return info

    async def __call__(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> Any:
        """Generate the answer text (a list of texts when ``n > 1``); see ``Model.__call__``."""
        return await self._text(Constraint.of(output_type), prompt, inference_kwargs, 2)

    async def _text(
        self, constraint: Constraint, prompt: object, kw: dict[str, Any], level: int
    ) -> Any:
        call, completions = await self._completions(constraint, prompt, kw)
        return self.texts(call, completions, stacklevel=level + 1)

    async def complete(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> Completion | list[Completion]:
        """Generate and return a ``Completion`` (a list if ``n > 1``); see ``Model.complete``."""
        call, completions = await self._completions(
            Constraint.of(output_type), prompt, inference_kwargs
        )
        return self.rich(call, completions)  # type: ignore[no-any-return]

    async def parse(self, prompt: object, output_type: object, **inference_kwargs: Any) -> Any:
        """Generate and read the answer as ``output_type``; see ``Model.parse``."""
        return await self._parse(Constraint.of(output_type), prompt, inference_kwargs)

    async def _parse(self, constraint: Constraint, prompt: object, kw: dict[str, Any]) -> Any:
        call, completions = await self._completions(constraint, prompt, kw)
        return self.values(call, completions)

    def stream(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> AsyncIterator[str]:
        """Yield answer text deltas: ``async for delta in amodel.stream(...)``.

        Arguments are checked at once; the request goes out at the first iteration.

        Raises:
            ValueError: ``n > 1`` (a stream carries one answer).
        """
        call = self.prepare(prompt, Constraint.of(output_type), inference_kwargs, stream=True)
        return self._stream(call)

    async def _stream(self, call: Call) -> AsyncIterator[str]:
        reader = self.stream_reader(call)
        stream = await self._send(call)
        with translate_errors():
            try:
                async for chunk in stream:
                    delta = reader.feed(chunk)
                    if delta:
                        yield delta
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    await close()
        tail = reader.finish(stacklevel=2)
        if tail:
            yield tail

    def stream_parse(
        self, prompt: object, output_type: object, **inference_kwargs: Any
    ) -> AsyncIterator[Any]:
        """Async twin of ``Model.stream_parse``: ``async for value in amodel.stream_parse(...)``."""
        from outlines_like.streaming import aiter_partial

        return aiter_partial(self.stream(prompt, output_type, **inference_kwargs), output_type)

    async def batch(
        self,
        prompts: Iterable[object],
        output_type: object = None,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        return_exceptions: bool = False,
        **inference_kwargs: Any,
    ) -> list[Any]:
        """Generate for many prompts concurrently (tasks under a semaphore); see ``Model.batch``."""
        return await self._batch(
            Constraint.of(output_type),
            prompts,
            inference_kwargs,
            max_concurrency=max_concurrency,
            return_exceptions=return_exceptions,
        )

    async def _batch(
        self,
        constraint: Constraint,
        prompts: Iterable[object],
        kw: dict[str, Any],
        *,
        max_concurrency: int,
        return_exceptions: bool,
    ) -> list[Any]:
        items = list(prompts)
        limit = asyncio.Semaphore(_check_concurrency(max_concurrency))
        if not items:
            return []
        await self._ready(kw.get("model"))  # detect once, not once per task

        async def one(prompt: object) -> Any:
            async with limit:
                return await self._text(constraint, prompt, kw, 3)

        tasks = [asyncio.ensure_future(one(p)) for p in items]
        if return_exceptions:
            return list(await asyncio.gather(*tasks, return_exceptions=True))
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
