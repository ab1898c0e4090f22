"""The public names of ``outlines_like.adapters`` (a change here is an API change)."""

from __future__ import annotations

import outlines_like.adapters as adapters
from outlines_like.adapters import base, detect


def test_adapters_exports() -> None:
    assert sorted(adapters.__all__) == sorted(
        [
            "SERVER_KINDS",
            "Adapter",
            "ConstraintFields",
            "Endpoint",
            "GenericAdapter",
            "LlamaCppAdapter",
            "OllamaAdapter",
            "OpenAIAdapter",
            "SGLangAdapter",
            "ServerInfo",
            "ServerKind",
            "TGIAdapter",
            "VLLMAdapter",
            "get_adapter",
            "get_adapter_for",
        ]
    )
    for name in adapters.__all__:
        assert hasattr(adapters, name), name


def test_base_and_detect_exports() -> None:
    assert set(base.__all__) >= {"Adapter", "ConstraintFields", "ServerInfo", "ServerKind"}
    assert set(detect.__all__) == {  # pure recognisers: the probing is in models.detection
        "ROOT_PROBES",
        "Listing",
        "ProbeAnswer",
        "is_openai_host",
        "read_listing",
        "root_url",
        "vllm_version",
    }
    assert adapters.SERVER_KINDS == (
        "sglang",
        "vllm",
        "llamacpp",
        "tgi",
        "ollama",
        "openai",
        "generic",
    )
