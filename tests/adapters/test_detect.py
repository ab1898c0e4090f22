"""Server detection through the user's own client, with transports that answer like each server."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx2
import openai
import pytest

from outlines_like.adapters import ServerInfo, adetect_server, clear_detection_cache, detect_server
from outlines_like.adapters import detect as detect_module

Handler = Callable[[httpx2.Request], httpx2.Response]


def models(*ids: str, owned_by: str) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {"id": i, "object": "model", "created": 1796017439, "owned_by": owned_by} for i in ids
        ],
    }


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


class FakeServer:
    """A transport handler that answers fixed JSON per path and records every request."""

    def __init__(
        self, routes: Mapping[str, object], delay: float = 0.0, v1_needs_key: bool = False
    ) -> None:
        self.routes = routes
        self.delay = delay
        self.v1_needs_key = v1_needs_key or routes is VLLM_KEYED or routes is REFERENCE_KEYED
        self.requests: list[httpx2.Request] = []
        self._lock = threading.Lock()

    @property
    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        with self._lock:
            self.requests.append(request)
        if self.delay:
            time.sleep(self.delay)
        path = request.url.path
        if self.v1_needs_key and path.startswith("/v1/"):
            return httpx2.Response(401, json={"error": "Unauthorized"})
        if path in self.routes:
            return httpx2.Response(200, json=self.routes[path])
        return httpx2.Response(404, json={"detail": "Not Found"})


def sync_client(handler: Handler, base_url: str = "http://127.0.0.1:8000/v1") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=base_url,
        api_key="sk-test",
        default_headers={"X-Team": "blue"},
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def async_client(
    handler: Handler, base_url: str = "http://127.0.0.1:8000/v1"
) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=base_url,
        api_key="sk-test",
        default_headers={"X-Team": "blue"},
        http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)),
    )


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_detection_cache()
    yield
    clear_detection_cache()


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
    server = FakeServer(routes)
    assert detect_server(sync_client(server)) == info
    assert server.paths == paths
    for request in server.requests:  # the user's auth and headers reach every probe
        assert request.headers["authorization"] == "Bearer sk-test"
        assert request.headers["x-team"] == "blue"
        assert request.method == "GET"


@pytest.mark.parametrize(("routes", "info", "paths"), CASES)
async def test_detect_async(routes: dict[str, object], info: ServerInfo, paths: list[str]) -> None:
    server = FakeServer(routes)
    assert await adetect_server(async_client(server)) == info
    assert server.paths == paths
    assert all(r.headers["authorization"] == "Bearer sk-test" for r in server.requests)


@pytest.mark.parametrize(
    "base_url", ["https://api.openai.com/v1", "https://myorg.openai.azure.com/openai/v1"]
)
def test_openai_by_host_without_probes(base_url: str) -> None:
    server = FakeServer({})
    assert detect_server(sync_client(server, base_url)) == ServerInfo("openai")
    assert server.requests == []


def test_root_paths_sit_beside_the_base_path() -> None:
    server = FakeServer(
        {"/proxy/v1/models": models("m", owned_by="x"), "/proxy/version": {"version": "0.12.1"}}
    )
    info = detect_server(sync_client(server, "http://gw.local/proxy/v1/"))
    assert info == ServerInfo("vllm", "0.12.1", ("m",))
    assert server.paths[0] == "/proxy/v1/models"
    assert all(p.startswith("/proxy/") for p in server.paths)


def test_one_probe_per_base_url_across_calls_and_clients() -> None:
    server = FakeServer(VLLM)
    first = detect_server(sync_client(server))
    second = detect_server(sync_client(server))  # another client, same base URL
    assert first is second
    assert server.paths == ["/v1/models", "/version"]
    other = detect_server(sync_client(server, "http://127.0.0.1:8001/v1"))
    assert other == first
    assert len(server.requests) == 4


def test_one_probe_across_threads() -> None:
    server = FakeServer(VLLM, delay=0.02)
    client = sync_client(server)
    results: list[ServerInfo] = []
    threads = [
        threading.Thread(target=lambda: results.append(detect_server(client))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [ServerInfo("vllm", "0.32.0", ("tiny",))] * 8
    assert server.paths == ["/v1/models", "/version"]


async def test_one_probe_across_tasks() -> None:
    server = FakeServer(LLAMACPP, delay=0.01)
    client = async_client(server)
    results = await asyncio.gather(*(adetect_server(client) for _ in range(10)))
    assert set(results) == {ServerInfo("llamacpp", None, ("tiny",))}
    assert server.paths == ["/v1/models"]
    # the sync and async callers share the cache
    assert detect_server(sync_client(server)) == results[0]
    assert server.paths == ["/v1/models"]


def test_refresh_probes_again() -> None:
    server = FakeServer(SGLANG)
    client = sync_client(server)
    detect_server(client)
    detect_server(client, refresh=True)
    assert server.paths == ["/v1/models", "/v1/models"]


def _unreachable(request: httpx2.Request) -> httpx2.Response:
    raise httpx2.ConnectError("connection refused", request=request)


def test_unreachable_is_generic_and_not_cached_for_long(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            return _unreachable(request)
        return FakeServer(VLLM)(request)

    client = sync_client(handler)
    assert detect_server(client) == ServerInfo("generic")
    assert detect_server(client) == ServerInfo("generic")  # within FAILURE_TTL: no new probe
    assert calls == ["/v1/models"]
    monkeypatch.setattr(detect_module, "FAILURE_TTL", 0.0)
    clear_detection_cache()
    assert detect_server(client) == ServerInfo("vllm", "0.32.0", ("tiny",))
    assert detect_server(client).kind == "vllm"  # a success is cached
    assert calls == ["/v1/models", "/v1/models", "/version"]


def test_failure_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect_module, "FAILURE_TTL", 0.0)
    calls: list[str] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(request.url.path)
        return _unreachable(request)

    client = sync_client(handler)
    assert detect_server(client).kind == "generic"
    assert detect_server(client).kind == "generic"
    assert calls == ["/v1/models", "/v1/models"]


async def test_async_unreachable_is_generic() -> None:
    assert await adetect_server(async_client(_unreachable)) == ServerInfo("generic")


def test_non_json_answers_are_not_conclusive() -> None:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/api/version":
            return httpx2.Response(200, text="Ollama is running")
        if request.url.path == "/version":
            return httpx2.Response(200, json={"version": "1.2.3", "commit": "x", "extra": 1})
        return httpx2.Response(500, text="boom")

    assert detect_server(sync_client(handler)) == ServerInfo("generic")


def test_probes_do_not_retry() -> None:
    server = FakeServer({})

    def flaky(request: httpx2.Request) -> httpx2.Response:
        server(request)
        return httpx2.Response(503, json={"error": "loading"})

    detect_server(sync_client(flaky))
    assert server.paths.count("/v1/models") == 1
