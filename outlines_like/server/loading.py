"""Loading the served model: the tiny model or a local transformers folder, quietly."""

from __future__ import annotations

from typing import Any

from outlines_like.server.config import ServerConfig
from outlines_like.server.service import GenerationService

__all__ = ["load_service"]


def load_service(config: ServerConfig) -> GenerationService:
    """Load the model named by ``config.model`` (``"tiny"`` builds it) and serve it.

    Raises:
        FileNotFoundError: ``config.model`` is neither ``"tiny"`` nor a model folder.
    """
    import pathlib

    try:
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the reference server needs the server extra: pip install 'outlines-like[server]'"
        ) from exc
    hf_logging: Any = transformers.utils.logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    threads = config.torch_threads or (1 if config.model == "tiny" else None)
    if threads:
        import torch

        torch.set_num_threads(threads)
    if config.model == "tiny":
        from outlines_like.server.tiny import build_tiny_model

        path = build_tiny_model()
        name = config.model_name or "tiny"
    else:
        path = pathlib.Path(config.model)
        if not path.is_dir():
            raise FileNotFoundError(
                f"--model {config.model!r}: not 'tiny' and not a local model folder"
            )
        name = config.model_name or path.name
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model: Any = AutoModelForCausalLM.from_pretrained(str(path))
    model.eval()
    return GenerationService(model, tokenizer, config, name)
