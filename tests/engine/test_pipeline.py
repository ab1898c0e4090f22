"""The batching pipeline on the tiny model: batched == one by one, stops, seeds."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = pytest.mark.torch


def _run(pipeline: Any, requests: list[Any]) -> dict[str, tuple[list[int], str, str | None]]:
    """Step the pipeline until every request finishes (staggered admission allowed)."""
    active = {r.request_id: r for r in requests}
    out: dict[str, tuple[list[int], str, str | None]] = {rid: ([], "", None) for rid in active}
    while active:
        for rid, step in pipeline.execute(list(active.values())).items():
            tokens, text, _ = out[rid]
            out[rid] = (tokens + list(step.token_ids), text + step.text, step.finish_reason)
            if step.finished:
                del active[rid]
                pipeline.release(rid)
    return out


@pytest.fixture(scope="module")
def pipeline(tiny_model: tuple[Any, Any]) -> Any:
    from outlines_like.engine.pipeline import TransformersPipeline

    model, tokenizer = tiny_model
    return TransformersPipeline(model, tokenizer)


PROMPTS = ["hello world the", "a", "json schema name age city true false null value key", "paris"]


def test_a_batch_generates_what_each_request_generates_alone(pipeline: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams

    tok = pipeline.tokenizer
    params = SamplingParams(max_tokens=12, temperature=0)
    alone = [
        _run(pipeline, [GenerationRequest(f"a{i}", tok.encode(p), params)])[f"a{i}"][0]
        for i, p in enumerate(PROMPTS)
    ]
    together = _run(
        pipeline, [GenerationRequest(f"b{i}", tok.encode(p), params) for i, p in enumerate(PROMPTS)]
    )
    assert [together[f"b{i}"][0] for i in range(len(PROMPTS))] == alone
    assert pipeline._sequences == {}  # every request released


def test_requests_admitted_mid_generation_are_unaffected(pipeline: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams

    tok = pipeline.tokenizer
    params = SamplingParams(max_tokens=8, temperature=0)
    first = GenerationRequest("first", tok.encode(PROMPTS[2]), params)
    alone = _run(pipeline, [GenerationRequest("solo", tok.encode(PROMPTS[0]), params)])["solo"][0]
    pipeline.execute([first])
    pipeline.execute([first])  # "first" has a cache of a different length now
    late = GenerationRequest("late", tok.encode(PROMPTS[0]), params)
    got = _run(pipeline, [first, late])
    assert got["late"][0] == alone


@pytest.mark.parametrize(("seed", "same"), [(7, True), (None, False)])
def test_seeded_sampling_is_reproducible(pipeline: Any, seed: int | None, same: bool) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams

    ids = pipeline.tokenizer.encode("the")
    params = SamplingParams(max_tokens=16, temperature=1.0, seed=seed)
    a = _run(pipeline, [GenerationRequest("x", ids, params)])["x"][0]
    b = _run(pipeline, [GenerationRequest("y", ids, params)])["y"][0]
    assert (a == b) is same


def test_max_tokens_and_length(pipeline: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams
    from outlines_like.fsm import Vocabulary, compile_constraint
    from outlines_like.types import Regex

    vocab = Vocabulary.from_transformers(pipeline.tokenizer)
    compiled = compile_constraint(Regex("[a-z]{40}"), vocab)
    params = SamplingParams(max_tokens=3, temperature=0)
    got = _run(pipeline, [GenerationRequest("m", [5, 6], params, compiled)])
    tokens, _, reason = got["m"]
    assert len(tokens) == 3
    assert reason == "length"


def test_stop_string_cuts_the_text(pipeline: Any) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams
    from outlines_like.fsm import Vocabulary, compile_constraint
    from outlines_like.types import Regex

    vocab = Vocabulary.from_transformers(pipeline.tokenizer)
    compiled = compile_constraint(Regex("abc-def-ghi"), vocab)
    params = SamplingParams(max_tokens=30, temperature=0, stop=("-g",))
    got = _run(pipeline, [GenerationRequest("s", [5], params, compiled)])
    assert got["s"][1] == "abc-def"
    assert got["s"][2] == "stop"


@pytest.mark.parametrize("pattern", [r"[a-z]{3}-[0-9]{2}", r"(yes|no|maybe)", r"-?[1-9][0-9]{0,3}"])
def test_constrained_rows_beside_free_rows(pipeline: Any, pattern: str) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams
    from outlines_like.fsm import Vocabulary, compile_constraint
    from outlines_like.types import Regex

    vocab = Vocabulary.from_transformers(pipeline.tokenizer)
    compiled = compile_constraint(Regex(pattern), vocab)
    reqs = [
        GenerationRequest(
            f"c{i}", [7 + i], SamplingParams(max_tokens=20, temperature=1.0, seed=i), compiled
        )
        for i in range(4)
    ] + [GenerationRequest("free", [9], SamplingParams(max_tokens=5, temperature=1.0, seed=1))]
    got = _run(pipeline, reqs)
    for i in range(4):
        _, text, reason = got[f"c{i}"]
        assert reason == "stop"
        assert re.fullmatch(pattern, text), text


class _ZeroNoise:
    """A generator whose exponentials are all 0.0 (float32 can draw exact zeros)."""

    def standard_exponential(self, *, out: Any, dtype: Any) -> None:
        out[...] = 0.0


def test_sampling_never_picks_a_masked_token_even_with_zero_noise(pipeline: Any) -> None:
    import torch

    from outlines_like.engine.pipeline import GenerationRequest, SamplingParams, _Sequence

    seq = _Sequence(GenerationRequest("z", [1], SamplingParams()), [], [], None, _ZeroNoise())
    logits = torch.full((1, 16), float("-inf"))
    logits[0, 3] = 0.5
    logits[0, 4] = 0.1
    assert pipeline._sample([seq], logits) in ([3], [4])
