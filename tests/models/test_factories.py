"""Factories: which model class for which client, fixed dialects, argument checks."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

import outlines_like.models as m
from outlines_like.models.factories import ServerFactory


def sync_client() -> openai.OpenAI:
    return openai.OpenAI(base_url="http://t/v1", api_key="x")


def async_client() -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://t/v1", api_key="x")


def test_from_server_picks_the_model_class() -> None:
    assert type(m.from_server(sync_client())) is m.Model
    assert type(m.from_server(async_client())) is m.AsyncModel


@pytest.mark.parametrize(
    ("factory", "kind"),
    [
        (m.from_sglang, "sglang"),
        (m.from_vllm, "vllm"),
        (m.from_llamacpp, "llamacpp"),
        (m.from_tgi, "tgi"),
        (m.from_ollama, "ollama"),
        (m.from_openai, "openai"),
    ],
)
def test_fixed_dialect_factories(factory: ServerFactory, kind: str) -> None:
    model = factory(sync_client(), "qwen")
    assert type(model) is m.Model
    assert (model.server, model.model_name) == (kind, "qwen")
    amodel = factory(async_client(), model_name="qwen", endpoint="completions")
    assert type(amodel) is m.AsyncModel
    assert (amodel.server, amodel.endpoint) == (kind, "completions")
    assert factory.__name__ == f"from_{kind}"
    assert kind in (factory.__doc__ or "")


@pytest.mark.parametrize(
    "client",
    [None, "http://localhost:8000/v1", httpx.Client(), object()],
    ids=["none", "url", "httpx", "object"],
)
def test_anything_else_is_a_type_error(client: Any) -> None:
    with pytest.raises(TypeError, match=r"openai\.OpenAI .*openai\.AsyncOpenAI"):
        m.from_server(client)
    with pytest.raises(TypeError, match=r"openai\.OpenAI"):
        m.from_vllm(client)


def test_unknown_server_kind_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"server='vllm2'.*'sglang'"):
        m.from_server(sync_client(), "vllm2")  # type: ignore[call-overload]


def test_options_reach_the_model() -> None:
    retry = m.RetryPolicy(max_attempts=7)
    limiter = m.RateLimiter(100)
    model = m.from_server(sync_client(), "vllm", model_name="x", retry=retry, rate_limit=limiter)
    assert (model.retry, model.rate_limiter) == (retry, limiter)
    assert model._client is not model.client  # our retries: the client's own are off
    assert model._client.max_retries == 0
    assert m.from_server(sync_client(), retry=None).retry is None
