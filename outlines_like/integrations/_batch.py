"""Engine-independent half of the vLLM processor: the request argument, rows, batched masks.

Nothing here imports vLLM: the unit tests drive it with fake batches, and
``outlines_like.integrations.vllm`` wires it to vLLM's two logits-processor interfaces.

* :func:`read_argument` reads the ``vllm_xargs`` value that ``VLLMAdapter(masker=
  "outlines_like")`` writes (JSON text, see ``outlines_like.adapters.vllm``) into a term;
  :func:`check_argument` also compiles it against a 257-token byte vocabulary, so a bad regex,
  schema or grammar is refused before the request is scheduled.
* :class:`ConstrainedBatch` keeps one matcher per constrained batch slot, moves them as the
  batch is reordered, advances them with each row's new tokens, and masks all constrained
  rows of a logits tensor at once (:func:`mask_rows`).

Rejection contract inside the engine: a token a matcher does not allow (another processor
forced it) is logged and the row is then held to EOS, so a broken row ends instead of
producing text outside its constraint; the client's own check of the answer reports it.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from outlines_like.adapters.vllm import XARGS_KEY
from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.fsm import Compiled, Matcher, RejectedTokenError, Vocabulary, compile_constraint
from outlines_like.fsm.closing import check_max_tokens, closing_matcher, spend
from outlines_like.fsm.processors import apply_token_bitmask, import_torch
from outlines_like.reasoning import THINK_END
from outlines_like.types import CFG, JsonObject, JsonSchema, Regex, Term

__all__ = [
    "PROMPT_TAIL",
    "ConstrainedBatch",
    "ConstraintArgument",
    "check_argument",
    "mask_rows",
    "read_argument",
    "request_argument",
]

logger = logging.getLogger("outlines_like.integrations.vllm")

_KINDS = ("regex", "json_schema", "json_object", "grammar")
_KEYS = frozenset({"kind", "value", "whitespace_pattern", "lenient", "syntax", "reasoning"})
_MAX_COMPILED = 256
PROMPT_TAIL = 16  # prompt tokens read to see whether the template closed the think block


@dataclasses.dataclass(frozen=True)
class ConstraintArgument:
    """One request's constraint, read from ``vllm_xargs``.

    Attributes:
        term: The constraint.
        reasoning: ``True``: free until the think-end token; ``False``: constrained from the
            first token; ``None``: the server's default (on when vLLM runs a reasoning parser).
        text: The raw argument (the cache key of the compiled constraint).
    """

    term: Term
    reasoning: bool | None
    text: str


def _fail(message: str) -> ValueError:
    return ValueError(f"vllm_xargs.{XARGS_KEY}: {message}")


def request_argument(extra_args: Mapping[str, Any] | None) -> ConstraintArgument | None:
    """The constraint in a request's ``SamplingParams.extra_args``, or ``None`` for none.

    Raises:
        ValueError: The argument is there but malformed (a 400 in vLLM).
    """
    if not extra_args:
        return None
    value = extra_args.get(XARGS_KEY)
    if value is None:
        return None
    return read_argument(value)


def read_argument(value: object) -> ConstraintArgument:
    """Read one ``vllm_xargs`` value (JSON text) into a :class:`ConstraintArgument`.

    Raises:
        ValueError: Not JSON text, an unknown kind or key, or an invalid term.
    """
    if not isinstance(value, str):
        raise _fail(
            f"must be JSON text (vllm_xargs values are flat), got {type(value).__name__}; "
            "send it with from_server(..., masker='outlines_like')"
        )
    return _read_text(value)


@functools.lru_cache(maxsize=512)
def _read_text(text: str) -> ConstraintArgument:
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"not valid JSON: {exc.msg} at character {exc.pos}") from exc
    if not isinstance(spec, dict):
        raise _fail(f"must be a JSON object, got {type(spec).__name__}")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise _fail(f"unknown keys {unknown}; expected some of {sorted(_KEYS)}")
    kind = spec.get("kind")
    if kind not in _KINDS:
        raise _fail(f"kind must be one of {list(_KINDS)}, got {kind!r}")
    reasoning = spec.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, bool):
        raise _fail(f"reasoning must be true, false or null, got {reasoning!r}")
    try:
        term = _term(kind, spec)
    except ValueError as exc:
        if str(exc).startswith(f"vllm_xargs.{XARGS_KEY}"):
            raise
        raise _fail(f"{kind}: {exc}") from exc
    except (TypeError, UnsupportedConstraintError) as exc:
        raise _fail(f"{kind}: {exc}") from exc
    return ConstraintArgument(term, reasoning, text)


def _term(kind: str, spec: Mapping[str, Any]) -> Term:
    value = spec.get("value")
    if kind == "json_object":
        return JsonObject()
    if kind == "json_schema":
        if isinstance(value, bool) or not isinstance(value, dict):
            raise _fail("json_schema: value must be a JSON Schema object")
        ws = spec.get("whitespace_pattern")
        if ws is not None and not isinstance(ws, str):
            raise _fail("json_schema: whitespace_pattern must be a string or null")
        return JsonSchema(value, whitespace_pattern=ws, lenient=bool(spec.get("lenient", False)))
    if not isinstance(value, str) or not value:
        raise _fail(f"{kind}: value must be a non-empty string")
    if kind == "regex":
        return Regex(value)
    syntax = spec.get("syntax")
    if syntax not in (None, "lark", "ebnf"):
        raise _fail(f"grammar: syntax must be 'lark' or 'ebnf', got {syntax!r}")
    return CFG(value, syntax)


@functools.lru_cache(maxsize=1)
def _probe_vocabulary() -> Vocabulary:
    """Every byte as a token, plus EOS: compiling against it checks what the vocabulary can't."""
    return Vocabulary([bytes([b]) for b in range(256)] + [b"</s>"], eos_token_ids=[256])


@functools.lru_cache(maxsize=512)
def _check_text(text: str) -> None:
    arg = _read_text(text)
    try:
        compile_constraint(arg.term, _probe_vocabulary())
    except (InvalidConstraintError, UnsupportedConstraintError, ValueError, TypeError) as exc:
        raise _fail(str(exc)) from exc


def check_argument(
    extra_args: Mapping[str, Any] | None,
    *,
    max_tokens: int | None = None,
    batch: ConstrainedBatch | None = None,
) -> None:
    """Refuse a malformed or uncompilable constraint (vLLM's ``validate_params``).

    The regex, JSON Schema (as our compiler reads it) or grammar is compiled against a small
    byte vocabulary, so every error that does not depend on the model's tokens is found here,
    before the request is scheduled. Results are cached per argument text. With ``batch``
    (the model's vocabulary known in this process) a ``max_tokens`` that cannot fit even the
    shortest answer is refused too.

    Raises:
        ValueError: What is wrong, prefixed with ``vllm_xargs.outlines_like``.
    """
    arg = request_argument(extra_args)
    if arg is None:
        return
    _check_text(arg.text)
    compiled = batch.compiled(arg) if batch is not None and max_tokens is not None else None
    if compiled is not None and max_tokens is not None:
        try:
            check_max_tokens(compiled, max_tokens)
        except ValueError as exc:
            raise _fail(str(exc)) from exc


@dataclasses.dataclass
class _Row:
    """One constrained request in the batch."""

    matcher: Matcher | None  # None: held to EOS (compile failed or a token was rejected)
    thinking: bool
    output: list[int] | None  # the engine's live output list (V1 runner), else None
    fed: int = 0  # output tokens consumed so far (thinking tokens included)
    check_prompt: bool = False  # thinking, but the prompt may have closed the block already


class ConstrainedBatch:
    """The matchers of the constrained requests of one engine batch, keyed by slot.

    Args:
        vocabulary: The engine tokenizer's vocabulary (built once, at start-up).
        think_end_token_id: The id of ``</think>`` when it is one token, else ``None``.
        reasoning_default: Whether rows whose argument says nothing about reasoning stay free
            until ``think_end_token_id`` (vLLM started with a reasoning parser).
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        *,
        think_end_token_id: int | None = None,
        reasoning_default: bool = False,
    ) -> None:
        self.vocabulary = vocabulary
        self.think_end_token_id = think_end_token_id
        self.reasoning_default = reasoning_default
        self.rows: dict[int, _Row] = {}
        self._compiled: collections.OrderedDict[str, Compiled | None] = collections.OrderedDict()
        self._eos_row = np.zeros(vocabulary.mask_words, dtype=np.int32)
        for eos in vocabulary.eos_token_ids:
            self._eos_row[eos // 32] |= np.int32(np.uint32(1 << (eos % 32)).view(np.int32))
        self._host: npt.NDArray[np.int32] = np.zeros((0, vocabulary.mask_words), np.int32)
        self._warned_no_think = False

    # -- compiled constraints, cached per (argument, this vocabulary)

    def compiled(self, arg: ConstraintArgument) -> Compiled | None:
        """The compiled constraint of ``arg`` (``None`` when it does not compile here)."""
        if arg.text in self._compiled:
            self._compiled.move_to_end(arg.text)
            return self._compiled[arg.text]
        result: Compiled | None
        try:
            result = compile_constraint(arg.term, self.vocabulary)
        except (InvalidConstraintError, UnsupportedConstraintError, ValueError, TypeError):
            logger.exception("outlines_like: constraint does not compile; the row ends at EOS")
            result = None
        self._compiled[arg.text] = result
        while len(self._compiled) > _MAX_COMPILED:
            self._compiled.popitem(last=False)
        return result

    # -- batch bookkeeping

    def add(
        self,
        slot: int,
        arg: ConstraintArgument | None,
        *,
        prompt_ids: Sequence[int] | None = None,
        output: list[int] | None = None,
        max_tokens: int | None = None,
    ) -> bool:
        """Start ``slot``'s request (replacing any previous occupant); ``False``: unconstrained.

        Args:
            slot: The batch index (V1 runner) or persistent request slot (V2 runner).
            arg: The request's constraint, or ``None``.
            prompt_ids: The prompt's token ids, when known now (to see whether the chat
                template already closed the think block); ``None``: check later with
                :meth:`prompt_known`.
            output: The engine's live list of the request's output tokens (V1 runner).
            max_tokens: The request's ``max_tokens``: near it the row's masks narrow so that
                the answer is complete when the tokens run out (``fsm/closing.py``).
        """
        if arg is None:
            self.rows.pop(slot, None)
            return False
        compiled = self.compiled(arg)
        thinking = self.reasoning_default if arg.reasoning is None else arg.reasoning
        if thinking and self.think_end_token_id is None:
            if not self._warned_no_think:
                logger.warning(
                    "outlines_like: reasoning asked for, but '</think>' is not one token of "
                    "this tokenizer; constraining from the first token"
                )
                self._warned_no_think = True
            thinking = False
        matcher = closing_matcher(compiled, max_tokens) if compiled is not None else None
        row = _Row(matcher, thinking, output)
        if thinking:
            if prompt_ids is None:
                row.check_prompt = True
            else:
                row.thinking = not self._closed(prompt_ids)
        self.rows[slot] = row
        return True

    def prompt_known(self, slot: int, prompt_tail: Sequence[int]) -> None:
        """Give a row added without its prompt the end of its prompt (see :meth:`add`)."""
        row = self.rows.get(slot)
        if row is not None and row.check_prompt:
            row.check_prompt = False
            row.thinking = not self._closed(prompt_tail)

    def _closed(self, prompt_ids: Sequence[int]) -> bool:
        """Whether the prompt's text ends with ``</think>``, then whitespace.

        The template closed the block (``enable_thinking=False``): the engine's
        ``prepare_rendered`` reads a rendered prompt the same way.
        """
        tokens = self.vocabulary.tokens
        tail = b"".join(tokens[t] for t in prompt_ids[-PROMPT_TAIL:] if 0 <= t < len(tokens))
        return tail.decode("utf-8", errors="ignore").rstrip().endswith(THINK_END)

    def remove(self, slot: int) -> None:
        """Drop ``slot``'s request (finished, aborted or preempted)."""
        self.rows.pop(slot, None)

    def move(self, src: int, dst: int) -> None:
        """The request at ``src`` now sits at ``dst`` (whatever was at ``dst`` is gone)."""
        row = self.rows.pop(src, None)
        if row is None:
            self.rows.pop(dst, None)
        else:
            self.rows[dst] = row

    def swap(self, a: int, b: int) -> None:
        """The requests at ``a`` and ``b`` trade places."""
        row_a = self.rows.pop(a, None)
        row_b = self.rows.pop(b, None)
        if row_a is not None:
            self.rows[b] = row_a
        if row_b is not None:
            self.rows[a] = row_b

    # -- tokens

    def feed_outputs(self, slots: Iterable[int]) -> None:
        """Advance the rows that hold a live output list with what it gained since last time.

        Placeholders (``-1``, async scheduling) end what is read this time.
        """
        for slot in slots:
            row = self.rows.get(slot)
            if row is None or row.output is None:
                continue
            output = row.output
            end = len(output)
            if end > row.fed:
                new = output[row.fed : end]
                if -1 in new:
                    new = new[: new.index(-1)]
                self._advance(slot, row, new)

    def feed_at(self, slot: int, index: int, token: int) -> bool:
        """Give ``slot`` its output token number ``index``; ``False`` if earlier ones are missing.

        Tokens already consumed (``index < fed``) are ignored.
        """
        row = self.rows.get(slot)
        if row is None or index < row.fed:
            return True
        if index > row.fed:
            return False
        self._advance(slot, row, [token])
        return True

    def missing(self, slot: int) -> int:
        """How many output tokens ``slot`` has consumed (the index of the next one it needs)."""
        row = self.rows.get(slot)
        return row.fed if row is not None else 0

    def feed(self, slot: int, tokens: Sequence[int]) -> None:
        """Advance ``slot``'s row with the next output tokens."""
        row = self.rows.get(slot)
        if row is not None:
            self._advance(slot, row, tokens)

    def _advance(self, slot: int, row: _Row, tokens: Sequence[int]) -> None:
        end = self.think_end_token_id
        for token in tokens:
            row.fed += 1
            if row.thinking:
                row.thinking = token != end
                spend(row.matcher)  # reasoning tokens count against max_tokens too
                continue
            matcher = row.matcher
            if matcher is None or matcher.is_finished():
                continue
            try:
                matcher.advance(int(token))
            except RejectedTokenError:
                logger.warning(
                    "outlines_like: slot %d generated token %d that its constraint does not "
                    "allow (another logits processor forced it?); the row now ends at EOS",
                    slot,
                    token,
                )
                row.matcher = None

    # -- masks

    def masked_slots(self, slots: Iterable[int]) -> list[int]:
        """Of ``slots``, those to mask this step (constrained and not thinking)."""
        rows = self.rows
        out = []
        for slot in slots:
            row = rows.get(slot)
            if row is not None and not row.thinking and not row.check_prompt:
                out.append(slot)
        return out

    def fill(self, slots: Sequence[int]) -> npt.NDArray[np.int32]:
        """The packed bitmasks of ``slots``: ``(len(slots), ceil(V/32))`` int32, a reused buffer."""
        n = len(slots)
        if self._host.shape[0] < n:
            self._host = np.zeros((max(n, 2 * self._host.shape[0]), self._host.shape[1]), np.int32)
        host = self._host[:n]
        for i, slot in enumerate(slots):
            matcher = self.rows[slot].matcher
            if matcher is None:
                host[i] = self._eos_row
            else:
                matcher.fill_bitmask(host[i])
        return host


_SPARSE = 4096  # rows allowing at most this many tokens: keep those, fill the rest
_MAX_SPARSE_CACHE = 4096
_sparse_ids: collections.OrderedDict[bytes, npt.NDArray[np.intp]] = collections.OrderedDict()


def _allowed_ids(row: npt.NDArray[np.int32], width: int) -> npt.NDArray[np.intp]:
    """The allowed ids of one packed row, cached by the row's bytes (masks repeat per state)."""
    key = row.tobytes()
    ids = _sparse_ids.get(key)
    if ids is None:
        bits = np.unpackbits(row.view(np.uint8), count=min(width, row.size * 32), bitorder="little")
        ids = np.flatnonzero(bits)
        _sparse_ids[key] = ids
        while len(_sparse_ids) > _MAX_SPARSE_CACHE:
            _sparse_ids.popitem(last=False)
    return ids


def _mask_numpy(scores: npt.NDArray[np.float32], words: npt.NDArray[np.int32]) -> None:
    """Mask ``(n, V)`` float scores in place, row by row (memory-bound: skip what can be).

    A row allowing few tokens keeps their values, is filled with ``-inf`` and gets them back
    (a memset and two small gathers); a dense row gets ``-inf`` where its bits are clear.
    """
    width = scores.shape[1]
    covered = min(width, words.shape[1] * 32)
    counts = np.unpackbits(words.view(np.uint8), axis=1).sum(axis=1, dtype=np.int64)
    inverted = np.invert(words)
    for i in range(scores.shape[0]):
        row = scores[i]
        if counts[i] <= _SPARSE:
            ids = _allowed_ids(words[i], width)
            kept = row[ids]
            row.fill(-np.inf)
            row[ids] = kept
            continue
        bits = np.unpackbits(inverted[i].view(np.uint8), count=covered, bitorder="little")
        np.putmask(row[:covered], bits.view(np.bool_), -np.inf)
        if covered < width:  # logits columns past the vocabulary (padded embeddings)
            row[covered:] = -np.inf


def mask_rows(logits: Any, rows: Sequence[int], words: npt.NDArray[np.int32]) -> Any:
    """Set the disallowed logits of ``rows`` to ``-inf`` in place.

    Args:
        logits: ``(B, V)`` torch tensor, on any device.
        rows: The logits rows to mask, in the order of ``words``' rows.
        words: ``(len(rows), W)`` packed int32 bitmasks (bit ``i % 32`` of word ``i // 32``
            set = token ``i`` allowed); columns past ``32 * W`` are disallowed.

    Returns:
        ``logits``.

    On an accelerator the packed words are uploaded once and unpacked and applied there, one
    batched operation for all rows. On the CPU, where masking is memory-bound, float32 logits
    are masked in place through numpy row by row (see :func:`_mask_numpy`), which beats one
    ``masked_fill_`` over the whole batch by skipping the untouched columns of sparse rows.
    """
    if not len(rows):
        return logits
    torch = import_torch()
    everything = len(rows) == logits.shape[0] and all(r == i for i, r in enumerate(rows))
    index = None if everything else torch.as_tensor(list(rows), device=logits.device)
    if logits.device.type == "cpu" and logits.dtype == torch.float32:
        if index is None and logits.is_contiguous():
            _mask_numpy(logits.numpy(), words)
            return logits
        target = logits.index_select(0, index) if index is not None else logits.contiguous()
        _mask_numpy(target.numpy(), words)
    else:
        target = logits if index is None else logits.index_select(0, index)
        device_words = torch.from_numpy(np.ascontiguousarray(words)).to(
            logits.device, non_blocking=True
        )
        apply_token_bitmask(target, device_words)
    if index is not None:
        logits.index_copy_(0, index, target)
    elif target is not logits:
        logits.copy_(target)
    return logits
