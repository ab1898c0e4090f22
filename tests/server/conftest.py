"""Reference-server fixtures: the tiny model (built once per session), an engine, a server."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from outlines_like.server.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.getbasetemp() / "tiny-cache")


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> Iterator[None]:
    """The tiny model runs ~10x faster on one thread than on two busy cores (see docs)."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model(tiny_path: pathlib.Path) -> tuple[Any, Any]:
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_path))
    model: Any = AutoModelForCausalLM.from_pretrained(str(tiny_path))
    model.eval()
    return model, tokenizer


@pytest.fixture(scope="session")
def engine(tiny_model: tuple[Any, Any]) -> Any:
    from outlines_like.server.app import Engine, ServerConfig

    model, tokenizer = tiny_model
    config = ServerConfig(
        max_tokens_limit=512,
        compile_timeout=5.0,
        max_body_bytes=200_000,
        max_constraint_bytes=20_000,
    )
    return Engine(model, tokenizer, config, "tiny")


@pytest.fixture(scope="session")
def server(engine: Any) -> Iterator[Any]:
    from outlines_like.server.run import ServerThread

    with ServerThread(engine=engine) as running:
        yield running
    engine.stop()


@pytest.fixture
def client(server: Any) -> Any:
    import openai

    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
