"""The reference server's options: model, limits, reasoning mode, threads."""

from __future__ import annotations

import dataclasses

__all__ = ["SERVER_VERSION", "ServerConfig"]

SERVER_VERSION = "0.1.0"
"""What ``/version`` reports."""


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Limits and options of the reference server.

    Attributes:
        model: ``"tiny"`` or a local transformers model folder.
        model_name: The id served in ``/v1/models`` (default: ``tiny`` or the folder's name).
        api_key: When set, ``/v1/*`` requires ``Authorization: Bearer <api_key>``.
        max_body_bytes: Largest request body.
        max_tokens_limit: Largest ``max_tokens`` a request may ask for.
        default_max_tokens: ``max_tokens`` when a request gives none.
        max_n: Largest ``n``.
        max_constraint_bytes: Largest constraint (regex, schema or grammar text).
        max_states: DFA state limit when compiling a regex or schema.
        compile_timeout: Seconds a constraint may take to compile (with its first mask) before
            a 400; the worker that ran past it is killed.
        compile_memory_bytes: Resident memory a compile worker may reach before it is killed
            (the request gets a 400).
        compile_workers: Compile worker processes.
        cache_bytes: Memory the compiled-constraint cache may hold (its entries grow as
            generation reaches new states; the least recently used go first).
        mask_timeout: Seconds one mask (or one matcher step) may take; past it the sequence
            fails alone and its constraint is evicted.
        step_mask_wait: Seconds a decode step waits for masks that are not ready; the rows
            still waiting sit that step out instead of stalling the batch.
        mask_workers: Threads computing masks off the engine thread.
        body_timeout: Seconds a client may take to send its request body (a 408 after).
        allow_request_templates: Render a chat template sent in ``chat_template_kwargs``
            (off: a 400, as vLLM without ``--trust-request-chat-template``).
        template_timeout: Seconds a chat template may render.
        template_max_bytes: Largest rendered chat prompt.
        max_batch_size: Most sequences in one forward pass.
        reasoning: Reasoning-aware constraints (as vLLM's ``--reasoning-parser``): a chat
            request's constraint applies after the model's ``</think>``, the reasoning before
            it is free. Needs ``</think>`` to be one token.
        torch_threads: torch's intra-op threads (process-wide). ``None``: 1 for the tiny
            model, where more threads only add synchronisation (10x slower on 2 busy
            cores, measured), and torch's default for other models.
    """

    model: str = "tiny"
    model_name: str | None = None
    api_key: str | None = None
    max_body_bytes: int = 2_000_000
    max_tokens_limit: int = 2048
    default_max_tokens: int = 256
    max_n: int = 16
    max_constraint_bytes: int = 200_000
    max_states: int = 20_000
    compile_timeout: float = 10.0
    compile_memory_bytes: int = 2_000_000_000
    compile_workers: int = 2
    cache_bytes: int = 256_000_000
    mask_timeout: float = 2.0
    step_mask_wait: float = 0.02
    mask_workers: int = 2
    body_timeout: float = 30.0
    allow_request_templates: bool = False
    template_timeout: float = 5.0
    template_max_bytes: int = 1_000_000
    max_batch_size: int = 64
    reasoning: bool = False
    torch_threads: int | None = None
