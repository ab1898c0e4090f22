"""A server replaced behind the same URL while a model is in use: the model follows it.

The reference server answers on a port; a model detects it (vLLM's dialect). Then the
reference server stops and llama.cpp's server starts on the same port: a new ``from_server``
and the existing model's next call both use llama.cpp's dialect, and answers still fit.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

import httpx2
import openai
import pytest

import outlines_like as ol
from tests.integration.conftest import (
    free_port,
    launch_llamacpp,
    launch_reference,
    stop,
    wait_healthy,
)

if TYPE_CHECKING:
    import pathlib

    from tests.integration.conftest import Server

pytestmark = [pytest.mark.realservers, pytest.mark.timeout(600)]

Answer = Literal["yes", "no"]


def test_a_model_follows_the_server_behind_its_url(
    llamacpp_server: Server, tmp_path: pathlib.Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    bodies: list[dict[str, object]] = []

    def record(request: httpx2.Request) -> None:
        if request.method == "POST" and request.content:
            bodies.append(json.loads(request.content))

    http = httpx2.Client(event_hooks={"request": [record]}, timeout=60)
    client = openai.OpenAI(base_url=base + "/v1", api_key="-", http_client=http)
    reference = launch_reference(port, tmp_path / "reference.log")
    try:
        wait_healthy(base + "/health", 180, reference)
        model = ol.from_server(client)
        assert model("Yes or no?", Answer, max_tokens=4, seed=1) in ("yes", "no")
        assert model.server == "vllm"  # the reference server speaks vLLM's dialect
        assert "structured_outputs" in bodies[-1]
    finally:
        stop(reference)
    llamacpp = launch_llamacpp(port, tmp_path / "llamacpp.log")
    try:
        wait_healthy(base + "/health", 120, llamacpp)
        fresh = ol.from_server(openai.OpenAI(base_url=base + "/v1", api_key="-"))
        assert fresh("Yes or no?", Answer, max_tokens=4, seed=2) in ("yes", "no")
        assert fresh.server == "llamacpp"
        assert model("Yes or no?", Answer, max_tokens=4, seed=3) in ("yes", "no")
        assert model.server == "llamacpp"  # the old model detected again and followed
        assert "grammar" in bodies[-1]
        assert "structured_outputs" not in bodies[-1]
    finally:
        stop(llamacpp)
        http.close()
