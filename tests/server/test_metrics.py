"""The Prometheus text of ``/metrics``: the format itself, and what the server counts."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import httpx
import pytest

from outlines_like.server.metrics import CONTENT_TYPE, Histogram, Metrics

SAMPLE = re.compile(r'^[a-z_:][a-z0-9_:]*(\{([a-z_]+="([^"\\]|\\.)*",?)*\})? -?[0-9.e+-]+$')


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value, checking every line against the text format."""
    assert text.endswith("\n")
    out = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        assert SAMPLE.match(line), line
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram([0.1, 1.0])
    for v in (0.05, 0.1, 0.5, 7.0):
        h.observe(v)
    assert h.lines("x") == [
        'x_bucket{le="0.1"} 2',
        'x_bucket{le="1"} 3',
        'x_bucket{le="+Inf"} 4',
        "x_sum 7.65",
        "x_count 4",
    ]


def test_render_writes_every_family_once_with_help_and_type() -> None:
    m = Metrics()
    m.request("/v1/chat/completions", 200, 0.02)
    m.request("/v1/chat/completions", 200, 0.03)
    m.request('/odd"path', 404, 0.001)
    m.tokens(10, 4)
    m.mask_step_seconds.observe(0.0003)
    text = m.render()
    got = samples(text)
    assert got['outlines_like_requests_total{route="/v1/chat/completions",status="200"}'] == 2
    assert got['outlines_like_requests_total{route="/odd\\"path",status="404"}'] == 1
    assert got["outlines_like_prompt_tokens_total"] == 10
    assert got["outlines_like_completion_tokens_total"] == 4
    assert got["outlines_like_mask_step_seconds_count"] == 1
    assert got['outlines_like_mask_step_seconds_bucket{le="0.0005"}'] == 1
    assert got['outlines_like_request_duration_seconds_bucket{le="+Inf"}'] == 3
    types = re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M)
    assert len(types) == len({name for name, _ in types})


@pytest.mark.server
@pytest.mark.torch
def test_the_server_counts_requests_tokens_and_mask_time(server: Any) -> None:
    base = server.base_url
    before = samples(httpx.get(base + "/metrics").text)
    body = {
        "messages": [{"role": "user", "content": "Pick."}],
        "max_tokens": 8,
        "structured_outputs": {"regex": "(yes|no)"},
    }
    answer = httpx.post(base + "/v1/chat/completions", json=body, timeout=60).json()
    assert httpx.post(base + "/v1/chat/completions", json={"messages": []}).status_code == 400
    httpx.get(base + "/no/such/path")

    response = httpx.get(base + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    after = samples(response.text)

    def grew(key: str) -> float:
        return after.get(key, 0) - before.get(key, 0)

    route = 'outlines_like_requests_total{route="/v1/chat/completions",status="%s"}'
    assert grew(route % 200) == 1
    assert grew(route % 400) == 1
    assert grew('outlines_like_requests_total{route="other",status="404"}') == 1
    assert grew("outlines_like_prompt_tokens_total") == answer["usage"]["prompt_tokens"]
    assert grew("outlines_like_completion_tokens_total") == answer["usage"]["completion_tokens"]
    assert grew("outlines_like_mask_step_seconds_count") >= 1
    assert after["outlines_like_queue_depth"] == 0
    assert after["outlines_like_running_sequences"] == 0


@pytest.mark.server
@pytest.mark.torch
def test_metrics_need_the_api_key_when_one_is_set(service: Any) -> None:
    from outlines_like.server.run import ServerThread
    from outlines_like.server.service import GenerationService

    keyed = GenerationService.__new__(GenerationService)
    keyed.__dict__.update(service.__dict__)
    keyed.config = dataclasses.replace(service.config, api_key="sekret")
    with ServerThread(service=keyed) as srv:
        assert httpx.get(srv.base_url + "/metrics").status_code == 401
        good = httpx.get(srv.base_url + "/metrics", headers={"Authorization": "Bearer sekret"})
        assert good.status_code == 200
        assert "outlines_like_requests_total" in good.text
