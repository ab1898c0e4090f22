"""``Model`` and ``AsyncModel``: remote OpenAI-compatible servers, sync and async.

They share every decision with ``ModelCore`` (``_core.py``); what is written twice here is
only the I/O: ``client...create(...)`` vs ``await client...create(...)``, threads vs tasks.

```python
model = from_server(openai.OpenAI(base_url="http://localhost:8000/v1", api_key="-"))
model("Pick a colour.", Literal["red", "green"])          # -> "green"
model.parse("Describe a hero.", Character)                 # -> Character(...)
model.parse("Describe a hero.", Character, retries=2)      # ask again when validators fail
for delta in model.stream("Tell me a story."):
    print(delta, end="")
```
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import openai

from outlines_like.adapters.base import ServerInfo
from outlines_like.models import _tracing
from outlines_like.models._batch import (
    DEFAULT_MAX_CONCURRENCY,
    check_concurrency,
    outcome,
    reissue,
    results_of,
)
from outlines_like.models._call import Call, Constraint, ListModels, Request, Target
from outlines_like.models._core import ModelCore
from outlines_like.models._errors import translate_errors
from outlines_like.models._reader import Sink, StreamView
from outlines_like.models.detection import Probe, aprobe, probe
from outlines_like.models.reask import (
    Ask,
    Reasked,
    ReaskPolicy,
    Retries,
    aiter_reasked,
    iter_reasked,
    reask_policy,
    remote_flow,
    stream_opener,
)
from outlines_like.models.retry import Send, adrive, drive

if TYPE_CHECKING:
    from outlines_like.messages import Completion

__all__ = ["AsyncModel", "Model"]


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
        flow = self.completions_flow(call, *self._ready(call.model))
        return call, drive(flow, self._execute, self._policy)

    # -- the public face

    def detect(self, *, refresh: bool = False) -> ServerInfo:
        """What the server is (kind, version, served models), probed now if not known yet.

        The answer is kept on this model (``model.server`` then gives its kind).

        Args:
            refresh: Probe again even when the server is known (a server detected, not
                named, may have been replaced behind the same URL).

        Raises:
            UnsupportedConstraintError: with ``probe_enforcement=True``, the server did not
                enforce the probe's constraint.
        """
        info = self._info
        if info is None or refresh:
            with self._lock:
                info = drive(self.server_flow(refresh=refresh), self._execute, self._policy)
        if self.probe_enforcement:
            self._ready(None)  # resolve the model id and prove enforcement (once per server)
        return info

    def __call__(self, prompt: object, output_type: object = None, **inference_kwargs: Any) -> Any:
        """Generate the answer text (a list of texts when ``n > 1``).

        Args:
            prompt: A str, a list of str and ``Image``, or a ``Chat``.
            output_type: What the text must look like (``int``, a ``Literal``, a pydantic
                model, a ``Regex``, a ``CFG``...); ``None`` for free text.
            **inference_kwargs: Sent to the server unchanged (``max_tokens``,
                ``temperature``, ``n``, ``seed``, ``extra_body``, ``model``...).

        Raises:
            ConstraintViolationError: the answer does not fit ``output_type`` (the server did
                not enforce it); ``verify="warn"`` warns instead, ``verify=False`` skips it.
            GenerationError: the answer was cut at ``max_tokens`` before it fit, refused, or
                filtered.

        Warns:
            TruncatedOutputWarning: the answer fits but was cut at ``max_tokens``.
        """
        return self._text(Constraint.of(output_type), prompt, inference_kwargs, 2)

    def _text(
        self,
        constraint: Constraint,
        prompt: object,
        kw: dict[str, Any],
        level: int,
        sink: Sink | None = None,
    ) -> Any:
        with _tracing.start(self.endpoint, "call" if sink is None else "batch", constraint):
            call, completions = self._completions(constraint, prompt, kw)
            return self.texts(call, completions, stacklevel=level + 1, sink=sink)

    def complete(
        self,
        prompt: object,
        output_type: object = None,
        *,
        retries: Retries = 0,
        **inference_kwargs: Any,
    ) -> Completion | list[Completion]:
        """Generate and return everything the server said: a ``Completion`` (a list if ``n > 1``).

        The answer is checked as ``model(...)`` checks it (see ``models/_reader.py``). With
        ``retries`` it is also parsed as ``parse`` would, asked again as ``parse`` does, and
        the ``Completion`` of the answer that passed carries every answer in ``attempts``.
        """
        constraint = Constraint.of(output_type)
        policy = reask_policy(retries)
        if policy is not None:
            return self._reask(constraint, prompt, inference_kwargs, policy).completion
        with _tracing.start(self.endpoint, "complete", constraint):
            call, completions = self._completions(constraint, prompt, inference_kwargs)
            return self.rich(call, completions)  # type: ignore[no-any-return]

    def parse(
        self, prompt: object, output_type: object, *, retries: Retries = 0, **inference_kwargs: Any
    ) -> Any:
        """Generate and read the answer as ``output_type`` (a list of values when ``n > 1``).

        ``retries``: ask again, at most this many times, when the answer fits the constraint
        but fails validation (``n == 1``); see ``outlines_like.models.reask``.

        Raises:
            GenerationError: the output was cut at ``max_tokens`` (``reason="length"``),
                refused, or filtered.
            ParseError: the text does not fit ``output_type`` (after the last retry:
                ``error.attempts`` holds every answer).
        """
        constraint = Constraint.of(output_type)
        policy = reask_policy(retries)
        if policy is not None:
            return self._reask(constraint, prompt, inference_kwargs, policy).value
        return self._parse(constraint, prompt, inference_kwargs)

    def _reask(
        self,
        constraint: Constraint,
        prompt: object,
        kw: dict[str, Any],
        policy: ReaskPolicy,
        sink: Sink | None = None,
    ) -> Reasked[Any]:
        def ask(step: Ask) -> list[Completion]:
            return self._completions(constraint, step.prompt, kw)[1]

        with _tracing.start(self.endpoint, "parse" if sink is None else "batch", constraint):
            flow = remote_flow(self, constraint, prompt, kw, policy, sink)
            return drive(flow, ask, self._policy)

    def _parse(self, constraint: Constraint, prompt: object, kw: dict[str, Any]) -> Any:
        with _tracing.start(self.endpoint, "parse", constraint):
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

    def _stream(
        self, call: Call, level: int = 2, views: list[StreamView] | None = None
    ) -> Iterator[str]:
        # the trace ends at the last chunk, on an error, or when the caller closes the stream
        trace = _tracing.start(self.endpoint, "stream", call.constraint)
        with trace.finishing():
            with trace.active():
                stream = self._send(call)
                view = self.stream_view(call)  # after sending: the model id is known by then
                if views is not None:
                    views.append(view)
            with translate_errors():
                try:
                    for chunk in stream:
                        delta = view.feed(chunk)
                        if delta:
                            yield delta
                finally:
                    close = getattr(stream, "close", None)
                    if close is not None:
                        close()
            tail = view.finish(stacklevel=level)
        if tail:
            yield tail

    def stream_parse(
        self, prompt: object, output_type: object, *, retries: Retries = 0, **inference_kwargs: Any
    ) -> Iterator[Any]:
        """Yield partial values as the JSON answer grows, then the fully validated value.

        For a pydantic model each partial value is an instance holding the fields complete so
        far (see ``outlines_like.streaming.iter_partial``); the last item is what ``parse``
        would return. With ``retries`` (as on ``parse``), a rejected answer's partial values
        are followed by the next attempt's (``outlines_like.models.reask.iter_reasked``).
        """
        from outlines_like.streaming import iter_partial

        constraint = Constraint.of(output_type)
        call = self.prepare(prompt, constraint, inference_kwargs, stream=True)
        policy = reask_policy(retries)
        if policy is None:
            return iter_partial(self._stream(call, level=3), constraint.output_type)
        opener = stream_opener(self, self._stream, call, inference_kwargs)
        return iter_reasked(opener, prompt, constraint.output_type, policy)

    def batch(
        self,
        prompts: Iterable[object],
        output_type: object = None,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        return_exceptions: bool = False,
        retries: Retries = 0,
        **inference_kwargs: Any,
    ) -> list[Any]:
        """Generate for many prompts at once, at most ``max_concurrency`` requests in flight.

        Results keep the order of ``prompts``. A failing item raises its exception (the
        other requests are cancelled or awaited), unless ``return_exceptions=True``: then
        the exception object takes the item's place in the list. With ``retries`` each
        item's answer is also parsed as ``output_type`` and asked again on its own as
        ``parse`` does; the items are still the answer texts.
        """
        return self._batch(
            Constraint.of(output_type),
            prompts,
            inference_kwargs,
            max_concurrency=max_concurrency,
            return_exceptions=return_exceptions,
            policy=reask_policy(retries),
        )

    def _batch(
        self,
        constraint: Constraint,
        prompts: Iterable[object],
        kw: dict[str, Any],
        *,
        max_concurrency: int,
        return_exceptions: bool,
        policy: ReaskPolicy | None = None,
    ) -> list[Any]:
        items = list(prompts)
        workers = min(check_concurrency(max_concurrency), len(items))
        if not items:
            return []
        self._ready(kw.get("model"))  # detect once, not once per thread

        sinks: list[Sink] = [[] for _ in items]

        def one(i: int) -> Any:
            if policy is not None:
                return self._reask(constraint, items[i], kw, policy, sinks[i]).completion.text
            return self._text(constraint, items[i], kw, 3, sinks[i])

        pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="outlines-batch")
        try:
            with _tracing.batch_span(
                self.endpoint, len(items)
            ):  # each item's span is its child (context copied)
                futures = [
                    pool.submit(contextvars.copy_context().run, one, i) for i in range(len(items))
                ]
                stop = "ALL_COMPLETED" if return_exceptions else "FIRST_EXCEPTION"
                concurrent.futures.wait(futures, return_when=stop)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # running items finish; others stop
        results = [outcome(f) for f in futures]
        reissue(sinks, stacklevel=3)
        return results_of(results, return_exceptions)


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
        flow = self.completions_flow(call, *(await self._ready(call.model)))
        return call, await adrive(flow, self._execute, self._policy)

    # -- the public face

    async def detect(self, *, refresh: bool = False) -> ServerInfo:
        """What the server is, probed now if not known yet; see ``Model.detect``."""
        info = self._info
        if info is None or refresh:
            async with self._alock:
                info = await adrive(self.server_flow(refresh=refresh), self._execute, self._policy)
        if self.probe_enforcement:
            await self._ready(None)  # resolve the model id and prove enforcement
        return info

    async def __call__(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> Any:
        """Generate the answer text (a list of texts when ``n > 1``); see ``Model.__call__``."""
        return await self._text(Constraint.of(output_type), prompt, inference_kwargs, 2)

    async def _text(
        self,
        constraint: Constraint,
        prompt: object,
        kw: dict[str, Any],
        level: int,
        sink: Sink | None = None,
    ) -> Any:
        with _tracing.start(self.endpoint, "call" if sink is None else "batch", constraint):
            call, completions = await self._completions(constraint, prompt, kw)
            return self.texts(call, completions, stacklevel=level + 1, sink=sink)

    async def complete(
        self,
        prompt: object,
        output_type: object = None,
        *,
        retries: Retries = 0,
        **inference_kwargs: Any,
    ) -> Completion | list[Completion]:
        """Generate and return a ``Completion`` (a list if ``n > 1``); see ``Model.complete``."""
        constraint = Constraint.of(output_type)
        policy = reask_policy(retries)
        if policy is not None:
            return (await self._reask(constraint, prompt, inference_kwargs, policy)).completion
        with _tracing.start(self.endpoint, "complete", constraint):
            call, completions = await self._completions(constraint, prompt, inference_kwargs)
            return self.rich(call, completions)  # type: ignore[no-any-return]

    async def parse(
        self, prompt: object, output_type: object, *, retries: Retries = 0, **inference_kwargs: Any
    ) -> Any:
        """Generate and read the answer as ``output_type``; see ``Model.parse``."""
        constraint = Constraint.of(output_type)
        policy = reask_policy(retries)
        if policy is not None:
            return (await self._reask(constraint, prompt, inference_kwargs, policy)).value
        return await self._parse(constraint, prompt, inference_kwargs)

    async def _reask(
        self,
        constraint: Constraint,
        prompt: object,
        kw: dict[str, Any],
        policy: ReaskPolicy,
        sink: Sink | None = None,
    ) -> Reasked[Any]:
        async def ask(step: Ask) -> list[Completion]:
            return (await self._completions(constraint, step.prompt, kw))[1]

        with _tracing.start(self.endpoint, "parse" if sink is None else "batch", constraint):
            flow = remote_flow(self, constraint, prompt, kw, policy, sink)
            return await adrive(flow, ask, self._policy)

    async def _parse(self, constraint: Constraint, prompt: object, kw: dict[str, Any]) -> Any:
        with _tracing.start(self.endpoint, "parse", constraint):
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

    async def _stream(
        self, call: Call, level: int = 2, views: list[StreamView] | None = None
    ) -> AsyncIterator[str]:
        # the trace ends at the last chunk, on an error, or when the caller closes the stream
        trace = _tracing.start(self.endpoint, "stream", call.constraint)
        with trace.finishing():
            with trace.active():
                stream = await self._send(call)
                view = self.stream_view(call)  # after sending: the model id is known by then
                if views is not None:
                    views.append(view)
            with translate_errors():
                try:
                    async for chunk in stream:
                        delta = view.feed(chunk)
                        if delta:
                            yield delta
                finally:
                    close = getattr(stream, "close", None)
                    if close is not None:
                        await close()
            tail = view.finish(stacklevel=level)
        if tail:
            yield tail

    def stream_parse(
        self, prompt: object, output_type: object, *, retries: Retries = 0, **inference_kwargs: Any
    ) -> AsyncIterator[Any]:
        """Async twin of ``Model.stream_parse``: ``async for value in amodel.stream_parse(...)``."""
        from outlines_like.streaming import aiter_partial

        constraint = Constraint.of(output_type)
        call = self.prepare(prompt, constraint, inference_kwargs, stream=True)
        policy = reask_policy(retries)
        if policy is None:
            return aiter_partial(self._stream(call, level=3), constraint.output_type)
        opener = stream_opener(self, self._stream, call, inference_kwargs)
        return aiter_reasked(opener, prompt, constraint.output_type, policy)

    async def batch(
        self,
        prompts: Iterable[object],
        output_type: object = None,
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        return_exceptions: bool = False,
        retries: Retries = 0,
        **inference_kwargs: Any,
    ) -> list[Any]:
        """Generate for many prompts concurrently (tasks under a semaphore); see ``Model.batch``."""
        return await self._batch(
            Constraint.of(output_type),
            prompts,
            inference_kwargs,
            max_concurrency=max_concurrency,
            return_exceptions=return_exceptions,
            policy=reask_policy(retries),
        )

    async def _batch(
        self,
        constraint: Constraint,
        prompts: Iterable[object],
        kw: dict[str, Any],
        *,
        max_concurrency: int,
        return_exceptions: bool,
        policy: ReaskPolicy | None = None,
    ) -> list[Any]:
        items = list(prompts)
        limit = asyncio.Semaphore(check_concurrency(max_concurrency))
        if not items:
            return []
        await self._ready(kw.get("model"))  # detect once, not once per task

        sinks: list[Sink] = [[] for _ in items]

        async def one(i: int) -> Any:
            async with limit:
                if policy is not None:
                    reasked = await self._reask(constraint, items[i], kw, policy, sinks[i])
                    return reasked.completion.text
                return await self._text(constraint, items[i], kw, 3, sinks[i])

        with _tracing.batch_span(
            self.endpoint, len(items)
        ):  # tasks copy the context: items are its children
            tasks = [asyncio.ensure_future(one(i)) for i in range(len(items))]
            try:
                if return_exceptions:
                    await asyncio.wait(tasks)
                else:
                    await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        results = [outcome(t) for t in tasks]
        reissue(sinks, stacklevel=3)
        return results_of(results, return_exceptions)
