"""The pure core shared by ``Model`` and ``AsyncModel``: build requests, read responses.

Nothing here performs I/O. A call goes through four pure stages, and the models only add
the sending (blocking or awaited) between them:

1. ``prepare``: prompt -> messages, output type -> term, kwargs checked (server-independent);
2. ``resolve_flow``: a flow yielding ``Probe`` (``models/detection.py``) / ``ListModels`` steps
   until the server kind and the model id are known (kept on the model; skipped afterwards);
   ``send_flow`` sends with retries and, when the server behind the URL seems to have
   changed (connection refused, 404), detects it again once;
3. ``build_request``: the adapter's constraint fields merged into a copy of the kwargs;
4. ``read`` / ``StreamView``: text, reasoning, tool calls, usage and finish reason, checked
   for refusals, content filters and truncation. A stream is read by the same aggregator as
   ``outlines_like.streaming.aggregate_chunks`` (``StreamView`` is a thin view over it), and
   both paths share the recovery rules of ``reasoning.resolve_reasoning`` and the tool-call
   readers, so a streamed and a whole answer read the same.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_args

from outlines_like import telemetry
from outlines_like.adapters.base import Adapter, ConstraintFields, Endpoint, ServerInfo, ServerKind
from outlines_like.errors import APIConnectionError, APIError, NotFoundError
from outlines_like.inputs import to_messages, to_prompt_text
from outlines_like.messages import Completion, Usage
from outlines_like.models import _tracing
from outlines_like.models._call import (
    Call,
    Constraint,
    ListModels,
    Request,
    Target,
    UsageMeter,
    label,
)
from outlines_like.models._reader import (
    Sink,
    StreamView,
    Verify,
    check_answers,
    check_verify,
    misfit,
    read_response,
)
from outlines_like.models.detection import (
    detection_flow,
    name_unreachable,
    pick_model,
    server_name,
    shown_ids,
)
from outlines_like.models.enforcement import enforcement_flow
from outlines_like.models.retry import NO_RETRY, Flow, RateLimiter, RetryPolicy, retry_flow
from outlines_like.reasoning import model_thinks, warn_if_thinking_unconstrained
from outlines_like.types import Term, parse

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SERVER_KINDS", "ModelCore"]

ClientT = TypeVar("ClientT")

SERVER_KINDS: tuple[ServerKind, ...] = get_args(ServerKind)


_RESERVED = {
    "messages": "pass the prompt as the first argument (a str, a list with Images, or a Chat)",
    "prompt": "pass the prompt as the first argument",
    "stream": "call model.stream(...) to stream",
}
_OURS = frozenset({"verify"})  # per-call options read here, never sent


@functools.cache
def _create_params(endpoint: Endpoint) -> frozenset[str]:
    """The keyword arguments the openai SDK's ``create`` takes for ``endpoint``.

    Other inference kwargs (``top_k``, ``min_p``, ``repetition_penalty``...) go in
    ``extra_body``, where every OpenAI-compatible server reads them.
    """
    if endpoint == "chat":
        from openai.resources.chat.completions import Completions
    else:
        from openai.resources.completions import Completions  # type: ignore[assignment]
    names = set(inspect.signature(Completions.create).parameters) - {"self"}
    return frozenset(names)


class ModelCore(Generic[ClientT]):
    """Everything ``Model`` and ``AsyncModel`` share; the subclasses only add I/O.

    Args:
        client: An ``openai.OpenAI`` (``Model``) or ``openai.AsyncOpenAI`` (``AsyncModel``).
        server: The server kind, or ``None`` to detect it at the first call.
        model_name: The model id to send; ``None`` uses the server's single served model.
        endpoint: ``"chat"`` (``/v1/chat/completions``, default) or ``"completions"``
            (``/v1/completions``, raw text prompts).
        retry: Our retry policy. With a policy, the client's own retries are turned off
            (``client.with_options(max_retries=0)``) so that attempts are not multiplied;
            ``None`` sends each request once through the client as given, its own
            ``max_retries`` included.
        rate_limit: A ``RateLimiter``, or requests per minute, or ``None``.
        adapter: A custom adapter, for a dialect we do not ship (bypasses detection).
        reasoning_parser: Whether the server splits reasoning off the answer (``None``:
            unknown); used to warn when a thinking model would be constrained from its
            first token.
        verify: Check every answer against its output type before returning it: ``True``
            raises ``ConstraintViolationError`` on a misfit, ``"warn"`` warns
            (``ConstraintViolationWarning``) and returns it, ``False`` checks nothing. Also
            a per-call keyword (``model(p, T, verify=False)``), never sent to the server.
            See ``models/_reader.py`` for the rule, cut answers included.
        probe_enforcement: Prove, with one tiny constrained request when the server is first
            resolved (and again after it changed), that it enforces the fields it is sent
            (``models/enforcement.py``).

    Detection: with ``server=None`` the server is probed at the first call (or at
    ``detect()``) and what it said is kept on this model; with ``server="vllm"`` only vLLM's
    version is asked (before 0.12 it reads ``guided_*`` fields). A model whose request
    fails with a connection error or a 404 detects again, once, and when the server behind
    the URL has changed, sends the request again in the new server's dialect.
    """

    def __init__(
        self,
        client: ClientT,
        server: ServerKind | None = None,
        *,
        model_name: str | None = None,
        endpoint: Endpoint = "chat",
        retry: RetryPolicy | None = RetryPolicy(),  # noqa: B008 - immutable
        rate_limit: RateLimiter | float | None = None,
        adapter: Adapter | None = None,
        reasoning_parser: bool | None = None,
        verify: Verify = True,
        probe_enforcement: bool = False,
    ) -> None:
        if server is not None and server not in SERVER_KINDS:
            raise ValueError(
                f"server={server!r} is not a known kind; use one of {list(SERVER_KINDS)} "
                "or None to detect it"
            )
        if endpoint not in ("chat", "completions"):
            raise ValueError(f"endpoint={endpoint!r}; use 'chat' or 'completions'")
        if model_name is not None and not isinstance(model_name, str):
            raise TypeError(f"model_name must be a str, got {type(model_name).__name__}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(f"retry must be a RetryPolicy or None, got {type(retry).__name__}")
        if rate_limit is None or isinstance(rate_limit, RateLimiter):
            limiter = rate_limit
        elif isinstance(rate_limit, (int, float)) and not isinstance(rate_limit, bool):
            limiter = RateLimiter(rate_limit)
        else:
            raise TypeError(
                "rate_limit must be a RateLimiter, a number of requests per minute, or None; "
                f"got {type(rate_limit).__name__}"
            )
        self.client = client
        """The client as given."""
        self._client: Any = (
            client if retry is None else client.with_options(max_retries=0)  # type: ignore[attr-defined]
        )
        self.endpoint: Endpoint = endpoint
        self.model_name = model_name
        self.retry = retry
        self.rate_limiter = limiter
        self._policy = retry if retry is not None else NO_RETRY
        self._info: ServerInfo | None = None
        self._target: Target | None = None
        self._given: ServerKind | None = server
        self._redetects = adapter is None and server in (None, "vllm")
        if adapter is not None:
            self._info = ServerInfo(kind=adapter.kind)
            self._target = Target(self._info, adapter)
            self._given = adapter.kind
        elif server is not None and server != "vllm":
            self._info = ServerInfo(kind=server)
        self._default_model: str | None = None
        self._meter = UsageMeter()
        self._lock = threading.Lock()  # serialises detection in Model
        self._alock = asyncio.Lock()  # serialises detection in AsyncModel (binds no loop here)
        self._allowed = _create_params(endpoint)
        self.reasoning_parser = reasoning_parser
        self.verify: Verify = check_verify(verify)
        self.probe_enforcement = bool(probe_enforcement)
        self._proven: Target | None = None
        """How answers are checked against their output type (``verify=`` per call wins)."""
        self._thinks: dict[str, bool | None] = {}

    # -- state

    @property
    def server(self) -> ServerKind | None:
        """The server kind: the one given, or the one detected; ``None`` before detection.

        Never sends a request (the same on ``Model`` and ``AsyncModel``): detection happens
        at the first call, or at ``detect()`` (``await amodel.detect()``).
        """
        info = self._info
        return info.kind if info is not None else self._given

    @property
    def base_url(self) -> str:
        """The client's base URL, without its trailing slash."""
        return str(self._client.base_url).rstrip("/")

    @property
    def usage(self) -> Usage:
        """Token usage summed over every call this model made (thread-safe)."""
        return self._meter.total

    def __repr__(self) -> str:
        kind = self.server or "not detected yet"
        model = self.model_name or self._default_model
        return (
            f"{type(self).__name__}(server={kind!r}, model={model!r}, endpoint={self.endpoint!r})"
        )

    # -- stage 1: prepare (pure, server-independent)

    def prepare(
        self, prompt: object, constraint: Constraint, kwargs: Mapping[str, Any], *, stream: bool
    ) -> Call:
        """Check a call's arguments and turn the prompt into messages (or raw text).

        Raises:
            TypeError: the prompt or a kwarg has the wrong type.
            ValueError: a kwarg cannot be used here (``n > 1`` when streaming, ``messages``...).
        """
        for key in kwargs.keys() & _RESERVED.keys():
            raise TypeError(f"unexpected keyword argument {key!r}: {_RESERVED[key]}")
        n = kwargs.get("n", 1)
        if n is None:
            n = 1
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        if stream and n > 1:
            raise ValueError(
                f"stream() yields one answer; n={n} asks for several. Use model(..., n={n}) "
                "or model.complete(..., n=...) instead, or stream n=1 requests concurrently"
            )
        model = kwargs.get("model")
        if model is not None and not isinstance(model, str):
            raise TypeError(f"model= must be a str, got {type(model).__name__}")
        extra = kwargs.get("extra_body")
        if extra is not None and not isinstance(extra, Mapping):
            raise TypeError(f"extra_body must be a dict, got {type(extra).__name__}")
        if constraint.term is not None and kwargs.get("response_format") is not None:
            raise ValueError(
                "response_format was given and output_type also constrains the answer; pass "
                f"one or the other (output_type={label(constraint)})"
            )
        verify = self.verify
        if kwargs.keys() & _OURS:
            verify = check_verify(kwargs.get("verify", verify))
            kwargs = {k: v for k, v in kwargs.items() if k not in _OURS}
        if self.endpoint == "chat":
            messages = to_messages(prompt)
            return Call("messages", messages, kwargs, constraint, n, stream, model, verify)
        text = to_prompt_text(prompt)
        return Call("prompt", text, kwargs, constraint, n, stream, model, verify)

    # -- stage 2: resolve the server and the model id

    def ready_now(self, model: str | None) -> tuple[Target, str] | None:
        """The target server and the model id when both are known already, else ``None``."""
        target = self._target
        if target is None or self._info is None:
            return None
        model = model or self.model_name or self._default_model
        return None if model is None else (target, model)

    def server_flow(self, *, refresh: bool = False) -> Flow[ServerInfo]:
        """Detect the server if it is not known yet (``refresh``: probe again anyway).

        A conclusive answer is kept for the model's life; when the server could not be
        reached, the guess (``generic``) is used for this call only and the next one asks again.
        """
        info = self._info
        if info is None or (refresh and self._redetects):
            info, conclusive = yield from detection_flow(self.base_url, self._given)
            if conclusive:
                self._forget(info)
        return info

    def _forget(self, info: ServerInfo) -> None:
        """Keep ``info`` as the server; drop what was derived from the previous one."""
        if info != self._info:
            self._info = info
            self._target = None
            self._default_model = None

    def resolve_flow(self, model: str | None) -> Flow[tuple[Target, str]]:
        """Find (detecting and listing models when needed) the target and the model id."""
        info = yield from self.server_flow()
        target = self._target
        if target is None or target.info != info:
            from outlines_like.adapters import get_adapter

            target = Target(info, get_adapter(info))
            if info is self._info:
                self._target = target
        model = model or self.model_name or self._default_model
        if model is None:
            ids: Sequence[str] = info.model_ids
            if not ids:
                try:
                    ids = yield ListModels()
                except APIConnectionError as exc:
                    name_unreachable(exc, self.base_url)
                    raise
                except APIError as exc:
                    whose = "" if info.kind == "generic" else f"the {info.kind} server's "
                    exc.message = (
                        f"could not list {whose}models at {self.base_url} to pick one "
                        f"({exc.message}); pass model_name=... or model=..."
                    )
                    raise
            model = pick_model(ids, server_name(info.kind, self.base_url))
            if info is self._info:
                self._default_model = model
        if self.probe_enforcement and self._proven is not target:
            yield from enforcement_flow(self, target, model)
            self._proven = target
        return target, model

    def send_flow(self, call: Call, target: Target, model: str) -> Flow[Any]:
        """Send ``call`` to ``target`` with retries; return the response.

        When the final error is a connection error or a 404 and this model detects its
        server (``server=None``, or ``"vllm"`` for its version), the server is probed again,
        once: if another server now answers behind the URL, the call is rebuilt in its
        dialect and sent again; otherwise the error goes to the caller.
        """
        request = self.build_request(call, target, model)
        try:
            return (yield from retry_flow(request, self._policy, self.rate_limiter))
        except (APIConnectionError, NotFoundError) as error:
            changed = False
            if self._redetects:
                changed = yield from self._redetect_flow(target)
            if not changed:
                if isinstance(error, APIConnectionError):
                    name_unreachable(error, self.base_url)
                raise
        return (yield from self._resend_flow(call))

    def completions_flow(self, call: Call, target: Target, model: str) -> Flow[list[Completion]]:
        """Send a whole (not streamed) call and read its answers, once.

        A server that ignores the fields it was sent answers 200 all the same: when this model
        detects its server and an answer breaks its output type (a cut one too: probing again
        costs less than checking a prefix), the server is probed again, once, and if another
        server now answers behind the URL the call is sent again in its dialect. Otherwise the
        answers go to the answer check, which reports them.
        """
        completions = self.read(call, (yield from self.send_flow(call, target, model)))
        term = call.constraint.term
        if not self._redetects or term is None or call.verify is False:
            return completions
        if all(misfit(term, c) is None for c in completions):
            return completions
        current = self._target if self._target is not None else target
        if not (yield from self._redetect_flow(current)):
            return completions
        return self.read(call, (yield from self._resend_flow(call)))

    def _resend_flow(self, call: Call) -> Flow[Any]:
        """Send ``call`` again to the server detected anew."""
        target, model = yield from self.resolve_flow(call.model)
        request = self.build_request(call, target, model)
        return (yield from retry_flow(request, self._policy, self.rate_limiter))

    def _redetect_flow(self, stale: Target) -> Flow[bool]:
        """Probe again after a failure; True when another server than ``stale``'s now answers."""
        if self._target is stale or self._info is None:  # nobody re-detected meanwhile
            yield from self.server_flow(refresh=True)
        info = self._info
        return info is not None and info != stale.info

    # -- stage 3: build the request

    def constraint_fields(self, target: Target, term: Term | None) -> ConstraintFields:
        """The adapter's fields for ``term`` (cached per term; the result is shared: no edits)."""
        if term is None:
            return {}
        cache = target.fields
        try:
            return cache[term]
        except KeyError:
            fields = cache[term] = target.adapter.constraint_fields(term, endpoint=self.endpoint)
            return fields
        except TypeError:  # an unhashable term
            return target.adapter.constraint_fields(term, endpoint=self.endpoint)

    def build_request(self, call: Call, target: Target, model: str) -> Request:
        """Merge the caller's kwargs and the constraint fields into a fresh parameter dict.

        The caller's dicts are copied, never mutated. Kwargs the SDK does not take go in
        ``extra_body``.

        Raises:
            ValueError: the caller sets a constraint field of their own that ours would
                overwrite (``response_format``, or an ``extra_body`` key).
        """
        served = target.info.model_ids
        if target.info.kind == "llamacpp" and served and model not in served:
            # llama-server answers any model name with its own model: refuse it here.
            raise NotFoundError(
                f"model {model!r} is not served by {server_name('llamacpp', self.base_url)}; "
                f"it serves {shown_ids(served)}",
                status_code=404,
            )
        fields = self.constraint_fields(target, call.constraint.term)
        if fields:
            self._check_thinking(target.info.kind, model)
        params: dict[str, Any] = {call.prompt_key: call.prompt}
        extra: dict[str, Any] | None = None
        allowed = self._allowed
        for key, value in call.kwargs.items():
            if key in allowed:
                params[key] = value
            else:
                if extra is None:
                    extra = {}
                extra[key] = value
        params["model"] = model
        caller_extra = call.kwargs.get("extra_body")
        if caller_extra:
            if extra:
                both = sorted(extra.keys() & caller_extra.keys())
                if both:
                    raise ValueError(
                        f"{both} given both as keyword arguments and in extra_body; give each once"
                    )
                extra.update(caller_extra)
            else:
                extra = dict(caller_extra)
        response_format = fields.get("response_format")
        if response_format is not None:
            if params.get("response_format") is not None:
                raise ValueError(
                    "response_format was given and output_type also sets it; pass one or the "
                    f"other (output_type={label(call.constraint)})"
                )
            params["response_format"] = response_format
        ours = fields.get("extra_body")
        if ours:
            if extra is None:
                extra = {}
            clash = sorted(ours.keys() & extra.keys())
            if clash:
                raise ValueError(
                    f"extra_body key(s) {clash} conflict with the constraint that output_type="
                    f"{label(call.constraint)} sends to the {target.info.kind} server; remove "
                    "them or drop output_type"
                )
            extra.update(ours)
        if extra is not None:
            params["extra_body"] = extra
        if call.stream:
            params["stream"] = True
        _tracing.record_request(params, target.info.kind, fields, self._client.base_url)
        return Request(self.endpoint, params)

    def thinks(self, model: str | None) -> bool | None:
        """Whether ``model`` reasons before answering, guessed from its name (cached)."""
        if model is None:
            return None
        try:
            return self._thinks[model]
        except KeyError:
            thinks = self._thinks[model] = model_thinks(model)
            return thinks

    def _check_thinking(self, server: ServerKind, model: str) -> None:
        """Warn when a thinking model's reasoning may be forced into the output type."""
        if self.thinks(model):
            warn_if_thinking_unconstrained(
                server=server,
                constrained=True,
                thinks=True,
                reasoning_parser=self.reasoning_parser,
                stacklevel=6,
            )

    # -- stage 4: read the answer

    def read(self, call: Call, response: object) -> list[Completion]:
        """Read every choice of a response (``_reader.read_response``); account its usage.

        Raises:
            GenerationError: a choice was refused or stopped by a content filter.
            ProviderResponseError: the response has no choices or malformed fields.
        """
        chat = call.prompt_key == "messages"
        completions = read_response(
            response, chat=chat, text_tools=chat and bool(call.kwargs.get("tools"))
        )
        self._meter.add(completions[0].usage)
        _tracing.record_response(response, completions)
        return completions

    def check(
        self,
        call: Call,
        completions: list[Completion],
        *,
        stacklevel: int,
        sink: Sink | None = None,
        trace: telemetry.Trace | None = None,
    ) -> None:
        """The one rule for answers (``_reader.check_answers``); its verdict goes to ``trace``."""
        term = call.constraint.term
        if term is None:
            return
        info = self._info
        target = self._target
        fields = target.fields.get(term) if target is not None else None
        with _tracing.record_verdict(trace or telemetry.current()) as verdict:
            found = check_answers(
                label(call.constraint),
                term,
                completions,
                verify=call.verify,
                stacklevel=stacklevel + 1,
                server=info.kind if info is not None else None,
                server_version=info.version if info is not None else None,
                fields=_sent(fields),
                sink=sink,
            )
            verdict.append(found)

    def texts(
        self,
        call: Call,
        completions: list[Completion],
        *,
        stacklevel: int,
        sink: Sink | None = None,
    ) -> Any:
        """What ``model(...)`` returns: the answer text, or a list of them when ``n > 1``."""
        self.check(call, completions, stacklevel=stacklevel + 1, sink=sink)
        if call.n == 1:
            return completions[0].text
        return [c.text for c in completions]

    def values(self, call: Call, completions: list[Completion], *, stacklevel: int = 3) -> Any:
        """What ``model.parse(...)`` returns: the typed value, or a list when ``n > 1``."""
        self.check(call, completions, stacklevel=stacklevel + 1)
        output_type = call.constraint.output_type
        if call.n == 1:
            return parse(output_type, completions[0].text)
        return [parse(output_type, c.text) for c in completions]

    def rich(self, call: Call, completions: list[Completion], *, stacklevel: int = 2) -> Any:
        """What ``model.complete(...)`` returns: a ``Completion``, or a list when ``n > 1``."""
        self.check(call, completions, stacklevel=stacklevel + 1)
        return completions[0] if call.n == 1 else completions

    def stream_view(self, call: Call) -> StreamView:
        """A reader for the chunks of one streamed call."""
        chat = call.prompt_key == "messages"
        model = call.model or self.model_name or self._default_model
        trace = telemetry.current()

        def check(completions: list[Completion], stacklevel: int) -> None:
            _tracing.record_response(view.first, completions, trace)
            self.check(call, completions, stacklevel=stacklevel + 1, trace=trace)

        view = StreamView(
            text_tools=chat and bool(call.kwargs.get("tools")),
            hold_answer=bool(self.thinks(model)),
            on_usage=self._meter.add,
            check=check,
        )
        return view


def _sent(fields: ConstraintFields | None) -> dict[str, Any] | None:
    """The constraint fields as sent: ``response_format`` and the ``extra_body`` keys."""
    if not fields:
        return None
    out: dict[str, Any] = {}
    if "response_format" in fields:
        out["response_format"] = fields["response_format"]
    out.update(fields.get("extra_body", {}))
    return out
