"""Logits processors: apply a compiled constraint's token masks to a model's logits.

``LogitsProcessor(compiled)`` plugs into ``transformers``' ``generate()``
(``logits_processor=[LogitsProcessor(compiled)]``); it also takes numpy arrays, so any
sampling loop can use it. Each batch row gets its own matcher, created lazily on the first
call; the processor remembers the prompt length of that first call and feeds the matchers only
the tokens generated after it.

Masks go from the matchers (CPU, numpy) into one reusable host buffer of packed 32-bit words
(pinned when the logits live on a GPU), are uploaded once per step, and are unpacked and applied
with torch ops on the logits' own device: no per-token host round trip beyond that upload.

Rejection contract: a generated token that the constraint does not allow raises
``RejectedTokenError`` from the matcher (it cannot happen when every step's logits went through
this processor). Once a row's matcher has accepted EOS the row allows only EOS, and any later
padding tokens ``generate()`` appends to that row are ignored.

With ``max_tokens`` (the ``max_new_tokens`` given to ``generate()``), the masks narrow near the
end so that the answer is complete when the tokens run out (:mod:`outlines_like.fsm.closing`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from outlines_like.fsm.closing import check_max_tokens, closing_matcher, spend

if TYPE_CHECKING:
    from outlines_like.fsm._protocols import Compiled, Matcher

__all__ = [
    "LogitsProcessor",
    "apply_token_bitmask",
    "bitmask_words",
    "import_torch",
]

_TORCH_HINT = "pip install 'outlines-like[transformers]'"

ArrayT = TypeVar("ArrayT")


def import_torch() -> Any:
    """Import torch lazily, with an ``ImportError`` that names the extra to install."""
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"this feature needs torch: {_TORCH_HINT}") from exc
    return torch


def bitmask_words(vocab_size: int) -> int:
    """Return the number of int32 words a bitmask over ``vocab_size`` tokens takes."""
    return (vocab_size + 31) // 32


def _vocab_size(compiled: Compiled) -> int:
    vocab = compiled.vocabulary
    size = getattr(vocab, "size", None)
    if isinstance(size, int):
        return size
    return len(vocab)


def _unpack_numpy(words: npt.NDArray[np.int32], width: int) -> npt.NDArray[np.bool_]:
    """``(B, W)`` int32 words -> ``(B, width)`` booleans (bit ``i % 32`` of word ``i // 32``)."""
    as_bytes = np.ascontiguousarray(words, dtype="<i4").view(np.uint8)
    bits = np.unpackbits(as_bytes, axis=-1, bitorder="little")
    return bits[:, :width].astype(np.bool_)


def apply_token_bitmask(scores: ArrayT, words: Any) -> ArrayT:
    """Set the logits of disallowed tokens to ``-inf``, in place, and return ``scores``.

    Args:
        scores: ``(B, V)`` (or ``(V,)``) logits, a torch tensor on any device or a numpy array.
        words: ``(B, W)`` (or ``(W,)``) int32 packed bitmask with ``W >= ceil(V / 32)``, of the
            same kind as ``scores`` (a torch tensor is moved to ``scores``' device if needed).
            Tokens past the last word are disallowed.

    Returns:
        ``scores``, masked.
    """
    if isinstance(scores, np.ndarray):
        flat = scores.ndim == 1
        s2 = scores[None, :] if flat else scores
        w2 = np.asarray(words, dtype=np.int32).reshape(s2.shape[0], -1)
        width = s2.shape[1]
        allowed = np.zeros(s2.shape, dtype=np.bool_)
        covered = min(width, w2.shape[1] * 32)
        allowed[:, :covered] = _unpack_numpy(w2, covered)
        s2[~allowed] = -np.inf
        return scores
    torch = import_torch()
    if not isinstance(scores, torch.Tensor):
        raise TypeError(
            f"scores must be a torch tensor or a numpy array, got {type(scores).__name__}"
        )
    t_scores: Any = scores
    flat = t_scores.dim() == 1
    s2t = t_scores.unsqueeze(0) if flat else t_scores
    w = words if isinstance(words, torch.Tensor) else torch.from_numpy(np.asarray(words, np.int32))
    w = w.to(device=s2t.device, non_blocking=True).reshape(s2t.shape[0], -1)
    width = s2t.shape[1]
    shifts = torch.arange(32, device=s2t.device, dtype=torch.int32)
    bits = ((w.unsqueeze(-1) >> shifts) & 1).to(torch.bool).reshape(w.shape[0], -1)
    if bits.shape[1] >= width:
        allowed = bits[:, :width]
    else:
        allowed = torch.zeros(s2t.shape, dtype=torch.bool, device=s2t.device)
        allowed[:, : bits.shape[1]] = bits
    s2t.masked_fill_(~allowed, float("-inf"))
    return scores


class LogitsProcessor:
    """Constrain generation to a compiled constraint, one matcher per batch row.

    Use it with ``transformers``::

        processor = LogitsProcessor(compile_constraint(int, Vocabulary.from_transformers(tok)))
        model.generate(**inputs, logits_processor=LogitsProcessorList([processor]))

    or call it yourself with ``(input_ids, scores)`` each step, torch tensors or numpy arrays:
    ``input_ids`` holds prompt plus generated tokens (``(B, L)``), ``scores`` the next-token
    logits (``(B, V)``, ``V`` may exceed the vocabulary: padded ids are masked out).

    Rows are matched by position, so sampling and greedy search work; beam search, which
    reorders rows between steps, is not supported.

    A processor serves one generation at a time. A call whose batch size differs from the
    last one, or whose sequences are not longer than the last ones, starts a new generation
    (new matchers, new prompt length); ``reset()`` does so explicitly.

    Args:
        compiled: The compiled constraint (``outlines_like.fsm.compile_constraint``).
        think_end_token_id: Reasoning-aware mode: each row is left free until it generates
            this token (e.g. the id of ``</think>``); the constraint applies after it.
        max_tokens: The ``max_new_tokens`` of the generation: near the end, each row's mask
            narrows to what still completes the answer within it, so the answer is valid when
            generation stops at the limit (reasoning tokens count too). ``None``: no closing.

    Raises:
        ValueError: ``max_tokens`` cannot fit even the shortest answer of the constraint.
    """

    def __init__(
        self,
        compiled: Compiled,
        *,
        think_end_token_id: int | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if not hasattr(compiled, "matcher"):
            raise TypeError(
                "LogitsProcessor takes a compiled constraint (compile_constraint(output_type, "
                f"vocabulary)), got {type(compiled).__name__}"
            )
        if think_end_token_id is not None and not isinstance(think_end_token_id, int):
            raise TypeError("think_end_token_id must be an int token id or None")
        if max_tokens is not None:
            if not isinstance(max_tokens, int) or max_tokens < 1:
                raise ValueError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
            check_max_tokens(compiled, max_tokens)
        self.compiled = compiled
        self.think_end_token_id = think_end_token_id
        self.max_tokens = max_tokens
        self.vocab_size = _vocab_size(compiled)
        self._matchers: list[Matcher] = []
        self._fed: list[int] = []
        self._thinking: list[bool] = []
        self._prompt_len = 0
        self._last_len = -1
        self._host: Any = None  # (B, W) int32 host buffer (pinned torch tensor or numpy)
        self._host_np: npt.NDArray[np.int32] | None = None
        self._device_buf: Any = None
        self._free: npt.NDArray[np.int32] | None = None

    @property
    def prompt_length(self) -> int:
        """The sequence length seen on the first call of the current generation."""
        return self._prompt_len

    @property
    def matchers(self) -> Sequence[Matcher]:
        """The matchers of the current generation, one per row."""
        return tuple(self._matchers)

    def reset(self) -> None:
        """Forget the current generation; the next call starts a new one."""
        self._matchers = []
        self._fed = []
        self._thinking = []
        self._prompt_len = 0
        self._last_len = -1

    def _start(self, batch: int, length: int) -> None:
        self._matchers = [closing_matcher(self.compiled, self.max_tokens) for _ in range(batch)]
        self._fed = [0] * batch
        self._thinking = [self.think_end_token_id is not None] * batch
        self._prompt_len = length
        self._last_len = length

    def _feed(self, rows: list[list[int]]) -> None:
        end = self.think_end_token_id
        for i, new_tokens in enumerate(rows):
            matcher = self._matchers[i]
            for token in new_tokens:
                if self._thinking[i]:
                    if token == end:
                        self._thinking[i] = False
                    spend(matcher)
                    continue
                if matcher.is_finished():
                    break  # padding after EOS
                matcher.advance(token)
            self._fed[i] += len(new_tokens)

    def _fill(self, words: int) -> npt.NDArray[np.int32]:
        """Fill the host buffer's rows with each row's mask and return it as numpy."""
        host = self._host_np
        assert host is not None  # allocated by the caller
        vocab_words = bitmask_words(self.vocab_size)
        for i, matcher in enumerate(self._matchers):
            if self._thinking[i]:
                host[i, :] = self._free_row(words)
                continue
            matcher.fill_bitmask(host[i, :vocab_words])
            if words > vocab_words:
                host[i, vocab_words:] = 0
        return host

    def _free_row(self, words: int) -> npt.NDArray[np.int32]:
        """The mask allowing every token of the vocabulary (and no padded id past it)."""
        if self._free is None or self._free.shape[0] != words:
            bits = np.zeros(words * 32, dtype=np.uint8)
            bits[: self.vocab_size] = 1
            self._free = np.packbits(bits, bitorder="little").view("<i4").astype(np.int32)
        return self._free

    def _ensure_host(self, batch: int, words: int, pinned: bool) -> None:
        if self._host_np is not None and self._host_np.shape == (batch, words):
            return
        if pinned:
            torch = import_torch()
            self._host = torch.zeros((batch, words), dtype=torch.int32).pin_memory()
            self._host_np = self._host.numpy()
        else:
            self._host_np = np.zeros((batch, words), dtype=np.int32)
            self._host = None
        self._device_buf = None

    def __call__(self, input_ids: Any, scores: ArrayT) -> ArrayT:
        """Advance each row's matcher by its new tokens and mask ``scores`` in place.

        Args:
            input_ids: ``(B, L)`` (or ``(L,)``) token ids so far, prompt included.
            scores: ``(B, V)`` (or ``(V,)``) logits for the next token.

        Returns:
            ``scores``, with every disallowed token at ``-inf``.
        """
        is_numpy = isinstance(scores, np.ndarray)
        shape = tuple(scores.shape)  # type: ignore[attr-defined]
        flat = len(shape) == 1
        batch = 1 if flat else shape[0]
        width = shape[-1]
        if width < self.vocab_size:
            raise ValueError(
                f"scores have {width} columns but the constraint's vocabulary has "
                f"{self.vocab_size} tokens: compile it for this model's tokenizer"
            )
        ids_shape = tuple(input_ids.shape)
        length = ids_shape[-1]
        ids_batch = 1 if len(ids_shape) == 1 else ids_shape[0]
        if ids_batch != batch:
            raise ValueError(f"input_ids has {ids_batch} rows but scores has {batch}")
        if not self._matchers or batch != len(self._matchers) or length <= self._last_len:
            self._start(batch, length)
        else:
            start = self._prompt_len + min(self._fed)
            rows = input_ids[..., start:].tolist()
            if len(ids_shape) == 1:
                rows = [rows]
            offset = min(self._fed)
            self._feed([row[self._fed[i] - offset :] for i, row in enumerate(rows)])
            self._last_len = length

        words = bitmask_words(width)
        if is_numpy:
            self._ensure_host(batch, words, pinned=False)
            host = self._fill(words)
            return apply_token_bitmask(scores, host.reshape((*shape[:-1], words)))

        torch = import_torch()
        t_scores: Any = scores
        on_gpu = t_scores.device.type == "cuda"
        self._ensure_host(batch, words, pinned=on_gpu)
        host = self._fill(words)
        if on_gpu:
            if self._device_buf is None or self._device_buf.device != t_scores.device:
                self._device_buf = torch.empty(
                    (batch, words), dtype=torch.int32, device=t_scores.device
                )
            # The host buffer is reused next step; that is safe because the caller reads the
            # sampled tokens back (a synchronising copy) before calling us again.
            self._device_buf.copy_(self._host, non_blocking=True)
            device_words = self._device_buf
        else:
            device_words = torch.from_numpy(host)
        if flat:
            device_words = device_words[0]
        return apply_token_bitmask(scores, device_words)
