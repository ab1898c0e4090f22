"""Find out which server is behind an OpenAI client, from the server itself.

The probe logic is written once, as a generator (``_probe_flow``) that yields the URL it wants
and receives what came back; a tiny sync and a tiny async driver send the requests through the
user's own client (``client.get``: its transport, base URL, auth, headers and proxies), as
httpx's ``Auth.auth_flow`` does.

What each server answers (see ``docs/servers/``):

* ``GET /v1/models``: ``owned_by`` is ``vllm``, ``sglang`` or ``llamacpp`` on those servers,
  and ``data[].id`` lists the served models;
* vLLM ``GET /version`` -> ``{"version": "0.32.0"}``;
* llama.cpp ``GET /props`` -> ``{"default_generation_settings": ..., "total_slots": ...,
  "build_info": ...}``;
* TGI ``GET /info`` -> ``{"model_id": ..., "version": ..., "max_total_tokens": ...}``;
* Ollama ``GET /api/version`` -> ``{"version": "0.5.7"}``;
* SGLang ``GET /get_server_info`` (or ``/server_info``) -> server args with ``model_path``
  and ``version``; ``GET /get_model_info`` -> ``model_path``, ``is_generation``...;
* outlines-like's reference server (``owned_by: "outlines-like"``) reads every dialect: it
  is given vLLM's newest;
* OpenAI by its host, ``api.openai.com`` (or Azure's ``*.openai.azure.com``), with no probe.

Each base URL is probed once, lazily; the answer is cached for the process (thread-safe, and
concurrent tasks on one event loop share one probe). An unreachable server reads as
``generic`` for a few seconds only, then is probed again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
import weakref
from collections.abc import Callable, Generator, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import openai

from outlines_like.adapters.base import ServerInfo, ServerKind

__all__ = [
    "FAILURE_TTL",
    "PROBE_TIMEOUT",
    "adetect_server",
    "clear_detection_cache",
    "detect_server",
]

PROBE_TIMEOUT = 3.0
"""Seconds one probe may take (connect + read)."""

FAILURE_TTL = 5.0
"""Seconds an unreachable server stays ``generic`` before it is probed again."""

_OWNERS: dict[str, ServerKind] = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llamacpp",
    "llama.cpp": "llamacpp",
}
_REFERENCE_SERVER = "outlines-like"
_OPENAI_HOSTS = ("api.openai.com",)
_OPENAI_HOST_SUFFIXES = (".openai.azure.com",)


@dataclasses.dataclass(frozen=True)
class _Answer:
    """What one probe got: ``status`` None when the server could not be reached."""

    status: int | None
    body: object = None

    @property
    def json_object(self) -> Mapping[str, Any] | None:
        if self.status == 200 and isinstance(self.body, Mapping):
            return self.body
        return None


_Flow = Generator[str, _Answer, tuple[ServerInfo, bool]]


def _root_url(base_url: str) -> str:
    """The server root: the base URL without its trailing ``/v1``."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _is_openai_host(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return host in _OPENAI_HOSTS or host.endswith(_OPENAI_HOST_SUFFIXES)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _probe_flow(base_url: str) -> _Flow:
    """Yield URLs to GET, receive their answers, return ``(ServerInfo, cacheable)``."""
    if _is_openai_host(base_url):
        return ServerInfo("openai"), True
    root = _root_url(base_url)

    answer = yield "models"  # relative to the client's base URL
    if answer.status is None:
        return ServerInfo("generic"), False
    model_ids: tuple[str, ...] = ()
    owners: set[str] = set()
    listing = answer.json_object
    if listing is not None and isinstance(listing.get("data"), list):
        for card in listing["data"]:
            if isinstance(card, Mapping):
                if (model_id := _str(card.get("id"))) is not None:
                    model_ids += (model_id,)
                if (owner := _str(card.get("owned_by"))) is not None:
                    owners.add(owner.lower())
    if owners == {_REFERENCE_SERVER}:
        # outlines-like's own server reads every dialect; vLLM's newest is the richest.
        return ServerInfo("vllm", None, model_ids), True
    kinds = {_OWNERS[o] for o in owners if o in _OWNERS}
    if kinds == {"vllm"}:
        answer = yield root + "/version"
        version = _str((answer.json_object or {}).get("version"))
        return ServerInfo("vllm", version, model_ids), answer.status is not None
    if len(kinds) == 1:
        (kind,) = kinds
        return ServerInfo(kind, None, model_ids), True

    for path, recognise in _ROOT_PROBES:
        answer = yield root + path
        if answer.status is None:
            return ServerInfo("generic", None, model_ids), False
        body = answer.json_object
        if body is not None and (info := recognise(body, model_ids)) is not None:
            return info, True
    return ServerInfo("generic", None, model_ids), True


def _llamacpp(body: Mapping[str, Any], ids: tuple[str, ...]) -> ServerInfo | None:
    if "default_generation_settings" in body or "total_slots" in body:
        return ServerInfo("llamacpp", _str(body.get("build_info")), ids)
    return None


def _tgi(body: Mapping[str, Any], ids: tuple[str, ...]) -> ServerInfo | None:
    if "model_id" in body and {"router", "max_total_tokens", "model_dtype"} & set(body):
        ids = ids or tuple(filter(None, [_str(body.get("model_id"))]))
        return ServerInfo("tgi", _str(body.get("version")), ids)
    return None


def _ollama(body: Mapping[str, Any], ids: tuple[str, ...]) -> ServerInfo | None:
    if _str(body.get("version")) and len(body) <= 2:
        return ServerInfo("ollama", _str(body.get("version")), ids)
    return None


def _sglang(body: Mapping[str, Any], ids: tuple[str, ...]) -> ServerInfo | None:
    if {"model_path", "internal_states", "grammar_backend", "is_generation"} & set(body):
        return ServerInfo("sglang", _str(body.get("version")), ids)
    return None


def _vllm(body: Mapping[str, Any], ids: tuple[str, ...]) -> ServerInfo | None:
    if body.get("server") == _REFERENCE_SERVER:
        return ServerInfo("vllm", None, ids)
    if _str(body.get("version")) and len(body) <= 2:
        return ServerInfo("vllm", _str(body.get("version")), ids)
    return None


_Recogniser = Callable[[Mapping[str, Any], tuple[str, ...]], ServerInfo | None]

# Tried in order after /v1/models was not conclusive; every server 404s the others' paths.
_ROOT_PROBES: tuple[tuple[str, _Recogniser], ...] = (
    ("/props", _llamacpp),
    ("/info", _tgi),
    ("/api/version", _ollama),
    ("/get_server_info", _sglang),
    ("/server_info", _sglang),
    ("/get_model_info", _sglang),
    ("/version", _vllm),
)


# --- drivers ----------------------------------------------------------------------------


def _probe_options() -> Any:
    """No retries (a probe is a question, not a request to insist on) and a short timeout."""
    return {"max_retries": 0, "timeout": PROBE_TIMEOUT}


def _answer_from_error(exc: openai.APIError) -> _Answer:
    if isinstance(exc, openai.APIStatusError):
        return _Answer(exc.status_code)
    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return _Answer(None)
    return _Answer(0)  # the server answered something unreadable


def _run_sync(client: openai.OpenAI, flow: _Flow) -> tuple[ServerInfo, bool]:
    try:
        url = next(flow)
        while True:
            try:
                body = client.get(url, cast_to=object, options=_probe_options())
            except openai.APIError as exc:
                answer = _answer_from_error(exc)
            else:
                answer = _Answer(200, body)
            url = flow.send(answer)
    except StopIteration as stop:
        result: tuple[ServerInfo, bool] = stop.value
        return result


async def _run_async(client: openai.AsyncOpenAI, flow: _Flow) -> tuple[ServerInfo, bool]:
    try:
        url = next(flow)
        while True:
            try:
                body = await client.get(url, cast_to=object, options=_probe_options())
            except openai.APIError as exc:
                answer = _answer_from_error(exc)
            else:
                answer = _Answer(200, body)
            url = flow.send(answer)
    except StopIteration as stop:
        result: tuple[ServerInfo, bool] = stop.value
        return result


# --- the cache ----------------------------------------------------------------------------

_lock = threading.Lock()
_cache: dict[str, tuple[ServerInfo, float | None]] = {}  # key -> (info, expiry or None)
_key_locks: dict[str, threading.Lock] = {}
_inflight: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, asyncio.Task[ServerInfo]]
] = weakref.WeakKeyDictionary()


def _cache_key(client: openai.OpenAI | openai.AsyncOpenAI) -> str:
    return str(client.base_url).rstrip("/")


def _lookup(key: str) -> ServerInfo | None:
    with _lock:
        entry = _cache.get(key)
        if entry is None:
            return None
        info, expiry = entry
        if expiry is not None and time.monotonic() >= expiry:
            del _cache[key]
            return None
        return info


def _store(key: str, info: ServerInfo, cacheable: bool) -> None:
    with _lock:
        _cache[key] = (info, None if cacheable else time.monotonic() + FAILURE_TTL)


def clear_detection_cache() -> None:
    """Forget every detected server (the next call probes again)."""
    with _lock:
        _cache.clear()


def detect_server(client: openai.OpenAI, *, refresh: bool = False) -> ServerInfo:
    """Return what the server behind ``client`` is, probing it once per base URL.

    Args:
        client: The user's ``openai.OpenAI`` client; the probes go through it.
        refresh: Probe again even when an answer is cached.
    """
    key = _cache_key(client)
    if not refresh and (hit := _lookup(key)) is not None:
        return hit
    with _lock:
        key_lock = _key_locks.setdefault(key, threading.Lock())
    with key_lock:
        if not refresh and (hit := _lookup(key)) is not None:
            return hit
        info, cacheable = _run_sync(client, _probe_flow(str(client.base_url)))
        _store(key, info, cacheable)
        return info


async def adetect_server(client: openai.AsyncOpenAI, *, refresh: bool = False) -> ServerInfo:
    """Async twin of ``detect_server``: concurrent tasks on one loop share one probe."""
    key = _cache_key(client)
    if not refresh and (hit := _lookup(key)) is not None:
        return hit
    loop = asyncio.get_running_loop()
    with _lock:
        tasks = _inflight.setdefault(loop, {})
        task = tasks.get(key)
        if task is None:
            task = loop.create_task(_aprobe(client, key))
            tasks[key] = task
            task.add_done_callback(lambda done: _forget_task(loop, key, done))
    return await asyncio.shield(task)


async def _aprobe(client: openai.AsyncOpenAI, key: str) -> ServerInfo:
    info, cacheable = await _run_async(client, _probe_flow(str(client.base_url)))
    _store(key, info, cacheable)
    return info


def _forget_task(loop: asyncio.AbstractEventLoop, key: str, task: asyncio.Task[ServerInfo]) -> None:
    with _lock:
        tasks = _inflight.get(loop)
        if tasks is not None and tasks.get(key) is task:
            del tasks[key]
