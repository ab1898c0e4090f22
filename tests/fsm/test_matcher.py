"""Matchers: masks along walks, EOS, the rejection contract, bitmask layouts, copy and reset."""

from __future__ import annotations

import numpy as np
import pytest

from outlines_like.fsm import (
    FreeTextCompiled,
    Matcher,
    RegexCompiled,
    RejectedTokenError,
    Vocabulary,
    compile_regex,
)


def compiled_for(pattern: str, tokens: list[bytes], eos: list[int], special=()) -> RegexCompiled:  # type: ignore[no-untyped-def]
    return RegexCompiled(compile_regex(pattern), Vocabulary(tokens, eos, special))


def mask_ids(m: Matcher, words: int) -> list[int]:
    out = np.full(words, -1, dtype=np.int32)
    m.fill_bitmask(out)
    return [i for i in range(words * 32) if (int(out[i // 32]) >> (i % 32)) & 1]


def test_outlines_core_final_state_bug_does_not_happen() -> None:
    # outlines-core drops "x" after "3" because "3" is already a full match
    c = compiled_for(r"3(x5)?", [b"3", b"x", b"5", b"<eos>"], [3])
    m = c.matcher()
    assert m.allowed_token_ids().tolist() == [0]
    m.advance(0)
    assert m.allowed_token_ids().tolist() == [1, 3]
    m.advance(1)
    assert m.allowed_token_ids().tolist() == [2]
    m.advance(2)
    assert m.allowed_token_ids().tolist() == [3]
    m.advance(3)
    assert m.is_finished()


FLOAT = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"


@pytest.mark.parametrize(
    ("pattern", "tokens", "walk"),
    [
        (FLOAT, [b"-", b"3", b".", b"141", b"59", b"e", b"+", b"10"], [0, 1, 2, 3, 4, 5, 6, 7]),
        (r"[0-9]{4}-[0-9]{2}", [b"20", b"26", b"-", b"11", b"2026-"], [4, 3]),
        (r"café", [b"ca", b"f\xc3", b"\xa9"], [0, 1, 2]),
        (r"(ab)*", [b"a", b"b", b"ab"], [0, 1, 2, 0, 1]),
    ],
)
def test_walk_is_accepted_and_masks_agree_with_advance(
    pattern: str, tokens: list[bytes], walk: list[int]
) -> None:
    eos = len(tokens)
    c = compiled_for(pattern, [*tokens, b"</s>"], [eos])
    m = c.matcher()
    for tok in walk:
        allowed = m.allowed_token_ids().tolist()
        assert allowed == mask_ids(m, c.words)
        assert tok in allowed
        m.advance(tok)
    assert eos in m.allowed_token_ids().tolist()
    m.advance(eos)
    assert m.is_finished()


def test_rejection_leaves_the_state_unchanged() -> None:
    c = compiled_for(r"ab", [b"a", b"b", b"<eos>"], [2])
    m = c.matcher()
    m.advance(0)
    before = m.allowed_token_ids().tolist()
    with pytest.raises(RejectedTokenError) as info:
        m.advance(0)
    assert info.value.token_id == 0
    assert isinstance(info.value, ValueError)
    assert "b'a'" in str(info.value)
    assert m.allowed_token_ids().tolist() == before
    m.advance(1)
    m.advance(2)
    assert m.is_finished()


@pytest.mark.parametrize("token_id", [-1, 3, 10**6])
def test_out_of_range_tokens_are_rejected(token_id: int) -> None:
    c = compiled_for(r"a+", [b"a", b"b", b"<eos>"], [2])
    with pytest.raises(RejectedTokenError, match="not allowed"):
        c.matcher().advance(token_id)


def test_eos_only_when_complete_and_finished_allows_only_eos() -> None:
    c = compiled_for(r"aa", [b"a", b"<eos>", b"<|end|>"], [1, 2])
    m = c.matcher()
    with pytest.raises(RejectedTokenError, match="EOS"):
        m.advance(1)
    assert not m.is_finished()
    m.advance(0)
    assert not m.is_accepting()
    m.advance(0)
    assert m.is_accepting()
    assert m.allowed_token_ids().tolist() == [1, 2]
    m.advance(2)
    assert m.is_finished()
    assert m.allowed_token_ids().tolist() == [1, 2]
    assert mask_ids(m, c.words) == [1, 2]
    m.advance(1)  # EOS again: no-op
    with pytest.raises(RejectedTokenError, match="finished"):
        m.advance(0)


def test_special_tokens_are_never_allowed() -> None:
    # <pad> spells "a", which the regex would accept as text
    c = compiled_for(r"a*", [b"a", b"a", b"<eos>"], [2], special=[1])
    m = c.matcher()
    assert m.allowed_token_ids().tolist() == [0, 2]
    with pytest.raises(RejectedTokenError, match="special"):
        m.advance(1)


def test_fill_bitmask_layouts() -> None:
    tokens = [b"x"] * 40 + [b"a", b"<eos>"]
    c = compiled_for(r"a", tokens, [41])
    m = c.matcher()
    assert c.words == 2
    flat = np.full(2, -1, dtype=np.int32)
    m.fill_bitmask(flat)
    row = np.full((1, 2), -1, dtype=np.int32)
    m.fill_bitmask(row)
    batch = np.full((3, 2), -1, dtype=np.int32)
    m.fill_bitmask(batch[1])
    expected = [0, 1 << (40 - 32)]
    assert flat.tolist() == expected
    assert row.tolist() == [expected]
    assert batch.tolist() == [[-1, -1], expected, [-1, -1]]


@pytest.mark.parametrize(
    "out",
    [np.zeros(2, dtype=np.int64), np.zeros(3, dtype=np.int32), np.zeros((2, 2), dtype=np.int32)],
)
def test_fill_bitmask_rejects_wrong_arrays(out: np.ndarray) -> None:
    c = compiled_for(r"a", [b"x"] * 40 + [b"a", b"<eos>"], [41])
    with pytest.raises(ValueError, match="int32 array of 2 words"):
        c.matcher().fill_bitmask(out)


def test_copy_is_independent_and_reset_restarts() -> None:
    c = compiled_for(r"ab|acc", [b"a", b"b", b"c", b"<eos>"], [3])
    m = c.matcher()
    m.advance(0)
    fork = m.copy()
    m.advance(1)
    fork.advance(2)
    assert m.state != fork.state
    m.advance(3)
    assert m.is_finished()
    assert not fork.is_finished()
    m.reset()
    assert not m.is_finished()
    assert m.allowed_token_ids().tolist() == [0]


def test_matchers_share_the_compiled_rows() -> None:
    c = compiled_for(r"[ab]+", [b"a", b"b", b"<eos>"], [2])
    m1, m2 = c.matcher(), c.matcher()
    m1.allowed_token_ids()
    computed = c.index.computed_states
    m2.allowed_token_ids()
    assert c.index.computed_states == computed


def test_both_matchers_satisfy_the_protocol() -> None:
    vocab = Vocabulary([b"a", b"<eos>"], [1])
    assert isinstance(RegexCompiled(compile_regex("a"), vocab).matcher(), Matcher)
    assert isinstance(FreeTextCompiled(vocab).matcher(), Matcher)


def test_free_text_allows_everything_but_specials() -> None:
    vocab = Vocabulary([b"a", b"", b"<pad>", b"b", b"<eos>"], [4], [2])
    m = FreeTextCompiled(vocab).matcher()
    assert m.allowed_token_ids().tolist() == [0, 3, 4]
    assert mask_ids(m, 1) == [0, 3, 4]
    m.advance(0)
    with pytest.raises(RejectedTokenError):
        m.advance(2)
    with pytest.raises(RejectedTokenError):
        m.advance(1)
    fork = m.copy()
    m.advance(4)
    assert m.is_finished()
    assert not fork.is_finished()
    assert m.allowed_token_ids().tolist() == [4]
    with pytest.raises(RejectedTokenError, match="finished"):
        m.advance(0)
    m.reset()
    assert not m.is_finished()
