"""The server's budgets without HTTP: a cache bounded by bytes, failures remembered, templates."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from outlines_like.server.dialects import ConstraintSpec, RequestError
from outlines_like.types import Regex

pytestmark = pytest.mark.torch


def _spec(pattern: str) -> ConstraintSpec:
    term = Regex(pattern)
    return ConstraintSpec(term, "regex", ("Regex", repr(term)))


@pytest.fixture(scope="module")
def compiler(tiny_model: tuple[Any, Any]) -> Iterator[Any]:
    from outlines_like.fsm.vocabulary import Vocabulary
    from outlines_like.server.constraints import ConstraintCompiler

    vocabulary = Vocabulary.from_transformers(tiny_model[1])
    made = ConstraintCompiler(
        vocabulary, max_states=2000, max_bytes=10_000, timeout=5.0, workers=1, cache_bytes=1
    )
    yield made
    made.shutdown()


async def test_the_cache_is_bounded_by_bytes(compiler: Any) -> None:
    compiler.cache_bytes = 1  # smaller than any entry: nothing stays
    await compiler.compile(_spec("[0-9]{2}"))
    assert len(compiler) == 0
    compiler.cache_bytes = 10**9
    for pattern in ("[0-9]{2}", "[a-z]{2}", "(yes|no)"):
        await compiler.compile(_spec(pattern))
    assert len(compiler) == 3
    sizes = compiler.cached_bytes
    assert sizes > 3 * 10_000  # measured, not counted
    compiler.cache_bytes = sizes - 1  # one entry too many: the least recently used goes
    await compiler.compile(_spec("[0-9]{2}"))  # a hit: now the most recent
    compiler.remeasure(("Regex", repr(Regex("[0-9]{2}"))))
    compiler._measured.clear()
    compiler.remeasure(("Regex", repr(Regex("[0-9]{2}"))))
    assert len(compiler) == 2
    assert compiler.cached_bytes <= compiler.cache_bytes


async def test_an_evicted_constraint_is_refused_at_once(compiler: Any) -> None:
    compiler.cache_bytes = 10**9
    spec = _spec("[0-9]{4}")
    await compiler.compile(spec)
    compiler.evict(spec.key, "it failed while generating")
    started = time.monotonic()
    with pytest.raises(RequestError) as info:
        await compiler.compile(spec)
    assert time.monotonic() - started < 0.5
    assert info.value.code == "constraint_too_complex"
    assert "failed while generating" in info.value.message


def test_request_templates_render_in_a_limited_sandbox(tiny_model: tuple[Any, Any]) -> None:
    from outlines_like.server.templates import TemplateLimitError, TemplateRenderer

    tokenizer = tiny_model[1]
    renderer = TemplateRenderer(timeout=1.0, max_bytes=10_000)
    messages = [{"role": "user", "content": "hi"}]
    ok = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    assert renderer.render(tokenizer, messages, template_kwargs={"chat_template": ok}) == (
        "<user>hi"
    )
    started = time.monotonic()
    endless = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateLimitError):
        renderer.render(tokenizer, messages, template_kwargs={"chat_template": endless})
    assert time.monotonic() - started < 5  # stopped, not left running
    with pytest.raises(Exception, match="output budget"):
        renderer.render(tokenizer, messages, template_kwargs={"chat_template": "{{ 'x' * 9**9 }}"})
    wide = "{% for i in range(100000) %}xxxxxxxxxx{% endfor %}"
    with pytest.raises(TemplateLimitError, match="more than 10000 bytes"):
        renderer.render(tokenizer, messages, template_kwargs={"chat_template": wide})
    escape = "{{ messages.__class__.__mro__ }}"
    with pytest.raises(Exception, match=r"unsafe|access"):
        renderer.render(tokenizer, messages, template_kwargs={"chat_template": escape})
