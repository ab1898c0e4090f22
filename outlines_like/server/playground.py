"""The browser playground: its static page at ``/`` and the constraint check route it calls.

The page (``server/playground/``: plain HTML, JavaScript and CSS, no build step, nothing
fetched from elsewhere) is a client of the API: it streams ``/v1/chat/completions`` with
``logprobs`` (each token's ``allowed_count``, see :mod:`~outlines_like.server.logprobs`) and
checks the constraint being typed with ``POST /v1/constraints/check``.

``POST /v1/constraints/check`` takes a body with a constraint in any dialect a chat request
takes (``structured_outputs``, ``regex``, ``response_format``...), reads and compiles it with
the server's own compiler (the same budgets and cache: a constraint that passes is ready for
the next request), and answers ``{"object": "constraint.check", "field", "kind", "seconds"}``;
or the 400 a chat request with that constraint would get, whose ``error`` gains a
``position`` (``offset``, or ``line`` and ``column``, and the schema's ``pointer``) when the
message names one.
"""

from __future__ import annotations

import pathlib
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from outlines_like.server.dialects import CONSTRAINT_FIELDS, RequestError, ignored_fields
from outlines_like.server.responses import error_body, error_kind
from outlines_like.server.service import GenerationService

try:
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import JSONResponse
except ImportError as _exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the reference server needs the server extra: pip install 'outlines-like[server]'"
    ) from _exc

__all__ = ["PLAYGROUND_DIR", "check_constraint", "error_position", "install_playground"]

PLAYGROUND_DIR = pathlib.Path(__file__).with_name("playground")
"""The page's files, shipped in the package."""

_MEDIA_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
_CHECK_FIELDS = frozenset({"model"}) | CONSTRAINT_FIELDS | ignored_fields()

_OFFSET = re.compile(r"at (?:position|character|offset) (\d+)")
_LINE_COLUMN = re.compile(r"at line (\d+),? col(?:umn)? (\d+)")
_POINTER = re.compile(r"at (#/?[^\s:]*)")


def error_position(message: str) -> dict[str, Any] | None:
    """Where an error message says the constraint is wrong, if it says.

    Returns:
        ``{"offset": n}`` (0-based, into the constraint's text) or ``{"line": l, "column": c}``
        (1-based), with ``"pointer"`` (a JSON pointer into the schema) when the message has
        one; ``None`` when it names no place.
    """
    found: dict[str, Any] = {}
    pointer = _POINTER.search(message)
    if pointer is not None:
        found["pointer"] = pointer.group(1)
    line = _LINE_COLUMN.search(message)
    offset = _OFFSET.search(message)
    if line is not None:
        found["line"], found["column"] = int(line.group(1)), int(line.group(2))
    elif offset is not None:
        found["offset"] = int(offset.group(1))
    return found or None


async def check_constraint(service: GenerationService, body: dict[str, Any]) -> dict[str, Any]:
    """Read and compile the constraint of ``body`` as a chat request's would be.

    Raises:
        RequestError: an unknown field, or the constraint's own 400 (invalid, unsupported,
            too large or too costly to compile).
    """
    from outlines_like.server.dialects import read_constraint

    unknown = sorted(set(body) - _CHECK_FIELDS)
    if unknown:
        raise RequestError(
            f"unknown field {unknown[0]!r}: send the constraint fields of a chat request",
            param=unknown[0],
            code="unknown_field",
        )
    spec = read_constraint(body)
    if spec is None:
        return {"object": "constraint.check", "field": None, "kind": "text", "seconds": 0.0}
    started = time.perf_counter()
    await service.compiler.compile(spec)
    return {
        "object": "constraint.check",
        "field": spec.field,
        "kind": type(spec.term).__name__,
        "seconds": round(time.perf_counter() - started, 4),
    }


def _page_file(name: str) -> Response:
    path = PLAYGROUND_DIR / name
    media = _MEDIA_TYPES.get(path.suffix)
    if media is None or path.parent != PLAYGROUND_DIR or not path.is_file():
        return JSONResponse(
            error_body(f"no playground file {name!r}", kind=error_kind(404), param=None, code=None),
            status_code=404,
        )
    return Response(path.read_bytes(), media_type=media, headers={"cache-control": "no-cache"})


def install_playground(
    app: FastAPI,
    body_of: Callable[[Request], Awaitable[tuple[GenerationService, dict[str, Any]]]],
) -> None:
    """Add ``GET /``, ``GET /playground/{name}`` and ``POST /v1/constraints/check`` to ``app``.

    Args:
        app: The server's app.
        body_of: The app's body reader (auth, size limit, served model checked).
    """

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return _page_file("index.html")

    @app.get("/playground/{name}", include_in_schema=False)
    async def page_file(name: str) -> Response:
        return _page_file(name)

    @app.post("/v1/constraints/check", response_model=None)
    async def check(request: Request) -> Response:
        svc, body = await body_of(request)
        try:
            return JSONResponse(await check_constraint(svc, body))
        except RequestError as exc:
            payload = error_body(
                exc.message, kind=error_kind(exc.status), param=exc.param, code=exc.code
            )
            position = error_position(exc.message)
            if position is not None:
                payload["error"]["position"] = position
            return JSONResponse(payload, status_code=exc.status)
