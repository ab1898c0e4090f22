"""Shared test helpers: ONE fake OpenAI-compatible server for every unit test that needs one.

``FakeServer`` is an ``httpx2.MockTransport`` handler: GET routes answer fixed JSON (what
each real server answers to detection probes), ``/v1/models`` lists ``models``, and the
completion routes answer from a queue of recorded bodies, SSE streams, exceptions or
handlers. Every request is recorded. ``client()`` / ``aclient()`` build an
``openai.OpenAI`` / ``openai.AsyncOpenAI`` over it.

```python
from tests.conftest import FakeServer, chat_body
fake = FakeServer(chat_body("7"), models=("tiny",), owned_by="vllm")
model = from_server(fake.client())
```
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx2
import openai

Handler = Callable[[httpx2.Request], httpx2.Response]
Answer = httpx2.Response | Mapping[str, Any] | Exception | Handler

BASE_URL = "http://127.0.0.1:8000/v1"

# the kernels called past numba's dispatcher check that their arrays are C-contiguous
# (fsm/_accel_dfa_kernels.entry_point): a strided array would be read as if it were not
os.environ.setdefault("OUTLINES_LIKE_ACCEL_CHECKS", "1")


def chat_body(
    *contents: str | None,
    finish: str = "stop",
    usage: dict[str, Any] | None = None,
    **message_fields: Any,
) -> dict[str, Any]:
    """A ``chat.completion`` body with one choice per content."""
    contents = contents or ("ok",)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "tiny",
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": c, **message_fields},
                "finish_reason": finish,
            }
            for i, c in enumerate(contents)
        ],
        "usage": usage or {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def chunk(content: str | None = None, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with ``delta`` (``content`` when given)."""
    if content is not None:
        delta["content"] = content
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "tiny",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def sse(*chunks: Mapping[str, Any]) -> httpx2.Response:
    """A server-sent-events answer carrying ``chunks``, then ``[DONE]``."""
    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=text)


def models_listing(*ids: str, owned_by: str) -> dict[str, Any]:
    """A ``GET /v1/models`` body."""
    return {
        "object": "list",
        "data": [
            {"id": i, "object": "model", "created": 1796017439, "owned_by": owned_by} for i in ids
        ],
    }


def _respond(answer: Answer, request: httpx2.Request) -> httpx2.Response:
    if isinstance(answer, Exception):
        raise answer
    if isinstance(answer, httpx2.Response):
        return answer
    if isinstance(answer, Mapping):
        return httpx2.Response(200, json=answer)
    return answer(request)


class FakeServer:
    """An OpenAI-compatible server in a transport handler; records every request.

    Args:
        *answers: What the completion routes answer, in order (a body, a response, an
            exception to raise, or a handler); ``chat_body("ok")`` once they run out.
        models: The ids ``GET .../models`` lists; ``None``: that route is not answered
            unless ``routes`` has it.
        owned_by: The ``owned_by`` of every listed model.
        routes: Exact paths answered first (``{"/version": {"version": "0.32.0"}}``); every
            other path is a 404, as on the real servers.
        delay: Seconds each request takes.
        v1_needs_key: Answer 401 under ``/v1/`` (a server whose API needs a key we lack).

    The attributes may be changed between calls (``fake.routes = ...``): another server
    now answers behind the same URL.
    """

    def __init__(
        self,
        *answers: Answer,
        models: tuple[str, ...] | None = ("tiny",),
        owned_by: str = "someone",
        routes: Mapping[str, Answer] | None = None,
        delay: float = 0.0,
        v1_needs_key: bool = False,
    ) -> None:
        self.answers = list(answers)
        self.models = models
        self.owned_by = owned_by
        self.routes: Mapping[str, Any] = routes or {}  # each value an Answer
        self.delay = delay
        self.v1_needs_key = v1_needs_key
        self.down = False
        self.requests: list[httpx2.Request] = []
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        with self.lock:
            self.requests.append(request)
        if self.delay:
            time.sleep(self.delay)
        if self.down:
            raise httpx2.ConnectError("connection refused", request=request)
        path = request.url.path
        if self.v1_needs_key and path.startswith("/v1/"):
            return httpx2.Response(401, json={"error": "Unauthorized"})
        if path in self.routes:
            return _respond(self.routes[path], request)
        if path.endswith("/models") and self.models is not None:
            return httpx2.Response(200, json=models_listing(*self.models, owned_by=self.owned_by))
        if request.method != "POST" or not path.endswith("/completions"):
            return httpx2.Response(404, json={"error": {"message": "no route"}})
        with self.lock:
            self.bodies.append(json.loads(request.content))
            answer = self.answers.pop(0) if self.answers else chat_body("ok")
        return _respond(answer, request)

    @property
    def paths(self) -> list[str]:
        """The path of every request, in order."""
        return [r.url.path for r in self.requests]

    @property
    def sent(self) -> dict[str, Any]:
        """The body of the last completion request."""
        return self.bodies[-1]

    def client(self, base_url: str = BASE_URL, **kw: Any) -> openai.OpenAI:
        """An ``openai.OpenAI`` talking to this server (key ``sk-test``, header ``X-Team``)."""
        http = httpx2.Client(transport=httpx2.MockTransport(self))
        return openai.OpenAI(
            base_url=base_url,
            api_key="sk-test",
            default_headers={"X-Team": "blue"},
            http_client=http,
            **kw,
        )

    def aclient(self, base_url: str = BASE_URL, **kw: Any) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` talking to this server."""
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(self))
        return openai.AsyncOpenAI(
            base_url=base_url,
            api_key="sk-test",
            default_headers={"X-Team": "blue"},
            http_client=http,
            **kw,
        )
