"""Server detection through the user's own client, with transports that answer like each server.

The recognisers (``adapters.detect``) are pure; the probes are a flow the model drives
(``models.detection``); the fake server is ``tests.conftest.FakeServer``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx2
import pytest

import outlines_like.models as m
from outlines_like.adapters import ServerInfo
from outlines_like.adapters.detect import ProbeAnswer, read_listing, root_url, vllm_version
from outlines_like.models.detection import adetect_server, detect_server
from tests.conftest import FakeServer, models_listing


def models(*ids: str, owned_by: str) -> dict[str, Any]:
    return models_listing(*ids, owned_by=owned_by)


# What each server answers (shapes from the recordings in ../shared/servers and the servers'
# own sources/docs); every other path is a 404, as on the real servers.
VLLM = {
    "/v1/models": models("tiny", owned_by="vllm"),
    "/version": {"version": "0.32.0"},
}
VLLM_OLD = {
    "/v1/models": models("meta-llama/Llama-3.1-8B-Instruct", owned_by="vllm"),
    "/version": {"version": "0.8.5.post1"},
}
SGLANG = {
    "/v1/models": models("qwen/qwen2.5-0.5b-instruct", owned_by="sglang"),
    "/get_server_info": {"model_path": "qwen/qwen2.5-0.5b-instruct", "version": "0.5.23"},
}
SGLANG_NO_OWNER = {
    "/v1/models": models("default", owned_by=""),
    "/get_server_info": {
        "model_path": "qwen/qwen2.5-0.5b-instruct",
        "grammar_backend": "xgrammar",
        "version": "0.4.6",
    },
}
LLAMACPP = {  # trimmed from a real llama-server (xllamacpp 2026.10.11549)
    "/v1/models": {
        "models": [
            {"name": "tiny", "model": "tiny", "type": "model", "capabilities": ["completion"]}
        ],
        "object": "list",
        "data": [
            {
                "id": "tiny",
                "aliases": ["tiny"],
                "tags": [],
                "object": "model",
                "created": 1796022853,
                "owned_by": "llamacpp",
                "meta": {"vocab_type": 2, "n_vocab": 151680, "n_ctx": 1024},
            }
        ],
    },
    "/props": {
        "default_generation_settings": {"params": {"seed": 4294967295}, "n_ctx": 1024},
        "total_slots": 2,
        "model_alias": "tiny",
        "model_path": "/tmp/tiny-qwen3.gguf",
        "build_info": "b0-unknown",
        "is_sleeping": False,
    },
}
LLAMACPP_OLD = {  # an older llama-server: no owned_by in /v1/models
    "/v1/models": {"object": "list", "data": [{"id": "model.gguf", "object": "model"}]},
    "/props": {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1},
}
TGI = {
    "/v1/models": models(
        "mistralai/Mistral-7B-Instruct-v0.2", owned_by="mistralai/Mistral-7B-Instruct-v0.2"
    ),
    "/info": {
        "model_id": "mistralai/Mistral-7B-Instruct-v0.2",
        "model_sha": None,
        "model_dtype": "torch.float16",
        "model_device_type": "cuda",
        "max_input_tokens": 4095,
        "max_total_tokens": 4096,
        "version": "3.0.1",
        "sha": "abc",
        "router": "text-generation-router",
    },
}
OLLAMA = {
    "/v1/models": models("llama3.2:latest", "qwen3:8b", owned_by="library"),
    "/api/version": {"version": "0.5.7"},
}
REFERENCE = {  # outlines_like.server: reads every dialect, gets vLLM's newest
    "/v1/models": models("tiny", owned_by="outlines-like"),
    "/version": {"version": "0.1.0", "server": "outlines-like"},
}
REFERENCE_KEYED = {"/version": {"version": "0.1.0", "server": "outlines-like"}}
SGLANG_MODEL_INFO = {  # an SGLang whose server-info routes are off
    "/get_model_info": {
        "model_path": "qwen/qwen2.5-0.5b-instruct",
        "tokenizer_path": "qwen/qwen2.5-0.5b-instruct",
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
    }
}
GENERIC = {"/v1/models": models("local-model", owned_by="organization_owner")}
VLLM_KEYED = {"/version": {"version": "0.11.0"}}  # /v1/* needs a key we do not have


KEYED = (VLLM_KEYED, REFERENCE_KEYED)  # /v1/* needs a key we do not have


def fake(routes: dict[str, Any], delay: float = 0.0) -> FakeServer:
    """A server answering ``routes`` only (``/v1/models`` included when listed)."""
    return FakeServer(models=None, routes=routes, delay=delay, v1_needs_key=routes in KEYED)


CASES = [
    pytest.param(
        VLLM, ServerInfo("vllm", "0.32.0", ("tiny",)), ["/v1/models", "/version"], id="vllm"
    ),
    pytest.param(
        VLLM_OLD,
        ServerInfo("vllm", "0.8.5.post1", ("meta-llama/Llama-3.1-8B-Instruct",)),
        ["/v1/models", "/version"],
        id="vllm-old",
    ),
    pytest.param(
        SGLANG,
        ServerInfo("sglang", None, ("qwen/qwen2.5-0.5b-instruct",)),
        ["/v1/models"],
        id="sglang",
    ),
    pytest.param(
        SGLANG_NO_OWNER,
        ServerInfo("sglang", "0.4.6", ("default",)),
        ["/v1/models", "/props", "/info", "/api/version", "/get_server_info"],
        id="sglang-by-server-info",
    ),
    pytest.param(
        SGLANG_MODEL_INFO,
        ServerInfo("sglang"),
        [
            "/v1/models",
            "/props",
            "/info",
            "/api/version",
            "/get_server_info",
            "/server_info",
            "/get_model_info",
        ],
        id="sglang-by-model-info",
    ),
    pytest.param(LLAMACPP, ServerInfo("llamacpp", None, ("tiny",)), ["/v1/models"], id="llamacpp"),
    pytest.param(
        LLAMACPP_OLD,
        ServerInfo("llamacpp", None, ("model.gguf",)),
        ["/v1/models", "/props"],
        id="llamacpp-by-props",
    ),
    pytest.param(
        TGI,
        ServerInfo("tgi", "3.0.1", ("mistralai/Mistral-7B-Instruct-v0.2",)),
        ["/v1/models", "/props", "/info"],
        id="tgi",
    ),
    pytest.param(
        OLLAMA,
        ServerInfo("ollama", "0.5.7", ("llama3.2:latest", "qwen3:8b")),
        ["/v1/models", "/props", "/info", "/api/version"],
        id="ollama",
    ),
    pytest.param(
        GENERIC,
        ServerInfo("generic", None, ("local-model",)),
        [
            "/v1/models",
            "/props",
            "/info",
            "/api/version",
            "/get_server_info",
            "/server_info",
            "/get_model_info",
            "/version",
        ],
        id="generic",
    ),
    pytest.param(REFERENCE, ServerInfo("vllm", None, ("tiny",)), ["/v1/models"], id="reference"),
    pytest.param(
        REFERENCE_KEYED,
        ServerInfo("vllm", None),
        [
            "/v1/models",
            "/props",
            "/info",
            "/api/version",
            "/get_server_info",
            "/server_info",
            "/get_model_info",
            "/version",
        ],
        id="reference-models-behind-key",
    ),
    pytest.param(
        VLLM_KEYED,
        ServerInfo("vllm", "0.11.0"),
        [
            "/v1/models",
            "/props",
            "/info",
            "/api/version",
            "/get_server_info",
            "/server_info",
            "/get_model_info",
            "/version",
        ],
        id="vllm-models-behind-key",
    ),
]


@pytest.mark.parametrize(("routes", "info", "paths"), CASES)
def test_detect_sync(routes: dict[str, object], info: ServerInfo, paths: list[str]) -> None:
    server = fake(routes)
    assert detect_server(server.client()) == info
    assert server.paths == paths
    for request in server.requests:  # the user's auth and headers reach every probe
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["x-team"] == "blue"
        assert request.method == "GET"


@pytest.mark.parametrize(("routes", "info", "paths"), CASES)
async def test_detect_async(routes: dict[str, object], info: ServerInfo, paths: list[str]) -> None:
    server = fake(routes)
    assert await adetect_server(server.aclient()) == info
    assert server.paths == paths
    assert all(r.headers["authorization"] == "Bearer sk-test" for r in server.requests)


@pytest.mark.parametrize(("routes", "info", "paths"), CASES)
def test_a_model_detects_the_same(
    routes: dict[str, object], info: ServerInfo, paths: list[str]
) -> None:
    server = fake(routes)
    model = m.from_server(server.client())
    assert model.detect() == info
    assert (model.server, server.paths) == (info.kind, paths)


@pytest.mark.parametrize(
    "base_url", ["https://api.openai.com/v1", "https://myorg.openai.azure.com/openai/v1"]
)
def test_openai_by_host_without_probes(base_url: str) -> None:
    server = fake({})
    assert detect_server(server.client(base_url)) == ServerInfo("openai")
    assert server.requests == []


def test_root_paths_sit_beside_the_base_path() -> None:
    server = fake(
        {"/proxy/v1/models": models("m", owned_by="x"), "/proxy/version": {"version": "0.12.1"}}
    )
    info = detect_server(server.client("http://gw.local/proxy/v1/"))
    assert info == ServerInfo("vllm", "0.12.1", ("m",))
    assert server.paths[0] == "/proxy/v1/models"
    assert all(p.startswith("/proxy/") for p in server.paths)


def test_no_process_cache_each_model_asks() -> None:
    server = fake(VLLM)
    first = m.from_server(server.client())
    assert first.detect() == first.detect()  # kept on the model: probed once
    assert server.paths == ["/v1/models", "/version"]
    server.routes = LLAMACPP  # another server behind the same URL
    assert m.from_server(server.client()).detect() == ServerInfo("llamacpp", None, ("tiny",))
    kinds = [first.server]  # the old kind, until it asks again
    assert first.detect(refresh=True).kind == "llamacpp"
    kinds.append(first.server)
    assert kinds == ["vllm", "llamacpp"]


def test_one_probe_across_threads() -> None:
    server = fake(VLLM, delay=0.02)
    model = m.from_server(server.client())
    results: list[ServerInfo] = []
    threads = [threading.Thread(target=lambda: results.append(model.detect())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [ServerInfo("vllm", "0.32.0", ("tiny",))] * 8
    assert server.paths == ["/v1/models", "/version"]


async def test_one_probe_across_tasks() -> None:
    server = fake(LLAMACPP, delay=0.01)
    amodel = m.from_server(server.aclient())
    results = await asyncio.gather(*(amodel.detect() for _ in range(10)))
    assert set(results) == {ServerInfo("llamacpp", None, ("tiny",))}
    assert server.paths == ["/v1/models"]
    assert amodel.server == "llamacpp"


def test_unreachable_is_generic_and_asked_again() -> None:
    server = fake(VLLM)
    server.down = True
    model = m.from_server(server.client())
    assert detect_server(server.client()) == ServerInfo("generic")
    assert model.detect() == ServerInfo("generic")
    assert model.server is None  # no answer is not an answer: not kept
    assert server.paths == ["/v1/models", "/v1/models"]
    server.down = False
    assert model.detect() == ServerInfo("vllm", "0.32.0", ("tiny",))
    assert model.detect().kind == "vllm"  # a success is kept
    assert server.paths == ["/v1/models"] * 3 + ["/version"]


async def test_async_unreachable_is_generic() -> None:
    server = fake({})
    server.down = True
    assert await adetect_server(server.aclient()) == ServerInfo("generic")


def test_non_json_answers_are_not_conclusive() -> None:
    server = fake(
        {
            "/api/version": httpx2.Response(200, text="Ollama is running"),
            "/version": {"version": "1.2.3", "commit": "x", "extra": 1},
        }
    )
    assert detect_server(server.client()) == ServerInfo("generic")


def test_probes_do_not_retry() -> None:
    server = fake({"/v1/models": httpx2.Response(503, json={"error": "loading"})})
    detect_server(server.client())
    assert server.paths.count("/v1/models") == 1


# ----------------------------------------------------------------------------- pure readers


def test_recognisers_are_pure_functions_of_answers() -> None:
    listing = read_listing(ProbeAnswer(200, models("a", "b", owned_by="sglang")))
    assert (listing.model_ids, listing.kind, listing.reference) == (("a", "b"), "sglang", False)
    assert read_listing(ProbeAnswer(200, models("t", owned_by="outlines-like"))).reference
    assert read_listing(ProbeAnswer(404)).model_ids == ()
    assert read_listing(ProbeAnswer(200, "not json")).kind is None
    assert vllm_version(ProbeAnswer(200, {"version": "0.8.5"})) == "0.8.5"
    assert vllm_version(ProbeAnswer(200, {"version": "0.1.0", "server": "outlines-like"})) is None
    assert vllm_version(ProbeAnswer(None)) is None
    assert root_url("http://h:1/a/v1/") == "http://h:1/a"


def test_adapters_import_no_client_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, outlines_like.adapters, outlines_like.adapters.detect; "
        "print(sorted(m for m in ('openai', 'httpx', 'httpx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
