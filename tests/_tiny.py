"""The tiny model as session fixtures, shared by the engine and server tests' conftests."""

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
def one_torch_thread() -> Iterator[None]:
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
