"""Local models: a ``transformers`` model and tokenizer, constrained by our token masker.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer
import outlines_like as ol
hf_model, hf_tok = AutoModelForCausalLM.from_pretrained(p), AutoTokenizer.from_pretrained(p)
local = ol.from_transformers(hf_model, hf_tok)
local("How old is Alice?", int, max_tokens=8)        # "42"
local.parse("Pick one", Literal["yes", "no"])        # "yes"
local.parse("Describe a hero", Hero, retries=2)      # asked again when validators fail
```

The API is the remote models' (``__call__``, ``stream``, ``batch``, ``parse``, ``complete``);
``retries=`` on ``parse``, ``complete`` and ``stream_parse`` reasks as they do
(:mod:`outlines_like.models.reask`; a ``Chat`` follow-up needs the tokenizer's chat template).
Generation runs on the engine the reference server also uses
(:class:`outlines_like.engine.pipeline.TransformersPipeline`): prompts of one ``batch`` call
(and the ``n`` choices of a call) share forward passes. Prompts (a ``str``, a list of text
parts, a ``Chat``) go through the tokenizer's chat template when it has one
(:mod:`outlines_like.engine.prepare`). With ``reasoning=True`` the text inside
``<think>...</think>`` is left free and the constraint applies after ``</think>``.

For ``transformers``' own ``generate()``, use :class:`outlines_like.fsm.processors.LogitsProcessor`.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from outlines_like.messages import Completion, Usage
from outlines_like.models.reask import Retries, reask_policy

if TYPE_CHECKING:
    from outlines_like.engine.pipeline import TransformersPipeline
    from outlines_like.engine.runs import Run
    from outlines_like.fsm._protocols import Compiled
    from outlines_like.fsm.vocabulary import Vocabulary
    from outlines_like.models.reask import Ask, Reasked, ReaskPolicy

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


class TransformersModel:
    """A local model; see :func:`from_transformers`. Calls are serialised by a lock."""

    def __init__(self, model: Any, tokenizer: Any, *, reasoning: bool = False) -> None:
        from outlines_like.engine.pipeline import TransformersPipeline
        from outlines_like.engine.prepare import think_end_token_id

        self.model = model
        self.tokenizer = tokenizer
        self._pipeline: TransformersPipeline = TransformersPipeline(model, tokenizer)
        self._vocabulary: Vocabulary | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._usage = Usage()
        self.think_end_token_id: int | None = (
            think_end_token_id(tokenizer, option="reasoning=True") if reasoning else None
        )

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

    def _requests(
        self, prompts: Sequence[object], output_type: object, kwargs: Mapping[str, Any]
    ) -> tuple[list[Run], int]:
        from outlines_like.engine.pipeline import SamplingParams
        from outlines_like.engine.prepare import expand_runs, prepare_prompt

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
        max_tokens = kwargs.get("max_tokens", kwargs.get("max_new_tokens", 256))
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=float(kwargs.get("temperature", 1.0)),
            top_p=float(kwargs.get("top_p", 1.0)),
            seed=kwargs.get("seed"),
            stop=stop,
        )
        compiled = self._compile(output_type)
        if compiled is not None:
            from outlines_like.fsm.closing import check_max_tokens

            check_max_tokens(compiled, max_tokens)  # before generating: a clear ValueError
        template_kwargs = dict(kwargs.get("chat_template_kwargs") or {})
        prepared = [
            prepare_prompt(
                self.tokenizer,
                prompt,
                template_kwargs=template_kwargs,
                think_end_token_id=self.think_end_token_id,
            )
            for prompt in prompts
        ]
        return expand_runs(prepared, params, n, compiled, lambda: f"local-{next(self._ids)}"), n

    # -- running ---------------------------------------------------------------------------

    def _deltas(self, runs: list[Run]) -> Iterator[tuple[Run, str]]:
        """Step the pipeline until every run finishes, yielding text deltas."""
        from outlines_like.engine.runs import step_until_done

        for run, out in step_until_done(self._pipeline, runs):
            if out.text:
                yield run, out.text

    def _completions(self, runs: list[Run]) -> list[Completion]:
        from outlines_like.reasoning import split_reasoning

        with self._lock:
            for _ in self._deltas(runs):
                pass
        out: list[Completion] = []
        for run in runs:
            reasoning, answer = (
                split_reasoning(run.text, think_open=run.think_open)
                if self._splits(run)
                else (None, run.text)
            )
            usage = Usage(
                run.prompt_tokens, run.completion_tokens, run.prompt_tokens + run.completion_tokens
            )
            self._usage = self._usage + usage
            out.append(Completion(answer, reasoning, (), run.finish_reason, usage, raw=run.text))
        return out

    @staticmethod
    def _splits(run: Run) -> bool:
        return run.think_open or "<think>" in run.text[:32]

    @staticmethod
    def _check(output_type: object, completions: Iterable[Completion], *, stacklevel: int) -> None:
        """The one rule for answers under an output type (``models/_reader.py``).

        Our masker enforces the constraint, so a misfit can only be an answer cut at
        ``max_tokens`` (``GenerationError``); a cut answer that fits warns.
        """
        from outlines_like.models._reader import check_answers
        from outlines_like.types import to_term

        term = to_term(output_type)
        if term is None:
            return
        label = repr(getattr(output_type, "__name__", output_type))
        check_answers(label, term, list(completions), verify=True, stacklevel=stacklevel + 1)

    # -- the public API --------------------------------------------------------------------

    def complete(
        self,
        prompt: object,
        output_type: object = None,
        *,
        retries: Retries = 0,
        **inference_kwargs: Any,
    ) -> Completion | list[Completion]:
        """Generate and return the rich result: a ``Completion`` (a list when ``n > 1``).

        With ``retries``, as on the remote models: parsed, asked again on a validation
        failure, and the answer kept carries every attempt in ``attempts``.
        """
        policy = reask_policy(retries)
        if policy is not None:
            return self._reask(prompt, output_type, inference_kwargs, policy).completion
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
        self._check(output_type, completions, stacklevel=2)
        return completions[0].text if n == 1 else [c.text for c in completions]

    def parse(
        self, prompt: object, output_type: object, *, retries: Retries = 0, **inference_kwargs: Any
    ) -> Any:
        """Generate and read the answer as ``output_type`` (a list when ``n > 1``).

        ``retries``: ask again when the answer fails validation; see ``Model.parse``.

        Raises:
            GenerationError: the output was cut at ``max_tokens``.
            ParseError: the text does not fit ``output_type`` (``error.attempts``: every
                answer, with ``retries``).
        """
        from outlines_like.types import parse

        policy = reask_policy(retries)
        if policy is not None:
            return self._reask(prompt, output_type, inference_kwargs, policy).value
        runs, n = self._requests([prompt], output_type, inference_kwargs)
        completions = self._completions(runs)
        self._check(output_type, completions, stacklevel=2)
        values = [parse(output_type, c.text) for c in completions]
        return values[0] if n == 1 else values

    def _reask(
        self, prompt: object, output_type: object, kw: Mapping[str, Any], policy: ReaskPolicy
    ) -> Reasked[Any]:
        """Run ``reask_flow`` on this model (see ``outlines_like.models.reask``)."""
        from outlines_like.models.reask import check_reaskable, reask_flow
        from outlines_like.models.retry import NO_RETRY, drive
        from outlines_like.types import parse

        check_reaskable(kw.get("n") or 1, chat=True)

        def ask(step: Ask) -> list[Completion]:
            return self._completions(self._requests([step.prompt], output_type, kw)[0])

        def read(completions: list[Completion]) -> Any:
            # warnings point at the caller: read, the flow, drive, _reask, parse/complete
            self._check(output_type, completions, stacklevel=6)
            return parse(output_type, completions[0].text)

        return drive(reask_flow(prompt, policy, read), ask, NO_RETRY)

    def batch(
        self,
        prompts: Iterable[object],
        output_type: object = None,
        *,
        retries: Retries = 0,
        **inference_kwargs: Any,
    ) -> list[Any]:
        """Generate for many prompts in shared forward passes; results keep the prompts' order.

        With ``retries``, each answer is also parsed as ``output_type``, and the prompts whose
        answer failed validation are asked again together, in rounds (``Model.batch``); the
        first failure that is not asked again is raised once its round ends.
        """
        items = list(prompts)
        policy = reask_policy(retries)
        if policy is not None:
            return self._batch_reask(items, output_type, inference_kwargs, policy)
        runs, n = self._requests(items, output_type, inference_kwargs)
        completions = self._completions(runs)
        self._check(output_type, completions, stacklevel=2)
        texts = [c.text for c in completions]
        if n == 1:
            return texts
        return [texts[i * n : (i + 1) * n] for i in range(len(items))]

    def _batch_reask(
        self, items: list[object], output_type: object, kw: Mapping[str, Any], policy: ReaskPolicy
    ) -> list[Any]:
        from outlines_like.errors import GenerationError, ParseError
        from outlines_like.models.reask import Reasker, check_reaskable
        from outlines_like.types import parse

        check_reaskable(kw.get("n") or 1, chat=True)
        states = [Reasker(prompt, policy) for prompt in items]
        texts: list[Any] = [None] * len(items)
        pending = list(range(len(items)))
        while pending:
            runs, _ = self._requests([states[i].prompt for i in pending], output_type, kw)
            failures: list[Exception] = []
            again: list[int] = []
            for i, completion in zip(pending, self._completions(runs), strict=True):
                try:
                    self._check(output_type, [completion], stacklevel=3)
                    parse(output_type, completion.text)
                except ParseError as error:
                    if states[i].retry(completion, error):
                        again.append(i)
                    else:
                        failures.append(error)
                except GenerationError as error:  # a cut answer: never asked again
                    failures.append(error)
                else:
                    texts[i] = states[i].passed(completion).text
            if failures:
                raise failures[0]
            pending = again
        return texts

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
        self, prompt: object, output_type: object, *, retries: Retries = 0, **inference_kwargs: Any
    ) -> Iterator[Any]:
        """Yield partial values as the JSON answer grows, then the validated one.

        See ``outlines_like.models.Model.stream_parse`` (``retries`` included).
        """
        from outlines_like.models.reask import iter_reasked
        from outlines_like.streaming import iter_partial

        if inference_kwargs.get("n", 1) != 1:
            raise ValueError("stream_parse() reads one answer; call parse() with n > 1")
        runs, _ = self._requests([prompt], output_type, inference_kwargs)
        policy = reask_policy(retries)
        if policy is None:
            return iter_partial(self._stream(runs, output_type, level=3), output_type)

        def open_stream(asked: object) -> tuple[Iterator[str], Callable[[], Completion]]:
            done: list[Completion] = []
            again, _ = self._requests([asked], output_type, inference_kwargs)
            return self._stream(again, output_type, 4, done), lambda: done[-1]

        return iter_reasked(open_stream, prompt, output_type, policy)

    def _stream(
        self,
        runs: list[Run],
        output_type: object,
        level: int = 2,
        done: list[Completion] | None = None,
    ) -> Iterator[str]:
        from outlines_like.reasoning import ReasoningStream

        splitter = ReasoningStream(think_open=runs[0].think_open)
        pieces: list[str] = []
        with self._lock:
            for _, delta in self._deltas(runs):
                _, answer = splitter.feed(delta)
                if answer:
                    pieces.append(answer)
                    yield answer
        _, tail = splitter.finish()
        if tail:
            pieces.append(tail)
            yield tail
        run = runs[0]
        usage = Usage(
            run.prompt_tokens, run.completion_tokens, run.prompt_tokens + run.completion_tokens
        )
        self._usage = self._usage + usage
        completion = Completion("".join(pieces), finish_reason=run.finish_reason, usage=usage)
        if done is not None:
            done.append(completion)
        self._check(output_type, [completion], stacklevel=level)
