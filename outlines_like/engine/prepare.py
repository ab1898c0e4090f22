"""Request preparation, written once for the local model and the server: prompt -> token ids.

- :func:`think_end_token_id`: the reasoning-aware mode needs ``</think>`` to be one token.
- :func:`render_chat` renders messages (and tools) with the tokenizer's chat template;
  :func:`prepare_rendered` / :func:`prepare_text` encode a rendered or raw text into a
  :class:`PreparedPrompt`, which also says how the output starts (inside a reasoning block or
  not); :func:`prepare_prompt` does it all for a user prompt (``str``, list, ``Chat``: their
  one meaning is :func:`outlines_like.inputs.normalize_prompt`'s).
- :func:`expand_runs`: one :class:`~outlines_like.engine.runs.Run` per prompt and choice;
  choice ``j`` of ``n`` is seeded ``seed + j``, so a seeded call is reproducible and its
  choices still differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from outlines_like.engine.pipeline import GenerationRequest, SamplingParams
from outlines_like.engine.runs import Run
from outlines_like.inputs import Chat, message_text, normalize_prompt
from outlines_like.reasoning import THINK_END, THINK_START

if TYPE_CHECKING:
    from outlines_like.fsm._protocols import Compiled

__all__ = [
    "PreparedPrompt",
    "expand_runs",
    "prepare_prompt",
    "prepare_rendered",
    "prepare_text",
    "render_chat",
    "template_messages",
    "think_end_token_id",
]


def think_end_token_id(tokenizer: Any, *, option: str) -> int:
    """The id of ``</think>``, which the reasoning-aware mode needs to be one token.

    Args:
        tokenizer: A ``transformers`` tokenizer.
        option: How the caller turned the mode on, for the error (``"--reasoning"``).

    Raises:
        ValueError: the tokenizer splits ``</think>`` into several tokens (or none).
    """
    ids = tokenizer.encode(THINK_END, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(
            f"{option} needs {THINK_END!r} to be one token; this tokenizer splits it into "
            f"{len(ids)}"
        )
    return int(ids[0])


@dataclasses.dataclass(frozen=True)
class PreparedPrompt:
    """A prompt ready for the pipeline.

    Attributes:
        ids: The prompt's token ids.
        think_end_token_id: Reasoning-aware mode for this prompt: the output is free until
            this token; ``None`` when the mode is off or the template closed the block.
        think_open: The output starts inside a reasoning block (the template opened
            ``<think>``, or the reasoning-aware mode is on): read it with ``think_open``.
    """

    ids: tuple[int, ...]
    think_end_token_id: int | None = None
    think_open: bool = False


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates read them: text content, ``developer`` as ``system``.

    Raises:
        TypeError: a message's content has a part that is not text.
    """
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        item = dict(message)
        if item.get("role") == "developer":
            item["role"] = "system"
        item["content"] = message_text(message.get("content"), f"messages[{i}].content")
        out.append(item)
    return out


def render_chat(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """Render messages (text content, see :func:`template_messages`) with the chat template.

    The generation prompt is added; ``template_kwargs`` go to the template
    (``enable_thinking`` and the like). Template errors propagate unchanged.
    """
    rendered: str = tokenizer.apply_chat_template(
        list(messages),
        tools=list(tools) if tools is not None else None,
        add_generation_prompt=True,
        tokenize=False,
        **dict(template_kwargs or {}),
    )
    return rendered


def _encode(tokenizer: Any, text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in tokenizer.encode(text, add_special_tokens=False))


def prepare_rendered(
    tokenizer: Any, rendered: str, *, think_end_token_id: int | None = None
) -> PreparedPrompt:
    """Encode a rendered chat prompt and read how its output starts.

    In the reasoning-aware mode the output is free until ``</think>``, unless the template
    already closed the block (``enable_thinking=False`` renders an empty
    ``<think></think>``); the text before ``</think>`` is then reasoning even without an
    opening tag, as vLLM's qwen3 parser reads it.
    """
    tail = rendered.rstrip()
    think_end = None if tail.endswith(THINK_END) else think_end_token_id
    think_open = tail.endswith(THINK_START) or think_end is not None
    return PreparedPrompt(_encode(tokenizer, rendered), think_end, think_open)


def prepare_text(
    tokenizer: Any, text: str, *, think_end_token_id: int | None = None
) -> PreparedPrompt:
    """Encode a raw text prompt (no template); reasoning-aware when ``think_end_token_id``."""
    return PreparedPrompt(
        _encode(tokenizer, text), think_end_token_id, think_end_token_id is not None
    )


def prepare_prompt(
    tokenizer: Any,
    prompt: object,
    *,
    template_kwargs: Mapping[str, Any] | None = None,
    think_end_token_id: int | None = None,
) -> PreparedPrompt:
    """Prepare a user prompt (``str``, list of parts, ``Chat``) for a local text model.

    With a chat template the prompt's messages are rendered; without one, a ``str`` or a
    list of text parts (one user message) is its text as is, and a ``Chat`` raises.

    Raises:
        TypeError: not a prompt, or a part is not text (images need a vision model).
        ValueError: an empty prompt, or a ``Chat`` for a tokenizer without a chat template.
    """
    normal = normalize_prompt(prompt)
    messages = template_messages(normal.messages)
    if getattr(tokenizer, "chat_template", None):
        rendered = render_chat(tokenizer, messages, template_kwargs=template_kwargs)
        return prepare_rendered(tokenizer, rendered, think_end_token_id=think_end_token_id)
    if isinstance(prompt, Chat):
        raise ValueError("this tokenizer has no chat template; pass a str prompt instead of a Chat")
    text = normal.text if normal.text is not None else messages[0]["content"]
    return prepare_text(tokenizer, text, think_end_token_id=think_end_token_id)


def expand_runs(
    prompts: Sequence[PreparedPrompt],
    params: SamplingParams,
    n: int,
    constraint: Compiled | None,
    new_id: Callable[[], str],
) -> list[Run]:
    """One run per prompt and choice, in order: prompt ``p``'s choice ``j`` has index ``p * n + j``.

    Choice ``j`` is seeded ``params.seed + j`` (unseeded stays unseeded). The reasoning-aware
    mode applies only to constrained requests (free text has nothing to hold back).
    """
    seed = params.seed
    runs: list[Run] = []
    for prompt in prompts:
        think_end = prompt.think_end_token_id if constraint is not None else None
        for j in range(n):
            choice = dataclasses.replace(params, seed=None if seed is None else seed + j)
            request = GenerationRequest(new_id(), prompt.ids, choice, constraint, think_end)
            runs.append(Run(request, len(runs), think_open=prompt.think_open))
    return runs
