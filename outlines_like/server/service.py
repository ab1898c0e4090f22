"""The generation service: validated requests in, runs on the engine out; no HTTP.

:class:`GenerationService` owns the served model's engine (pipeline, scheduler), its
vocabulary and the constraint compiler. :meth:`~GenerationService.prepare_chat` and
:meth:`~GenerationService.prepare_completion` turn a validated request into a :class:`Job`
(the prompt rendered and encoded, the constraint compiled, one run per choice);
:meth:`~GenerationService.finish` runs a job to the end and
:meth:`~GenerationService.stream` yields its outputs as they come. The routes shape the
results (:mod:`outlines_like.server.responses`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from outlines_like.engine.masking import MaskWorkers
from outlines_like.engine.pipeline import StepOutput, TransformersPipeline
from outlines_like.engine.prepare import (
    PreparedPrompt,
    expand_runs,
    prepare_rendered,
    prepare_text,
    think_end_token_id,
)
from outlines_like.engine.runs import Run, generate_all
from outlines_like.engine.scheduler import Scheduler
from outlines_like.fsm.closing import check_max_tokens
from outlines_like.server.config import ServerConfig
from outlines_like.server.constraints import ConstraintCompiler
from outlines_like.server.dialects import ConstraintSpec, RequestError
from outlines_like.server.metrics import Metrics, TimedPipeline
from outlines_like.server.templates import TemplateLimitError, TemplateRenderer
from outlines_like.server.validation import ChatRequest, Common, CompletionRequest

if TYPE_CHECKING:
    from outlines_like.fsm._protocols import Compiled
    from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["GenerationService", "Job"]


@dataclasses.dataclass
class Job:
    """One request's runs, ready to generate.

    Attributes:
        kind: Which route it came from.
        runs: One per prompt and choice, indexed as the response's choices.
        prompt_tokens: Prompt tokens for the usage (each prompt once, whatever ``n``).
        common: Sampling, ``n``, streaming.
        tools: Tool calls are parsed out of the answers (chat with tools).
        constraint_key: The compiled constraint's cache key, if any.
        token_bytes: The vocabulary's token bytes, when the request asked for logprobs.
    """

    kind: Literal["chat", "completion"]
    runs: list[Run]
    prompt_tokens: int
    common: Common
    tools: bool = False
    constraint_key: tuple[str, str] | None = None
    token_bytes: Sequence[bytes] | None = None

    @property
    def completion_tokens(self) -> int:
        """Tokens generated over every run."""
        return sum(r.completion_tokens for r in self.runs)


def _check_max_tokens(compiled: Compiled, max_tokens: int) -> None:
    """A 400 when ``max_tokens`` cannot fit even the shortest answer of the constraint."""
    try:
        check_max_tokens(compiled, max_tokens)
    except ValueError as exc:
        raise RequestError(str(exc), param="max_tokens", code="max_tokens_too_small") from exc


def _engine_failure() -> RequestError:
    return RequestError(
        "generation failed inside the server (see its log)", code="internal_error", status=500
    )


class GenerationService:
    """The served model: its engine, vocabulary and constraint compiler.

    Args:
        model: A ``transformers`` causal LM.
        tokenizer: Its tokenizer (with a chat template for the chat route).
        config: Server limits.
        model_name: The served model id.

    Raises:
        ValueError: ``config.reasoning`` but ``</think>`` is not one token.
    """

    def __init__(self, model: Any, tokenizer: Any, config: ServerConfig, model_name: str) -> None:
        from outlines_like.fsm.vocabulary import Vocabulary

        self.config = config
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.vocabulary: Vocabulary = Vocabulary.from_transformers(tokenizer)
        self.mask_workers = MaskWorkers(
            config.mask_workers, job_timeout=config.mask_timeout, step_wait=config.step_mask_wait
        )
        self.pipeline = TransformersPipeline(model, tokenizer, mask_workers=self.mask_workers)
        self.metrics = Metrics()
        """What ``/metrics`` reports (the scheduler steps the pipeline through a timer)."""
        timed = TimedPipeline(self.pipeline, self.metrics.mask_step_seconds)
        self.scheduler = Scheduler(timed, max_batch_size=config.max_batch_size)
        self.compiler = ConstraintCompiler(
            self.vocabulary,
            max_states=config.max_states,
            max_bytes=config.max_constraint_bytes,
            timeout=config.compile_timeout,
            memory_bytes=config.compile_memory_bytes,
            workers=config.compile_workers,
            cache_bytes=config.cache_bytes,
        )
        self.templates = TemplateRenderer(
            timeout=config.template_timeout, max_bytes=config.template_max_bytes
        )
        self.created = int(time.time())
        self.think_end_token_id: int | None = (
            think_end_token_id(tokenizer, option="--reasoning") if config.reasoning else None
        )

    def start(self) -> None:
        """Start the engine thread and the compile workers."""
        self.scheduler.start()
        self.compiler.start()

    def stop(self) -> None:
        """Stop the engine thread, the mask threads and the compile workers."""
        self.scheduler.stop()
        self.mask_workers.shutdown()
        self.compiler.shutdown()

    def model_card(self) -> dict[str, Any]:
        """The ``/v1/models`` entry of the served model."""
        return {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "outlines-like",
            "max_model_len": self.pipeline.max_length,
        }

    def stats(self) -> dict[str, Any]:
        """Pipeline timings and batch sizes (``/stats``)."""
        out = dataclasses.asdict(self.pipeline.stats)
        out["batch_sizes"] = dict(self.scheduler.batch_sizes)
        out["load"] = self.scheduler.load
        out["constraints"] = self.compiler.status()
        return out

    # -- preparing ---------------------------------------------------------------------------

    async def prepare_chat(self, request: ChatRequest) -> Job:
        """Render the chat template, compile the constraint, and make one run per choice.

        Raises:
            RequestError: the template fails on these messages, the constraint does not
                compile, or the prompt does not fit the context.
        """
        try:
            rendered = await asyncio.to_thread(
                self.templates.render,
                self.tokenizer,
                request.messages,
                tools=request.tools,
                template_kwargs=request.template_kwargs,
            )
        except TemplateLimitError as exc:
            raise RequestError(
                f"the chat template {exc}", param="messages", code="template_too_costly"
            ) from exc
        except Exception as exc:  # a template error is the request's fault (bad messages)
            raise RequestError(
                f"the chat template failed on these messages: {exc}", param="messages"
            ) from exc
        prompt = prepare_rendered(
            self.tokenizer, rendered, think_end_token_id=self.think_end_token_id
        )
        runs = await self._runs([prompt], request.common, request.constraint, "chat")
        job = Job("chat", runs, len(prompt.ids), request.common, request.tools is not None)
        job.constraint_key = request.constraint.key if request.constraint else None
        if request.common.params.logprobs is not None:
            job.token_bytes = self.vocabulary.tokens
        return job

    async def prepare_completion(self, request: CompletionRequest) -> Job:
        """Encode the prompts, compile the constraint, and make one run per prompt and choice.

        Raises:
            RequestError: the constraint does not compile, or a prompt is empty or does not
                fit the context.
        """
        prompts = [
            prepare_text(self.tokenizer, p) if isinstance(p, str) else PreparedPrompt(tuple(p))
            for p in request.prompts
        ]
        runs = await self._runs(prompts, request.common, request.constraint, "cmpl")
        job = Job("completion", runs, sum(len(p.ids) for p in prompts), request.common)
        job.constraint_key = request.constraint.key if request.constraint else None
        return job

    async def _runs(
        self,
        prompts: Sequence[PreparedPrompt],
        common: Common,
        spec: ConstraintSpec | None,
        prefix: str,
    ) -> list[Run]:
        compiled = await self.compiler.compile(spec) if spec is not None else None
        if compiled is not None:
            await asyncio.to_thread(_check_max_tokens, compiled, common.params.max_tokens)
        context = self.pipeline.max_length
        for prompt in prompts:
            if not prompt.ids:
                raise RequestError("the prompt is empty", param="prompt")
            if len(prompt.ids) + common.params.max_tokens > context:
                raise RequestError(
                    f"prompt ({len(prompt.ids)} tokens) + max_tokens "
                    f"({common.params.max_tokens}) is over the model's context of {context} "
                    "tokens",
                    param="max_tokens",
                    code="context_length_exceeded",
                )
        return expand_runs(
            prompts, common.params, common.n, compiled, lambda: f"{prefix}-{uuid.uuid4().hex}"
        )

    # -- running -----------------------------------------------------------------------------

    async def stream(self, job: Job) -> AsyncIterator[tuple[Run, StepOutput]]:
        """The job's outputs as they come, every run interleaved (the runs fill in).

        When it ends, a constraint that failed in the engine is evicted from the cache, and
        one that worked is measured again (its tables grew while generating).

        Raises:
            RequestError: a run failed inside the engine (a 500, or the stream's error
                event; the log has the details). The job's other runs are cancelled.
        """
        try:
            async for run, out in generate_all(self.scheduler, job.runs):
                if out.finish_reason == "error":  # a stream ends with its own error event
                    raise _engine_failure()
                yield run, out
        finally:
            await self._after(job)

    async def _after(self, job: Job) -> None:
        key = job.constraint_key
        if key is None:
            return
        if any(r.finish_reason == "error" for r in job.runs):
            self.compiler.evict(key, "the masker failed on it or ran past its time budget")
        else:
            await asyncio.to_thread(self.compiler.remeasure, key)

    async def finish(self, job: Job) -> Job:
        """Run the job to the end.

        Raises:
            RequestError: a run failed inside the engine (a 500; the log has the details).
        """
        async for _ in self.stream(job):
            pass
        return job
