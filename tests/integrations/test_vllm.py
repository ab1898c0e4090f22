"""The vLLM logits processor without vLLM: fake batch updates, contexts and torch CPU logits."""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
import types
from collections.abc import Iterator
from typing import Any

import httpx2
import numpy as np
import openai
import pytest

import outlines_like as ol
from outlines_like.adapters.vllm import XARGS_KEY, VLLMAdapter, masker_adapter
from outlines_like.fsm import Vocabulary
from outlines_like.integrations import _batch
from outlines_like.integrations._batch import (
    ConstrainedBatch,
    check_argument,
    mask_rows,
    read_argument,
    request_argument,
)
from outlines_like.integrations.vllm import StepStats, _build, _Processor
from outlines_like.types import CFG, Choice, JsonObject, JsonSchema, Regex, Term, to_term

torch = pytest.importorskip("torch")

TOKENS = [b"a", b"b", b"ab", b"0", b"1", b"12", b" ", b"\n", b"</think>", b"x", b"<eos>"]
THINK, EOS = 8, 10
NEG = float("-inf")
VOCAB = Vocabulary(TOKENS, eos_token_ids=[EOS])
WIDTH = 16  # logits columns: past the vocabulary (padded embeddings) too

LETTERS = Regex("[ab]{2}")
DIGITS = Regex("[0-9]{2}")


def xargs(term: Term, **extra: Any) -> dict[str, Any]:
    """What ``from_server(..., masker="outlines_like")`` puts in ``vllm_xargs``."""
    fields = VLLMAdapter(masker="outlines_like").constraint_fields(term, endpoint="chat")
    args: dict[str, Any] = fields["extra_body"]["vllm_xargs"]
    if extra:
        spec = json.loads(args[XARGS_KEY])
        spec.update(extra)
        args = {XARGS_KEY: json.dumps(spec)}
    return args


@dataclasses.dataclass
class Params:
    extra_args: dict[str, Any] | None = None


def params(term: Term | None, **extra: Any) -> Params:
    return Params(None if term is None else xargs(term, **extra))


class Direction(enum.Enum):
    UNIDIRECTIONAL = enum.auto()
    SWAP = enum.auto()


@dataclasses.dataclass(frozen=True)
class BatchUpdate:
    batch_size: int
    removed: list[int] = dataclasses.field(default_factory=list)
    added: list[tuple[int, Params, list[int] | None, list[int]]] = dataclasses.field(
        default_factory=list
    )
    moved: list[tuple[int, int, Direction]] = dataclasses.field(default_factory=list)


def processor(req_states: Any = None, **batch_options: Any) -> _Processor:
    proc = _Processor()
    proc.batch = ConstrainedBatch(VOCAB, think_end_token_id=THINK, **batch_options)
    proc._req_states = req_states
    proc._stats = StepStats(None)
    return proc


def allowed(row: Any) -> set[int]:
    return {i for i, v in enumerate(row.tolist()) if v != NEG}


def ids(*texts: bytes) -> set[int]:
    return {TOKENS.index(t) for t in texts}


# -- the request argument --------------------------------------------------------------------


@pytest.mark.parametrize(
    "term",
    [
        LETTERS,
        to_term(int),
        Choice(["yes", "no"]),
        JsonSchema({"type": "integer", "minimum": 1, "maximum": 5}),
        JsonSchema({"type": "object", "properties": {"a": {"enum": [1]}}}, whitespace_pattern=" ?"),
        JsonObject(),
        CFG('start: "a" | "b"'),
        CFG("root ::= [a-b]+"),
    ],
    ids=str,
)
def test_the_argument_round_trips(term: Term) -> None:
    args = xargs(term)
    assert list(args) == [XARGS_KEY]
    assert isinstance(args[XARGS_KEY], str)
    arg = request_argument(args)
    assert arg is not None
    assert arg.reasoning is None
    if isinstance(term, (JsonSchema, JsonObject, CFG)):
        assert arg.term == term
    else:  # every regex-shaped term travels as its regex
        assert arg.term == Regex(json.loads(args[XARGS_KEY])["value"])
    check_argument(args)


def test_requests_without_our_argument_are_not_ours() -> None:
    assert request_argument(None) is None
    assert request_argument({}) is None
    assert request_argument({"other": "1"}) is None
    check_argument({"other": "1"})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (42, "must be JSON text"),
        ("{", "not valid JSON"),
        ("[1]", "must be a JSON object"),
        ('{"kind": "lark"}', "kind must be one of"),
        ('{"kind": "regex", "value": "a", "x": 1}', "unknown keys"),
        ('{"kind": "regex", "value": ""}', "non-empty string"),
        ('{"kind": "regex", "value": "[a-"}', "invalid regex"),
        ('{"kind": "regex", "value": "a", "reasoning": "yes"}', "reasoning must be"),
        ('{"kind": "json_schema", "value": 3}', "JSON Schema object"),
        ('{"kind": "json_schema", "value": {"type": "number", "multipleOf": 3}}', "multipleOf"),
        ('{"kind": "grammar", "value": "start: (", "syntax": "lark"}', "grammar"),
        ('{"kind": "grammar", "value": "start: a", "syntax": "bnf"}', "syntax must be"),
    ],
)
def test_a_bad_argument_is_a_value_error_naming_the_field(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        check_argument({XARGS_KEY: value})
    assert str(info.value).startswith(f"vllm_xargs.{XARGS_KEY}")


def test_read_argument_caches_by_text() -> None:
    text = xargs(LETTERS)[XARGS_KEY]
    assert read_argument(text) is read_argument(text)


# -- V1 runner: BatchUpdate ------------------------------------------------------------------


def test_v1_masks_only_constrained_rows_and_follows_their_tokens() -> None:
    proc = processor()
    out0: list[int] = []
    out2: list[int] = []
    proc.update_state(
        BatchUpdate(
            3,
            added=[
                (0, params(LETTERS), [1, 2], out0),
                (1, params(None), [1], []),
                (2, params(DIGITS), None, out2),
            ],
        )
    )
    logits = torch.zeros(3, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == ids(b"a", b"b", b"ab")
    assert allowed(logits[1]) == set(range(WIDTH))  # untouched
    assert allowed(logits[2]) == ids(b"0", b"1", b"12")
    out0.append(0)  # "a": the engine appends to the live lists
    out2.append(5)  # "12": complete
    proc.update_state(None)
    logits = torch.zeros(3, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == ids(b"a", b"b")
    assert allowed(logits[2]) == {EOS}


def test_v1_remove_move_and_swap_carry_the_matchers() -> None:
    proc = processor()
    outs: list[list[int]] = [[], [], []]
    proc.update_state(
        BatchUpdate(
            3,
            added=[
                (0, params(LETTERS), [], outs[0]),
                (1, params(DIGITS), [], outs[1]),
                (2, params(Regex("x")), [], outs[2]),
            ],
        )
    )
    # request 0 finishes; 2 moves into its place; then 0 <-> 1 swap
    proc.update_state(
        BatchUpdate(
            2,
            removed=[0],
            moved=[(2, 0, Direction.UNIDIRECTIONAL), (0, 1, Direction.SWAP)],
        )
    )
    assert sorted(proc.batch.rows) == [0, 1]
    logits = torch.zeros(2, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == ids(b"0", b"1", b"12")  # DIGITS, now at 0
    assert allowed(logits[1]) == ids(b"x")  # the Regex("x") request, now at 1
    # a new request takes slot 1's index: the old matcher is gone
    proc.update_state(BatchUpdate(2, added=[(1, params(None), [], [])]))
    logits = torch.zeros(2, WIDTH)
    proc.apply(logits)
    assert allowed(logits[1]) == set(range(WIDTH))


def test_v1_placeholders_wait_for_the_real_tokens() -> None:
    proc = processor()
    out: list[int] = []
    proc.update_state(BatchUpdate(1, added=[(0, params(DIGITS), [], out)]))
    out.extend([3, -1])  # "0" and a placeholder (async scheduling)
    logits = torch.zeros(1, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == ids(b"0", b"1")
    out[1] = 4  # "1"
    logits = torch.zeros(1, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == {EOS}


def test_a_rejected_token_holds_the_row_to_eos() -> None:
    proc = processor()
    out: list[int] = []
    proc.update_state(BatchUpdate(1, added=[(0, params(DIGITS), [], out)]))
    out.append(0)  # "a": not a digit (another processor forced it)
    logits = torch.zeros(1, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == {EOS}


def test_compiled_constraints_are_shared_between_requests() -> None:
    batch = ConstrainedBatch(VOCAB)
    first = request_argument(xargs(LETTERS))
    assert first is not None
    batch.add(0, first)
    batch.add(1, first)
    assert len(batch._compiled) == 1
    assert batch.compiled(first) is batch.compiled(first)


# -- reasoning ---------------------------------------------------------------------------------


def test_a_reasoning_row_is_free_until_think_end() -> None:
    proc = processor()
    out: list[int] = []
    proc.update_state(BatchUpdate(1, added=[(0, params(DIGITS, reasoning=True), [0], out)]))
    logits = torch.zeros(1, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == set(range(WIDTH))
    out.extend([0, 9, THINK])
    logits = torch.zeros(1, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == ids(b"0", b"1", b"12")


@pytest.mark.parametrize(
    ("prompt", "free"),
    [([0, THINK, 7, 6], False), ([0, THINK, 0], True), ([0], True)],
    ids=["closed-by-template", "closed-earlier", "open"],
)
def test_reasoning_follows_the_server_default_and_the_prompt(prompt: list[int], free: bool) -> None:
    proc = processor(reasoning_default=True)
    proc.update_state(BatchUpdate(1, added=[(0, params(DIGITS), prompt, [])]))
    logits = torch.zeros(1, WIDTH)
    proc.apply(logits)
    assert (allowed(logits[0]) == set(range(WIDTH))) is free
    proc.update_state(BatchUpdate(1, added=[(0, params(DIGITS, reasoning=False), [0], [])]))
    logits = torch.zeros(1, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == ids(b"0", b"1", b"12")


def test_without_a_think_token_reasoning_constrains_from_the_start() -> None:
    batch = ConstrainedBatch(VOCAB, think_end_token_id=None, reasoning_default=True)
    arg = request_argument(xargs(DIGITS))
    assert arg is not None
    batch.add(0, arg, prompt_ids=[0])
    assert batch.masked_slots([0]) == [0]


# -- V2 runner: slots, row mapping, token history ---------------------------------------------


@dataclasses.dataclass
class Uva:
    np: np.ndarray[Any, Any]


@dataclasses.dataclass
class ReqStates:
    prompt_len: Uva
    all_token_ids: Any


@dataclasses.dataclass
class Ctx:
    idx_mapping_np: np.ndarray[Any, Any]
    input_ids: Any
    pos: Any


def v2_states(prompts: dict[int, list[int]], slots: int = 4) -> ReqStates:
    history = torch.zeros(slots, 32, dtype=torch.int32)
    lens = np.zeros(slots, dtype=np.int32)
    for slot, prompt in prompts.items():
        history[slot, : len(prompt)] = torch.tensor(prompt)
        lens[slot] = len(prompt)
    return ReqStates(Uva(lens), types.SimpleNamespace(gpu=history))


def v2_step(proc: _Processor, rows: list[tuple[int, int, int]]) -> Any:
    """One step: ``rows`` of (slot, fed token, position)."""
    logits = torch.zeros(len(rows), WIDTH)
    ctx = Ctx(
        np.array([r[0] for r in rows], dtype=np.int32),
        torch.tensor([r[1] for r in rows]),
        torch.tensor([r[2] for r in rows]),
    )
    return proc.apply(logits, ctx)


def test_v2_rows_follow_slots_when_the_batch_reorders() -> None:
    states = v2_states({0: [9, 9], 1: [9], 2: [9, 9, 9]})
    proc = processor(states)
    assert proc.add_request(0, params(LETTERS)) is True
    assert proc.add_request(1, params(None)) is False
    assert proc.add_request(2, params(DIGITS)) is True
    # prefill: the fed token is each prompt's last one
    logits = v2_step(proc, [(0, 9, 1), (1, 9, 0), (2, 9, 2)])
    assert allowed(logits[0]) == ids(b"a", b"b", b"ab")
    assert allowed(logits[1]) == set(range(WIDTH))
    assert allowed(logits[2]) == ids(b"0", b"1", b"12")
    # next step, rows reordered: slot 2 fed "1" (output 0), slot 0 fed "a" (output 0)
    logits = v2_step(proc, [(2, 4, 3), (1, 0, 1), (0, 0, 2)])
    assert allowed(logits[0]) == ids(b"0", b"1")
    assert allowed(logits[1]) == set(range(WIDTH))
    assert allowed(logits[2]) == ids(b"a", b"b")


def test_v2_catches_up_from_the_token_history_after_a_resume() -> None:
    states = v2_states({3: [9, 9, 3, 4]})  # prompt [9, 9]; outputs "0", "1" already there
    states.prompt_len.np[3] = 2
    proc = processor(states)
    proc.add_request(3, params(Regex("[0-9]{3}")))
    logits = v2_step(proc, [(3, 4, 3)])  # resumed: fed output 1; output 0 is in the history
    assert allowed(logits[0]) == ids(b"0", b"1")


def test_v2_reads_the_prompt_end_for_reasoning() -> None:
    states = v2_states({0: [9, THINK, 7], 1: [9]})
    proc = processor(states, reasoning_default=True)
    proc.add_request(0, params(DIGITS))
    proc.add_request(1, params(DIGITS))
    logits = v2_step(proc, [(0, 7, 2), (1, 9, 0)])
    assert allowed(logits[0]) == ids(b"0", b"1", b"12")  # the template closed the block
    assert allowed(logits[1]) == set(range(WIDTH))  # thinking


def test_v2_refuses_more_rows_than_requests() -> None:
    proc = processor(v2_states({0: [9]}))
    proc.add_request(0, params(DIGITS))
    ctx = Ctx(np.array([0], np.int32), torch.tensor([9, 9]), torch.tensor([0, 1]))
    with pytest.raises(RuntimeError, match="speculative"):
        proc.apply(torch.zeros(2, WIDTH), ctx)


# -- masks --------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows", [[0, 1, 2], [2, 0], [1]])
def test_mask_rows_is_one_batched_operation_on_the_rows_given(rows: list[int]) -> None:
    words = np.zeros((len(rows), 1), dtype=np.int32)
    for i, row in enumerate(rows):
        words[i, 0] = 1 << row  # row r allows token r
    logits = torch.arange(3 * 40, dtype=torch.float32).reshape(3, 40)
    before = logits.clone()
    out = mask_rows(logits, rows, words)
    assert out is logits
    for r in range(3):
        if r in rows:
            assert allowed(logits[r]) == {r}  # columns past 32 * W are masked too
            assert logits[r, r] == before[r, r]
        else:
            assert torch.equal(logits[r], before[r])


def test_mask_rows_with_nothing_to_mask() -> None:
    logits = torch.zeros(2, 4)
    assert mask_rows(logits, [], np.zeros((0, 1), np.int32)) is logits


def test_step_stats_write_json(tmp_path: Any) -> None:
    path = tmp_path / "stats.json"
    stats = StepStats(str(path), every=2)
    stats.record(0.0, 0.1, 1)
    stats.record(0.2, 0.25, 2)
    stats.record(0.3, 0.35, 0)
    data = json.loads(path.read_text())
    assert data["steps"] == 2
    assert data["masked_rows"] == 2
    assert data["processor_s"] == pytest.approx(0.1)
    assert data["step_s"] == pytest.approx(0.25)


# -- the class vLLM loads ---------------------------------------------------------------------


@pytest.fixture
def fake_vllm() -> Iterator[tuple[type, type]]:
    """Two fake vLLM base classes, as the two loaders check them."""
    import abc

    class V1(abc.ABC):
        @abc.abstractmethod
        def apply(self, logits: Any) -> Any: ...

    class V2(abc.ABC):
        @abc.abstractmethod
        def apply(self, logits: Any, ctx: Any) -> Any: ...

    names = ["vllm.v1.sample.logits_processor", "vllm.v1.worker.gpu.sample.logits_processor"]
    saved = {n: sys.modules.get(n) for n in names}
    for name, base in zip(names, (V1, V2), strict=True):
        sys.modules[name] = types.SimpleNamespace(LogitsProcessor=base)  # type: ignore[assignment]
    try:
        yield V1, V2
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def test_the_class_subclasses_both_interfaces(fake_vllm: tuple[type, type]) -> None:
    cls = _build()
    assert cls.__name__ == "OutlinesLikeLogitsProcessor"
    assert issubclass(cls, fake_vllm[0])
    assert issubclass(cls, fake_vllm[1])
    assert not getattr(cls, "__abstractmethods__", None)
    with pytest.raises(ValueError, match="vllm_xargs"):
        cls.validate_params(Params({XARGS_KEY: "{"}))


def test_the_module_imports_without_vllm() -> None:
    import outlines_like.integrations.vllm as plugin

    assert "vllm" not in sys.modules or not hasattr(sys.modules["vllm"], "__version__")
    with pytest.raises(AttributeError):
        _ = plugin.Nothing  # type: ignore[attr-defined]
    assert _batch.logger.name == "outlines_like.integrations.vllm"


# -- client side --------------------------------------------------------------------------------


def test_adapter_masker_fields() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}
    server = VLLMAdapter("0.32.0")
    ours = VLLMAdapter("0.32.0", masker="outlines_like")
    # xgrammar drops multipleOf: the server dialect sends our regex instead; ours sends the schema
    bounded = JsonSchema(
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}}
    )
    assert "structured_outputs" in server.constraint_fields(bounded, endpoint="chat")["extra_body"]
    fields = ours.constraint_fields(bounded, endpoint="completions")
    assert set(fields) == {"extra_body"}
    assert set(fields["extra_body"]) == {"vllm_xargs"}
    assert ours.dropped_keywords(JsonSchema(schema)) == []
    with pytest.raises(ol.errors.InvalidConstraintError, match="multipleOf"):
        ours.constraint_fields(JsonSchema(schema), endpoint="chat")  # refused before sending
    with pytest.raises(ValueError, match="masker"):
        VLLMAdapter(masker="xgrammar")  # type: ignore[arg-type]


def test_masker_adapter_checks_the_server() -> None:
    assert masker_adapter("vllm", "server") is None
    assert masker_adapter(None, "outlines_like") == VLLMAdapter(masker="outlines_like")
    with pytest.raises(ValueError, match="inside vLLM"):
        masker_adapter("sglang", "outlines_like")
    with pytest.raises(ValueError, match="masker="):
        masker_adapter("vllm", "ours")  # type: ignore[arg-type]


def test_from_server_sends_the_constraint_in_vllm_xargs() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.method != "POST":  # a probe (version, models): not what this test is about
            return httpx2.Response(404, json={"error": {"message": "no route"}})
        bodies.append(json.loads(request.content))
        return httpx2.Response(
            200,
            json={
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "tiny",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ab"},
                        "finish_reason": "stop",
                    }
                ],
            },
        )

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    client = openai.OpenAI(base_url="http://vllm-plugin/v1", api_key="x", http_client=http)
    model = ol.from_server(client, "vllm", model_name="tiny", masker="outlines_like")
    assert model.server == "vllm"
    assert model("x", LETTERS) == "ab"
    assert "structured_outputs" not in bodies[0]
    assert read_argument(bodies[0]["vllm_xargs"][XARGS_KEY]).term == LETTERS
    plain = ol.from_server(client, "vllm", model_name="tiny")
    plain("x", LETTERS)
    assert bodies[1]["structured_outputs"] == {"regex": "[ab]{2}"}


def test_dense_and_sparse_rows_on_the_cpu() -> None:
    width, vocab = 5000, 4990  # a dense row allows more than _SPARSE tokens
    words = np.zeros((2, (vocab + 31) // 32), dtype=np.int32)
    bits = np.zeros((2, words.shape[1] * 32), dtype=np.uint8)
    bits[0, :vocab] = 1
    bits[0, [3, 4000]] = 0  # dense: all but two
    bits[1, [7, 11]] = 1  # sparse: two
    words[:] = np.packbits(bits, axis=1, bitorder="little").view("<i4")
    assert int(bits[0].sum()) > _batch._SPARSE
    logits = torch.randn(3, width)
    before = logits.clone()
    mask_rows(logits, [2, 0], words)
    assert allowed(logits[2]) == set(range(vocab)) - {3, 4000}
    assert allowed(logits[0]) == {7, 11}
    assert torch.equal(logits[0, [7, 11]], before[0, [7, 11]])
    assert torch.equal(logits[1], before[1])


# -- closing within max_tokens ----------------------------------------------------------------


@dataclasses.dataclass
class LimitedParams:
    extra_args: dict[str, Any] | None = None
    max_tokens: int | None = None


def test_rows_close_within_their_max_tokens() -> None:
    """``a|b{4}`` with 2 tokens: ``b`` could not close (3 more needed), so only ``a`` is left."""
    proc = processor()
    term = Regex("a|b{4}")
    proc.update_state(
        BatchUpdate(
            2,
            added=[
                (0, LimitedParams(xargs(term), max_tokens=2), [1], []),
                (1, LimitedParams(xargs(term), max_tokens=None), [1], []),
            ],
        )
    )
    logits = torch.zeros(2, WIDTH)
    proc.apply(logits)
    assert allowed(logits[0]) == ids(b"a")
    assert allowed(logits[1]) == ids(b"a", b"b")
    assert proc.add_request(3, LimitedParams(xargs(term), max_tokens=2)) is True
    matcher = proc.batch.rows[3].matcher
    assert matcher is not None
    assert getattr(matcher, "left", None) == 2


def test_validate_params_refuses_a_max_tokens_below_the_shortest_answer() -> None:
    batch = ConstrainedBatch(VOCAB, think_end_token_id=THINK)
    args = xargs(Regex("b{3}"))  # three "b" tokens at least
    check_argument(args, max_tokens=3, batch=batch)
    with pytest.raises(ValueError, match=r"vllm_xargs.outlines_like: max_tokens=2 cannot fit"):
        check_argument(args, max_tokens=2, batch=batch)
    check_argument(args, max_tokens=2)  # no vocabulary in this process: nothing to measure
    vllm_module = sys.modules["outlines_like.integrations.vllm"]
    vllm_module._LOADED[:] = [batch]  # type: ignore[attr-defined]
    try:
        with pytest.raises(ValueError, match="max_tokens=2 cannot fit"):
            _Processor.validate_params(LimitedParams(args, max_tokens=2))
    finally:
        vllm_module._LOADED[:] = []  # type: ignore[attr-defined]
