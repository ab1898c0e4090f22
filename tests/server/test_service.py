"""The generation service on the tiny model, without HTTP: validated requests in, runs out."""

from __future__ import annotations

import re
from typing import Any

import pytest

from outlines_like.server.dialects import RequestError
from outlines_like.server.validation import validate_chat, validate_completion

pytestmark = pytest.mark.torch

MESSAGES = [{"role": "user", "content": "Give me the answer."}]


@pytest.fixture
def svc(service: Any) -> Any:
    service.start()  # idempotent; the session's server fixture stops it
    return service


async def test_a_chat_job_renders_the_template_and_expands_n(svc: Any) -> None:
    body = {"messages": MESSAGES, "n": 3, "seed": 5, "max_tokens": 6, "regex": "[0-9]{3}"}
    job = await svc.prepare_chat(validate_chat(body, svc.config))
    rendered = svc.tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    ids = tuple(svc.tokenizer.encode(rendered, add_special_tokens=False))
    assert job.kind == "chat"
    assert job.prompt_tokens == len(ids)
    assert [r.index for r in job.runs] == [0, 1, 2]
    assert [r.request.params.seed for r in job.runs] == [5, 6, 7]
    assert all(r.request.prompt_ids == ids for r in job.runs)
    assert all(r.request.constraint is job.runs[0].request.constraint for r in job.runs)
    await svc.finish(job)
    assert all(re.fullmatch("[0-9]{3}", r.text) for r in job.runs), [r.text for r in job.runs]
    assert all(r.finish_reason == "stop" for r in job.runs)


async def test_a_completion_job_per_prompt(svc: Any) -> None:
    body = {"prompt": ["a", "bc"], "n": 2, "max_tokens": 3, "temperature": 0}
    valid = validate_completion(body, svc.config, svc.pipeline.vocab_size)
    job = await svc.prepare_completion(valid)
    encode = svc.tokenizer.encode
    assert [r.request.prompt_ids for r in job.runs] == [
        *[tuple(encode("a", add_special_tokens=False))] * 2,
        *[tuple(encode("bc", add_special_tokens=False))] * 2,
    ]
    assert job.prompt_tokens == sum(len(encode(p, add_special_tokens=False)) for p in ("a", "bc"))
    seen = [(run.index, out.text) async for run, out in svc.stream(job)]
    assert {i for i, _ in seen} == {0, 1, 2, 3}
    assert job.completion_tokens == sum(r.completion_tokens for r in job.runs) > 0


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"prompt": "", "max_tokens": 3}, "prompt", "invalid_request"),
        ({"prompt": "a", "max_tokens": 512}, "max_tokens", "context_length_exceeded"),
        ({"prompt": "a", "regex": "(a|b)*c" * 4000}, "regex", "constraint_too_large"),
        ({"prompt": "a", "regex": "(a|b)*a(a|b){24}"}, "regex", "invalid_constraint"),
    ],
)
async def test_completion_refusals(svc: Any, body: dict[str, Any], param: str, code: str) -> None:
    config = svc.config
    if code == "context_length_exceeded":
        import dataclasses

        config = dataclasses.replace(config, max_tokens_limit=10**6)
        body = {**body, "max_tokens": svc.pipeline.max_length}
    valid = validate_completion(body, config, svc.pipeline.vocab_size)
    with pytest.raises(RequestError) as info:
        await svc.prepare_completion(valid)
    assert (info.value.param, info.value.code) == (param, code)


class _BrokenTemplate:
    """A tokenizer whose chat template raises (as Jinja does on messages it refuses)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> str:
        raise ValueError("conversation roles must alternate")


async def test_a_failing_chat_template_is_the_requests_fault(svc: Any) -> None:
    from outlines_like.server.service import GenerationService

    broken = GenerationService.__new__(GenerationService)
    broken.__dict__.update(svc.__dict__)
    broken.tokenizer = _BrokenTemplate(svc.tokenizer)
    with pytest.raises(RequestError) as info:
        await broken.prepare_chat(validate_chat({"messages": MESSAGES}, svc.config))
    assert info.value.param == "messages"
    assert "chat template failed on these messages: conversation roles" in info.value.message


def test_model_card_and_stats(svc: Any) -> None:
    card = svc.model_card()
    assert (card["id"], card["owned_by"], card["max_model_len"]) == (
        "tiny",
        "outlines-like",
        svc.pipeline.max_length,
    )
    assert {"steps", "batch_sizes", "load"} <= set(svc.stats())
