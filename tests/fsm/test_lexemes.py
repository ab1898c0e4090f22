"""Lexeme sets: string-body rows read from the vocabulary's shared sets equal the plain walk."""

from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest

import outlines_like.fsm.index as index_mod
from outlines_like.fsm import Vocabulary
from outlines_like.fsm.index import (
    JSON_STRING_BODY,
    TokenIndex,
    prepare_vocabulary,
    token_table,
)
from outlines_like.fsm.regex_dfa import _build, compile_regex, compile_regex_auto

TOKENS = [
    b"a",
    b"ab",
    b"abc",
    b" ",
    b" the",
    b"1",
    b'"',
    b'",',
    b'"}',
    b'", "',
    b'a"',
    b'ab",',
    b"\\",
    b"\\n",
    b'\\"',
    b"\\\\",
    b"\\u00e9",
    b'a\\"b',
    b"\n",
    b"ab\n",
    b"\xc3",
    b"\xa9",
    b"\xc3\xa9",
    b'\xc3\xa9"',
    b"caf\xc3",
    b"\xa9s",
    b"\xe2\x82",
    b"\xe2\x82\xac",
    b"<eos>",
    b"",
    b"x" * 40,
    b"y" * 19 + b'"',
    b"-" * 30 + b"\n",
    b"\xe4\xb8\xad" * 7,
    b"\xe4\xb8\xad" * 6 + b"\xe4\xb8",
    b"}",
    b"x",
    b'{"a": "',
    b'", "b": "',
    b'"b',
]
EOS = 28

PATTERNS = [
    r'"[^"\\\x00-\x1f]*"',
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])*",?',
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]){0,5}"',
    r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]){2,45}"\}?',
    r'"(?:[^"\\\x00-\x1f]|\\u[0-9a-f]{4}){0,3}"',
    r'"[^"]{0,20}"x',
    r'[^"\\]{2,30}"',
    r"[^\x00-\x1f]*",
    r'\{"a": ?"[^"\\\x00-\x1f]*"(, ?"b": ?"[^"\\\x00-\x1f]{0,8}")?\}',
]


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary(TOKENS, [EOS])


def scalar_ids(dfa: object, vocab: Vocabulary, state: int) -> list[int]:
    ids = [
        i
        for i, tok in enumerate(vocab.tokens)
        if tok and i != EOS and dfa.step(state, tok) >= 0  # type: ignore[attr-defined]
    ]
    return sorted([*ids, EOS]) if dfa.is_accepting(state) else ids  # type: ignore[attr-defined]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("chain_steps", [16, 2])
def test_shared_lexeme_rows_equal_the_plain_walk(
    vocab: Vocabulary, monkeypatch: pytest.MonkeyPatch, pattern: str, chain_steps: int
) -> None:
    # a toy vocabulary: let any share of fitting tokens take the shared sets; short chains
    # leave longer tokens to the walk
    monkeypatch.setattr(index_mod, "_LEXEME_SHARE", 10**6)
    monkeypatch.setattr(index_mod, "_CHAR_CHAIN_STEPS", chain_steps)
    taken = 0
    real = index_mod._lexeme_walk

    def counting(*args: object) -> object:
        nonlocal taken
        out = real(*args)  # type: ignore[arg-type]
        taken += out is not None
        return out

    monkeypatch.setattr(index_mod, "_lexeme_walk", counting)
    for dfa in (compile_regex(pattern), compile_regex_auto(pattern, eager_nfa_limit=0)):
        shared = TokenIndex(dfa, vocab)  # rows from the shared sets where they apply
        plain = TokenIndex(dfa, vocab, lookahead=1)  # rows from the walk (end states needed)
        todo, seen = [dfa.start], {dfa.start}
        while todo:
            state = todo.pop()
            row = shared.row(state)
            np.testing.assert_array_equal(row.mask, plain.row(state).mask)
            assert row.ids(vocab.size).tolist() == scalar_ids(dfa, vocab, state), state
            for tok in row.ids(vocab.size).tolist():
                if tok != EOS and (nxt := row.next_state(tok)) not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    assert taken > 0


def test_lexeme_sets_are_shared_by_constraints(vocab: Vocabulary) -> None:
    prepare_vocabulary(vocab)
    table = token_table(vocab)
    body = table.lexemes.chars(JSON_STRING_BODY)
    fit = {table.tokens_by_pos[p] for p in body.fit_pos.tolist()}
    assert b" the" in fit
    assert b"\xc3\xa9" in fit
    assert b"\xe4\xb8\xad" * 7 in fit
    assert not fit & {b'"', b"\\n", b"\n", b"caf\xc3", b"\xa9s"}
    assert body.n_fit + body.unfit_pos.shape[0] == table.n_text
    # the suffixes start where a token leaves the string body
    sfx = body.suffixes()
    cut = dict(zip(sfx.ids.tolist(), sfx.tokens_by_pos, strict=True))
    assert cut[TOKENS.index(b'ab",')] == b'",'
    assert cut[TOKENS.index(b"-" * 30 + b"\n")] == b"\n"
    assert cut[TOKENS.index(b"\xe4\xb8\xad" * 6 + b"\xe4\xb8")] == b"\xe4\xb8"
    assert cut[TOKENS.index(b"\xa9s")] == b"\xa9s"
    # one object per vocabulary and byte set, whatever constraint asks
    assert token_table(vocab).lexemes.chars(JSON_STRING_BODY) is body
    mask = body.mask_upto(3)
    allowed = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")).tolist()
    assert allowed == sorted(
        table.ids[p] for p, n in zip(body.fit_pos, body.fit_chars, strict=True) if n <= 3
    )


def test_nfa_is_out_of_the_collectors_reach() -> None:
    builder = _build(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]){0,40}"', 20_000)
    nfa = builder.nfa  # flat int arrays: no object per state or edge for a collection to scan
    assert nfa.n > 40
    for part in (nfa.off, nfa.lo, nfa.hi, nfa.dst, nfa.eps_off, nfa.eps_dst, builder.live):
        assert all(isinstance(r, type) for r in gc.get_referents(part))


def _char_offset_reference(tok: bytes, k: int) -> int:
    seen = 0
    for i, b in enumerate(tok):
        if b & 0xC0 != 0x80:
            if seen == k:
                return i
            seen += 1
    return len(tok)


def _cut_reference(tok: bytes, in_set: np.ndarray) -> tuple[int, int]:
    """(cut, characters before it): the first ASCII byte outside the set or invalid UTF-8."""
    try:
        tok.decode("utf-8")
        valid = len(tok)
    except UnicodeDecodeError as exc:
        valid = exc.start
    cut = next((i for i in range(valid) if tok[i] < 128 and not in_set[tok[i]]), valid)
    return cut, sum(1 for b in tok[:cut] if b & 0xC0 != 0x80)


def test_token_bytes_and_suffixes_equal_the_byte_by_byte_reading() -> None:
    """The array-built layout reads every token as the plain per-byte definitions do."""
    from outlines_like.fsm._lexemes import SuffixTable, TokenBytes

    rng = np.random.default_rng(7)
    pieces = [b"a", b"\"", b"\\", b" ", b"\n", "é".encode(), "€".encode(), "😀".encode(),
              b"\x80", b"\xe2\x82", b"\xff", b"z9"]  # fmt: skip
    tokens = tuple(
        b"".join(pieces[j] for j in rng.integers(0, len(pieces), rng.integers(1, 7)))
        for _ in range(3000)
    )
    layout = TokenBytes.of(tokens)
    for k in (0, 1, 2, 5):
        expected = [_char_offset_reference(t, k) for t in tokens]
        assert layout.char_offsets(k).tolist() == expected
    in_set = np.ones(128, dtype=bool)
    in_set[[ord('"'), ord("\\"), ord("\n")]] = False
    unfit = np.arange(len(tokens))[::3]
    sfx = SuffixTable(layout, unfit, np.arange(len(tokens), dtype=np.int32), in_set)
    got = {
        int(p): (bytes(s), int(c))
        for p, s, c in zip(sfx.orig_pos, sfx.tokens_by_pos, sfx.pre_chars, strict=True)
    }
    for p in unfit.tolist():
        cut, chars = _cut_reference(tokens[p], in_set)
        assert got[p] == (tokens[p][cut:], chars), tokens[p]
    assert (np.diff(sfx.lengths) <= 0).all()  # the walk's layout: longest first


def test_first_outside_reads_the_tokens_asked_for() -> None:
    """Where each listed token (any order, repeats, empty ones) first has an outside byte."""
    from outlines_like.fsm._lexemes import TokenBytes

    rng = np.random.default_rng(3)
    pieces = [b"a", b"@", b'"', b" ", "é".encode(), b"\x80", b"z"]
    tokens = (
        b"",
        *(
            b"".join(pieces[j] for j in rng.integers(0, len(pieces), rng.integers(0, 6)))
            for _ in range(500)
        ),
    )
    layout = TokenBytes.of(tokens)
    outside = np.zeros(256, dtype=bool)
    outside[[ord("@"), ord('"')]] = True
    pos = rng.permutation(len(tokens))[:300]
    pos = np.concatenate([pos, pos[:20], [0]])
    want = [next((i for i, b in enumerate(tokens[p]) if outside[b]), len(tokens[p])) for p in pos]
    assert layout.first_outside(outside, pos).tolist() == want
    assert layout.first_outside(outside, pos[:0]).tolist() == []


def test_chain_tails_sort_and_flag_as_bytes_compare() -> None:
    """``ChainTails.of`` (numpy sorts of fixed-width keys) orders the suffixes as Python sorts
    ``(bytes, pre, position)`` -- zero bytes inside and at the end included, which the padded
    keys alone cannot tell apart -- and flags equal neighbours and partial characters as the
    per-item definitions do."""
    from outlines_like.fsm._lexemes import NON_ASCII, ChainTails, SuffixTable, TokenBytes

    rng = np.random.default_rng(11)
    pieces = [b"a", b'"', b"\\", b"\x00", b"\x00\x00", b"b", "é".encode(), "€".encode(),
              b"\xc3", b"\xe2\x82", b"\xf0\x9f", b"\xff"]  # fmt: skip
    tokens = tuple(
        b"".join(pieces[j] for j in rng.integers(0, len(pieces), rng.integers(1, 5)))
        for _ in range(4000)
    )
    layout = TokenBytes.of(tokens)
    in_set = np.ones(128, dtype=bool)
    in_set[[0, ord('"'), ord("\\")]] = False
    unfit = np.flatnonzero([_cut_reference(t, in_set)[0] < len(t) for t in tokens])
    sfx = SuffixTable(layout, unfit, np.arange(len(tokens), dtype=np.int32), in_set)
    tails = ChainTails.of(sfx, NON_ASCII)
    items = sfx.tokens_by_pos
    order = sorted(range(len(items)), key=lambda k: (items[k], int(sfx.pre_chars[k]), k))
    want = [items[k] for k in order]
    got = [bytes(tails.flat[b:e]) for b, e in zip(tails.begin, tails.end, strict=True)]
    assert got == want
    assert any(w.endswith(b"\x00") for w in want)
    assert any(b"\x00" in w[:-1] for w in want)
    assert tails.ids.tolist() == [int(sfx.ids[k]) for k in order]
    assert tails.pre.tolist() == [int(sfx.pre_chars[k]) for k in order]
    assert tails.same.tolist() == [0, *(int(a == b) for a, b in itertools.pairwise(want))]
    assert sum(tails.same.tolist()) > 0

    def proper_prefix(data: bytes) -> bool:
        return any(
            len(data) < len(seq)
            and all(lo <= x <= hi for x, (lo, hi) in zip(data, seq, strict=False))
            for seq in NON_ASCII
        )

    assert tails.partial.tolist() == [int(proper_prefix(w)) for w in want]
    assert tails.partial.any()
