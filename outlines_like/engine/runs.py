"""Running requests to the end: each request's growing result, stepped directly or scheduled.

:func:`step_until_done` drives a :class:`~outlines_like.engine.pipeline.Pipeline` itself
(the local model: one caller, no thread); :func:`generate_all` goes through the
:class:`~outlines_like.engine.scheduler.Scheduler` (the server: many callers share forward
passes). Both fold each :class:`~outlines_like.engine.pipeline.StepOutput` into its
:class:`Run` the same way and release what they started.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator, Sequence

from outlines_like.engine.logprobs import TokenInfo
from outlines_like.engine.pipeline import GenerationRequest, Pipeline, StepOutput
from outlines_like.engine.scheduler import Scheduler

__all__ = ["Run", "generate_all", "step_until_done"]


@dataclasses.dataclass
class Run:
    """One request and what it has produced so far.

    Attributes:
        request: The request.
        index: Its place among the choices of one call.
        text: Text generated so far.
        finish_reason: ``"stop"``, ``"length"`` or ``"error"`` once finished.
        completion_tokens: Tokens generated so far.
        think_open: The output starts inside a reasoning block (see
            :class:`~outlines_like.engine.prepare.PreparedPrompt`).
        infos: Each generated token's facts, when the request asked for ``logprobs``.
    """

    request: GenerationRequest
    index: int = 0
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int = 0
    think_open: bool = False
    infos: list[TokenInfo] = dataclasses.field(default_factory=list)

    @property
    def prompt_tokens(self) -> int:
        """The prompt's length in tokens."""
        return len(self.request.prompt_ids)

    def update(self, out: StepOutput) -> None:
        """Fold one step's output into the run."""
        self.text += out.text
        self.completion_tokens = out.completion_tokens
        if out.info is not None:
            self.infos.append(out.info)
        if out.finished:
            self.finish_reason = out.finish_reason


def step_until_done(pipeline: Pipeline, runs: Sequence[Run]) -> Iterator[tuple[Run, StepOutput]]:
    """Step ``pipeline`` until every run finishes, yielding each output after folding it in.

    Abandoning the iterator releases the runs still active.
    """
    active = {r.request.request_id: r for r in runs}
    try:
        while active:
            outputs = pipeline.execute([r.request for r in active.values()])
            for rid, out in outputs.items():
                run = active[rid]
                run.update(out)
                if out.finished:
                    del active[rid]
                    pipeline.release(rid)
                yield run, out
    finally:
        for rid in active:
            pipeline.release(rid)


async def generate_all(
    scheduler: Scheduler, runs: Sequence[Run]
) -> AsyncIterator[tuple[Run, StepOutput]]:
    """Run every run on the scheduler, yielding outputs as they come (interleaved).

    A failure of any run is raised here; abandoning the iterator cancels the others.
    """
    queue: asyncio.Queue[tuple[Run, StepOutput | BaseException | None]] = asyncio.Queue()

    async def pump(run: Run) -> None:
        try:
            async for out in scheduler.generate(run.request):
                await queue.put((run, out))
        except BaseException as exc:
            await queue.put((run, exc))
            return
        await queue.put((run, None))

    tasks = [asyncio.create_task(pump(r)) for r in runs]
    remaining = len(runs)
    try:
        while remaining:
            run, item = await queue.get()
            if item is None:
                remaining -= 1
                continue
            if isinstance(item, BaseException):
                raise item
            run.update(item)
            yield run, item
    finally:
        for task in tasks:
            task.cancel()
