"""Reference-server fixtures: the tiny model (built once per session), a service, a server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests import _tiny

# the tiny model's session fixtures, shared with tests/engine
tiny_path = _tiny.tiny_path
tiny_model = _tiny.tiny_model
one_torch_thread = _tiny.one_torch_thread


@pytest.fixture(scope="session")
def service(tiny_model: tuple[Any, Any]) -> Iterator[Any]:
    from outlines_like.server.config import ServerConfig
    from outlines_like.server.service import GenerationService

    model, tokenizer = tiny_model
    config = ServerConfig(
        max_tokens_limit=512,
        compile_timeout=5.0,
        max_body_bytes=200_000,
        max_constraint_bytes=20_000,
    )
    svc = GenerationService(model, tokenizer, config, "tiny")
    yield svc
    svc.stop()  # idempotent: the engine thread, mask threads and compile workers


@pytest.fixture(scope="session")
def server(service: Any) -> Iterator[Any]:
    from outlines_like.server.run import ServerThread

    with ServerThread(service=service) as running:
        yield running
    service.stop()


@pytest.fixture
def client(server: Any) -> Any:
    import openai

    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
