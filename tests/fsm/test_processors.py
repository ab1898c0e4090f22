"""LogitsProcessor: masks on tiny vocabularies, torch CPU and numpy, batched rows, prompt length."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from outlines_like.fsm.processors import LogitsProcessor, apply_token_bitmask, bitmask_words

# A tiny vocabulary: id -> bytes; id 5 is EOS.
TOKENS = [b"a", b"b", b"ab", b"ba", b"c", b"<eos>"]
EOS = 5


@dataclasses.dataclass
class _Vocab:
    tokens: list[bytes]

    def __len__(self) -> int:
        return len(self.tokens)


class _PrefixMatcher:
    """Accepts exactly one of ``targets`` (bytes), then EOS; follows the masker's contract."""

    def __init__(self, targets: tuple[bytes, ...]) -> None:
        self.targets = targets
        self.text = b""
        self.finished = False

    def _allowed(self) -> list[int]:
        if self.finished:
            return [EOS]
        out = []
        for i, tok in enumerate(TOKENS[:EOS]):
            if any(t.startswith(self.text + tok) for t in self.targets):
                out.append(i)
        if self.text in self.targets:
            out.append(EOS)
        return out

    def fill_bitmask(self, out: npt.NDArray[np.int32]) -> None:
        out[...] = 0
        flat = out.reshape(-1).view(np.uint32)
        for i in self._allowed():
            flat[i // 32] |= np.uint32(1 << (i % 32))

    def allowed_token_ids(self) -> npt.NDArray[np.int32]:
        return np.array(self._allowed(), dtype=np.int32)

    def advance(self, token_id: int) -> None:
        if token_id not in self._allowed():
            raise ValueError(f"token {token_id} rejected")
        if token_id == EOS:
            self.finished = True
        else:
            self.text += TOKENS[token_id]

    def is_finished(self) -> bool:
        return self.finished

    def reset(self) -> None:
        self.text, self.finished = b"", False

    def copy(self) -> _PrefixMatcher:
        other = _PrefixMatcher(self.targets)
        other.text, other.finished = self.text, self.finished
        return other


class _Compiled:
    def __init__(self, *targets: bytes) -> None:
        self.targets = targets
        self.vocabulary = _Vocab(TOKENS)
        self.created = 0

    def matcher(self) -> _PrefixMatcher:
        self.created += 1
        return _PrefixMatcher(self.targets)


def _allowed_np(scores: npt.NDArray[np.floating[Any]]) -> list[list[int]]:
    return [sorted(np.flatnonzero(np.isfinite(row)).tolist()) for row in scores]


@pytest.mark.parametrize(
    ("targets", "generated", "expected"),
    [
        ((b"ab",), [], [0, 2]),
        ((b"ab",), [0], [1]),
        ((b"ab",), [2], [EOS]),
        ((b"ab", b"abc"), [2], [4, EOS]),
        ((b"c",), [4, EOS], [EOS]),
        ((b"ba", b"c"), [], [1, 3, 4]),
    ],
)
def test_numpy_masks_follow_the_matcher(
    targets: tuple[bytes, ...], generated: list[int], expected: list[int]
) -> None:
    proc = LogitsProcessor(_Compiled(*targets))  # type: ignore[arg-type]
    prompt = [9, 9, 9]
    # first call: prompt only; then one call per generated token
    ids = list(prompt)
    scores = np.zeros((1, 8), dtype=np.float32)  # 8 columns: ids 6, 7 are padding
    proc(np.array([ids]), scores)
    for tok in generated:
        ids.append(tok)
        scores = np.zeros((1, 8), dtype=np.float32)
        proc(np.array([ids]), scores)
    assert _allowed_np(scores) == [expected]
    assert proc.prompt_length == len(prompt)


@pytest.mark.torch
def test_torch_batched_rows_have_their_own_matchers() -> None:
    torch = pytest.importorskip("torch")
    compiled = _Compiled(b"ab", b"ba")
    proc = LogitsProcessor(compiled)  # type: ignore[arg-type]
    ids = torch.tensor([[7, 7], [7, 7]])
    scores = torch.zeros((2, 6))
    out = proc(ids, scores)
    assert out is scores  # in place
    assert compiled.created == 2
    ids = torch.tensor([[7, 7, 0], [7, 7, 1]])
    scores = torch.zeros((2, 6))
    proc(ids, scores)
    allowed = [torch.isfinite(r).nonzero().flatten().tolist() for r in scores]
    assert allowed == [[1], [0]]
    # the prompt tokens (7, not in the vocabulary's grammar) were never fed
    assert [m.text for m in proc.matchers] == [b"a", b"b"]  # type: ignore[attr-defined]


@pytest.mark.torch
def test_rows_that_finished_ignore_padding() -> None:
    torch = pytest.importorskip("torch")
    proc = LogitsProcessor(_Compiled(b"c", b"ab"))  # type: ignore[arg-type]
    proc(torch.tensor([[1], [1]]), torch.zeros((2, 6)))
    proc(torch.tensor([[1, 4], [1, 0]]), torch.zeros((2, 6)))
    proc(torch.tensor([[1, 4, EOS], [1, 0, 1]]), torch.zeros((2, 6)))
    scores = torch.zeros((2, 6))
    # generate() pads the finished row with a pad id (0 here) that the matcher never sees
    proc(torch.tensor([[1, 4, EOS, 0], [1, 0, 1, EOS]]), scores)
    assert [torch.isfinite(r).nonzero().flatten().tolist() for r in scores] == [[EOS], [EOS]]


def test_a_shorter_call_starts_a_new_generation() -> None:
    compiled = _Compiled(b"ab")
    proc = LogitsProcessor(compiled)  # type: ignore[arg-type]
    proc(np.array([[3, 3]]), np.zeros((1, 6)))
    proc(np.array([[3, 3, 0]]), np.zeros((1, 6)))
    scores = np.zeros((1, 6))
    proc(np.array([[3]]), scores)  # a new prompt
    assert proc.prompt_length == 1
    assert _allowed_np(scores) == [[0, 2]]
    assert compiled.created == 2


def test_reasoning_mode_leaves_think_free_then_constrains() -> None:
    think_end = 4  # pretend "c" is </think>
    proc = LogitsProcessor(_Compiled(b"ab"), think_end_token_id=think_end)  # type: ignore[arg-type]
    scores = np.zeros((1, 8))
    proc(np.array([[9]]), scores)
    assert _allowed_np(scores) == [[0, 1, 2, 3, 4, 5]]  # free, but not the padded ids 6, 7
    proc(np.array([[9, 1]]), np.zeros((1, 8)))
    scores = np.zeros((1, 8))
    proc(np.array([[9, 1, think_end]]), scores)
    assert _allowed_np(scores) == [[0, 2]]


def test_one_dimensional_inputs() -> None:
    proc = LogitsProcessor(_Compiled(b"ba"))  # type: ignore[arg-type]
    scores = np.zeros(6)
    proc(np.array([2, 2]), scores)
    assert sorted(np.flatnonzero(np.isfinite(scores)).tolist()) == [1, 3]


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ("scores", "columns"),
        ("rows", "rows"),
    ],
)
def test_bad_shapes_are_named(bad: str, match: str) -> None:
    proc = LogitsProcessor(_Compiled(b"a"))  # type: ignore[arg-type]
    ids = np.zeros((1, 2), dtype=np.int64)
    scores = np.zeros((1, 6))
    if bad == "scores":
        scores = np.zeros((1, 4))
    else:
        ids = np.zeros((2, 2), dtype=np.int64)
    with pytest.raises(ValueError, match=match):
        proc(ids, scores)


def test_not_a_compiled_constraint() -> None:
    with pytest.raises(TypeError, match="compiled constraint"):
        LogitsProcessor("[0-9]+")  # type: ignore[arg-type]


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 64, 100])
def test_apply_token_bitmask_numpy_matches_torch(vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    words = rng.integers(-(2**31), 2**31 - 1, size=(3, bitmask_words(vocab)), dtype=np.int64)
    words32 = words.astype(np.int32)
    expected = [
        [(int(words32[r, i // 32]) >> (i % 32)) & 1 == 1 for i in range(vocab)] for r in range(3)
    ]
    s_np = np.zeros((3, vocab), dtype=np.float32)
    apply_token_bitmask(s_np, words32)
    assert np.isfinite(s_np).tolist() == expected
    torch = pytest.importorskip("torch")
    s_t = torch.zeros((3, vocab))
    apply_token_bitmask(s_t, torch.from_numpy(words32))
    assert torch.isfinite(s_t).tolist() == expected


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any, Any]:
    """``(transformers, tokenizer, model)`` of the tiny model, loaded once for this module."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from outlines_like.server.tiny import build_tiny_model

    transformers.utils.logging.disable_progress_bar()
    path = str(build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-cache"))
    tok = transformers.AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    return transformers, tok, model


@pytest.mark.torch
@pytest.mark.parametrize(
    "pattern", [r"[a-z]{3}-[0-9]{2}", r"(yes|no|maybe)", r"\{\"n\":[0-9]\}", r"[0-9]{2,4}"]
)
def test_transformers_generate_with_the_real_masker(
    tiny_hf: tuple[Any, Any, Any], pattern: str
) -> None:
    import re

    import torch

    from outlines_like.fsm import Vocabulary, compile_constraint
    from outlines_like.types import Regex

    transformers, tok, model = tiny_hf
    compiled = compile_constraint(Regex(pattern), Vocabulary.from_transformers(tok))
    proc = LogitsProcessor(compiled)
    prompts = ["hello", "the answer is a long prompt"]
    inputs = tok(prompts, return_tensors="pt", padding=True)
    torch.manual_seed(0)
    out = model.generate(
        **inputs,
        logits_processor=transformers.LogitsProcessorList([proc]),
        max_new_tokens=30,
        do_sample=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    assert proc.prompt_length == inputs["input_ids"].shape[1]
    for row in out[:, inputs["input_ids"].shape[1] :]:
        text = tok.decode(row, skip_special_tokens=True)
        assert re.fullmatch(pattern, text), text
    # generate() stops after sampling the last EOS, so it is never fed back to the matchers
    assert len(proc.matchers) == 2


@pytest.mark.torch
@pytest.mark.parametrize("extra", [0, 4])
def test_transformers_generate_closes_within_max_new_tokens(
    tiny_hf: tuple[Any, Any, Any], extra: int
) -> None:
    """``LogitsProcessor(max_tokens=max_new_tokens)``: a long regex still ends complete."""
    import re

    import torch

    from outlines_like.fsm import Vocabulary, compile_constraint
    from outlines_like.fsm.closing import shortest_document_tokens
    from outlines_like.types import Regex

    transformers, tok, model = tiny_hf
    pattern = r"\[([a-z]+, )*[a-z]+\]"
    compiled = compile_constraint(Regex(pattern), Vocabulary.from_transformers(tok))
    need = shortest_document_tokens(compiled)
    assert need is not None
    proc = LogitsProcessor(compiled, max_tokens=need + extra)
    inputs = tok(["hello", "a longer prompt"], return_tensors="pt", padding=True)
    torch.manual_seed(extra)
    out = model.generate(
        **inputs,
        logits_processor=transformers.LogitsProcessorList([proc]),
        max_new_tokens=need + extra,
        do_sample=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    for row in out[:, inputs["input_ids"].shape[1] :]:
        text = tok.decode(row, skip_special_tokens=True)
        assert re.fullmatch(pattern, text), text
