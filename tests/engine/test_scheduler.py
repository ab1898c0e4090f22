"""The scheduler on the tiny model: concurrent requests share forward passes, all released."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def pipeline(tiny_model: tuple[Any, Any]) -> Any:
    from outlines_like.engine.pipeline import TransformersPipeline

    model, tokenizer = tiny_model
    return TransformersPipeline(model, tokenizer)


def test_scheduler_batches_concurrent_requests(pipeline: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams
    from outlines_like.engine.scheduler import Scheduler

    scheduler = Scheduler(pipeline, max_batch_size=8)
    scheduler.start()

    async def one(i: int) -> int:
        req = GenerationRequest(f"q{i}", [3 + i], SamplingParams(max_tokens=6, temperature=0))
        count = 0
        async for out in scheduler.generate(req):
            count += len(out.token_ids)
        return count

    async def main() -> list[int]:
        return await asyncio.gather(*(one(i) for i in range(12)))

    try:
        counts = asyncio.run(main())
    finally:
        scheduler.stop()
    assert all(1 <= c <= 6 for c in counts)
    assert max(scheduler.batch_sizes) == 8  # never more than max_batch_size, and filled
    assert pipeline._sequences == {}
