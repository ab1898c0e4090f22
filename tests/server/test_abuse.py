"""The abuse suite (issue 12): each attack against the reference server, with victims around it.

Every test sends one hostile request (or a few) while well-behaved clients keep generating,
and checks four things: the attacker's status (an OpenAI-style 4xx, or a 500 for its request
alone), that every victim succeeded, that the server's memory came back within a bound, and
that a normal request still answers in normal time afterwards. Attacks are kept small (the
budgets of this server are set low) but real. Loopback only.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.server, pytest.mark.torch]

VICTIM_REGEX = "[0-9]{3}"
RSS_SLACK = 300_000_000
"""Bytes the server may hold after an attack beyond what it held before."""


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * 4096


@pytest.fixture(scope="module")
def abuse(tiny_model: tuple[Any, Any]) -> Iterator[Any]:
    """A server with low budgets (its own service over the shared tiny model)."""
    from outlines_like.server.config import ServerConfig
    from outlines_like.server.run import ServerThread
    from outlines_like.server.service import GenerationService

    model, tokenizer = tiny_model
    config = ServerConfig(
        max_tokens_limit=512,
        compile_timeout=2.0,
        compile_memory_bytes=400_000_000,
        max_states=2_000,
        mask_timeout=1.0,
        body_timeout=1.0,
        max_body_bytes=300_000,
        max_constraint_bytes=100_000,
        template_timeout=1.0,
    )
    svc = GenerationService(model, tokenizer, config, "tiny")
    with ServerThread(service=svc) as running:
        running.http = httpx.Client(base_url=running.base_url + "/v1", timeout=120)
        _victim_request(running.http)  # compile the victims' constraint once
        started = time.monotonic()
        _victim_request(running.http)
        running.normal_seconds = time.monotonic() - started
        yield running
        running.http.close()
    svc.stop()


def _victim_request(http: httpx.Client) -> None:
    body = {
        "messages": [{"role": "user", "content": "a number"}],
        "max_tokens": 8,
        "regex": VICTIM_REGEX,
    }
    response = http.post("/chat/completions", json=body)
    assert response.status_code == 200, response.text
    text = response.json()["choices"][0]["message"]["content"]
    assert re.fullmatch(VICTIM_REGEX, text), text


def _chat(**fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **fields}


def _under_attack(server: Any, attack: Callable[[], Any], victims: int = 3) -> Any:
    """Run ``attack`` while ``victims`` clients generate; every victim must succeed."""
    done = threading.Event()
    before = _rss()

    def victim() -> int:
        count = 0
        with httpx.Client(base_url=server.base_url + "/v1", timeout=120) as http:
            while count == 0 or not done.is_set():
                _victim_request(http)
                count += 1
        return count

    with concurrent.futures.ThreadPoolExecutor(victims) as pool:
        running = [pool.submit(victim) for _ in range(victims)]
        try:
            result = attack()
        finally:
            done.set()
        served = [f.result() for f in running]  # raises if a victim failed
    assert all(served)
    _recovered(server, before)
    return result


def _recovered(server: Any, rss_before: int) -> None:
    """Memory within bounds and a normal request in normal time."""
    assert _rss() - rss_before < RSS_SLACK, (_rss() - rss_before) / 1e6
    started = time.monotonic()
    _victim_request(server.http)
    assert time.monotonic() - started < max(5.0, 10 * server.normal_seconds)
    assert server.service.scheduler.load == 0 or _settles(server)


def _settles(server: Any) -> bool:
    deadline = time.monotonic() + 10
    while server.service.scheduler.load and time.monotonic() < deadline:
        time.sleep(0.05)
    return server.service.scheduler.load == 0


def _refused(
    response: httpx.Response, status: int = 400, code: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert {"message", "type", "param", "code"} <= set(error)
    if code is not None:
        assert error["code"] == code, error
    return error


# -- 1: a seed numpy refuses -------------------------------------------------------------------


def test_row1_negative_seed_is_refused_at_the_door(abuse: Any) -> None:
    def attack() -> httpx.Response:
        return abuse.http.post("/chat/completions", json=_chat(seed=-1))

    error = _refused(_under_attack(abuse, attack))
    assert error["param"] == "seed"
    huge = abuse.http.post("/chat/completions", json=_chat(seed=2**64))
    assert _refused(huge)["param"] == "seed"


# -- 2: a lazy DFA that passes its state limit while generating --------------------------------


def test_row2_state_limit_while_generating_fails_that_request_alone(abuse: Any) -> None:
    attack_body = {
        "prompt": "digits:",
        "max_tokens": 400,
        "ignore_eos": True,
        "regex": "[0-9]*1[0-9]{3000}",  # 2**3000 DFA states
    }

    def attack() -> httpx.Response:
        return abuse.http.post("/completions", json=attack_body)

    first = _under_attack(abuse, attack)
    # The masker's state estimate refuses it at compile (400); a blowup the estimate lets
    # through fails its own request while generating (500; tests/engine/test_isolation.py).
    # Either way the victims went on.
    _refused(first, first.status_code if first.status_code in (400, 500) else 400)
    started = time.monotonic()
    again = abuse.http.post("/completions", json=attack_body)
    _refused(again, 400)  # evicted and remembered: refused at once
    assert time.monotonic() - started < 2.0


# -- 3, 4: constraints that exhaust memory or time while compiling -----------------------------


def _nested_arrays(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def _ref_chain(length: int) -> dict[str, Any]:
    defs: dict[str, Any] = {"d0": {"type": "integer"}}
    for i in range(1, length):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        defs[f"d{i}"] = {"type": "array", "prefixItems": [ref, ref], "items": False}
    return {"$defs": defs, "$ref": f"#/$defs/d{length - 1}"}


@pytest.mark.parametrize(
    "schema",
    [
        _nested_arrays(30),
        _ref_chain(30),
        {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(2000)}},
    ],
    ids=["nested-arrays-30", "ref-chain-30", "optional-properties-2000"],
)
def test_rows3_4_costly_schemas_are_stopped_not_abandoned(abuse: Any, schema: Any) -> None:
    compiler = abuse.service.compiler

    def attack() -> httpx.Response:
        return abuse.http.post("/chat/completions", json=_chat(json_schema=schema))

    killed = compiler.trials.killed
    response = _under_attack(abuse, attack)
    if response.status_code != 200:  # the masker's budget compiles the deep ones now (grammar)
        error = _refused(response)
        assert error["code"] in ("constraint_too_complex", "invalid_constraint"), error
        if error["code"] == "constraint_too_complex":
            assert compiler.trials.killed > killed  # the worker was killed, not left running
    # a new constraint still compiles (no worker is left busy with the attack)
    fresh = abuse.http.post("/chat/completions", json=_chat(regex="[0-9]{5}"))
    assert fresh.status_code == 200, fresh.text


# -- 5: a grammar whose masks are slow ---------------------------------------------------------


def test_row5_a_grammar_of_thousands_of_alternatives_does_not_stall_others(abuse: Any) -> None:
    grammar = "start: " + " | ".join(f'"w{i}x"' for i in range(5001))

    def attack() -> httpx.Response:
        return abuse.http.post("/chat/completions", json=_chat(grammar=grammar))

    response = _under_attack(abuse, attack)
    assert response.status_code in (200, 400, 500), response.text
    if response.status_code != 200:
        _refused(response, response.status_code)


# -- 6: request-supplied chat templates --------------------------------------------------------


def test_row6_request_templates_are_refused(abuse: Any) -> None:
    template = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}"

    def attack() -> httpx.Response:
        body = _chat(chat_template_kwargs={"chat_template": template})
        return abuse.http.post("/chat/completions", json=body)

    error = _refused(_under_attack(abuse, attack), code="template_not_allowed")
    assert error["param"] == "chat_template_kwargs.chat_template"


# -- 7: a non-streaming request whose client went away -----------------------------------------


def test_row7_a_disconnected_non_streaming_request_is_cancelled(abuse: Any) -> None:
    body = {"prompt": "go", "n": 16, "max_tokens": 500, "ignore_eos": True}

    def attack() -> None:
        with httpx.Client(base_url=abuse.base_url + "/v1", timeout=0.5) as impatient:
            for _ in range(3):
                with pytest.raises(httpx.TimeoutException):
                    impatient.post("/completions", json=body)
        assert _settles(abuse), "the abandoned runs are still generating"

    _under_attack(abuse, attack)


# -- 8, 9: text the server cannot hold, grammars it must not build ------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": "user", "content": "a\ud800b"}]}, "messages[0].content"),
        (
            {
                "tools": [{"type": "function", "function": {"name": "f\ud800", "parameters": {}}}],
                "tool_choice": "required",
            },
            "tools[0].function.name",
        ),
        ({"structured_outputs": {"choice": ["yes", "n\udc00o"]}}, "structured_outputs.choice[1]"),
        ({"json_schema": {"enum": ["a", "\ud800"]}}, "json_schema.enum[1]"),
        ({"regex": "[\ud800-\udfff]x"}, "regex"),
    ],
    ids=["content", "tool-name", "choice", "enum", "regex"],
)
def test_rows8_9_lone_surrogates_are_refused(abuse: Any, fields: Any, param: str) -> None:
    raw = json.dumps(_chat(**fields))  # ensure_ascii: the surrogates travel as \\ud800 escapes

    def attack() -> httpx.Response:
        headers = {"content-type": "application/json"}
        return abuse.http.post("/chat/completions", content=raw, headers=headers)

    error = _refused(_under_attack(abuse, attack, victims=2), code="invalid_string")
    assert error["param"] == param


@pytest.mark.parametrize(
    ("grammar", "says"),
    [
        ('start: a\na: "(" a ")"\n', "never reaches a terminal"),
        ('root ::= "x" item\nitem ::= "(" item ")"', "never reaches a terminal"),
        ("start: FOO\n%declare FOO\n", "%declare is not allowed"),
        ("start: X\n%import secrets.X\n", "%import secrets.X is not allowed"),
        ("start: X\n%import .common.X\n", "%import .common.X is not allowed"),
        ("start: X\n%import secrets (X, Y)\n", "%import secrets (X, Y) is not allowed"),
        ("start: X\n%import lark.RULE\n", "%import lark.RULE is not allowed"),
    ],
    ids=[
        "no-base-case",
        "ebnf-no-base-case",
        "declare",
        "import-file",
        "import-relative",
        "import-names",
        "import-other-bundled",
    ],
)
def test_row8_grammar_sanity(
    abuse: Any, grammar: str, says: str, tmp_path: Any, monkeypatch: Any
) -> None:
    def attack() -> dict[str, Any]:
        response = abuse.http.post("/chat/completions", json=_chat(grammar=grammar))
        return _refused(response, code="invalid_constraint")

    error = _under_attack(abuse, attack, victims=2)
    assert says in error["message"]
    # the same answer whatever files exist in the server's working directory
    (tmp_path / "secrets.lark").write_text("X: /.+/\n")
    (tmp_path / "common.lark").write_text("NUMBER: /[0-9]+/\n")
    monkeypatch.chdir(tmp_path)
    again = _refused(abuse.http.post("/chat/completions", json=_chat(grammar=grammar)))
    assert again["message"] == error["message"]


@pytest.mark.parametrize(
    "grammar",
    [
        "start: NUMBER\n%import common.NUMBER\n",
        "start: N\n%import common.INT -> N\n",
        'start: INT ("," INT)*\n%import common (INT, WS)\n%ignore WS\n',
    ],
    ids=["one", "alias", "names"],
)
def test_row8_grammar_imports_from_common_are_allowed(
    abuse: Any, grammar: str, tmp_path: Any, monkeypatch: Any
) -> None:
    # a decoy in the working directory plays no part: `common` is Lark's bundled grammar
    (tmp_path / "common.lark").write_text("NUMBER: /x+/\nINT: /x+/\nWS: /x/\n")
    monkeypatch.chdir(tmp_path)
    response = abuse.http.post("/chat/completions", json=_chat(grammar=grammar, max_tokens=6))
    assert response.status_code == 200, response.text
    text = response.json()["choices"][0]["message"]["content"]
    # digits (and any blank: %ignore WS), never the decoy's x
    assert re.fullmatch(r"[-+0-9.eE,\s]*", text), text


@pytest.mark.parametrize("bound", [1e300, -1e300, 10**16])
def test_row8_numeric_bounds_beyond_the_engine_get_a_clear_400(abuse: Any, bound: Any) -> None:
    schema = {"type": "integer", "minimum": -bound, "maximum": bound}
    response = abuse.http.post("/chat/completions", json=_chat(json_schema=schema))
    error = _refused(response, code="invalid_constraint")
    assert error["param"] == "json_schema"
    assert "beyond what this server enforces" in error["message"]
    as_text = abuse.http.post("/chat/completions", json=_chat(json_schema='{"enum": ["\\ud800"]}'))
    assert _refused(as_text, code="invalid_string")["param"] == "json_schema"


# -- 10: clients that drop mid-body, and slow bodies -------------------------------------------


def _half_request(port: int, *, then_close: bool) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n"
    )
    sock.sendall(head.encode() + b'{"messages": [')
    if then_close:
        sock.close()
    return sock


def test_row10_dropped_clients_log_one_line_each(abuse: Any, caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="outlines_like")
    clients = 60

    def attack() -> None:
        for _ in range(clients):
            _half_request(abuse.port, then_close=True)
        time.sleep(1.0)

    _under_attack(abuse, attack, victims=2)
    mine = [r for r in caplog.records if r.name.startswith("outlines_like")]
    assert len(mine) <= clients
    assert not any(r.exc_info for r in mine)
    assert all("went away" in r.getMessage() for r in mine)


def test_row10_a_body_that_never_arrives_times_out(abuse: Any) -> None:
    def attack() -> bytes:
        sock = _half_request(abuse.port, then_close=False)
        sock.settimeout(10)
        answer = b""
        try:
            while b"}}" not in answer:  # the whole error body
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
            return answer
        finally:
            sock.close()

    started = time.monotonic()
    answer = _under_attack(abuse, attack, victims=2)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"body_timeout" in answer
    assert time.monotonic() - started < 30
