"""The masker on real vocabularies (llama3, qwen3 from ``quicktok-v1``), against xgrammar's masks.

Run with ``pytest -m vocab`` (skipped otherwise). Vocabularies load from the ``quicktok-v1``
package (bundled, no download); xgrammar is a test-only reference, skipped when missing.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import numpy as np
import pytest

from outlines_like.fsm import RegexCompiled, Vocabulary, _accel, compile_constraint
from outlines_like.fsm.index import TokenIndex
from outlines_like.fsm.regex_dfa import compile_regex_auto
from outlines_like.types import JsonSchema, Regex, to_regex

pytestmark = pytest.mark.vocab


EOS_TOKEN = {"llama3": "<|eot_id|>", "qwen3": "<|endoftext|>"}

# the harness's regex cases: (pattern, a valid sample)
REGEXES = {
    "integer": (r"-?(0|[1-9][0-9]*)", "-1234567"),
    "float": (r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?", "-3.14159e+10"),
    "email": (
        r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9-]+(\.[a-zA-Z0-9-]+)*\.[a-zA-Z]{2,}",
        "john.doe+bench@mail-server.example.co.uk",
    ),
    "iso_datetime": (
        r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
        r"T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?"
        r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
        "2024-02-29T13:45:07.123+05:30",
    ),
    "us_phone": (r"(\+1 )?\(?[0-9]{3}\)?[ .-]?[0-9]{3}[ .-]?[0-9]{4}", "+1 (555) 867-5309"),
    "ssn": (r"\d{3}-\d{2}-\d{4}", "078-05-1120"),
    "uuid4": (
        r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
        "3f2b8c1e-9d4a-4e7b-8a6c-1f0e2d3c4b5a",
    ),
    "unicode": (r"(café|naïve|日本語)+ ?[€$]", "日本語café €"),
}


INEXACT_IN_XGRAMMAR = {"unicode"}


@functools.cache
def load(name: str) -> tuple[Vocabulary, Any]:
    quicktok = pytest.importorskip("quicktok")
    enc = quicktok.get_encoding(name)
    tokens = [enc.decode_single_token_bytes(i) for i in range(enc.n_vocab)]
    special = [enc.encode_single_token(s) for s in enc.special_tokens_set]
    eos = enc.encode_single_token(EOS_TOKEN[name])
    return Vocabulary(tokens, [eos], special), enc


@functools.cache
def xgrammar_compiler(name: str) -> Any:
    xgr = pytest.importorskip("xgrammar")
    vocab, _ = load(name)
    encoded = [b"" if i in vocab.special_token_ids else t for i, t in enumerate(vocab.tokens)]
    info = xgr.TokenizerInfo(
        encoded, xgr.VocabType.RAW, vocab_size=vocab.size, stop_token_ids=list(vocab.eos_token_ids)
    )
    return xgr.GrammarCompiler(info, max_threads=1)


def bits(row: np.ndarray, size: int) -> np.ndarray:
    unpacked = np.unpackbits(row.reshape(-1).view(np.uint8), bitorder="little")
    return np.flatnonzero(unpacked[:size])


@pytest.fixture(params=["llama3", "qwen3"])
def vocab_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("case", sorted(REGEXES))
def test_sample_walk_is_accepted_and_specials_never_allowed(vocab_name: str, case: str) -> None:
    vocab, enc = load(vocab_name)
    pattern, sample = REGEXES[case]
    compiled = compile_constraint(Regex(pattern), vocab)
    m = compiled.matcher()
    out = np.zeros(vocab.mask_words, dtype=np.int32)
    specials = np.array(sorted(vocab.special_token_ids - set(vocab.eos_token_ids)))
    text = b""
    for tok in [*enc.encode_ordinary(sample), vocab.eos_token_ids[0]]:
        m.fill_bitmask(out)
        allowed = bits(out, vocab.size)
        assert tok in allowed, (case, text)
        assert not np.isin(specials, allowed).any()
        m.advance(tok)
        text += vocab.tokens[tok] if tok not in vocab.eos_token_ids else b""
    assert m.is_finished()
    assert re.fullmatch(pattern, text.decode(), re.ASCII)


@pytest.mark.parametrize("case", sorted(REGEXES))
def test_masks_bit_identical_to_xgrammar(vocab_name: str, case: str) -> None:
    vocab, enc = load(vocab_name)
    xgr = pytest.importorskip("xgrammar")
    pattern, sample = REGEXES[case]
    ours = compile_constraint(Regex(pattern), vocab).matcher()
    theirs = xgr.GrammarMatcher(xgrammar_compiler(vocab_name).compile_regex(pattern))
    a = np.zeros((1, vocab.mask_words), dtype=np.int32)
    b = np.zeros((1, vocab.mask_words), dtype=np.int32)
    for step, tok in enumerate([*enc.encode_ordinary(sample), vocab.eos_token_ids[0]]):
        ours.fill_bitmask(a)
        theirs.fill_next_token_bitmask(b, 0)
        if case in INEXACT_IN_XGRAMMAR:
            # xgrammar lets tokens ending in any partial UTF-8 character through (for example
            # b" \xe0" where only "€" = E2 82 AC may follow); ours must be a subset
            assert np.isin(bits(a, vocab.size), bits(b, vocab.size)).all()
        elif not np.array_equal(a, b):
            only_ours = np.setdiff1d(bits(a, vocab.size), bits(b, vocab.size))[:10]
            only_theirs = np.setdiff1d(bits(b, vocab.size), bits(a, vocab.size))[:10]
            pytest.fail(f"{case} step {step}: only ours {only_ours}, only xgrammar {only_theirs}")
        ours.advance(tok)
        assert theirs.accept_token(tok)


JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
JSON_SAMPLE = json.dumps({"name": "Zoë Ω", "age": 31, "tags": ["a b", "日本"]}, ensure_ascii=False)
# a string long enough for its later positions to share one row (a token of llama3's or
# qwen3's cannot reach its end from them), with escapes and characters of every length
LONG_SCHEMA = {
    "type": "object",
    "properties": {"note": {"type": "string", "maxLength": 400}, "n": {"type": "integer"}},
    "required": ["note", "n"],
    "additionalProperties": False,
}
LONG_SAMPLE = json.dumps(
    {"note": 'Moved to Zürich in 2019 — then "Lyon";\n日本 😀 ' * 3 + "end.", "n": 7},
    ensure_ascii=False,
)


@pytest.mark.skipif(not _accel.available(), reason="numba is not installed (the accel extra)")
@pytest.mark.parametrize("case", [*sorted(REGEXES), "json", "json_long"])
def test_compiled_walk_masks_equal_the_pure_walk(vocab_name: str, case: str) -> None:
    vocab, enc = load(vocab_name)
    if case == "json":
        pattern = to_regex(JsonSchema(JSON_SCHEMA, whitespace_pattern="[ ]?"))
        sample = JSON_SAMPLE
    elif case == "json_long":
        pattern = to_regex(JsonSchema(LONG_SCHEMA, whitespace_pattern="[ ]?"))
        sample = LONG_SAMPLE
    else:
        pattern, sample = REGEXES[case]
    indexes = []
    for accel in (False, True):
        _accel.set_enabled(accel)
        try:
            # a lazy DFA for the JSON Schema (states built as the walk reaches them)
            dfa = compile_regex_auto(pattern, eager_nfa_limit=0 if "json" in case else 3000)
            indexes.append(TokenIndex(dfa, vocab))
        finally:
            _accel.set_enabled(None)
    pure, fast = indexes
    ps, fs = pure.dfa.start, fast.dfa.start
    for step, tok in enumerate(enc.encode_ordinary(sample)):
        pr, fr = pure.row(ps), fast.row(fs)
        np.testing.assert_array_equal(pr.mask, fr.mask, err_msg=f"{case} step {step}")
        ps, fs = pr.next_state(tok), fr.next_state(tok)
        assert ps >= 0
        assert fs >= 0
    np.testing.assert_array_equal(pure.row(ps).mask, fast.row(fs).mask)
    if case == "json_long":  # the later positions of the note shared one row
        assert fast._shifted


def test_json_schema_walk(vocab_name: str) -> None:
    vocab, enc = load(vocab_name)
    compiled = compile_constraint(JsonSchema(JSON_SCHEMA, whitespace_pattern="[ ]?"), vocab)
    assert isinstance(compiled, RegexCompiled)
    m = compiled.matcher()
    out = np.zeros(vocab.mask_words, dtype=np.int32)
    for tok in [*enc.encode_ordinary(JSON_SAMPLE), vocab.eos_token_ids[0]]:
        m.fill_bitmask(out)
        assert (int(out[tok // 32]) >> (tok % 32)) & 1
        m.advance(tok)
    assert m.is_finished()


def test_free_text_allows_all_but_specials(vocab_name: str) -> None:
    vocab, _ = load(vocab_name)
    ids = compile_constraint(None, vocab).matcher().allowed_token_ids()
    assert ids.shape[0] == vocab.size - len(vocab.special_token_ids) + len(vocab.eos_token_ids)
