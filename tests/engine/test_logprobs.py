"""Per-token facts: the mask row's popcount and sample, log-probabilities, and the pipeline's."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pytest

from outlines_like.engine.logprobs import allowed_count, allowed_ids, step_infos
from outlines_like.engine.pipeline import SamplingParams


def _mask(ids: list[int], vocab: int) -> np.ndarray:
    bits = np.zeros((vocab + 31) // 32 * 32, dtype=np.uint8)
    bits[ids] = 1
    return np.packbits(bits, bitorder="little").view("<i4").copy()


@pytest.mark.parametrize("ids", [[], [0], [0, 5, 31, 32, 70], list(range(100)), [31, 63, 95]])
def test_allowed_count_and_ids_read_the_packed_row(ids: list[int]) -> None:
    words = _mask(ids, 100)
    assert allowed_count(words) == len(ids)
    assert allowed_ids(words, 1000) == tuple(ids)


def test_the_sample_is_spread_over_the_allowed_set() -> None:
    words = _mask([0, 5, 31, 32, 70], 100)
    assert allowed_ids(words, 2) == (0, 70)
    assert allowed_ids(words, 3) == (0, 31, 70)
    assert allowed_ids(words, 0) == ()


@pytest.mark.torch
def test_step_infos_only_for_the_rows_that_ask() -> None:
    import torch

    logits = torch.tensor([[0.0, 1.0, 2.0, -math.inf], [3.0, 0.0, 0.0, 0.0]])
    mask = _mask([0, 1, 2], 4)
    rows = [
        (SamplingParams(logprobs=2, allowed_sample=2), mask),
        (SamplingParams(), None),
    ]
    first, second = step_infos(torch, logits, [1, 0], rows)
    assert second is None
    assert first is not None
    expected = torch.log_softmax(logits[0], dim=-1)
    assert first.token_id == 1
    assert first.logprob == pytest.approx(float(expected[1]))
    assert [t for t, _ in first.top] == [2, 1]
    assert first.allowed_count == 3
    assert first.allowed_sample == (0, 2)


@pytest.mark.torch
def test_alternatives_past_the_allowed_ones_are_left_out() -> None:
    import torch

    logits = torch.tensor([[0.0, -math.inf, -math.inf]])
    (info,) = step_infos(torch, logits, [0], [(SamplingParams(logprobs=3), _mask([0], 3))])
    assert info is not None
    assert info.top == ((0, 0.0),)
    assert info.allowed_count == 1


@pytest.mark.torch
def test_the_pipeline_reports_each_token_and_its_mask(tiny_model: tuple[Any, Any]) -> None:
    from outlines_like.engine.pipeline import GenerationRequest, TransformersPipeline
    from outlines_like.engine.runs import Run, step_until_done
    from outlines_like.fsm.compile import compile_constraint
    from outlines_like.fsm.vocabulary import Vocabulary
    from outlines_like.types import Regex

    model, tokenizer = tiny_model
    pipeline = TransformersPipeline(model, tokenizer)
    compiled = compile_constraint(Regex("[a-z]{2}-[0-9]"), Vocabulary.from_transformers(tokenizer))
    ids = tokenizer.encode("plate")
    asked = Run(
        GenerationRequest(
            "a", ids, SamplingParams(max_tokens=10, seed=3, logprobs=2, allowed_sample=4), compiled
        )
    )
    quiet = Run(GenerationRequest("b", ids, SamplingParams(max_tokens=10, seed=3), compiled))
    for _ in step_until_done(pipeline, [asked, quiet]):
        pass
    assert re.fullmatch("[a-z]{2}-[0-9]", asked.text)
    assert quiet.infos == []
    assert len(asked.infos) == asked.completion_tokens
    counts = [info.allowed_count for info in asked.infos]
    assert all(c is not None and c >= 1 for c in counts)
    dash = next(i for i in asked.infos if tokenizer.decode([i.token_id]) == "-")
    assert dash.allowed_count == 1
    assert dash.logprob == pytest.approx(0.0, abs=1e-5)
    for info in asked.infos:
        assert info.token_id in info.allowed_sample or len(info.allowed_sample) == 4
        assert len(info.top) <= 2
