"""Find out which server is behind an OpenAI client: a flow of probes, and its I/O steps.

The probing is written once, as a flow (``detection_flow``) that yields ``Probe`` steps
and receives what came back; what the answers mean is decided by the pure recognisers in
``outlines_like.adapters.detect``. A model runs this flow as a stage of its own call flow
(``ModelCore.resolve_flow``) with its ``drive``/``adrive`` driver; ``probe`` and ``aprobe``
perform one step through the user's own client (``client.get``: its transport, base URL,
auth, headers and proxies), as httpx's ``Auth.auth_flow`` does.

Nothing is cached here: the answer belongs to the model that asked (see ``ModelCore``).

```python
info = detect_server(openai.OpenAI(base_url="http://localhost:8000/v1", api_key="-"))
# ServerInfo(kind='vllm', version='0.32.0', model_ids=('tiny',))
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import openai

from outlines_like.adapters.base import ServerInfo, ServerKind
from outlines_like.adapters.detect import (
    ROOT_PROBES,
    ProbeAnswer,
    is_openai_host,
    read_listing,
    root_url,
    vllm_version,
)
from outlines_like.errors import APIConnectionError
from outlines_like.models.retry import NO_RETRY, Flow, adrive, drive

__all__ = [
    "PROBE_TIMEOUT",
    "Probe",
    "adetect_server",
    "aprobe",
    "detect_server",
    "detection_flow",
    "name_unreachable",
    "pick_model",
    "probe",
    "server_name",
    "shown_ids",
]

PROBE_TIMEOUT = 3.0
"""Seconds one probe may take (connect + read)."""

Detection = tuple[ServerInfo, bool]
"""What a detection flow returns: the server, and whether the answer is conclusive (``False``
when the server could not be reached: ask again later rather than keep the guess)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Probe:
    """Flow step: ``GET url`` through the user's client; the result is a ``ProbeAnswer``.

    Attributes:
        url: Relative to the client's base URL (``"models"``), or absolute (the server root's
            ``/version``, ``/props``...).
    """

    url: str


def detection_flow(base_url: str, kind: ServerKind | None = None) -> Flow[Detection]:
    """Probe the server at ``base_url``; return ``(ServerInfo, conclusive)``.

    Args:
        base_url: The client's base URL (``http://host:port/v1``).
        kind: The kind the caller named, if any: then only what that kind's dialect still
            depends on is asked (vLLM's version: before 0.12 it reads ``guided_*`` fields).
    """
    root = root_url(base_url)
    if kind is not None:
        if kind != "vllm":
            return ServerInfo(kind), True
        answer = yield Probe(root + "/version")
        return ServerInfo("vllm", vllm_version(answer)), answer.status is not None
    if is_openai_host(base_url):
        return ServerInfo("openai"), True

    answer = yield Probe("models")
    if answer.status is None:
        return ServerInfo("generic"), False
    listing = read_listing(answer)
    ids = listing.model_ids
    if listing.reference:
        return ServerInfo("vllm", None, ids), True
    if listing.kind == "vllm":
        answer = yield Probe(root + "/version")
        return ServerInfo("vllm", vllm_version(answer), ids), answer.status is not None
    if listing.kind is not None:
        return ServerInfo(listing.kind, None, ids), True

    for path, recognise in ROOT_PROBES:
        answer = yield Probe(root + path)
        if answer.status is None:
            return ServerInfo("generic", None, ids), False
        body = answer.json_object
        if body is not None and (info := recognise(body, ids)) is not None:
            return info, True
    return ServerInfo("generic", None, ids), True


# --- the I/O of one probe (the twinned part) ------------------------------------------------


def _probe_options() -> Any:
    """No retries (a probe is a question, not a request to insist on) and a short timeout."""
    return {"max_retries": 0, "timeout": PROBE_TIMEOUT}


def _answer_from_error(exc: openai.APIError) -> ProbeAnswer:
    if isinstance(exc, openai.APIStatusError):
        return ProbeAnswer(exc.status_code)
    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return ProbeAnswer(None)
    return ProbeAnswer(0)  # the server answered something unreadable


def probe(client: openai.OpenAI, step: Probe) -> ProbeAnswer:
    """Send one probe through ``client``; never raises for an HTTP or connection failure."""
    try:
        body = client.get(step.url, cast_to=object, options=_probe_options())
    except openai.APIError as exc:
        return _answer_from_error(exc)
    return ProbeAnswer(200, body)


async def aprobe(client: openai.AsyncOpenAI, step: Probe) -> ProbeAnswer:
    """Async twin of ``probe``."""
    try:
        body = await client.get(step.url, cast_to=object, options=_probe_options())
    except openai.APIError as exc:
        return _answer_from_error(exc)
    return ProbeAnswer(200, body)


def detect_server(client: openai.OpenAI, server: ServerKind | None = None) -> ServerInfo:
    """Probe the server behind ``client`` now (no cache) and say what it is.

    Args:
        client: The user's ``openai.OpenAI`` client; the probes go through it.
        server: A kind already known: only what its dialect depends on is asked.
    """
    flow = detection_flow(str(client.base_url), server)
    info, _ = drive(flow, lambda step: probe(client, step), NO_RETRY)
    return info


async def adetect_server(
    client: openai.AsyncOpenAI, server: ServerKind | None = None
) -> ServerInfo:
    """Async twin of ``detect_server``."""

    async def execute(step: Probe) -> ProbeAnswer:
        return await aprobe(client, step)

    flow = detection_flow(str(client.base_url), server)
    info, _ = await adrive(flow, execute, NO_RETRY)
    return info


def shown_ids(ids: Sequence[str]) -> str:
    """Up to ten served model ids, quoted."""
    return ", ".join(repr(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")


def server_name(kind: str, url: str) -> str:
    """``the vllm server at URL`` (a ``generic`` kind is not named: it means "unknown")."""
    return f"the server at {url}" if kind == "generic" else f"the {kind} server at {url}"


def pick_model(ids: Sequence[str], server: str) -> str:
    """The single served model, or a ValueError that says how to choose one."""
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise ValueError(
            f"{server} lists no models; pass model_name=... when creating the model "
            "or model=... per call"
        )
    raise ValueError(
        f"{server} serves {len(ids)} models ({shown_ids(ids)}); choose one with "
        "model_name=... when creating the model, or model=... per call"
    )


def name_unreachable(error: APIConnectionError, url: str) -> APIConnectionError:
    """Name the URL in a connection error's message (the error itself is kept)."""
    prefix = "could not reach the server"
    rest = error.message[len(prefix) :] if error.message.startswith(prefix) else error.message
    error.message = f"could not reach the server at {url}{rest}; is it running?"
    return error
