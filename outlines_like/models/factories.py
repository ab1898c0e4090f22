"""Factories: wrap an ``openai`` client into a ``Model`` (sync) or ``AsyncModel`` (async).

```python
model = from_server(openai.OpenAI(base_url="http://localhost:8000/v1", api_key="-"))
amodel = from_vllm(openai.AsyncOpenAI(base_url=...), model_name="Qwen/Qwen3-0.6B")
```
"""

from __future__ import annotations

from typing import overload

import openai

from outlines_like.adapters.base import Endpoint, ServerKind
from outlines_like.adapters.vllm import Masker, masker_adapter
from outlines_like.models._reader import Verify
from outlines_like.models.remote import AsyncModel, Model
from outlines_like.models.retry import RateLimiter, RetryPolicy

__all__ = [
    "ServerFactory",
    "from_llamacpp",
    "from_ollama",
    "from_openai",
    "from_server",
    "from_sglang",
    "from_tgi",
    "from_vllm",
]

_DEFAULT_RETRY = RetryPolicy()


@overload
def from_server(
    client: openai.OpenAI,
    server: ServerKind | None = None,
    *,
    model_name: str | None = None,
    endpoint: Endpoint = "chat",
    retry: RetryPolicy | None = _DEFAULT_RETRY,
    rate_limit: RateLimiter | float | None = None,
    reasoning_parser: bool | None = None,
    verify: Verify = True,
    masker: Masker = "server",
    probe_enforcement: bool = False,
) -> Model: ...
@overload
def from_server(
    client: openai.AsyncOpenAI,
    server: ServerKind | None = None,
    *,
    model_name: str | None = None,
    endpoint: Endpoint = "chat",
    retry: RetryPolicy | None = _DEFAULT_RETRY,
    rate_limit: RateLimiter | float | None = None,
    reasoning_parser: bool | None = None,
    verify: Verify = True,
    masker: Masker = "server",
    probe_enforcement: bool = False,
) -> AsyncModel: ...
def from_server(
    client: openai.OpenAI | openai.AsyncOpenAI,
    server: ServerKind | None = None,
    *,
    model_name: str | None = None,
    endpoint: Endpoint = "chat",
    retry: RetryPolicy | None = _DEFAULT_RETRY,
    rate_limit: RateLimiter | float | None = None,
    reasoning_parser: bool | None = None,
    verify: Verify = True,
    masker: Masker = "server",
    probe_enforcement: bool = False,
) -> Model | AsyncModel:
    """Wrap a client: ``Model`` for ``openai.OpenAI``, ``AsyncModel`` for ``openai.AsyncOpenAI``.

    Args:
        client: The client you already have, pointed at the server (``base_url``).
        server: ``"sglang"``, ``"vllm"``, ``"llamacpp"``, ``"tgi"``, ``"ollama"``,
            ``"openai"`` or ``"generic"``; ``None`` detects it from the server at the
            first call (or at ``model.detect()``). The answer is kept on this model, not
            in the process: a new ``from_server`` probes anew, and a model whose request
            fails with a connection error or a 404 probes once more and follows the new
            server. ``"vllm"`` asks the server's version (older than 0.12 reads
            ``guided_*`` fields); other named kinds send no probe.
        model_name: The model id to request; ``None`` uses the server's single served model.
            A per-call ``model=`` wins over it.
        endpoint: ``"chat"`` (default) or ``"completions"`` for raw text prompts.
        retry: Our retry policy (the client's own retries are then turned off so attempts
            do not multiply); ``None`` leaves retrying to the client's ``max_retries``.
        rate_limit: A ``RateLimiter``, a number of requests per minute, or ``None``.
        reasoning_parser: Whether the server runs a reasoning parser that applies constraints
            after the model's thinking (vLLM/SGLang ``--reasoning-parser``). ``None``:
            unknown. A constrained call to a model whose name says it thinks, on a server
            that may constrain from the first token, warns (``ThinkingConstrainedWarning``).
        verify: Check every answer against its output type before returning it: ``True``
            raises ``ConstraintViolationError`` when a server broke the constraint,
            ``"warn"`` warns and returns the answer, ``False`` skips the check. A per-call
            ``verify=`` wins.
        masker: ``"server"`` (default): the server's own backend enforces constraints;
            ``"outlines_like"``: our logits processor inside vLLM does (docs/vllm.md).
        probe_enforcement: Prove at once that the server enforces what it is sent: one tiny
            constrained request (``models/enforcement.py``). A sync model does it here and
            raises ``UnsupportedConstraintError`` when the server ignores the constraint; an
            async model at ``await amodel.detect()`` or its first call.

    Raises:
        TypeError: ``client`` is not an ``openai.OpenAI`` or ``openai.AsyncOpenAI``.
        ValueError: ``server`` or ``endpoint`` is not a known value.
    """
    options = {
        "model_name": model_name,
        "endpoint": endpoint,
        "retry": retry,
        "rate_limit": rate_limit,
        "reasoning_parser": reasoning_parser,
        "verify": verify,
        "adapter": masker_adapter(server, masker),
        "probe_enforcement": probe_enforcement,
    }
    if isinstance(client, openai.AsyncOpenAI):
        return AsyncModel(client, server, **options)  # type: ignore[arg-type]
    if isinstance(client, openai.OpenAI):
        model = Model(client, server, **options)  # type: ignore[arg-type]
        if probe_enforcement:
            model.detect()
        return model
    raise TypeError(
        f"from_server takes an openai.OpenAI (gives a Model) or an openai.AsyncOpenAI "
        f"(gives an AsyncModel) client, got {type(client).__module__}.{type(client).__qualname__}; "
        "create one with openai.OpenAI(base_url='http://host:port/v1', api_key=...)"
    )


class ServerFactory:
    """``from_<server>(client, model_name=None, **options)``: ``from_server`` with the kind fixed.

    The dialect is the one named; only ``from_vllm`` sends a probe (``GET /version``, once,
    at the first call: vLLM's fields changed at 0.12).
    """

    def __init__(self, kind: ServerKind, title: str) -> None:
        self.kind: ServerKind = kind
        self.__name__ = self.__qualname__ = f"from_{kind}"
        self.__doc__ = (
            f"Wrap a client pointed at {title}: ``from_server(client, {kind!r}, ...)``.\n\n"
            "Returns a ``Model`` for ``openai.OpenAI`` and an ``AsyncModel`` for "
            "``openai.AsyncOpenAI``."
        )

    @overload
    def __call__(
        self,
        client: openai.OpenAI,
        model_name: str | None = None,
        *,
        endpoint: Endpoint = "chat",
        retry: RetryPolicy | None = _DEFAULT_RETRY,
        rate_limit: RateLimiter | float | None = None,
        reasoning_parser: bool | None = None,
        verify: Verify = True,
    ) -> Model: ...
    @overload
    def __call__(
        self,
        client: openai.AsyncOpenAI,
        model_name: str | None = None,
        *,
        endpoint: Endpoint = "chat",
        retry: RetryPolicy | None = _DEFAULT_RETRY,
        rate_limit: RateLimiter | float | None = None,
        reasoning_parser: bool | None = None,
        verify: Verify = True,
    ) -> AsyncModel: ...
    def __call__(
        self,
        client: openai.OpenAI | openai.AsyncOpenAI,
        model_name: str | None = None,
        *,
        endpoint: Endpoint = "chat",
        retry: RetryPolicy | None = _DEFAULT_RETRY,
        rate_limit: RateLimiter | float | None = None,
        reasoning_parser: bool | None = None,
        verify: Verify = True,
    ) -> Model | AsyncModel:
        """Wrap ``client`` for this server kind."""
        return from_server(
            client,
            self.kind,
            model_name=model_name,
            endpoint=endpoint,
            retry=retry,
            rate_limit=rate_limit,
            reasoning_parser=reasoning_parser,
            verify=verify,
        )

    def __repr__(self) -> str:
        return f"<server factory {self.__name__}>"


from_sglang = ServerFactory("sglang", "an SGLang server")
from_vllm = ServerFactory("vllm", "a vLLM server")
from_llamacpp = ServerFactory("llamacpp", "llama.cpp's llama-server")
from_tgi = ServerFactory("tgi", "a Text Generation Inference (TGI) server")
from_ollama = ServerFactory("ollama", "Ollama's OpenAI-compatible API (``/v1``)")
from_openai = ServerFactory("openai", "the OpenAI API")
