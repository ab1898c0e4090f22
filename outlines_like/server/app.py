"""The reference server's HTTP side: an OpenAI-compatible FastAPI app over the batching scheduler.

Routes: ``GET /health``, ``GET /version``, ``GET /v1/models``, ``GET /stats``,
``POST /v1/chat/completions`` and ``POST /v1/completions`` (SSE streaming with OpenAI chunk
shapes, a final usage chunk with ``stream_options.include_usage``). Constraints come in any
dialect (:mod:`outlines_like.server.dialects`) and are compiled by our masker, cached.

Every refusal is an OpenAI-style error body ``{"error": {"message", "type", "param", "code"}}``
with a 4xx status; the server keeps answering.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hmac
import json
import logging
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.server.dialects import (
    CONSTRAINT_FIELDS,
    ConstraintSpec,
    RequestError,
    ignored_fields,
    read_constraint,
)
from outlines_like.server.pipeline import (
    GenerationRequest,
    SamplingParams,
    StepOutput,
    TransformersPipeline,
)
from outlines_like.server.scheduler import Scheduler

try:
    from fastapi import FastAPI, Request, Response
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the reference server needs the server extra: pip install 'outlines-like[server]'"
    ) from _exc

if TYPE_CHECKING:
    from outlines_like.fsm._protocols import Compiled
    from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["Engine", "ServerConfig", "create_app", "load_engine"]

_log = logging.getLogger("outlines_like.server")
_SERVER_VERSION = "0.1.0"

_COMMON_FIELDS = frozenset(
    {
        "model",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "user",
        "logprobs",
        "presence_penalty",
        "frequency_penalty",
        "ignore_eos",
    }
)
_CHAT_FIELDS = _COMMON_FIELDS | {
    "messages",
    "max_completion_tokens",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "chat_template_kwargs",
    "top_logprobs",
}
_COMPLETION_FIELDS = _COMMON_FIELDS | {"prompt", "echo", "suffix"}
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


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
        compile_timeout: Seconds a constraint may take to compile before a 400.
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
    max_batch_size: int = 64
    reasoning: bool = False
    torch_threads: int | None = None


class Engine:
    """The model, its vocabulary, the pipeline, the scheduler and the constraint cache.

    Args:
        model: A ``transformers`` causal LM.
        tokenizer: Its tokenizer (with a chat template for the chat route).
        config: Server limits.
        model_name: The served model id.
    """

    def __init__(self, model: Any, tokenizer: Any, config: ServerConfig, model_name: str) -> None:
        from outlines_like.fsm.vocabulary import Vocabulary

        self.config = config
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.vocabulary: Vocabulary = Vocabulary.from_transformers(tokenizer)
        self.pipeline = TransformersPipeline(model, tokenizer)
        self.scheduler = Scheduler(self.pipeline, max_batch_size=config.max_batch_size)
        self._compiled: dict[tuple[str, str], Compiled] = {}
        # Compiles run here, so that one slow constraint cannot starve request handling; a
        # compile past its timeout keeps its worker until it ends (the request gets a 400 now).
        self._compile_pool = concurrent.futures.ThreadPoolExecutor(2, "outlines-like-compile")
        self.created = int(time.time())
        self.think_end_token_id: int | None = None
        if config.reasoning:
            ids = tokenizer.encode("</think>", add_special_tokens=False)
            if len(ids) != 1:
                raise ValueError("--reasoning needs '</think>' to be one token of this tokenizer")
            self.think_end_token_id = int(ids[0])

    def start(self) -> None:
        """Start the engine thread."""
        self.scheduler.start()

    def stop(self) -> None:
        """Stop the engine thread and the compile workers."""
        self.scheduler.stop()
        self._compile_pool.shutdown(wait=False, cancel_futures=True)

    def _compile_now(self, spec: ConstraintSpec) -> Compiled:
        from outlines_like.fsm.compile import compile_constraint

        return compile_constraint(spec.term, self.vocabulary, max_states=self.config.max_states)

    async def compile(self, spec: ConstraintSpec) -> Compiled:
        """Compile (or fetch from the cache) a request's constraint.

        Raises:
            RequestError: Invalid, unsupported, too large or too slow to compile.
        """
        cached = self._compiled.get(spec.key)
        if cached is not None:
            return cached
        if len(spec.key[1]) > self.config.max_constraint_bytes:
            raise RequestError(
                f"{spec.field} is too large ({len(spec.key[1])} bytes; the limit is "
                f"{self.config.max_constraint_bytes})",
                param=spec.field,
                code="constraint_too_large",
            )
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._compile_pool, self._compile_now, spec)
        try:
            compiled = await asyncio.wait_for(future, self.config.compile_timeout)
        except asyncio.TimeoutError as exc:
            raise RequestError(
                f"{spec.field} did not compile within {self.config.compile_timeout:g} s; "
                "simplify it",
                param=spec.field,
                code="constraint_too_complex",
            ) from exc
        except InvalidConstraintError as exc:
            raise RequestError(
                f"{spec.field} is invalid: {exc}", param=spec.field, code="invalid_constraint"
            ) from exc
        except UnsupportedConstraintError as exc:
            raise RequestError(
                f"{spec.field} is not supported: {exc}",
                param=spec.field,
                code="unsupported_constraint",
            ) from exc
        except RecursionError as exc:
            raise RequestError(
                f"{spec.field} is nested too deeply to compile",
                param=spec.field,
                code="constraint_too_complex",
            ) from exc
        if len(self._compiled) >= 256:
            self._compiled.pop(next(iter(self._compiled)))
        self._compiled[spec.key] = compiled
        return compiled


def load_engine(config: ServerConfig) -> Engine:
    """Load the model named by ``config.model`` (``"tiny"`` builds it) and make an engine."""
    import pathlib

    try:
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the reference server needs the server extra: pip install 'outlines-like[server]'"
        ) from exc
    hf_logging: Any = transformers.utils.logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    threads = config.torch_threads or (1 if config.model == "tiny" else None)
    if threads:
        import torch

        torch.set_num_threads(threads)
    if config.model == "tiny":
        from outlines_like.server.tiny import build_tiny_model

        path = build_tiny_model()
        name = config.model_name or "tiny"
    else:
        path = pathlib.Path(config.model)
        if not path.is_dir():
            raise FileNotFoundError(
                f"--model {config.model!r}: not 'tiny' and not a local model folder"
            )
        name = config.model_name or path.name
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model: Any = AutoModelForCausalLM.from_pretrained(str(path))
    model.eval()
    return Engine(model, tokenizer, config, name)


# --------------------------------------------------------------------------- validation


def _int(body: Mapping[str, Any], field: str, low: int, high: int, default: int) -> int:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{field} must be an integer", param=field)
    if not low <= value <= high:
        raise RequestError(f"{field} must be between {low} and {high}, got {value}", param=field)
    return value


def _float(body: Mapping[str, Any], field: str, low: float, high: float, default: float) -> float:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{field} must be a number", param=field)
    if not low <= value <= high:
        raise RequestError(f"{field} must be between {low} and {high}, got {value}", param=field)
    return float(value)


def _bool(body: Mapping[str, Any], field: str) -> bool:
    value = body.get(field, False)
    if not isinstance(value, bool):
        raise RequestError(f"{field} must be a boolean", param=field)
    return value


def _stop(body: Mapping[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or len(value) > 4
        or not all(isinstance(s, str) and s for s in value)
    ):
        raise RequestError(
            "stop must be a string or a list of up to 4 non-empty strings", param="stop"
        )
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class _Common:
    params: SamplingParams
    n: int
    stream: bool
    include_usage: bool


def _common(body: Mapping[str, Any], config: ServerConfig, fields: frozenset[str]) -> _Common:
    unknown = sorted(set(body) - fields - CONSTRAINT_FIELDS - ignored_fields())
    if unknown:
        raise RequestError(
            f"unknown field {unknown[0]!r}" + (f" (and {unknown[1:]})" if unknown[1:] else ""),
            param=unknown[0],
            code="unknown_field",
        )
    for field in ("logprobs", "echo"):
        if body.get(field):
            raise RequestError(f"{field} is not supported by this server", param=field)
    if body.get("suffix"):
        raise RequestError("suffix is not supported by this server", param="suffix")
    for field in ("presence_penalty", "frequency_penalty"):
        if _float(body, field, -2.0, 2.0, 0.0) != 0.0:
            raise RequestError(f"{field} is not supported (only 0)", param=field)
    max_field = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    max_tokens = _int(body, max_field, 1, config.max_tokens_limit, config.default_max_tokens)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise RequestError("seed must be an integer", param="seed")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("stream must be a boolean", param="stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping) or set(options) - {
        "include_usage",
        "continuous_usage_stats",
    }:
        raise RequestError("stream_options must be {'include_usage': bool}", param="stream_options")
    params = SamplingParams(
        max_tokens=max_tokens,
        temperature=_float(body, "temperature", 0.0, 2.0, 1.0),
        top_p=_float(body, "top_p", 1e-6, 1.0, 1.0),
        seed=seed,
        stop=_stop(body),
        ignore_eos=_bool(body, "ignore_eos"),
    )
    return _Common(
        params=params,
        n=_int(body, "n", 1, config.max_n, 1),
        stream=stream,
        include_usage=bool(options.get("include_usage")),
    )


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages must be a non-empty list", param="messages")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, Mapping):
            raise RequestError(f"{where} must be an object", param=where)
        role = message.get("role")
        if role not in _ROLES:
            raise RequestError(
                f"{where}.role must be one of {sorted(_ROLES)}, got {role!r}", param=where + ".role"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise RequestError(
                f"{where}.content must be a string or a list of parts", param=where + ".content"
            )
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, Mapping) or part.get("type") != "text":
                    raise RequestError(
                        f"{where}.content[{j}]: only text parts are supported",
                        param=f"{where}.content[{j}]",
                    )
            content = "".join(str(part.get("text", "")) for part in content)
        item = dict(message)
        item["role"] = "system" if role == "developer" else role
        item["content"] = content if content is not None else ""
        out.append(item)
    return out


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise RequestError("tools must be a list", param="tools")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise RequestError(
                f"tools[{i}] must be {{'type': 'function', 'function': {{'name': ...}}}}",
                param=f"tools[{i}]",
            )
    return None if body.get("tool_choice") == "none" else tools or None


def _hoist_defs(params: Mapping[str, Any], tool: str, defs: dict[str, Any]) -> dict[str, Any]:
    """Move a tool schema's ``$defs`` (or ``definitions``) to the root, renaming its refs.

    The parameters are nested under ``properties.arguments`` of the call's schema, where their
    ``#/$defs/X`` refs would point to nothing; each tool's definitions become
    ``#/$defs/<tool>.X`` at the root, so that tools sharing a definition name do not collide.
    """
    local: dict[tuple[str, str], Any] = {}
    for key in ("$defs", "definitions"):
        found = params.get(key)
        if isinstance(found, Mapping):
            local.update({(key, str(k)): v for k, v in found.items()})
    renames = {f"#/{key}/{k}": f"#/$defs/{tool}.{k}" for key, k in local}

    def rewrite(node: Any) -> Any:
        if isinstance(node, Mapping):
            out = {}
            for k, v in node.items():
                if k == "$ref" and isinstance(v, str):
                    out[k] = renames.get(v, v)
                elif k in ("$defs", "definitions") and node is params:
                    continue
                else:
                    out[k] = rewrite(v)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for (_, k), v in local.items():
        defs[f"{tool}.{k}"] = rewrite(v)
    hoisted: dict[str, Any] = rewrite(params)
    return hoisted


def _tool_choice_spec(
    body: Mapping[str, Any], tools: list[dict[str, Any]] | None
) -> ConstraintSpec | None:
    r"""``tool_choice`` "required" or a named function, as a constraint on the output.

    The answer is then exactly one ``<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>``
    block whose arguments follow the tool's parameter schema.
    """
    from outlines_like.types import JsonSchema

    choice = body.get("tool_choice")
    if choice in (None, "auto", "none"):
        return None
    if not tools:
        raise RequestError("tool_choice needs tools", param="tool_choice")
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    if choice == "required":
        names = list(by_name)
    elif (
        isinstance(choice, Mapping)
        and isinstance(choice.get("function"), Mapping)
        and choice["function"].get("name") in by_name
    ):
        names = [choice["function"]["name"]]
    else:
        raise RequestError(
            "tool_choice must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': <one of the tools>}}",
            param="tool_choice",
        )
    options = []
    defs: dict[str, Any] = {}
    for name in names:
        params = by_name[name].get("parameters") or {"type": "object"}
        if not isinstance(params, Mapping):
            raise RequestError(f"tool {name!r}: parameters must be a JSON Schema", param="tools")
        options.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": name},
                    "arguments": _hoist_defs(params, name, defs),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    if defs:
        schema = {**schema, "$defs": defs}
    try:
        term = "<tool_call>\n" + JsonSchema(schema) + "\n</tool_call>"
    except (ValueError, TypeError) as exc:
        raise RequestError(f"tools: {exc}", param="tools") from exc
    return ConstraintSpec(term, "tool_choice", ("tool_choice", repr(term)))


# --------------------------------------------------------------------------- responses


def _error_body(message: str, *, kind: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error_kind(status: int) -> str:
    return {
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        413: "invalid_request_error",
        429: "rate_limit_error",
    }.get(status, "invalid_request_error" if status < 500 else "server_error")


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


@dataclasses.dataclass
class _Choice:
    """One choice being generated: its request, and its text parsed as it grows."""

    index: int
    request: GenerationRequest
    prompt_tokens: int
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int = 0


def _raise_failed(choices: list[_Choice]) -> None:
    if any(c.finish_reason == "error" for c in choices):
        raise RequestError(
            "generation failed inside the server (see its log)", code="internal_error", status=500
        )


def _split_message(text: str, tools: bool, think_open: bool) -> tuple[dict[str, Any], bool]:
    """A chat message from the generated text: reasoning split, tool calls parsed."""
    from outlines_like.reasoning import split_reasoning

    reasoning, answer = split_reasoning(text, think_open=think_open)
    message: dict[str, Any] = {"role": "assistant", "content": answer}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    called = False
    if tools:
        from outlines_like.tools import ToolCallParser

        with warnings.catch_warnings():
            # A malformed block stays in the content; the client sees it there.
            warnings.simplefilter("ignore")
            calls, rest = ToolCallParser(
                id_factory=lambda i: f"call_{uuid.uuid4().hex[:24]}"
            ).parse_complete(answer)
        if calls:
            called = True
            message["content"] = rest or None
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in calls
            ]
    return message, called


class _ChatStreamState:
    """Per-choice streaming parsers: reasoning split, then tool calls."""

    def __init__(self, tools: bool, think_open: bool) -> None:
        from outlines_like.reasoning import ReasoningStream
        from outlines_like.tools import ToolCallParser

        self.reasoning = ReasoningStream(think_open=think_open)
        self.tools = (
            ToolCallParser(id_factory=lambda i: f"call_{uuid.uuid4().hex[:24]}") if tools else None
        )
        self.called = False

    def _answer(self, text: str, final: bool) -> list[dict[str, Any]]:
        from outlines_like.tools import ContentDelta

        if self.tools is None:
            return [{"content": text}] if text else []
        with warnings.catch_warnings():  # a malformed block is left in the content
            warnings.simplefilter("ignore")
            parsed = list(self.tools.parse_delta(text) or []) if text else []
            if final:
                parsed += self.tools.finish()
        out: list[dict[str, Any]] = []
        for item in parsed:
            if isinstance(item, ContentDelta):
                if item.text:
                    out.append({"content": item.text})
            else:
                self.called = True
                out.append({"tool_calls": [item.to_openai()]})
        return out

    def feed(self, text: str) -> list[dict[str, Any]]:
        reasoning, answer = self.reasoning.feed(text)
        out = [{"reasoning_content": reasoning}] if reasoning else []
        return out + self._answer(answer, final=False)

    def finish(self) -> list[dict[str, Any]]:
        reasoning, answer = self.reasoning.finish()
        out = [{"reasoning_content": reasoning}] if reasoning else []
        return out + self._answer(answer, final=True)


def _sse(data: Mapping[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()


def _stream_failure(exc: Exception) -> bytes:
    """The SSE event that reports a failure once a stream has started (logged here)."""
    _log.exception("stream failed", exc_info=exc)
    return _sse(
        _error_body(
            f"internal error: {type(exc).__name__}",
            kind="server_error",
            param=None,
            code="internal_error",
        )
    )


# --------------------------------------------------------------------------- the app


def create_app(engine: Engine | None = None, config: ServerConfig | None = None) -> FastAPI:
    """Build the FastAPI app.

    Args:
        engine: A ready engine (tests build one once); else one is loaded from ``config`` at
            start-up.
        config: Limits and the model to load (ignored when ``engine`` carries its own).

    Returns:
        The app; run it with uvicorn. The engine thread starts and stops with the app.
    """
    import contextlib

    holder: dict[str, Engine] = {}
    if engine is not None:
        holder["engine"] = engine

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if "engine" not in holder:
            holder["engine"] = await asyncio.to_thread(load_engine, config or ServerConfig())
        owned = engine is None
        holder["engine"].start()
        try:
            yield
        finally:
            if owned:
                holder["engine"].stop()

    app = FastAPI(
        title="outlines-like reference server", lifespan=lifespan, docs_url=None, redoc_url=None
    )

    def error(
        status: int, message: str, param: str | None = None, code: str | None = None
    ) -> JSONResponse:
        return JSONResponse(
            _error_body(message, kind=_error_kind(status), param=param, code=code),
            status_code=status,
        )

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> Response:
        return error(exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return error(exc.status_code, str(exc.detail), None, None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error(400, str(exc), None, "invalid_request")

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> Response:
        _log.exception("request failed")
        return error(500, f"internal error: {type(exc).__name__}", None, "internal_error")

    def get_engine() -> Engine:
        return holder["engine"]

    def check_auth(request: Request) -> None:
        key = get_engine().config.api_key
        if key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.strip().encode(), key.encode()
        ):
            raise RequestError("invalid or missing API key", code="invalid_api_key", status=401)

    async def read_body(request: Request) -> dict[str, Any]:
        limit = get_engine().config.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            raise RequestError(
                f"request body over {limit} bytes", code="body_too_large", status=413
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise RequestError(
                    f"request body over {limit} bytes", code="body_too_large", status=413
                )
            chunks.append(chunk)
        raw = b"".join(chunks)
        try:
            body = json.loads(raw)
        except RecursionError as exc:
            raise RequestError(
                "the request body is nested too deeply", code="invalid_json"
            ) from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            where = f" at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else ""
            raise RequestError(
                f"the request body is not valid JSON{where}", code="invalid_json"
            ) from exc
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object", code="invalid_json")
        model = body.get("model")
        if model is not None and model != get_engine().model_name:
            raise RequestError(
                f"model {model!r} is not served here; this server serves "
                f"{get_engine().model_name!r}",
                param="model",
                code="model_not_found",
                status=404,
            )
        return body

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": _SERVER_VERSION, "server": "outlines-like"}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        check_auth(request)
        eng = get_engine()
        card = {
            "id": eng.model_name,
            "object": "model",
            "created": eng.created,
            "owned_by": "outlines-like",
        }
        card["max_model_len"] = eng.pipeline.max_length
        return {"object": "list", "data": [card]}

    @app.get("/stats")
    async def stats(request: Request) -> dict[str, Any]:
        check_auth(request)
        eng = get_engine()
        out = dataclasses.asdict(eng.pipeline.stats)
        out["batch_sizes"] = dict(eng.scheduler.batch_sizes)
        out["load"] = eng.scheduler.load
        return out

    async def prepare(
        body: Mapping[str, Any],
        common: _Common,
        prompts: list[list[int]],
        kind: str,
        tool_spec: ConstraintSpec | None = None,
        think_end: int | None = None,
    ) -> list[_Choice]:
        eng = get_engine()
        spec = read_constraint(body)
        if tool_spec is not None:
            if spec is not None:
                raise RequestError(
                    f"conflicting constraints: tool_choice and {spec.field}; send one",
                    param="tool_choice",
                    code="conflict",
                )
            spec = tool_spec
        compiled = await eng.compile(spec) if spec is not None else None
        choices: list[_Choice] = []
        for p, prompt in enumerate(prompts):
            if not prompt:
                raise RequestError("the prompt is empty", param="prompt")
            if len(prompt) + common.params.max_tokens > eng.pipeline.max_length:
                raise RequestError(
                    f"prompt ({len(prompt)} tokens) + max_tokens ({common.params.max_tokens}) "
                    "is over "
                    f"the model's context of {eng.pipeline.max_length} tokens",
                    param="max_tokens",
                    code="context_length_exceeded",
                )
            for j in range(common.n):
                seed = common.params.seed
                params = dataclasses.replace(common.params, seed=None if seed is None else seed + j)
                rid = f"{kind}-{uuid.uuid4().hex}"
                req = GenerationRequest(rid, prompt, params, compiled, think_end)
                choices.append(_Choice(p * common.n + j, req, len(prompt)))
        return choices

    async def run_all(choices: list[_Choice]) -> AsyncIterator[tuple[_Choice, StepOutput]]:
        """Run every choice, yielding outputs as they come (interleaved)."""
        eng = get_engine()
        queue: asyncio.Queue[tuple[_Choice, StepOutput | BaseException | None]] = asyncio.Queue()

        async def pump(choice: _Choice) -> None:
            try:
                async for out in eng.scheduler.generate(choice.request):
                    await queue.put((choice, out))
            except BaseException as exc:
                await queue.put((choice, exc))
                return
            await queue.put((choice, None))

        tasks = [asyncio.create_task(pump(c)) for c in choices]
        remaining = len(choices)
        try:
            while remaining:
                choice, item = await queue.get()
                if item is None:
                    remaining -= 1
                    continue
                if isinstance(item, BaseException):
                    raise item
                choice.text += item.text
                choice.completion_tokens = item.completion_tokens
                if item.finished:
                    choice.finish_reason = item.finish_reason
                yield choice, item
        finally:
            for task in tasks:
                task.cancel()

    def base(kind: str) -> dict[str, Any]:
        prefix = "chatcmpl" if kind == "chat" else "cmpl"
        return {
            "id": f"{prefix}-{uuid.uuid4().hex}",
            "created": int(time.time()),
            "model": get_engine().model_name,
            "system_fingerprint": f"outlines-like-{_SERVER_VERSION}",
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> Response:
        check_auth(request)
        body = await read_body(request)
        eng = get_engine()
        common = _common(body, eng.config, _CHAT_FIELDS)
        messages = _messages(body)
        tools = _tools(body)
        tool_spec = _tool_choice_spec(body, tools)
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, Mapping):
            raise RequestError(
                "chat_template_kwargs must be an object", param="chat_template_kwargs"
            )
        try:
            prompt_text: str = await asyncio.to_thread(
                eng.tokenizer.apply_chat_template,
                messages,
                tools=tools,
                add_generation_prompt=True,
                tokenize=False,
                **kwargs,
            )
        except Exception as exc:  # a template error is the request's fault (bad messages)
            raise RequestError(
                f"the chat template failed on these messages: {exc}", param="messages"
            ) from exc
        ids = eng.tokenizer.encode(prompt_text, add_special_tokens=False)
        # Reasoning-aware (--reasoning): free until </think>, unless the template already closed
        # the block (enable_thinking=False renders an empty <think></think>); the text before
        # </think> is then reasoning even without an opening tag, as vLLM's qwen3 parser reads it.
        closed = prompt_text.rstrip().endswith("</think>")
        think_end = None if closed else eng.think_end_token_id
        think_open = prompt_text.rstrip().endswith("<think>") or think_end is not None
        choices = await prepare(body, common, [list(ids)], "chat", tool_spec, think_end)
        head = base("chat")
        if not common.stream:
            async for _ in run_all(choices):
                pass
            _raise_failed(choices)
            out_choices = []
            for c in choices:
                message, called = _split_message(c.text, tools is not None, think_open)
                reason = "tool_calls" if called and c.finish_reason == "stop" else c.finish_reason
                out_choices.append(
                    {
                        "index": c.index,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": reason,
                    }
                )
            total = sum(c.completion_tokens for c in choices)
            return JSONResponse(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": out_choices,
                    "usage": _usage(len(ids), total),
                }
            )

        async def events() -> AsyncIterator[bytes]:
            chunk = {**head, "object": "chat.completion.chunk"}
            usage_null = {"usage": None} if common.include_usage else {}
            states = {c.index: _ChatStreamState(tools is not None, think_open) for c in choices}

            def piece(index: int, delta: dict[str, Any], reason: str | None = None) -> bytes:
                return _sse(
                    {
                        **chunk,
                        "choices": [
                            {
                                "index": index,
                                "delta": delta,
                                "logprobs": None,
                                "finish_reason": reason,
                            }
                        ],
                        **usage_null,
                    }
                )

            for c in choices:
                yield piece(c.index, {"role": "assistant", "content": ""})
            try:
                async for c, out in run_all(choices):
                    state = states[c.index]
                    for delta in state.feed(out.text):
                        yield piece(c.index, delta)
                    if out.finished:
                        for delta in state.finish():
                            yield piece(c.index, delta)
                        reason = (
                            "tool_calls"
                            if state.called and out.finish_reason == "stop"
                            else out.finish_reason
                        )
                        yield piece(c.index, {}, reason)
            except RequestError as exc:
                yield _sse(
                    _error_body(
                        exc.message, kind="invalid_request_error", param=exc.param, code=exc.code
                    )
                )
                return
            except Exception as exc:  # the stream has started: report in-band
                yield _stream_failure(exc)
                return
            if common.include_usage:
                total = sum(c.completion_tokens for c in choices)
                yield _sse({**chunk, "choices": [], "usage": _usage(len(ids), total)})
            yield _sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Response:
        check_auth(request)
        body = await read_body(request)
        eng = get_engine()
        common = _common(body, eng.config, _COMPLETION_FIELDS)
        prompt = body.get("prompt")
        prompts: list[list[int]]
        if isinstance(prompt, str):
            prompts = [eng.tokenizer.encode(prompt, add_special_tokens=False)]
        elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
            prompts = [eng.tokenizer.encode(p, add_special_tokens=False) for p in prompt]
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
        ):
            if not all(0 <= t < eng.pipeline.vocab_size for t in prompt):
                raise RequestError("prompt holds token ids outside the vocabulary", param="prompt")
            prompts = [list(prompt)]
        else:
            raise RequestError(
                "prompt must be a string, a list of strings or a list of token ids", param="prompt"
            )
        if len(prompts) > eng.config.max_n:
            raise RequestError(f"at most {eng.config.max_n} prompts per request", param="prompt")
        choices = await prepare(body, common, prompts, "cmpl")
        prompt_tokens = sum(len(p) for p in prompts)
        head = base("completions")
        if not common.stream:
            async for _ in run_all(choices):
                pass
            _raise_failed(choices)
            out_choices = [
                {
                    "index": c.index,
                    "text": c.text,
                    "logprobs": None,
                    "finish_reason": c.finish_reason,
                }
                for c in choices
            ]
            total = sum(c.completion_tokens for c in choices)
            return JSONResponse(
                {
                    **head,
                    "object": "text_completion",
                    "choices": out_choices,
                    "usage": _usage(prompt_tokens, total),
                }
            )

        async def events() -> AsyncIterator[bytes]:
            chunk = {**head, "object": "text_completion"}
            usage_null = {"usage": None} if common.include_usage else {}
            try:
                async for c, out in run_all(choices):
                    if out.text or out.finished:
                        yield _sse(
                            {
                                **chunk,
                                "choices": [
                                    {
                                        "index": c.index,
                                        "text": out.text,
                                        "logprobs": None,
                                        "finish_reason": out.finish_reason
                                        if out.finished
                                        else None,
                                    }
                                ],
                                **usage_null,
                            }
                        )
            except Exception as exc:  # the stream has started: report in-band
                yield _stream_failure(exc)
                return
            if common.include_usage:
                total = sum(c.completion_tokens for c in choices)
                yield _sse({**chunk, "choices": [], "usage": _usage(prompt_tokens, total)})
            yield _sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    return app
