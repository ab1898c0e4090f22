"""Property tests: masks against a brute-force reference, walks, valid strings under many splits.

Random regexes over a tiny alphabet (``a``, ``b`` and the two-byte ``é``) meet a tiny vocabulary
whose tokens split ``é`` across tokens. The reference is the ``regex`` module's partial
matching on bytes: a token is allowed iff the text so far plus the token can still be
extended to a full match; EOS iff the text so far is a full match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.fsm import RegexCompiled, RejectedTokenError, Vocabulary, compile_regex
from outlines_like.fsm.regex_dfa import compile_regex_auto

regex_mod = pytest.importorskip("regex")

TOKENS = [
    b"a",
    b"b",
    b"\xc3",
    b"\xa9",
    b"ab",
    b"ba",
    b"aa",
    b"bb",
    b"a\xc3",
    b"\xc3\xa9",
    b"\xa9a",
    b"\xa9b",
    b"aba",
    b"\xc3\xa9\xc3\xa9",
    b"<s>",
    b"<eos>",
]
SPECIAL = 14
EOS = 15
VOCAB = Vocabulary(TOKENS, [EOS], [SPECIAL])
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Pattern:
    text: str  # for compile_regex / re
    raw: bytes  # the same language for the ``regex`` module, on bytes


LEAVES = [
    Pattern("a", b"a"),
    Pattern("b", b"b"),
    Pattern("é", b"(?:\xc3\xa9)"),
    Pattern("[ab]", b"[ab]"),
    Pattern("(?:a|é)", b"(?:a|\xc3\xa9)"),
]


def _combine(children: st.SearchStrategy[Pattern]) -> st.SearchStrategy[Pattern]:
    def cat(p: tuple[Pattern, Pattern]) -> Pattern:
        return Pattern(
            f"(?:{p[0].text})(?:{p[1].text})", b"(?:" + p[0].raw + b")(?:" + p[1].raw + b")"
        )

    def alt(p: tuple[Pattern, Pattern]) -> Pattern:
        return Pattern(f"(?:{p[0].text}|{p[1].text})", b"(?:" + p[0].raw + b"|" + p[1].raw + b")")

    def rep(p: tuple[Pattern, str]) -> Pattern:
        return Pattern(f"(?:{p[0].text}){p[1]}", b"(?:" + p[0].raw + b")" + p[1].encode())

    quant = st.sampled_from(["*", "+", "?", "{2}", "{0,2}", "{1,3}", "{2,}"])
    return st.one_of(
        st.tuples(children, children).map(cat),
        st.tuples(children, children).map(alt),
        st.tuples(children, quant).map(rep),
    )


patterns = st.recursive(st.sampled_from(LEAVES), _combine, max_leaves=6)


def reference_allowed(raw: bytes, prefix: bytes) -> list[int]:
    allowed = [
        i
        for i, tok in enumerate(TOKENS)
        if i not in (SPECIAL, EOS) and regex_mod.fullmatch(raw, prefix + tok, partial=True)
    ]
    if regex_mod.fullmatch(raw, prefix):
        allowed.append(EOS)
    return allowed


def mask_of(m: object) -> list[int]:
    out = np.full(VOCAB.mask_words, -1, dtype=np.int32)
    m.fill_bitmask(out)  # type: ignore[attr-defined]
    return [i for i in range(len(TOKENS)) if (int(out[i // 32]) >> (i % 32)) & 1]


@SETTINGS
@given(pattern=patterns, data=st.data())
def test_masks_equal_brute_force_along_random_walks(pattern: Pattern, data: st.DataObject) -> None:
    for dfa in (compile_regex(pattern.text), compile_regex_auto(pattern.text, eager_nfa_limit=0)):
        m = RegexCompiled(dfa, VOCAB).matcher()
        text = b""
        for _ in range(8):
            expected = reference_allowed(pattern.raw, text)
            assert mask_of(m) == expected, (pattern.text, text)
            assert m.allowed_token_ids().tolist() == expected
            if not expected:
                break
            tok = data.draw(st.sampled_from(expected))
            m.advance(tok)
            if tok == EOS:
                assert re.fullmatch(pattern.text, text.decode())
                assert m.is_finished()
                break
            text += TOKENS[tok]


@SETTINGS
@given(pattern=patterns, data=st.data())
def test_disallowed_tokens_are_rejected_without_changing_state(
    pattern: Pattern, data: st.DataObject
) -> None:
    m = RegexCompiled(compile_regex(pattern.text), VOCAB).matcher()
    allowed = set(m.allowed_token_ids().tolist())
    for tok in range(len(TOKENS)):
        if tok in allowed:
            continue
        with pytest.raises(RejectedTokenError):
            m.advance(tok)
        assert set(m.allowed_token_ids().tolist()) == allowed


def _tokenize_greedy(data: bytes) -> list[int]:
    by_len = sorted(
        (i for i in range(len(TOKENS)) if i not in (SPECIAL, EOS)), key=lambda i: -len(TOKENS[i])
    )
    out, pos = [], 0
    while pos < len(data):
        tok = next(i for i in by_len if data.startswith(TOKENS[i], pos))
        out.append(tok)
        pos += len(TOKENS[tok])
    return out


def _tokenize_random(data: bytes, draw: st.DataObject) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        fits = [
            i
            for i in range(len(TOKENS))
            if i not in (SPECIAL, EOS) and data.startswith(TOKENS[i], pos)
        ]
        tok = draw.draw(st.sampled_from(fits))
        out.append(tok)
        pos += len(TOKENS[tok])
    return out


@SETTINGS
@given(pattern=patterns, data=st.data())
def test_valid_strings_are_never_rejected_under_any_tokenization(
    pattern: Pattern, data: st.DataObject
) -> None:
    compiled = RegexCompiled(compile_regex(pattern.text), VOCAB)
    text = data.draw(st.from_regex(pattern.text, fullmatch=True).filter(lambda s: len(s) < 12))
    raw = text.encode()
    splits = [
        [TOKENS.index(bytes([b])) for b in raw],
        _tokenize_greedy(raw),
        _tokenize_random(raw, data),
    ]
    for ids in splits:
        m = compiled.matcher()
        for tok in ids:
            assert tok in m.allowed_token_ids().tolist(), (pattern.text, text, ids)
            m.advance(tok)
        m.advance(EOS)
        assert m.is_finished()


@SETTINGS
@given(pattern=patterns)
def test_dfa_language_equals_re_on_short_strings(pattern: Pattern) -> None:
    dfa = compile_regex(pattern.text)
    alphabet = ["a", "b", "é"]
    frontier = [""]
    for _ in range(4):
        nxt: list[str] = []
        for s in frontier:
            assert dfa.fullmatch(s.encode()) == bool(re.fullmatch(pattern.text, s)), s
            nxt.extend(s + c for c in alphabet)
        frontier = nxt
