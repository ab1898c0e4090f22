"""The ``outlines-like`` command: ``serve`` options and the ``demo`` run end to end."""

from __future__ import annotations

import io
import pathlib

import pytest

from outlines_like.cli import main


@pytest.mark.parametrize("argv", [["--help"], ["serve", "--help"], ["demo", "--help"]])
def test_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: outlines-like" in out
    if argv[0] == "serve":
        for option in ("--model", "--host", "--port", "--api-key"):
            assert option in out


@pytest.mark.torch
def test_serve_refuses_a_missing_model_folder(tmp_path: pathlib.Path) -> None:
    from outlines_like.server.config import ServerConfig
    from outlines_like.server.loading import load_service

    with pytest.raises(FileNotFoundError, match="not 'tiny'"):
        load_service(ServerConfig(model=str(tmp_path / "nope")))


@pytest.mark.server
@pytest.mark.torch
def test_demo_runs_and_every_shape_holds(
    tiny_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from outlines_like.server.demo import run_demo

    monkeypatch.setenv("OUTLINES_LIKE_CACHE", str(tiny_path.parent))
    out = io.StringIO()
    assert run_demo(out=out) == 0, out.getvalue()
    text = out.getvalue()
    assert "all shapes held" in text
    for label in ("int", "Literal", "Regex", "pydantic", "Lark grammar", "stream", "async x4"):
        assert f"[ok ] {label}" in text


def test_serve_passes_every_budget_to_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    import outlines_like.server.run as run

    seen: dict[str, object] = {}
    monkeypatch.setattr(run, "serve", lambda config, **kw: seen.update(config=config, **kw))
    argv = ["serve", "--mask-timeout", "0.5", "--cache-bytes", "1000", "--allow-request-templates"]
    assert main([*argv, "--body-timeout", "3", "--compile-workers", "1"]) == 0
    from outlines_like.server.config import ServerConfig

    config = seen["config"]
    assert isinstance(config, ServerConfig)
    assert (config.mask_timeout, config.cache_bytes, config.body_timeout) == (0.5, 1000, 3.0)
    assert config.compile_workers == 1
    assert config.allow_request_templates is True


def test_every_serve_option_is_documented() -> None:
    from outlines_like.cli import _parser

    doc = (pathlib.Path(__file__).parents[2] / "docs" / "server.md").read_text(encoding="utf-8")
    import argparse

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    serve = sub.choices["serve"]
    options = [o for action in serve._actions for o in action.option_strings if o.startswith("--")]
    missing = [o for o in options if o not in ("--help", "--log-level") and f"`{o}`" not in doc]
    assert not missing, missing


def test_demo_open_points_the_browser_at_the_playground(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import time
    import webbrowser

    from outlines_like.server import demo

    opened: list[str] = []

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    monkeypatch.setattr(time, "sleep", interrupted)
    lines: list[str] = []
    demo._keep_serving("http://127.0.0.1:1234/", lines.append)
    assert opened == ["http://127.0.0.1:1234/"]
    assert lines[0].startswith("playground at http://127.0.0.1:1234/")
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "--open" in capsys.readouterr().out
