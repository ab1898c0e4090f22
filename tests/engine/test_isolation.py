"""One sequence's failure is its own: admission, masks and slow masks never fail the batch."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

pytestmark = pytest.mark.torch


def _run(pipeline: Any, requests: list[Any], limit: float = 60.0) -> dict[str, tuple[str, str]]:
    """Step until every request finishes; ``{request_id: (text, finish_reason)}``."""
    active = {r.request_id: r for r in requests}
    out = {rid: ("", "") for rid in active}
    deadline = time.monotonic() + limit
    while active:
        assert time.monotonic() < deadline, f"still running: {sorted(active)}"
        for rid, step in pipeline.execute(list(active.values())).items():
            text, _ = out[rid]
            out[rid] = (text + step.text, step.finish_reason or "")
            if step.finished:
                del active[rid]
                pipeline.release(rid)
    return out


class _Hostile:
    """A compiled constraint whose matchers fail or stall after ``after`` masks."""

    def __init__(self, real: Any, *, after: int, stall: bool) -> None:
        self._real = real
        self.after = after
        self.stall = stall

    @property
    def vocabulary(self) -> Any:
        return self._real.vocabulary

    def matcher(self) -> Any:
        return _HostileMatcher(self._real.matcher(), self)


class _HostileMatcher:
    def __init__(self, real: Any, owner: _Hostile) -> None:
        self._real = real
        self._owner = owner
        self._masks = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def fill_bitmask(self, out: Any) -> None:
        self._masks += 1
        if self._masks > self._owner.after:
            if not self._owner.stall:
                raise RuntimeError("the masker broke on this state")
            end = time.monotonic() + 60
            while time.monotonic() < end:  # Python work, as the masker's loops are
                sum(range(1000))
        self._real.fill_bitmask(out)


@pytest.fixture(scope="module", params=["inline", "workers"])
def pipeline(request: Any, tiny_model: tuple[Any, Any]) -> Any:
    from outlines_like.engine.masking import MaskWorkers
    from outlines_like.engine.pipeline import TransformersPipeline

    model, tokenizer = tiny_model
    if request.param == "inline":
        yield TransformersPipeline(model, tokenizer)
        return
    workers = MaskWorkers(2, job_timeout=0.5, step_wait=0.01)
    yield TransformersPipeline(model, tokenizer, mask_workers=workers)
    workers.shutdown()


@pytest.fixture(scope="module")
def digits(tiny_model: tuple[Any, Any]) -> Any:
    from outlines_like.fsm.compile import compile_constraint
    from outlines_like.fsm.vocabulary import Vocabulary
    from outlines_like.types import Regex

    return compile_constraint(Regex("[0-9]{6}"), Vocabulary.from_transformers(tiny_model[1]))


def _neighbours(pipeline: Any, digits: Any) -> list[Any]:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams

    ids = pipeline.tokenizer.encode("numbers:")
    params = SamplingParams(max_tokens=8, temperature=0)
    return [
        GenerationRequest("free", ids, params),
        GenerationRequest("digits", ids, params, digits),
    ]


def _check_neighbours(out: dict[str, tuple[str, str]]) -> None:
    assert out["free"][1] in ("stop", "length")
    assert re.fullmatch("[0-9]{6}", out["digits"][0]), out["digits"]
    assert out["digits"][1] == "stop"


def test_a_seed_numpy_refuses_fails_that_request_alone(pipeline: Any, digits: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams

    bad = GenerationRequest("bad", pipeline.tokenizer.encode("x"), SamplingParams(seed=-1))
    out = _run(pipeline, [*_neighbours(pipeline, digits), bad])
    assert out["bad"] == ("", "error")
    _check_neighbours(out)
    assert pipeline._sequences == {}


def test_a_mask_that_raises_fails_that_request_alone(pipeline: Any, digits: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams

    hostile = _Hostile(digits, after=2, stall=False)
    bad = GenerationRequest(
        "bad", pipeline.tokenizer.encode("x"), SamplingParams(max_tokens=8), hostile
    )
    out = _run(pipeline, [*_neighbours(pipeline, digits), bad])
    assert out["bad"][1] == "error"
    _check_neighbours(out)


def test_a_slow_mask_is_stopped_and_does_not_stall_the_batch(pipeline: Any, digits: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams

    if pipeline.mask_workers is None:
        pytest.skip("inline masks run on the caller's thread: the server uses workers")
    hostile = _Hostile(digits, after=1, stall=True)
    bad = GenerationRequest(
        "bad", pipeline.tokenizer.encode("x"), SamplingParams(max_tokens=8), hostile
    )
    started = time.monotonic()
    out = _run(pipeline, [*_neighbours(pipeline, digits), bad], limit=20)
    assert out["bad"][1] == "error"
    _check_neighbours(out)
    assert time.monotonic() - started < 10  # the stalled mask was stopped after 0.5 s
    # its worker thread is free again: new masks are served
    again = _run(pipeline, _neighbours(pipeline, digits), limit=20)
    _check_neighbours(again)
