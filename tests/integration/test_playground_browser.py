"""The browser playground in headless Chromium, against ``outlines-like serve --model tiny``.

Playwright's Python API drives the system's Chromium (Debian's ``chromium`` package; set
``OL_CHROMIUM`` to use another binary): Playwright never downloads a browser here. The tests
enter a regex, a JSON Schema and a Lark grammar, run each, and check that the streamed answer
fits and that the token view shows each step's allowed count; an invalid regex must show the
API's error with its position; "Copy as Python" must give code that runs. Screenshots go to
``artifacts/playground/`` (``OL_ARTIFACTS`` overrides ``artifacts/``).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import pytest

from tests.integration.conftest import ROOT, Server
from tests.integration.test_servers import SCHEMA

pytestmark = pytest.mark.realservers

GRAMMAR = 'start: "answer: " ANSWER "."\nANSWER: "yes" | "no" | "maybe"'
TIMEOUT_MS = 120_000


def _chromium() -> str | None:
    named = os.environ.get("OL_CHROMIUM")
    if named:
        return named
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def artifacts() -> pathlib.Path:
    folder = pathlib.Path(os.environ.get("OL_ARTIFACTS", ROOT / "artifacts")) / "playground"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
    )
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium found: apt-get install -y chromium (or set OL_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        try:
            # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
            browser = playwright.chromium.launch(
                executable_path=executable, headless=True, args=["--no-sandbox"]
            )
        except sync_api.Error as exc:
            pytest.skip(f"Chromium at {executable} did not start: {exc}")
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any, reference_server: Server) -> Iterator[Any]:
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(reference_server.base_url.removesuffix("/v1") + "/")
    expect(page.locator("#server-status")).to_contain_text("model tiny", timeout=TIMEOUT_MS)
    yield page
    page.close()


def _enter(page: Any, kind: str, text: str, syntax: str | None = None) -> None:
    page.select_option("#kind", kind)
    if syntax is not None:
        page.select_option("#syntax", syntax)
    page.fill("#constraint", text)


def _check_json(text: str) -> None:
    jsonschema.validate(json.loads(text), SCHEMA)


def _fullmatch(pattern: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        assert re.fullmatch(pattern, text), f"{text!r} !~ {pattern}"

    return check


@pytest.mark.parametrize(
    ("kind", "syntax", "text", "check"),
    [
        ("regex", None, "[a-z]{3}-[0-9]{2}", _fullmatch("[a-z]{3}-[0-9]{2}")),
        ("json", None, json.dumps(SCHEMA, indent=2), _check_json),
        ("grammar", "lark", GRAMMAR, _fullmatch(r"answer: (yes|no|maybe)\.")),
    ],
    ids=["regex", "json-schema", "lark-grammar"],
)
def test_a_run_streams_an_answer_that_fits_with_its_token_view(
    page: Any,
    artifacts: pathlib.Path,
    kind: str,
    syntax: str | None,
    text: str,
    check: Callable[[str], None],
) -> None:
    from playwright.sync_api import expect

    _enter(page, kind, text, syntax)
    expect(page.locator("#check")).to_have_attribute("data-state", "ok", timeout=TIMEOUT_MS)
    page.fill("#max_tokens", "80")
    page.fill("#seed", "7")
    page.click("#run")
    status = page.locator("#run-status")
    expect(status).to_have_attribute("data-state", "done", timeout=TIMEOUT_MS)
    answer = page.locator("#answer").text_content() or ""
    check(answer)
    assert "finish_reason stop" in (status.text_content() or "")
    chips = page.locator("#tokens .tok")
    counts = chips.evaluate_all("els => els.map(e => e.dataset.allowed)")
    assert counts, "no tokens in the token view"
    assert all(c.isdigit() and int(c) >= 1 for c in counts), counts
    badges = chips.locator(".n").all_text_contents()
    assert badges == counts  # each chip shows its step's allowed count
    chips.first.hover()
    tip = page.locator("#tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("allowed")
    page.screenshot(path=str(artifacts / f"run-{kind}.png"), full_page=True)


def test_an_invalid_regex_shows_the_api_error_with_its_position(
    page: Any, artifacts: pathlib.Path
) -> None:
    from playwright.sync_api import expect

    _enter(page, "regex", "ab(c")
    box = page.locator("#check")
    expect(box).to_have_attribute("data-state", "bad", timeout=TIMEOUT_MS)
    expect(box).to_contain_text("invalid regex")
    expect(box).to_contain_text("position 2")
    assert box.locator("pre.where").text_content() == "ab(c\n  ^"
    page.screenshot(path=str(artifacts / "invalid-regex.png"), full_page=True)
    page.click("#run")  # the chat route refuses it too, and the page shows where
    expect(page.locator("#run-error")).to_contain_text("invalid regex", timeout=TIMEOUT_MS)
    expect(page.locator("#run-status")).to_have_attribute("data-state", "error")


def test_copy_as_python_gives_code_that_runs(
    page: Any, artifacts: pathlib.Path, reference_server: Server
) -> None:
    from playwright.sync_api import expect

    _enter(page, "regex", r"[A-Z]{2}-\d{3}")
    page.fill("#max_tokens", "40")
    page.fill("#seed", "3")
    page.click("#copy")
    code_box = page.locator("#python")
    expect(code_box).to_be_visible()
    code = code_box.text_content() or ""
    assert "ol.from_server(client)" in code
    assert r'Regex(r"[A-Z]{2}-\d{3}")' in code
    assert reference_server.base_url in code
    page.screenshot(path=str(artifacts / "copy-as-python.png"), full_page=True)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"[A-Z]{2}-\d{3}", done.stdout.strip()), done.stdout


def test_a_field_list_runs_as_a_schema(page: Any, artifacts: pathlib.Path) -> None:
    from playwright.sync_api import expect

    # bounded fields: an unbounded int could run past max_tokens on the tiny model's noise
    _enter(page, "fields", 'color: Literal["red", "green"]\nn: Literal[1, 2, 3]\nok: bool')
    expect(page.locator("#check")).to_have_attribute("data-state", "ok", timeout=TIMEOUT_MS)
    page.fill("#max_tokens", "80")
    page.fill("#seed", "7")
    page.click("#run")
    expect(page.locator("#run-status")).to_have_attribute("data-state", "done", timeout=TIMEOUT_MS)
    value = json.loads(page.locator("#answer").text_content() or "")
    assert value["color"] in ("red", "green")
    assert value["n"] in (1, 2, 3)
    assert type(value["ok"]) is bool
    _enter(page, "fields", "color: colour")
    expect(page.locator("#check")).to_contain_text("line 1")
    page.screenshot(path=str(artifacts / "field-list-error.png"), full_page=True)


def test_reasoning_is_shown_apart_from_the_answer(page: Any, artifacts: pathlib.Path) -> None:
    from playwright.sync_api import expect

    _enter(page, "regex", "<think>[a-z]{4}</think>[0-9]{2}")  # the constraint writes the block
    expect(page.locator("#check")).to_have_attribute("data-state", "ok", timeout=TIMEOUT_MS)
    page.fill("#max_tokens", "40")
    page.fill("#seed", "1")
    page.click("#run")
    expect(page.locator("#run-status")).to_have_attribute("data-state", "done", timeout=TIMEOUT_MS)
    expect(page.locator("#reasoning-box")).to_be_visible()
    assert re.fullmatch("[a-z]{4}", page.locator("#reasoning").text_content() or "")
    assert re.fullmatch("[0-9]{2}", page.locator("#answer").text_content() or "")
    assert page.locator("#reasoning-tokens .tok").count() >= 1
    assert page.locator("#tokens .tok").count() >= 1
    page.screenshot(path=str(artifacts / "reasoning.png"), full_page=True)
