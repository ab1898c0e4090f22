"""Vocabulary: validation, hashing, reading Hugging Face tokenizers (byte-level, SentencePiece)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from outlines_like.fsm import Vocabulary
from outlines_like.fsm.vocabulary import gpt2_byte_decoder


def test_basic_fields() -> None:
    v = Vocabulary([b"a", b"b", b"<eos>", b"<pad>"], 2, [3])
    assert v.size == len(v) == 4
    assert v.eos_token_ids == (2,)
    assert v.special_token_ids == frozenset({2, 3})
    assert v.mask_words == 1
    assert Vocabulary([b"x"] * 33, [0]).mask_words == 2
    assert "size=4" in repr(v)


@pytest.mark.parametrize(
    ("tokens", "eos", "special", "error", "match"),
    [
        (["a"], [0], (), TypeError, "token 0 is a str"),
        ([b"a"], [], (), ValueError, "at least one EOS"),
        ([b"a"], [1], (), ValueError, r"eos_token_ids: id 1 is not in \[0, 1\)"),
        ([b"a", b"b"], [0], (5,), ValueError, "special_token_ids: id 5"),
        ([b"a", b"b"], [0], (-1,), ValueError, "special_token_ids: id -1"),
    ],
)
def test_validation(tokens: Any, eos: Any, special: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Vocabulary(tokens, eos, special)


def test_hash_is_stable_and_sensitive() -> None:
    base = Vocabulary([b"a", b"b", b"<e>"], [2])
    assert base.hash == Vocabulary([b"a", b"b", b"<e>"], [2]).hash
    assert len(base.hash) == 64
    variants = [
        Vocabulary([b"a", b"c", b"<e>"], [2]),
        Vocabulary([b"a", b"b", b"<e>"], [2], [1]),
        Vocabulary([b"a", b"b", b"<e>"], [1]),
        Vocabulary([b"ab", b"", b"<e>"], [2]),  # same concatenation, other split
    ]
    assert len({base.hash, *(v.hash for v in variants)}) == 1 + len(variants)


def test_gpt2_byte_map_is_a_bijection() -> None:
    dec = gpt2_byte_decoder()
    assert sorted(dec.values()) == list(range(256))
    assert dec["Ġ"] == 32
    assert dec["Ċ"] == 10
    assert dec["a"] == ord("a")


@dataclass
class _Added:
    content: str
    special: bool


class FakeTokenizer:
    """The duck-typed surface of a transformers tokenizer that from_transformers reads."""

    def __init__(
        self, vocab: dict[str, int], eos: int, special: list[int], added: dict[int, _Added]
    ) -> None:
        self._vocab = vocab
        self.eos_token_id = eos
        self.all_special_ids = special
        self.added_tokens_decoder = added

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab)


def test_byte_level_bpe() -> None:
    tok = FakeTokenizer(
        {"Ġhello": 0, "Ċ": 1, "Ã©": 2, "<|end|>": 3, "<tool>": 4, "a": 5},
        eos=3,
        special=[3],
        added={3: _Added("<|end|>", True), 4: _Added("<tool>", False)},
    )
    v = Vocabulary.from_transformers(tok)
    assert v.tokens[0] == b" hello"
    assert v.tokens[1] == b"\n"
    assert v.tokens[2] == "é".encode()
    assert v.tokens[4] == b"<tool>"  # added, not special: text as written
    assert v.eos_token_ids == (3,)
    assert v.special_token_ids == frozenset({3})


def test_sentencepiece() -> None:
    tok = FakeTokenizer(
        {"<unk>": 0, "<s>": 1, "</s>": 2, "▁hello": 3, "<0x0A>": 4, "<0xC3>": 5, "é": 6},
        eos=2,
        special=[0, 1, 2],
        added={},
    )
    v = Vocabulary.from_transformers(tok)
    assert v.tokens[3] == b" hello"
    assert v.tokens[4] == b"\n"
    assert v.tokens[5] == b"\xc3"
    assert v.tokens[6] == "é".encode()
    assert v.special_token_ids == frozenset({0, 1, 2})


def test_gaps_in_ids_are_special() -> None:
    tok = FakeTokenizer({"a": 0, "b": 2, "</s>": 3}, eos=3, special=[3], added={})
    v = Vocabulary.from_transformers(tok)
    assert v.size == 4
    assert 1 in v.special_token_ids


def test_missing_eos_is_an_error() -> None:
    tok = FakeTokenizer({"a": 0}, eos=None, special=[], added={})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="eos_token_id"):
        Vocabulary.from_transformers(tok)


@pytest.mark.torch
def test_real_byte_level_tokenizer() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    raw = tokenizers.Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|eos|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator(["hello world café\n", "hello there"] * 20, trainer)
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|eos|>")
    v = Vocabulary.from_transformers(tok)
    assert v.eos_token_ids == (tok.eos_token_id,)
    text = "hello café\n"
    ids = tok.encode(text)
    assert b"".join(v.tokens[i] for i in ids) == text.encode()
    assert tok.eos_token_id in v.special_token_ids


def test_a_vocabulary_pickles_without_its_derived_tables() -> None:
    import pickle

    from outlines_like.fsm.index import prepare_vocabulary

    vocab = Vocabulary([b"a", b"b", b"ab", b'"', b"<eos>"], [4])
    prepare_vocabulary(vocab)  # fills the per-vocabulary tables (some hold locks)
    assert vocab._cache
    copy = pickle.loads(pickle.dumps(vocab))
    assert copy.tokens == vocab.tokens
    assert copy.hash == vocab.hash
    assert copy.eos_token_ids == vocab.eos_token_ids
    assert copy.special_token_ids == vocab.special_token_ids
    assert copy._cache == {}
