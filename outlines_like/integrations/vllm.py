"""Our token masker inside vLLM: a batch-level logits processor for vLLM's V1 and V2 runners.

Start vLLM with it (the package must be importable in vLLM's environment)::

    vllm serve MODEL --logits-processors outlines_like.integrations.vllm:OutlinesLikeLogitsProcessor

or install ``outlines-like[vllm]`` there: the ``vllm.logits_processors`` entry point loads it in
every vLLM started from that environment. Clients opt in per request with
``from_server(client, server="vllm", masker="outlines_like")``, which sends the constraint as
JSON text in ``vllm_xargs`` (``SamplingParams.extra_args["outlines_like"]``, format in
``outlines_like.adapters.vllm``); requests without it are left alone.

vLLM 0.32 has two processor interfaces, and which one runs depends on the model runner:
the V1 runner (CPU, ``VLLM_USE_V2_MODEL_RUNNER=0``) calls ``update_state(BatchUpdate)`` with
added/removed/moved batch indices and hands each new request's live output-token list, then
``apply(logits)`` with one row per batch index; the V2 runner (the GPU default) calls
``add_request(slot, params)`` for persistent request slots and ``apply(logits, ctx)`` with the
step's row -> slot mapping, the token fed at each row and its position. Each loader checks the
class against its own base, so :data:`OutlinesLikeLogitsProcessor` subclasses both (built on
first access, when vLLM imports it) and dispatches on the arguments it gets.

Per step: advance each constrained row's matcher with its new tokens, fill one packed bitmask
for all constrained rows, apply it with one batched tensor operation on the logits' device.
``validate_params`` compiles the constraint once against a byte vocabulary, so a bad one is an
HTTP 400 before scheduling. Reasoning: a row stays free until ``</think>`` when its argument
says ``"reasoning": true``, or by default when vLLM runs a reasoning parser (``--reasoning-parser``
without ``enable_in_reasoning``), unless the prompt already closed the think block.

Set ``OUTLINES_LIKE_VLLM_STATS=/path/stats.json`` to have the processor write the time it
spends per step and the step interval there (``benchmarks/vllm_plugin.py`` reads it).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
import types
from typing import TYPE_CHECKING, Any

from outlines_like.fsm.index import prepare_vocabulary
from outlines_like.fsm.processors import import_torch
from outlines_like.integrations._batch import (
    PROMPT_TAIL,
    ConstrainedBatch,
    check_argument,
    mask_rows,
    request_argument,
)

if TYPE_CHECKING:
    from outlines_like.fsm import Vocabulary

    OutlinesLikeLogitsProcessor: type  # built on first access: see __getattr__ below

__all__ = ["OutlinesLikeLogitsProcessor", "StepStats", "build_vocabulary"]

STATS_ENV = "OUTLINES_LIKE_VLLM_STATS"
logger = logging.getLogger("outlines_like.integrations.vllm")


def build_vocabulary(vllm_config: Any) -> tuple[Vocabulary, int | None]:
    """The vocabulary of the engine's tokenizer, and the id of ``</think>`` if it is one token.

    Args:
        vllm_config: vLLM's ``VllmConfig`` (its ``model_config`` names the tokenizer).
    """
    from transformers import AutoTokenizer

    from outlines_like.engine.prepare import think_end_token_id
    from outlines_like.fsm import Vocabulary

    model_config = vllm_config.model_config
    tokenizer = AutoTokenizer.from_pretrained(
        model_config.tokenizer,
        revision=getattr(model_config, "tokenizer_revision", None),
        trust_remote_code=bool(getattr(model_config, "trust_remote_code", False)),
    )
    vocabulary = Vocabulary.from_transformers(tokenizer)
    try:
        think_end: int | None = think_end_token_id(tokenizer, option="reasoning")
    except ValueError:  # only requests asking for reasoning need it (they then get a warning)
        think_end = None
    return vocabulary, think_end


def _reasoning_default(vllm_config: Any) -> bool:
    config = getattr(vllm_config, "structured_outputs_config", None)
    if config is None:
        return False
    return bool(getattr(config, "reasoning_parser", "")) and not bool(
        getattr(config, "enable_in_reasoning", False)
    )


class StepStats:
    """Time spent in the processor per step, and the time between steps (one engine step).

    Written as JSON to ``OUTLINES_LIKE_VLLM_STATS`` every ``every`` steps.
    """

    def __init__(self, path: str | None, every: int = 20) -> None:
        self.path = path
        self.every = every
        self.steps = 0
        self.masked_steps = 0
        self.rows = 0
        self.busy_s = 0.0
        self.interval_s = 0.0
        self._last: float | None = None

    def record(self, started: float, ended: float, rows: int) -> None:
        """One ``apply`` call from ``started`` to ``ended`` that masked ``rows`` rows."""
        if self.path is None:
            return
        if self._last is not None and started - self._last < 1.0:  # idle gaps are not steps
            self.interval_s += ended - self._last
            self.steps += 1
            self.busy_s += ended - started
            self.masked_steps += rows > 0
            self.rows += rows
        self._last = ended
        if self.steps % self.every == 0:
            self.write()

    def write(self) -> None:
        """Write the totals (atomically)."""
        if self.path is None:
            return
        data = {
            "steps": self.steps,
            "masked_steps": self.masked_steps,
            "masked_rows": self.rows,
            "processor_s": self.busy_s,
            "step_s": self.interval_s,
        }
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.replace(tmp, self.path)
        except OSError:
            pass


_LOADED: list[ConstrainedBatch] = []  # the batch of the processor built in this process


class _Processor:
    """The shared body of both interfaces (mixed into vLLM's base classes in :func:`_build`)."""

    batch: ConstrainedBatch
    _req_states: Any
    _stats: StepStats

    def _setup(self, vllm_config: Any, req_states: Any = None) -> None:
        if getattr(vllm_config, "speculative_config", None) is not None:
            raise ValueError(
                "outlines_like's logits processor does not support speculative decoding "
                "(draft tokens would need their own matcher states); start vLLM without it"
            )
        vocabulary, think_end = build_vocabulary(vllm_config)
        # token tables, shared lexeme sets and the compiled kernels at start-up, not in the
        # first request (a machine's first run compiles the kernels: seconds)
        prepare_vocabulary(vocabulary)
        self.batch = ConstrainedBatch(
            vocabulary,
            think_end_token_id=think_end,
            reasoning_default=_reasoning_default(vllm_config),
        )
        _LOADED[:] = [self.batch]
        self._req_states = req_states
        self._stats = StepStats(os.environ.get(STATS_ENV) or None)
        logger.info(
            "outlines_like logits processor ready: %d tokens, </think> id %s, runner %s",
            vocabulary.size,
            think_end,
            "V2" if req_states is not None else "V1",
        )

    # -- both runners

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Refuse a malformed or uncompilable constraint (an HTTP 400 before scheduling).

        Where a processor runs in this process (its vocabulary is known), a ``max_tokens``
        that cannot fit even the shortest answer is refused too.
        """
        check_argument(
            getattr(sampling_params, "extra_args", None),
            max_tokens=getattr(sampling_params, "max_tokens", None),
            batch=_LOADED[-1] if _LOADED else None,
        )

    def is_argmax_invariant(self) -> bool:
        """Masks change the argmax (V1 runner)."""
        return False

    # -- V1 runner

    def update_state(self, batch_update: Any) -> None:
        """Apply the batch's changes: removed, then added, then moved (V1 runner)."""
        if batch_update is None:
            return
        batch = self.batch
        for index in batch_update.removed:
            batch.remove(index)
        for index, params, prompt_ids, output_ids in batch_update.added:
            arg = request_argument(getattr(params, "extra_args", None))
            batch.add(
                index,
                arg,
                prompt_ids=prompt_ids or (),
                output=output_ids,
                max_tokens=getattr(params, "max_tokens", None),
            )
        for src, dst, direction in batch_update.moved:
            if getattr(direction, "name", "") == "SWAP":
                batch.swap(src, dst)
            else:
                batch.move(src, dst)

    # -- V2 runner

    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        """Start a request in a persistent slot; ``False`` when it carries no constraint."""
        arg = request_argument(getattr(sampling_params, "extra_args", None))
        max_tokens = getattr(sampling_params, "max_tokens", None)
        return self.batch.add(req_idx, arg, prompt_ids=None, output=None, max_tokens=max_tokens)

    def apply_staged_writes(self) -> None:
        """Nothing is staged: state lives on the host (V2 runner)."""

    # -- the step

    def apply(self, logits: Any, ctx: Any = None) -> Any:
        """Mask the constrained rows of ``logits`` in place and return it."""
        started = time.perf_counter()
        if ctx is None:
            rows = self._step_v1(logits)
            slots = rows
        else:
            rows, slots = self._step_v2(logits, ctx)
        if rows:
            mask_rows(logits, rows, self.batch.fill(slots))
        self._stats.record(started, time.perf_counter(), len(rows))
        return logits

    def _step_v1(self, logits: Any) -> list[int]:
        batch = self.batch
        if not batch.rows:
            return []
        present = [i for i in sorted(batch.rows) if i < logits.shape[0]]
        batch.feed_outputs(present)
        return batch.masked_slots(present)

    def _step_v2(self, logits: Any, ctx: Any) -> tuple[list[int], list[int]]:
        batch = self.batch
        if not batch.rows:
            return [], []
        slot_of_row = [int(s) for s in ctx.idx_mapping_np]
        if logits.shape[0] != len(slot_of_row):
            raise RuntimeError(
                "outlines_like: more logits rows than requests (speculative decoding?); "
                "this processor needs one row per request"
            )
        positions = [i for i, s in enumerate(slot_of_row) if s in batch.rows]
        if not positions:
            return [], []
        torch = import_torch()
        where = torch.as_tensor(positions, device=ctx.input_ids.device)
        fed_ids = ctx.input_ids.index_select(0, where).tolist()
        fed_pos = ctx.pos.index_select(0, where).tolist()
        prompt_lens = self._req_states.prompt_len.np
        for row, token, pos in zip(positions, fed_ids, fed_pos, strict=True):
            slot = slot_of_row[row]
            prompt_len = int(prompt_lens[slot])
            if batch.rows[slot].check_prompt:
                batch.prompt_known(
                    slot, self._tokens(slot, max(0, prompt_len - PROMPT_TAIL), prompt_len)
                )
            index = int(pos) - prompt_len  # the fed token's index in the output (< 0: prompt)
            if index < 0:
                continue
            if not batch.feed_at(slot, index, int(token)):  # resumed, or a step we missed
                start = prompt_len + batch.missing(slot)
                batch.feed(slot, self._tokens(slot, start, int(pos)))
                batch.feed_at(slot, index, int(token))
        masked = set(batch.masked_slots(slot_of_row[r] for r in positions))
        rows = [r for r in positions if slot_of_row[r] in masked]
        return rows, [slot_of_row[r] for r in rows]

    def _tokens(self, slot: int, start: int, end: int) -> list[int]:
        """Committed token ids ``[start, end)`` of ``slot`` from the runner's token history."""
        if end <= start:
            return []
        history = self._req_states.all_token_ids
        table = getattr(history, "gpu", history)
        return [int(t) for t in table[slot, start:end].tolist()]


_BASES = (
    "vllm.v1.sample.logits_processor",  # the V1 model runner's interface
    "vllm.v1.worker.gpu.sample.logits_processor",  # Model Runner V2's interface
)


def _build() -> type:
    """The processor class, subclassing each vLLM logits-processor base that is installed."""
    bases: list[type] = []
    for module in _BASES:
        try:
            base = importlib.import_module(module).LogitsProcessor
        except (ImportError, AttributeError):  # pragma: no cover - depends on the vLLM version
            continue
        if isinstance(base, type):
            bases.append(base)
    if not bases:
        raise ImportError(
            "outlines_like's vLLM logits processor needs vLLM with custom logits processors "
            "(vllm.v1.sample.logits_processor); pip install 'outlines-like[vllm]'"
        )

    def __init__(self: Any, vllm_config: Any, *args: Any) -> None:
        # V1 runner: (vllm_config, device, is_pin_memory); V2: (vllm_config, req_states)
        self._setup(vllm_config, args[0] if len(args) == 1 else None)

    def body(namespace: dict[str, Any]) -> None:
        namespace["__init__"] = __init__
        namespace["__module__"] = __name__
        namespace["__doc__"] = (
            "outlines-like's constraints inside vLLM (V1 and V2 model runners); see the "
            "module docstring of outlines_like.integrations.vllm."
        )

    return types.new_class("OutlinesLikeLogitsProcessor", (_Processor, *bases), exec_body=body)


_built: type | None = None


def __getattr__(name: str) -> Any:
    """Build ``OutlinesLikeLogitsProcessor`` on first access (that is when vLLM is imported)."""
    global _built
    if name == "OutlinesLikeLogitsProcessor":
        if _built is None:
            _built = _build()
        return _built
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
