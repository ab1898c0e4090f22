"""The model's vocabulary as the masker sees it: raw bytes per token id, EOS and special ids."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Vocabulary", "gpt2_byte_decoder"]

_SENTENCEPIECE_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def gpt2_byte_decoder() -> dict[str, int]:
    """Return GPT-2's byte-level BPE map from the printable stand-in character to its byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class Vocabulary:
    """Token id -> raw bytes, with the EOS ids and the special ids that are never text.

    Args:
        tokens: The raw bytes of every token, indexed by id (ids are dense, ``0..V-1``).
        eos_token_ids: The ids that end generation (one or more). They are special too.
        special_token_ids: Ids that are never generated as text (``<|...|>`` control tokens,
            padding, added special tokens). EOS ids are added to this set.

    Raises:
        TypeError: A token is not ``bytes``.
        ValueError: No EOS id, or an id outside ``[0, V)``.
    """

    __slots__ = (
        "_cache",
        "_hash",
        "eos_token_ids",
        "special_token_ids",
        "tokens",
    )

    def __init__(
        self,
        tokens: Sequence[bytes],
        eos_token_ids: int | Iterable[int],
        special_token_ids: Iterable[int] = (),
    ) -> None:
        toks = tuple(tokens)
        for i, t in enumerate(toks):
            if not isinstance(t, (bytes, bytearray)):
                raise TypeError(
                    f"Vocabulary token {i} is a {type(t).__name__}, not bytes; pass the raw bytes "
                    "(use Vocabulary.from_transformers for a Hugging Face tokenizer)"
                )
        self.tokens: tuple[bytes, ...] = tuple(bytes(t) for t in toks)
        eos = (eos_token_ids,) if isinstance(eos_token_ids, int) else tuple(eos_token_ids)
        if not eos:
            raise ValueError("Vocabulary needs at least one EOS token id")
        n = len(self.tokens)
        for name, ids in (("eos_token_ids", eos), ("special_token_ids", special_token_ids)):
            for i in ids:
                if not isinstance(i, int) or not 0 <= i < n:
                    raise ValueError(f"Vocabulary {name}: id {i!r} is not in [0, {n})")
        self.eos_token_ids: tuple[int, ...] = tuple(sorted(set(eos)))
        self.special_token_ids: frozenset[int] = frozenset(special_token_ids) | frozenset(eos)
        self._hash: str | None = None
        self._cache: dict[str, Any] = {}

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        # the per-vocabulary tables (``_cache``) are derived data with locks inside: another
        # process rebuilds them on first use rather than receiving them
        state = {"tokens": self.tokens, "eos_token_ids": self.eos_token_ids}
        return None, {**state, "special_token_ids": self.special_token_ids, "_hash": self._hash}

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        for name, value in state[1].items():
            object.__setattr__(self, name, value)
        self._cache = {}

    @property
    def size(self) -> int:
        """Number of token ids (``V``)."""
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def mask_words(self) -> int:
        """Int32 words in one bitmask row: ``ceil(V / 32)``."""
        return (len(self.tokens) + 31) // 32

    @property
    def hash(self) -> str:
        """A stable hex digest of the tokens, EOS ids and special ids (the cache key)."""
        if self._hash is None:
            h = hashlib.sha256()
            h.update(len(self.tokens).to_bytes(8, "little"))
            h.update(b"".join(len(t).to_bytes(4, "little") for t in self.tokens))
            h.update(b"".join(self.tokens))
            h.update(
                json.dumps([list(self.eos_token_ids), sorted(self.special_token_ids)]).encode()
            )
            self._hash = h.hexdigest()
        return self._hash

    def __repr__(self) -> str:
        return (
            f"Vocabulary(size={self.size}, eos_token_ids={list(self.eos_token_ids)}, "
            f"special={len(self.special_token_ids)})"
        )

    @classmethod
    def from_transformers(cls, tokenizer: Any) -> Vocabulary:
        """Build the vocabulary of a Hugging Face tokenizer.

        Handles byte-level BPE (GPT-2's byte-to-character map: ``Ġ`` is a space), SentencePiece
        (``▁`` is a space, ``<0xNN>`` a raw byte) and plain vocabularies. Special and added
        special tokens are kept out of the text; added non-special tokens are text, as written.

        Raises:
            ValueError: The tokenizer has no EOS token.
        """
        vocab: dict[str, int] = dict(tokenizer.get_vocab())
        size = max(len(tokenizer), max(vocab.values(), default=-1) + 1)
        special: set[int] = {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
        added_text: dict[int, str] = {}
        for tid, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
            if getattr(added, "special", False):
                special.add(int(tid))
            else:
                added_text[int(tid)] = str(getattr(added, "content", added))
        eos_id = getattr(tokenizer, "eos_token_id", None)
        if eos_id is None:
            raise ValueError(
                "the tokenizer has no eos_token_id; build Vocabulary(tokens, eos_token_ids=...) "
                "yourself"
            )
        eos = [int(e) for e in eos_id] if isinstance(eos_id, (list, tuple)) else [int(eos_id)]
        kind = _tokenizer_kind(tokenizer, vocab)
        byte_dec = gpt2_byte_decoder()
        tokens: list[bytes] = [b""] * size
        for text, tid in vocab.items():
            if tid in added_text or tid in special:
                tokens[tid] = text.encode("utf-8")
            else:
                tokens[tid] = _token_bytes(text, kind, byte_dec)
        for tid, text in added_text.items():
            if tid < size:
                tokens[tid] = text.encode("utf-8")
        # ids with no string at all (padding rows of the embedding) are never text
        missing = set(range(size)) - set(vocab.values()) - set(added_text)
        return cls(tokens, eos, special | missing)


def _tokenizer_kind(tokenizer: Any, vocab: dict[str, int]) -> str:
    """Return "bytelevel", "sentencepiece" or "plain", from the decoder or else the tokens."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        try:
            decoder = json.dumps(json.loads(backend.to_str()).get("decoder"))
        except (ValueError, AttributeError, TypeError):
            decoder = ""
        if "ByteLevel" in decoder:
            return "bytelevel"
        if "ByteFallback" in decoder or "Metaspace" in decoder or "\u2581" in decoder:
            return "sentencepiece"
    if any(_SENTENCEPIECE_BYTE.match(t) for t in vocab) or any(
        t.startswith("\u2581") for t in vocab
    ):
        return "sentencepiece"
    byte_dec = gpt2_byte_decoder()
    if any("Ġ" in t for t in vocab) and all(all(c in byte_dec for c in t) for t in vocab):
        return "bytelevel"
    return "plain"


def _token_bytes(text: str, kind: str, byte_dec: dict[str, int]) -> bytes:
    if kind == "bytelevel":
        try:
            return bytes(byte_dec[c] for c in text)
        except KeyError:
            return text.encode("utf-8")
    if kind == "sentencepiece":
        m = _SENTENCEPIECE_BYTE.match(text)
        if m:
            return bytes([int(m.group(1), 16)])
        return text.replace("\u2581", " ").encode("utf-8")
    return text.encode("utf-8")
