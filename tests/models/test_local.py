"""from_transformers on the tiny model: every output type gives valid output, same API as remote."""

from __future__ import annotations

import datetime as dt
import enum
import itertools
import pathlib
import re
from typing import Any, Literal

import pydantic
import pytest
from PIL import Image as PILImage

pytestmark = pytest.mark.torch


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"


class Pet(pydantic.BaseModel):
    kind: Literal["cat", "dog"]
    age: int = pydantic.Field(ge=0, le=20)
    name: str = pydantic.Field(pattern="^[a-z]{2,5}$")


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("torch")
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from outlines_like.models.local import from_transformers
    from outlines_like.server.tiny import build_tiny_model

    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    path: pathlib.Path = build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-cache")
    model = AutoModelForCausalLM.from_pretrained(str(path))
    return from_transformers(model, AutoTokenizer.from_pretrained(str(path)))


def _lark() -> Any:
    from outlines_like.types import CFG

    return CFG('start: "answer: " ANSWER "."\nANSWER: "yes" | "no"')


@pytest.mark.parametrize(
    ("output_type", "check"),
    [
        (int, lambda v: isinstance(v, int)),
        (bool, lambda v: isinstance(v, bool)),
        (Literal["yes", "no", "maybe"], lambda v: v in ("yes", "no", "maybe")),
        (Color, lambda v: isinstance(v, Color)),
        (dt.date, lambda v: isinstance(v, dt.date)),
        (Pet, lambda v: isinstance(v, Pet)),
        ("regex", lambda v: re.fullmatch(r"[A-Z]{2}-[0-9]{3}", v)),
        ("choice", lambda v: v in ("north", "south")),
        ("schema", lambda v: isinstance(v, dict) and v["n"] in range(10)),
        ("lark", lambda v: v in ("answer: yes.", "answer: no.")),
    ],
)
def test_parse_gives_a_valid_value_for_every_output_type(
    local: Any, output_type: Any, check: Any
) -> None:
    from outlines_like.types import Choice, JsonSchema, Regex

    resolved = (
        {
            "regex": Regex(r"[A-Z]{2}-[0-9]{3}"),
            "choice": Choice(["north", "south"]),
            "schema": JsonSchema(
                {
                    "type": "object",
                    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                    "required": ["n"],
                }
            ),
            "lark": _lark(),
        }.get(output_type, output_type)
        if isinstance(output_type, str)
        else output_type
    )
    value = local.parse("Answer me.", resolved, max_tokens=120, temperature=0.7, seed=1)
    assert check(value), value


def test_call_returns_text_and_n_gives_a_list(local: Any) -> None:
    text = local("hi", int, max_tokens=100, seed=3)
    assert re.fullmatch(r"-?(0|[1-9][0-9]*)", text)
    texts = local("hi", Literal["a", "b"], n=3, seed=3)
    assert len(texts) == 3
    assert set(texts) <= {"a", "b"}


def test_free_text_and_usage(local: Any) -> None:
    before = local.usage.completion_tokens
    result = local.complete("hello", max_tokens=4, temperature=0)
    assert result.finish_reason in ("stop", "length")
    assert result.usage.completion_tokens <= 4
    assert local.usage.completion_tokens == before + result.usage.completion_tokens


def test_stream_concatenates_to_a_valid_answer(local: Any) -> None:
    from outlines_like.types import Regex

    pieces = list(local.stream("go", Regex("[a-z]{4}-[0-9]{2}"), max_tokens=30, seed=2))
    assert len(pieces) >= 2
    assert re.fullmatch("[a-z]{4}-[0-9]{2}", "".join(pieces))


def test_batch_keeps_prompt_order(local: Any) -> None:
    out = local.batch(["a", "b", "c"], Literal["x", "y"], temperature=0)
    assert len(out) == 3
    assert set(out) <= {"x", "y"}
    # greedy: each equals the same prompt run alone
    assert out == [local(p, Literal["x", "y"], temperature=0) for p in ["a", "b", "c"]]


def test_chat_prompts_use_the_chat_template(local: Any) -> None:
    from outlines_like.engine.prepare import prepare_prompt
    from outlines_like.inputs import Chat

    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "n?"}]
    tok = local.tokenizer
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert "be brief" in rendered
    assert rendered != "be briefn?"
    expected = tuple(tok.encode(rendered, add_special_tokens=False))
    assert prepare_prompt(tok, Chat(messages)).ids == expected
    result = local.complete(Chat(messages), int, max_tokens=12, seed=4)
    assert result.usage.prompt_tokens == len(expected)  # the templated prompt was generated from
    assert isinstance(local.parse(Chat(messages), int, max_tokens=12, seed=4), int)


def test_truncated_constrained_output(local: Any) -> None:
    from outlines_like.errors import TruncatedOutputWarning
    from outlines_like.types import Regex

    # A max_tokens that cannot fit the shortest answer is refused before generating (the
    # masker closes every answer that fits: fsm/closing.py); a cut answer that fits warns.
    for method in (local.parse, local, local.stream):
        with pytest.raises(ValueError, match="max_tokens=2 cannot fit a valid answer"):
            method("x", Regex("[a-z]{30}"), max_tokens=2)
    with pytest.warns(TruncatedOutputWarning) as record:
        text = local("x", Regex("[a-z]{1,60}"), max_tokens=2, seed=1, temperature=1.0)
    assert record[0].filename == __file__  # points at the caller's line
    assert 1 <= len(text) <= 60


def test_an_answer_at_a_tight_max_tokens_closes_valid(local: Any) -> None:
    """The masks narrow near max_tokens: the answer is complete, finish_reason "length"."""
    import json
    import warnings

    import jsonschema

    from outlines_like.errors import TruncatedOutputWarning
    from outlines_like.fsm.closing import shortest_document_tokens
    from outlines_like.types import JsonSchema

    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "tags": {"type": "array"}},
        "required": ["name", "tags"],
    }
    compiled = local._compile(JsonSchema(schema))
    need = shortest_document_tokens(compiled)
    assert need is not None
    for extra in (0, 3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TruncatedOutputWarning)
            out = local.complete("x", JsonSchema(schema), max_tokens=need + extra, seed=extra)
        jsonschema.validate(json.loads(out.text), schema)
        assert out.finish_reason in ("length", "stop")
        assert out.usage.completion_tokens <= need + extra


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [({"bogus": 1}, TypeError), ({"n": 0}, ValueError), ({"max_tokens": 0}, ValueError)],
)
def test_bad_arguments(local: Any, kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        local("x", int, **kwargs)


def test_image_prompts_are_refused(local: Any) -> None:
    from outlines_like.inputs import Image

    with pytest.raises(TypeError, match="vision model"):
        local(["What is this?", Image(PILImage.new("RGB", (2, 2)))], int)
    with pytest.raises(TypeError, match=r"prompt\[0\] is a object"):
        local([object()], int)


def test_a_list_prompt_is_one_user_message(local: Any) -> None:
    from outlines_like.inputs import Chat

    as_list = local(["Answer ", "me."], Literal["x", "y"], temperature=0)
    as_chat = local(
        Chat([{"role": "user", "content": "Answer me."}]), Literal["x", "y"], temperature=0
    )
    assert as_list == as_chat


def test_reasoning_mode_leaves_thinking_free(local: Any) -> None:
    from outlines_like.models.local import from_transformers
    from outlines_like.types import Regex

    tok = local.tokenizer
    # The tiny model's greedy first token stands in for </think>: thinking ends at once, then
    # the constraint applies. (A random model never writes a real </think>.)
    first = local._pipeline.tokenizer.decode([_greedy_first(local)])
    thinker = from_transformers(local.model, tok)
    thinker.think_end_token_id = _greedy_first(local)
    result: Any = thinker.complete("q", Regex("[0-9]{3}"), temperature=0, max_tokens=20)
    assert result.raw.startswith(first)
    assert re.search("[0-9]{3}$", result.raw)


def _greedy_first(local: Any) -> int:
    from outlines_like.engine.prepare import prepare_prompt

    ids = list(prepare_prompt(local.tokenizer, "q").ids)
    logits = local.model(__import__("torch").tensor([ids])).logits[0, -1]
    return int(logits.argmax())


def _rejecting(first: int) -> type[pydantic.BaseModel]:
    """A model whose validator rejects its first ``first`` values (what no mask can say)."""
    calls = itertools.count()

    class Pick(pydantic.BaseModel):
        kind: Literal["cat", "dog"]

        @pydantic.model_validator(mode="after")
        def not_yet(self) -> Pick:
            if next(calls) < first:
                raise ValueError("not this one")
            return self

    return Pick


def test_parse_and_complete_reask_until_the_validator_passes(local: Any) -> None:
    from outlines_like.messages import Completion

    before = local.usage
    value = local.parse("Pick a pet.", _rejecting(2), retries=2, max_tokens=24, seed=1)
    assert value.kind in ("cat", "dog")
    completion = local.complete("Pick a pet.", _rejecting(1), retries=1, max_tokens=24, seed=1)
    assert isinstance(completion, Completion)
    assert len(completion.attempts) == 2
    assert completion.attempts[0].error is not None
    assert "not this one" in (completion.attempts[0].feedback or "")
    used = sum(a.usage.total_tokens for a in completion.attempts if a.usage is not None)
    assert local.usage.total_tokens - before.total_tokens > used  # five answers in all
    # the follow-up went through the chat template: the second prompt is longer
    first, second = (a.usage for a in completion.attempts)
    assert first is not None
    assert second is not None
    assert second.prompt_tokens > first.prompt_tokens + first.completion_tokens


def test_reask_exhausted_and_streamed(local: Any) -> None:
    from outlines_like.errors import ParseError

    with pytest.raises(ParseError, match="not this one") as caught:
        local.parse("Pick a pet.", _rejecting(5), retries=1, max_tokens=24, seed=1)
    assert len(caught.value.attempts) == 2
    values = list(local.stream_parse("Pick a pet.", _rejecting(1), retries=1, max_tokens=24))
    assert values[-1].kind in ("cat", "dog")


def test_batch_reasks_the_failed_prompts_together(local: Any) -> None:
    pick = _rejecting(2)  # the first two answers of the first round fail
    texts = local.batch(["Pick a pet.", "Pick one.", "A pet?"], pick, retries=1, max_tokens=24)
    assert [pick.model_validate_json(t).kind in ("cat", "dog") for t in texts] == [True] * 3
