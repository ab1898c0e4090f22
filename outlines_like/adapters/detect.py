"""Recognise a server from its answers to detection probes (pure: no I/O, no client).

The probing itself is a step of the model's flow (``outlines_like.models.detection``); this
module only says which URLs are worth asking and what their answers mean.

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from outlines_like.adapters.base import ServerInfo, ServerKind

__all__ = [
    "ROOT_PROBES",
    "Listing",
    "ProbeAnswer",
    "is_openai_host",
    "read_listing",
    "root_url",
    "vllm_version",
]

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
class ProbeAnswer:
    """What one probe got: ``status`` is ``None`` when the server could not be reached.

    Attributes:
        status: The HTTP status (0: an answer that could not be read), ``None``: no answer.
        body: The decoded JSON body of a 2xx answer.
    """

    status: int | None
    body: object = None

    @property
    def json_object(self) -> Mapping[str, Any] | None:
        """The body when the probe succeeded with a JSON object, else ``None``."""
        if self.status == 200 and isinstance(self.body, Mapping):
            return self.body
        return None


@dataclasses.dataclass(frozen=True)
class Listing:
    """What ``GET /v1/models`` said.

    Attributes:
        model_ids: The served model ids, in the server's order.
        kind: The server kind its ``owned_by`` fields name, when they agree on one.
        reference: The server is outlines-like's reference server (``kind`` is then
            ``"vllm"``, whose newest dialect it reads: no version to ask for).
    """

    model_ids: tuple[str, ...] = ()
    kind: ServerKind | None = None
    reference: bool = False


def root_url(base_url: str) -> str:
    """The server root: the base URL without its trailing ``/v1``."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def is_openai_host(base_url: str) -> bool:
    """Whether ``base_url`` is OpenAI's API (or Azure OpenAI): no probe needed."""
    host = (urlsplit(base_url).hostname or "").lower()
    return host in _OPENAI_HOSTS or host.endswith(_OPENAI_HOST_SUFFIXES)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def read_listing(answer: ProbeAnswer) -> Listing:
    """Read the served ids and the owner's kind from a ``GET /v1/models`` answer."""
    listing = answer.json_object
    if listing is None or not isinstance(listing.get("data"), list):
        return Listing()
    model_ids: tuple[str, ...] = ()
    owners: set[str] = set()
    for card in listing["data"]:
        if isinstance(card, Mapping):
            if (model_id := _str(card.get("id"))) is not None:
                model_ids += (model_id,)
            if (owner := _str(card.get("owned_by"))) is not None:
                owners.add(owner.lower())
    if owners == {_REFERENCE_SERVER}:
        return Listing(model_ids, "vllm", reference=True)
    kinds = {_OWNERS[o] for o in owners if o in _OWNERS}
    return Listing(model_ids, kinds.pop() if len(kinds) == 1 else None)


def vllm_version(answer: ProbeAnswer) -> str | None:
    """The version in a vLLM ``GET /version`` answer (``None``: unknown, or our reference server).

    The reference server reads every dialect, so it gets vLLM's newest (version ``None``).
    """
    body = answer.json_object or {}
    if body.get("server") == _REFERENCE_SERVER:
        return None
    return _str(body.get("version"))


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


Recogniser = Callable[[Mapping[str, Any], tuple[str, ...]], ServerInfo | None]
"""Reads one root probe's JSON answer (and the ids listed so far) into a ``ServerInfo``."""

ROOT_PROBES: tuple[tuple[str, Recogniser], ...] = (
    ("/props", _llamacpp),
    ("/info", _tgi),
    ("/api/version", _ollama),
    ("/get_server_info", _sglang),
    ("/server_info", _sglang),
    ("/get_model_info", _sglang),
    ("/version", _vllm),
)
"""Paths below the server root, tried in order when ``/v1/models`` was not conclusive (every
server 404s the others' paths), each with the recogniser of its answer."""
