"""The ``tiny`` model: a small random-weight Qwen3-shaped causal LM and its own BPE, built locally.

Its words are noise; its structure is real: a byte-level BPE tokenizer (any text is
representable), the ChatML special tokens, a chat template with a tools section and
``<think>`` / ``<tool_call>`` markup, and a ``Qwen3ForCausalLM`` that ``transformers``,
vLLM or our reference server load like any checkpoint. Nothing is downloaded.

```python
from outlines_like.server.tiny import build_tiny_model
path = build_tiny_model()   # ~/.cache/outlines-like/tiny-<TINY_VERSION>, built once, in seconds
```
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import random
import shutil
import tempfile
from typing import Any

__all__ = [
    "CHAT_TEMPLATE",
    "SPECIAL_TOKENS",
    "TINY_VERSION",
    "build_tiny_model",
    "default_cache_dir",
]

TINY_VERSION = 2
"""Bumped whenever the builder's output changes, so that caches are rebuilt."""

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
"""Added tokens; the trainer gives them the first ids (0..8), in this order."""

# A ChatML template in the Qwen3 style: tools listed in the system turn, assistant tool calls
# rendered as <tool_call>{json}</tool_call>, tool results as <tool_response>, and reasoning in
# <think>...</think>. ``enable_thinking=False`` pre-closes an empty think block, as Qwen3 does.
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Function signatures:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each call, return a JSON object with the function name and '"
    " 'arguments within <tool_call></tool_call> tags:\\n<tool_call>\\n"
    '{"name": <function-name>, "arguments": <args-json-object>}'
    "\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if message.get('reasoning_content') %}"
    "{{- '<think>\\n' + message['reasoning_content'] + '\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{{- message['content'] or '' }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- set fn = call['function'] if call.get('function') else call %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + fn['name'] + '\", \"arguments\": ' }}"
    "{%- if fn['arguments'] is string %}{{- fn['arguments'] }}"
    "{%- else %}{{- fn['arguments'] | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{%- if message['content'] is string %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_ARCH: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
}
_VOCAB_SIZE = 2048
_CONST = 0.08
_LOGIT_STD = 1.5
_EOS_BIAS = 7.0
_SEED = 0

_WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "at",
    "this",
    "are",
    "from",
    "or",
    "an",
    "not",
    "json",
    "schema",
    "name",
    "age",
    "city",
    "true",
    "false",
    "null",
    "value",
    "key",
    "list",
    "item",
    "number",
    "string",
    "object",
    "array",
    "hello",
    "world",
    "yes",
    "no",
    "maybe",
    "red",
    "green",
    "blue",
    "alice",
    "bob",
    "paris",
    "london",
    "tokyo",
    "answer",
    "question",
    "think",
    "tool",
    "call",
    "function",
    "weather",
    "temperature",
    "date",
    "time",
    "email",
    "user",
    "assistant",
    "system",
    "you",
    "I",
    "we",
    "they",
    "what",
    "when",
    "where",
    "why",
    "how",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "first",
    "second",
    "result",
    "error",
    "ok",
    "done",
    "good",
    "bad",
    "small",
    "large",
    "fast",
    "slow",
]


def default_cache_dir() -> pathlib.Path:
    """Where built models live: ``$OUTLINES_LIKE_CACHE`` or ``~/.cache/outlines-like``."""
    root = os.environ.get("OUTLINES_LIKE_CACHE")
    if root:
        return pathlib.Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
    return base / "outlines-like"


def _corpus() -> list[str]:
    """Deterministic training text: words, JSON, numbers, punctuation and markup."""
    rnd = random.Random(_SEED)
    lines: list[str] = []
    for _ in range(4000):
        words = [rnd.choice(_WORDS) for _ in range(rnd.randint(3, 12))]
        lines.append(" ".join(words).capitalize() + rnd.choice(".?!,:;"))
        obj = {
            rnd.choice(_WORDS): rnd.randint(-1000, 1000),
            rnd.choice(_WORDS): rnd.choice(_WORDS),
            rnd.choice(_WORDS): rnd.choice([True, False, None, 3.25]),
        }
        lines.append(json.dumps(obj) + " " + json.dumps(obj, separators=(",", ":")))
        lines.append(
            f"{rnd.randint(1900, 2100)}-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d} "
            f"{rnd.randint(0, 23):02d}:{rnd.randint(0, 59):02d} "
            f"{rnd.choice(_WORDS)}@{rnd.choice(_WORDS)}.com ({rnd.randint(100, 999)}) "
            f"[{rnd.randint(0, 99)}, {rnd.randint(0, 99)}]\n"
        )
    return lines


def _build_tokenizer() -> object:
    from tokenizers import (
        AddedToken,
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=_VOCAB_SIZE,
        special_tokens=[
            AddedToken(s, special=s.startswith("<|"), normalized=False) for s in SPECIAL_TOKENS
        ],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    return tok


def _shape_logits(torch: Any, model: Any, eos: int) -> None:
    """Give the random model two properties real models have, so that generation ends.

    * Peaked next-token distributions: the LM head is scaled so that logits have a standard
      deviation near ``_LOGIT_STD`` (a plain 0.02 init gives a nearly uniform distribution).
    * EOS is likely whenever the constraint allows it: hidden dimension 0 is held constant
      (every embedding has ``_CONST`` there and no layer writes it), and only EOS reads it in
      the LM head, which gives EOS a fixed logit bias of about ``_EOS_BIAS``. Free text then
      ends after a few dozen tokens, an ``int`` after a few digits, and a closed JSON object
      at once; without it a random model never stops.
    """
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = _CONST
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        probe = torch.arange(4, min(260, model.config.vocab_size)).unsqueeze(0)
        hidden = model.model(input_ids=probe).last_hidden_state[0]
        norm = float(hidden[:, 1:].norm(dim=-1).mean())
        head = model.lm_head.weight
        head.normal_(0.0, _LOGIT_STD / norm)
        head[:, 0] = 0.0
        head[eos, 0] = _EOS_BIAS / float(hidden[:, 0].mean())


def _fingerprint(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    for name in sorted(p.name for p in path.iterdir()):
        digest.update(name.encode())
        digest.update((path / name).read_bytes())
    return digest.hexdigest()[:16]


def build_tiny_model(
    cache_dir: str | os.PathLike[str] | None = None, *, force: bool = False
) -> pathlib.Path:
    """Build the tiny model once and return its folder (a ``from_pretrained``-ready checkpoint).

    Args:
        cache_dir: The parent folder; ``default_cache_dir()`` when not given.
        force: Rebuild even when a finished build is there.

    Returns:
        ``cache_dir / f"tiny-{TINY_VERSION}"``, holding ``config.json``, ``model.safetensors``,
        ``tokenizer.json``, ``tokenizer_config.json`` and ``chat_template.jinja``.

    Raises:
        ImportError: When ``torch``, ``transformers`` or ``tokenizers`` is missing.
    """
    try:
        import torch
        from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the tiny model needs torch, transformers and tokenizers: "
            "pip install 'outlines-like[server]'"
        ) from exc

    import transformers

    hf_logging: Any = transformers.utils.logging
    hf_logging.disable_progress_bar()
    root = pathlib.Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / f"tiny-{TINY_VERSION}"
    if (target / "DONE").exists() and not force:
        return target
    root.mkdir(parents=True, exist_ok=True)
    # Build in a private folder, then rename: concurrent builders never see half a model.
    work = pathlib.Path(tempfile.mkdtemp(prefix=".tiny-build-", dir=root))
    try:
        tok = _build_tokenizer()
        tok.save(str(work / "tokenizer.json"))  # type: ignore[attr-defined]
        ids = {s: tok.token_to_id(s) for s in SPECIAL_TOKENS}  # type: ignore[attr-defined]
        n_tokens = tok.get_vocab_size(with_added_tokens=True)  # type: ignore[attr-defined]
        vocab_size = ((n_tokens + 63) // 64) * 64
        eos, pad = ids["<|im_end|>"], ids["<|endoftext|>"]
        tok_config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "backend": "tokenizers",
            "bos_token": None,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "unk_token": None,
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": _ARCH["max_position_embeddings"],
            "chat_template": CHAT_TEMPLATE,
        }
        (work / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
        (work / "chat_template.jinja").write_text(CHAT_TEMPLATE)
        (work / "special_tokens_map.json").write_text(
            json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2)
        )

        generator_state = torch.random.get_rng_state()
        torch.manual_seed(_SEED)
        try:
            config = Qwen3Config(
                vocab_size=vocab_size,
                tie_word_embeddings=False,
                bos_token_id=pad,
                eos_token_id=eos,
                pad_token_id=pad,
                **_ARCH,
            )
            model: Any = Qwen3ForCausalLM(config)
            model.eval()
            _shape_logits(torch, model, eos)
        finally:
            torch.random.set_rng_state(generator_state)
        model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
            bos_token_id=pad, eos_token_id=[eos, pad], pad_token_id=pad
        )
        model.save_pretrained(str(work), safe_serialization=True)
        (work / "DONE").write_text(_fingerprint(work) + "\n")
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            work.rename(target)
        except OSError:
            # Another process finished first; its build is identical (seeded).
            if not (target / "DONE").exists():
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target
