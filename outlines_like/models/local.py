"""Local models: a ``transformers`` model and tokenizer, constrained by our token masker.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
import outlines_like as ol
hf_model, hf_tok = AutoModelForCausalLM.from_pretrained(p), AutoTokenizer.from_pretrained(p)
local = ol.from_transformers(hf_model, hf_tok)
local("How old is Alice?", int, max_tokens=8)        # "42"
local.parse("Pick one", Literal["yes", "no"])        # "yes"
```

The API is the remote models' (``__call__``, ``stream``, ``batch``, ``parse``, ``complete``).
Generation runs on the reference server's batching pipeline
(:class:`outlines_like.server.pipeline.TransformersPipeline`): prompts of one ``batch`` call
(and the ``n`` choices of a call) share forward passes. ``str`` and ``Chat`` prompts go
through the tokenizer's chat template when it has one. With ``reasoning=True`` the text inside
``<think>...</think>`` is left free and the constraint applies after ``</think>``.

For ``transformers``' own ``generate()``, use :class:`outlines_like.fsm.processors.LogitsProcessor`.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from outlines_like.messages import Completion, Usage

if TYPE_CHECKING:
    from outlines_like.fsm._protocols import Compiled
    from outlines_like.fsm.vocabulary import Vocabulary
    from outlines_like.server.pipeline import GenerationRequest, TransformersPipeline

__all__ = ["TransformersModel", "from_transformers"]

_KWARGS = frozenset(
    {
        "max_tokens",
        "max_new_tokens",
        "temperature",
        "top_p",
        "seed",
        "n",
        "stop",
        "chat_template_kwargs",
    }
)
_THINK_END = "</think>"


def from_transformers(model: Any, tokenizer: Any, *, reasoning: bool = False) -> TransformersModel:
    """Wrap a ``transformers`` causal LM and its tokenizer as an outlines-like model.

    Args:
        model: A ``PreTrainedModel`` with a causal LM head, on any device.
        tokenizer: Its tokenizer.
        reasoning: Leave ``<think>...</think>`` free; apply the constraint after it. Needs
            ``</think>`` to be one token of the vocabulary.

    Raises:
        ImportError: torch or transformers is missing
            (``pip install 'outlines-like[transformers]'``).
        ValueError: ``reasoning=True`` but ``</think>`` is not a single token.
    """
    return TransformersModel(model, tokenizer, reasoning=reasoning)


@dataclasses.dataclass
class _Run:
    request: GenerationRequest
    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class TransformersModel:
    """A local model; see :func:`from_transformers`. Calls are serialised by a lock."""

    def __init__(self, model: Any, tokenizer: Any, *, reasoning: bool = False) -> None:
        from outlines_like.server.pipeline import TransformersPipeline

        self.model = model
        self.tokenizer = tokenizer
        self._pipeline: TransformersPipeline = TransformersPipeline(model, tokenizer)
        self._vocabulary: Vocabulary | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._usage = Usage()
        self.think_end_token_id: int | None = None
        if reasoning:
            ids = tokenizer.encode(_THINK_END, add_special_tokens=False)
            if len(ids) != 1:
                raise ValueError(
                    f"reasoning=True needs {_THINK_END!r} to be one token; this tokenizer splits "
                    f"it into {len(ids)}"
                )
            self.think_end_token_id = int(ids[0])

    def __repr__(self) -> str:
        name = (
            getattr(getattr(self.model, "config", None), "_name_or_path", "")
            or type(self.model).__name__
        )
        return f"TransformersModel({name!r})"

    @property
    def usage(self) -> Usage:
        """Token counts summed over this model's lifetime."""
        return self._usage

    @property
    def vocabulary(self) -> Vocabulary:
        """The masker's view of the tokenizer (built once)."""
        if self._vocabulary is None:
            from outlines_like.fsm.vocabulary import Vocabulary

            self._vocabulary = Vocabulary.from_transformers(self.tokenizer)
        return self._vocabulary

    # -- preparing -------------------------------------------------------------------------

    def _compile(self, output_type: object) -> Compiled | None:
        from outlines_like.fsm.compile import compile_constraint
        from outlines_like.types import to_term

        if to_term(output_type) is None:
            return None
        return compile_constraint(output_type, self.vocabulary)

    def _prompt_ids(self, prompt: object, template_kwargs: Mapping[str, Any]) -> list[int]:
        from outlines_like.inputs import Chat

        messages: list[dict[str, Any]] | None = None
        if isinstance(prompt, Chat):
            messages = [dict(m) for m in prompt.messages]
        elif isinstance(prompt, str):
            text = prompt
        elif isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            text = "".join(prompt)
        else:
            raise TypeError(
                f"a local text model takes a str or a Chat prompt, got {type(prompt).__name__} "
                "(images need a server with a vision model)"
            )
        template = getattr(self.tokenizer, "chat_template", None)
        if messages is None:
            if not template:
                return [int(t) for t in self.tokenizer.encode(text, add_special_tokens=False)]
            messages = [{"role": "user", "content": text}]
        elif not template:
            raise ValueError(
                "this tokenizer has no chat template; pass a str prompt instead of a Chat"
            )
        for message in messages:
            if not isinstance(message.get("content"), str):
                raise TypeError("local models take text message content only")
        rendered: str = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **template_kwargs
        )
        return [int(t) for t in self.tokenizer.encode(rendered, add_special_tokens=False)]

    def _requests(
        self, prompts: Sequence[object], output_type: object, kwargs: Mapping[str, Any]
    ) -> tuple[list[_Run], int]:
        from outlines_like.server.pipeline import GenerationRequest, SamplingParams

        unknown = sorted(set(kwargs) - _KWARGS)
        if unknown:
            raise TypeError(
                f"unknown inference argument(s) {unknown} for a local model; "
                f"it takes {sorted(_KWARGS)}"
            )
        n = kwargs.get("n", 1)
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        stop = kwargs.get("stop") or ()
        stop = (stop,) if isinstance(stop, str) else tuple(stop)
        seed = kwargs.get("seed")
        max_tokens = kwargs.get("max_tokens", kwargs.get("max_new_tokens", 256))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
        base = SamplingParams(
            max_tokens=max_tokens,
            temperature=float(kwargs.get("temperature", 1.0)),
            top_p=float(kwargs.get("top_p", 1.0)),
            seed=seed,
            stop=stop,
        )
        compiled = self._compile(output_type)
        template_kwargs = dict(kwargs.get("chat_template_kwargs") or {})
        runs: list[_Run] = []
        for prompt in prompts:
            ids = self._prompt_ids(prompt, template_kwargs)
            for j in range(n):
                params = dataclasses.replace(base, seed=None if seed is None else seed + j)
                request = GenerationRequest(
                    f"local-{next(self._ids)}",
                    ids,
                    params,
                    compiled,
                    self.think_end_token_id if compiled is not None else None,
                )
                runs.append(_Run(request, prompt_tokens=len(ids)))
        return runs, n

    # -- running ---------------------------------------------------------------------------

    def _steps(self, runs: list[_Run]) -> Iterator[tuple[_Run, str]]:
        """Step the pipeline until every run finishes, yielding text deltas."""
        active = {r.request.request_id: r for r in runs}
        try:
            while active:
                outputs = self._pipeline.execute([r.request for r in active.values()])
                for rid, out in outputs.items():
                    run = active[rid]
                    run.text += out.text
                    run.completion_tokens = out.completion_tokens
                    if out.finished:
                        run.finish_reason = out.finish_reason
                        del active[rid]
                        self._pipeline.release(rid)
                    if out.text:
                        yield run, out.text
        finally:
            for rid in active:
                self._pipeline.release(rid)

    def _completions(self, runs: list[_Run]) -> list[Completion]:
        from outlines_like.reasoning import split_reasoning

        with self._lock:
            for _ in self._steps(runs):
                pass
        out: list[Completion] = []
        for run in runs:
            reasoning, answer = split_reasoning(run.text) if self._splits(run) else (None, run.text)
            usage = Usage(
                run.prompt_tokens, run.completion_tokens, run.prompt_tokens + run.completion_tokens
            )
            self._usage = self._usage + usage
            out.append(Completion(answer, reasoning, (), run.finish_reason, usage, raw=run.text))
        return out

    def _splits(self, run: _Run) -> bool:
        return self.think_end_token_id is not None or "<think>" in run.text[:32]

    @staticmethod
    def _check_length(
        output_type: object, completions: Iterable[Completion], *, strict: bool
    ) -> None:
        from outlines_like.models._core import check_truncated
        from outlines_like.types import to_term

        if to_term(output_type) is None:
            return
        label = repr(getattr(output_type, "__name__", output_type))
        check_truncated(label, completions, strict=strict, stacklevel=4)

    # -- the public API --------------------------------------------------------------------

    def complete(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> Completion | list[Completion]:
        """Generate and return the rich result: a ``Completion`` (a list when ``n > 1``)."""
        runs, n = self._requests([prompt], output_type, inference_kwargs)
        completions = self._completions(runs)
        return completions[0] if n == 1 else completions

    def __call__(self, prompt: object, output_type: object = None, **inference_kwargs: Any) -> Any:
        """Generate the answer text (a list of texts when ``n > 1``).

        Warns:
            TruncatedOutputWarning: constrained output was cut at ``max_tokens``.
        """
        runs, n = self._requests([prompt], output_type, inference_kwargs)
        completions = self._completions(runs)
        self._check_length(output_type, completions, strict=False)
        return completions[0].text if n == 1 else [c.text for c in completions]

    def parse(self, prompt: object, output_type: object, **inference_kwargs: Any) -> Any:
        """Generate and read the answer as ``output_type`` (a list when ``n > 1``).

        Raises:
            GenerationError: the output was cut at ``max_tokens``.
            ParseError: the text does not fit ``output_type``.
        """
        from outlines_like.types import parse

        runs, n = self._requests([prompt], output_type, inference_kwargs)
        completions = self._completions(runs)
        self._check_length(output_type, completions, strict=True)
        values = [parse(output_type, c.text) for c in completions]
        return values[0] if n == 1 else values

    def batch(
        self, prompts: Iterable[object], output_type: object = None, **inference_kwargs: Any
    ) -> list[Any]:
        """Generate for many prompts in shared forward passes; results keep the prompts' order."""
        items = list(prompts)
        runs, n = self._requests(items, output_type, inference_kwargs)
        completions = self._completions(runs)
        self._check_length(output_type, completions, strict=False)
        texts = [c.text for c in completions]
        if n == 1:
            return texts
        return [texts[i * n : (i + 1) * n] for i in range(len(items))]

    def stream(
        self, prompt: object, output_type: object = None, **inference_kwargs: Any
    ) -> Iterator[str]:
        """Yield the answer in text deltas as it is generated (reasoning is never included).

        Raises:
            ValueError: ``n > 1`` (a stream carries one answer).
        """
        if inference_kwargs.get("n", 1) != 1:
            raise ValueError("stream() yields one answer; call batch() or __call__ with n > 1")
        runs, _ = self._requests([prompt], output_type, inference_kwargs)
        return self._stream(runs, output_type)

    def stream_parse(
        self, prompt: object, output_type: object, **inference_kwargs: Any
    ) -> Iterator[Any]:
        """Yield partial values as the JSON answer grows, then the validated one.

        See ``outlines_like.models.Model.stream_parse``.
        """
        from outlines_like.streaming import iter_partial

        return iter_partial(self.stream(prompt, output_type, **inference_kwargs), output_type)

    def _stream(self, runs: list[_Run], output_type: object) -> Iterator[str]:
        from outlines_like.reasoning import ReasoningStream

        splitter = ReasoningStream()
        with self._lock:
            for _, delta in self._steps(runs):
                _, answer = splitter.feed(delta)
                if answer:
                    yield answer
        _, tail = splitter.finish()
        if tail:
            yield tail
        run = runs[0]
        self._usage = self._usage + Usage(
            run.prompt_tokens, run.completion_tokens, run.prompt_tokens + run.completion_tokens
        )
        self._check_length(
            output_type, [Completion(run.text, finish_reason=run.finish_reason)], strict=False
        )
