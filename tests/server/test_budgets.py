"""The server's budgets without HTTP: a cache bounded by bytes, failures remembered, templates."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from outlines_like.server.dialects import ConstraintSpec, RequestError
from outlines_like.types import CFG, JsonSchema, Regex

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
    from outlines_like.server.constraints import nbytes

    compiler.cache_bytes = 1  # smaller than any entry: nothing stays
    await compiler.compile(_spec("[0-9]{2}"))
    assert len(compiler) == 0
    compiler.cache_bytes = 10**9
    for pattern in ("[0-9]{2}", "[a-z]{2}", "(yes|no)"):
        await compiler.compile(_spec(pattern))
    assert len(compiler) == 3
    sizes = compiler.cached_bytes
    assert sizes > 3 * 1_000  # measured, not counted
    # ... without the vocabulary's token table, which every entry shares (not 3 times over)
    table = compiler.vocabulary._cache["token_table"]
    assert sizes < nbytes(table, {id(compiler.vocabulary.tokens)})
    # one entry too many (with room for a measure's noise): the least recently used goes
    compiler.cache_bytes = sizes - min(compiler._sizes.values()) // 2
    await compiler.compile(_spec("[0-9]{2}"))  # a hit: now the most recent
    compiler.remeasure(("Regex", repr(Regex("[0-9]{2}"))))
    compiler._measured.clear()
    compiler.remeasure(("Regex", repr(Regex("[0-9]{2}"))))
    assert len(compiler) == 2
    assert compiler.cached_bytes <= compiler.cache_bytes


@pytest.mark.parametrize(
    "spec",
    [
        _spec("[a-f]{3}-[0-9]{1,3}"),
        ConstraintSpec(
            JsonSchema({"type": "object", "properties": {"n": {"type": "integer"}}}),
            "json_schema",
            ("JsonSchema", "compile-once"),
        ),
        ConstraintSpec(
            CFG('start: "(" NUMBER ")"\n%import common.NUMBER\n'),
            "grammar",
            ("CFG", "compile-once"),
        ),
    ],
    ids=["regex", "json_schema", "grammar"],
)
async def test_a_new_constraint_is_compiled_once(compiler: Any, spec: ConstraintSpec) -> None:
    from outlines_like.fsm import compile_constraint
    from outlines_like.fsm._transfer import dump_compiled

    compiler.cache_bytes = 10**9
    trials, local = compiler.trials.trials, compiler.local_compiles
    compiled = await compiler.compile(spec)
    assert compiler.trials.trials == trials + 1  # compiled in the trial worker ...
    assert compiler.local_compiles == local  # ... and not again here: its result was used
    assert compiled.vocabulary is compiler.vocabulary
    assert await compiler.compile(spec) is compiled  # cached
    # its size is never below its compiled bytes (a walk of its objects may miss some)
    assert compiler._sizes[spec.key] >= 0.9 * len(dump_compiled(compiled))
    assert compiler.trials.trials == trials + 1
    here = compile_constraint(spec.term, compiler.vocabulary, max_states=compiler.max_states)
    words = np.zeros((2, compiler.vocabulary.mask_words), dtype=np.int32)
    sent, made = compiled.matcher(), here.matcher()
    for _ in range(6):  # the same masks along the same walk
        sent.fill_bitmask(words[0])
        made.fill_bitmask(words[1])
        assert (words[0] == words[1]).all()
        allowed = made.allowed_token_ids()
        if made.is_finished() or not allowed.shape[0]:
            break
        sent.advance(int(allowed[0]))
        made.advance(int(allowed[0]))


async def test_a_constraint_over_a_quarter_of_the_cache_is_not_kept(compiler: Any) -> None:
    compiler.cache_bytes = 10**9
    await compiler.compile(_spec("[0-9]{5}"))
    held = len(compiler)
    size = compiler._sizes[("Regex", repr(Regex("[0-9]{5}")))]
    compiler.cache_bytes = 3 * size  # the next one, about as large, is over a quarter of it
    compiled = await compiler.compile(_spec("[a-z]{5}"))
    assert compiled.matcher().allowed_token_ids().shape[0] > 0  # it serves its request ...
    assert len(compiler) == held  # ... and pushes no other constraint out


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


def test_a_model_template_without_checks_is_stopped_past_its_grace() -> None:
    from outlines_like.server.templates import TemplateLimitError, TemplateRenderer

    state = {"spins": 0, "unwound": False}

    class Spinning:
        """A tokenizer whose template loops in Python and never checks a deadline."""

        def apply_chat_template(self, *args: Any, **kwargs: Any) -> str:
            try:
                while True:
                    state["spins"] += 1
            finally:
                state["unwound"] = True

    started = time.monotonic()
    with pytest.raises(TemplateLimitError, match=r"ran past 0\.2 s"):
        TemplateRenderer(timeout=0.2, max_bytes=100).render(Spinning(), [])
    assert time.monotonic() - started < 5
    assert state["unwound"]  # the thread was stopped, not left spinning
