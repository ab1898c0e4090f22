"""Running requests to the end over a fake pipeline: folding outputs, releasing, failures."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from outlines_like.engine.pipeline import GenerationRequest, SamplingParams, StepOutput
from outlines_like.engine.runs import Run, generate_all, step_until_done
from outlines_like.engine.scheduler import Scheduler


class FakePipeline:
    """Each request emits its prompt ids as letters, one per step, then finishes."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.steps: dict[str, int] = {}
        self.released: list[str] = []
        self.fail_on = fail_on

    def execute(self, batch: Sequence[GenerationRequest]) -> dict[str, StepOutput]:
        out = {}
        for req in batch:
            if req.request_id == self.fail_on:
                raise RuntimeError("boom")
            k = self.steps.get(req.request_id, 0) + 1
            self.steps[req.request_id] = k
            done = k == len(req.prompt_ids)
            out[req.request_id] = StepOutput(
                req.request_id,
                (k,),
                chr(96 + req.prompt_ids[k - 1]),
                done,
                "stop" if done else None,
                len(req.prompt_ids),
                k,
            )
        return out

    def release(self, request_id: str) -> None:
        self.released.append(request_id)


def _runs() -> list[Run]:
    params = SamplingParams()
    return [
        Run(GenerationRequest("a", (1, 2, 3), params), 0),
        Run(GenerationRequest("b", (2,), params), 1),
    ]


def test_step_until_done_folds_every_output_and_releases() -> None:
    pipeline = FakePipeline()
    runs = _runs()
    seen = [(run.index, out.text) for run, out in step_until_done(pipeline, runs)]
    assert seen == [(0, "a"), (1, "b"), (0, "b"), (0, "c")]
    assert [(r.text, r.finish_reason, r.completion_tokens) for r in runs] == [
        ("abc", "stop", 3),
        ("b", "stop", 1),
    ]
    assert runs[0].prompt_tokens == 3
    assert sorted(pipeline.released) == ["a", "b"]


def test_an_abandoned_step_loop_releases_what_is_active() -> None:
    pipeline = FakePipeline()
    steps = step_until_done(pipeline, _runs())
    next(steps)
    steps.close()
    assert sorted(pipeline.released) == ["a", "b"]


async def test_generate_all_interleaves_on_the_scheduler() -> None:
    pipeline = FakePipeline()
    scheduler = Scheduler(pipeline, max_batch_size=4)
    scheduler.start()
    runs = _runs()
    try:
        seen = [(run.index, out.text) async for run, out in generate_all(scheduler, runs)]
    finally:
        scheduler.stop()
    assert sorted(seen) == [(0, "a"), (0, "b"), (0, "c"), (1, "b")]
    assert [r.text for r in runs] == ["abc", "b"]
    assert sorted(pipeline.released) == ["a", "b"]


async def test_generate_all_raises_a_failed_step() -> None:
    scheduler = Scheduler(FakePipeline(fail_on="b"), max_batch_size=4)
    scheduler.start()
    try:
        with pytest.raises(RuntimeError, match="boom"):
            async for _ in generate_all(scheduler, _runs()):
                pass
    finally:
        scheduler.stop()
    await asyncio.sleep(0)
