"""The playground's routes: the static page, its files, and the constraint check with positions."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from outlines_like.server.playground import PLAYGROUND_DIR, error_position


@pytest.mark.parametrize(
    ("message", "position"),
    [
        ("regex: invalid regex 'ab(c' at position 2: missing )", {"offset": 2}),
        ("json is not valid JSON: Expecting value at character 18", {"offset": 18}),
        ("Unexpected token Token('_RPAR', ')') at line 2, column 9.", {"line": 2, "column": 9}),
        ("EBNF syntax error at line 1 column 17: expected ')'", {"line": 1, "column": 17}),
        (
            "pattern '[a-' at #/properties/a/pattern is not a valid regex: at position 0: x",
            {"pointer": "#/properties/a/pattern", "offset": 0},
        ),
        ("invalid JSON Schema at #/type: 'x' is not valid", {"pointer": "#/type"}),
        ("regex is too large (9000 bytes)", None),
    ],
)
def test_error_position(message: str, position: dict[str, Any] | None) -> None:
    assert error_position(message) == position


def test_the_page_ships_in_the_package() -> None:
    names = {p.name for p in PLAYGROUND_DIR.iterdir()}
    assert {"index.html", "playground.js", "playground.css"} <= names
    for path in PLAYGROUND_DIR.iterdir():  # offline: nothing is fetched from elsewhere
        text = path.read_text()
        assert "http://" not in text, path.name
        assert "https://" not in text, path.name


@pytest.mark.server
@pytest.mark.torch
def test_static_routes(server: Any) -> None:
    page = httpx.get(server.base_url + "/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "/playground/playground.js" in page.text
    for name, media in (("playground.js", "text/javascript"), ("playground.css", "text/css")):
        r = httpx.get(f"{server.base_url}/playground/{name}")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith(media)
    for name in ("nope.js", "__init__.py", "..%2Fapp.py", "index.txt"):
        r = httpx.get(f"{server.base_url}/playground/{name}")
        assert r.status_code == 404, name
        assert r.json()["error"]["type"] == "not_found_error"


def _check(server: Any, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/constraints/check", json=body, timeout=60)


@pytest.mark.server
@pytest.mark.torch
@pytest.mark.parametrize(
    ("body", "field", "kind"),
    [
        ({"structured_outputs": {"regex": "[a-z]{3}"}}, "structured_outputs.regex", "Regex"),
        ({"structured_outputs": {"choice": ["a", "b"]}}, "structured_outputs.choice", "Choice"),
        ({"structured_outputs": {"json": '{"type": "integer"}'}}, "structured_outputs.json", None),
        ({"ebnf": 'root ::= "a" | "b"'}, "ebnf", "CFG"),
        ({"model": "tiny"}, None, "text"),
    ],
)
def test_a_good_constraint_compiles(
    server: Any, body: dict[str, Any], field: str | None, kind: str | None
) -> None:
    r = _check(server, body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["object"] == "constraint.check"
    assert got["field"] == field
    if kind is not None:
        assert got["kind"] == kind
    assert got["seconds"] >= 0


@pytest.mark.server
@pytest.mark.torch
@pytest.mark.parametrize(
    ("body", "param", "position"),
    [
        ({"structured_outputs": {"regex": "ab(c"}}, "structured_outputs.regex", {"offset": 2}),
        ({"regex": "[a-"}, "regex", {"offset": 0}),
        (
            {"structured_outputs": {"json": '{"type": "object",}'}},
            "structured_outputs.json",
            {"offset": 18},
        ),
        (
            {"structured_outputs": {"grammar": 'start: "a"\n  | "b" )\n'}},
            "structured_outputs.grammar",
            {"line": 2, "column": 9},
        ),
        ({"ebnf": 'root ::= "a" | ('}, "ebnf", {"line": 1, "column": 17}),
        ({"bogus": 1}, "bogus", None),
    ],
)
def test_a_bad_constraint_gets_the_chat_error_with_its_position(
    server: Any, body: dict[str, Any], param: str, position: dict[str, Any] | None
) -> None:
    r = _check(server, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error.get("position") == position
    chat = httpx.post(
        server.base_url + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **body},
        timeout=60,
    )
    assert chat.status_code == 400  # the same refusal the chat route gives
    assert chat.json()["error"]["message"] == error["message"] or param == "bogus"


@pytest.mark.server
@pytest.mark.torch
def test_the_check_route_reads_the_body_like_the_api(server: Any) -> None:
    r = httpx.post(
        server.base_url + "/v1/constraints/check",
        content=b"{nope",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid_json"
    assert _check(server, {"model": "gpt-9", "regex": "a"}).status_code == 404
