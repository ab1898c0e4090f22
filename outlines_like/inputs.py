"""What a model takes as a prompt (text, text with images, or a chat) and its one normal form.

```python
model("Name a colour.")                                   # one user message
model(["What is in this picture?", Image(pil_image)])     # one user message, text + image parts
model(Chat([{"role": "system", "content": "Be terse."}]).add_user("Hi"))
```
"""

from __future__ import annotations

import base64
import dataclasses
import io
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

__all__ = [
    "Chat",
    "Image",
    "NormalizedPrompt",
    "Prompt",
    "message_text",
    "normalize_prompt",
    "to_messages",
    "to_prompt_text",
]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _import_pil_image() -> Any:
    try:
        import PIL.Image
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "outlines_like.Image needs Pillow; install it with `pip install outlines-like[images]`"
        ) from exc
    return PIL.Image


class Image:
    """An image in a prompt, sent as a base64 data URL in an ``image_url`` content part.

    Args:
        image: A PIL image (``PIL.Image.Image``). Its ``format`` (PNG, JPEG...) is kept when
            it has one; images built in memory are encoded as PNG.
    """

    __slots__ = ("_url", "image")

    def __init__(self, image: PILImage) -> None:
        pil = _import_pil_image()
        if not isinstance(image, pil.Image):
            raise TypeError(
                f"Image() takes a PIL.Image.Image, got {type(image).__name__}; "
                "open files with PIL.Image.open(path)"
            )
        self.image = image
        self._url: str | None = None

    @property
    def media_type(self) -> str:
        """The MIME type the image is encoded as (``image/png``, ``image/jpeg``...)."""
        return f"image/{self._format().lower()}"

    def _format(self) -> str:
        fmt = self.image.format
        return fmt.upper() if isinstance(fmt, str) and fmt else "PNG"

    @property
    def data_url(self) -> str:
        """The image as a ``data:`` URL (encoded once, then cached)."""
        if self._url is None:
            buffer = io.BytesIO()
            self.image.save(buffer, format=self._format())
            encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
            self._url = f"data:{self.media_type};base64,{encoded}"
        return self._url

    def to_content_part(self) -> dict[str, Any]:
        """The OpenAI ``image_url`` content part for this image."""
        return {"type": "image_url", "image_url": {"url": self.data_url}}

    def __repr__(self) -> str:
        size = getattr(self.image, "size", None)
        return f"Image({self._format()}, size={size})"


def _content(content: object, where: str) -> Any:
    """Turn message content into what the API takes: a str, or a list of content parts."""
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, Image):
        return [content.to_content_part()]
    if isinstance(content, (list, tuple)):
        parts: list[Any] = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                parts.append({"type": "text", "text": part})
            elif isinstance(part, Image):
                parts.append(part.to_content_part())
            elif isinstance(part, Mapping) and "type" in part:
                parts.append(dict(part))
            else:
                raise TypeError(
                    f"{where}[{i}] is a {type(part).__name__}; a content part is a str, "
                    "an outlines_like.Image or an OpenAI content-part dict with a 'type'"
                )
        return parts
    raise TypeError(
        f"{where} is a {type(content).__name__}; message content is a str, an Image, "
        "or a list of str / Image / content-part dicts"
    )


class Chat:
    """A conversation: OpenAI-style message dicts, with helpers to add turns.

    Message content may hold ``Image`` objects (alone or in a list with text); they are
    encoded when the request is built. The messages given are copied, never mutated.

    Args:
        messages: Dicts with a ``role`` and usually a ``content``.

    Raises:
        TypeError: a message is not a dict or its role is not a string.
        ValueError: a role is unknown.
    """

    __slots__ = ("messages",)

    def __init__(self, messages: Iterable[Mapping[str, Any]] = ()) -> None:
        if isinstance(messages, (str, bytes, Mapping)):
            raise TypeError("Chat() takes a list of message dicts, not a single str or dict")
        self.messages: list[dict[str, Any]] = []
        for i, message in enumerate(messages):
            self._append(message, f"messages[{i}]")

    def _append(self, message: Mapping[str, Any], where: str) -> None:
        if not isinstance(message, Mapping):
            raise TypeError(f"{where} is a {type(message).__name__}; a message is a dict")
        role = message.get("role")
        if not isinstance(role, str):
            raise TypeError(f"{where} has no string 'role'")
        if role not in _ROLES:
            raise ValueError(f"{where} has role {role!r}; expected one of {sorted(_ROLES)}")
        self.messages.append(dict(message))

    def add(self, role: str, content: object) -> Chat:
        """Append a message with ``role`` and ``content``; returns the chat for chaining."""
        self._append({"role": role, "content": content}, f"messages[{len(self.messages)}]")
        return self

    def add_system(self, content: str) -> Chat:
        """Append a system message."""
        return self.add("system", content)

    def add_user(self, content: str | Image | list[str | Image]) -> Chat:
        """Append a user message (text, an image, or a list of both)."""
        return self.add("user", content)

    def add_assistant(self, content: str) -> Chat:
        """Append an assistant message (for few-shot examples or a multi-turn chat)."""
        return self.add("assistant", content)

    def to_messages(self) -> list[dict[str, Any]]:
        """The messages as the API takes them: copies, images encoded as content parts."""
        out = []
        for i, message in enumerate(self.messages):
            content = message.get("content")
            if isinstance(content, str) or content is None:
                out.append(dict(message))
            else:
                converted = dict(message)
                converted["content"] = _content(content, f"messages[{i}].content")
                out.append(converted)
        return out

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return f"Chat({self.messages!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Chat) and other.messages == self.messages

    __hash__ = None  # type: ignore[assignment]  # mutable


Prompt: TypeAlias = "str | Chat | list[str | Image]"
"""What a model takes: text, a list of text and images (one user message), or a Chat."""


@dataclasses.dataclass(frozen=True)
class NormalizedPrompt:
    """A prompt in its one normal form (see :func:`normalize_prompt`).

    Attributes:
        messages: OpenAI-style chat messages: copies, images encoded as ``image_url`` parts.
        text: The prompt's own text when it is a plain ``str`` (what a raw-text endpoint or
            a model without a chat template takes as is); ``None`` for lists and chats.
    """

    messages: list[dict[str, Any]]
    text: str | None = None


def normalize_prompt(prompt: object) -> NormalizedPrompt:
    """Turn any prompt into its normal form: the one place that says what a prompt means.

    - a ``str`` is one user message with that text (and the raw text itself);
    - a list (or tuple) is ONE user message whose content parts are its items, in order:
      ``str`` items become text parts, :class:`Image` items ``image_url`` parts, and
      OpenAI content-part dicts pass through (copied);
    - a :class:`Chat` is its messages.

    Raises:
        TypeError: the prompt is none of ``str``, ``list[str | Image]`` or ``Chat``, or a list
            item is not a content part.
        ValueError: the prompt is an empty list or an empty Chat.
    """
    if isinstance(prompt, str):
        return NormalizedPrompt([{"role": "user", "content": prompt}], prompt)
    if isinstance(prompt, Chat):
        if not prompt.messages:
            raise ValueError("the Chat prompt has no messages")
        return NormalizedPrompt(prompt.to_messages())
    if isinstance(prompt, (list, tuple)):
        if not prompt:
            raise ValueError("the prompt is an empty list; give text and/or Images")
        return NormalizedPrompt([{"role": "user", "content": _content(prompt, "prompt")}])
    raise TypeError(
        f"the prompt is a {type(prompt).__name__}; expected a str, a list of str and "
        "outlines_like.Image, or an outlines_like.Chat"
    )


def to_messages(prompt: object) -> list[dict[str, Any]]:
    """Turn a prompt into chat messages (:func:`normalize_prompt`'s messages).

    Raises:
        TypeError: the prompt is none of ``str``, ``list[str | Image]`` or ``Chat``.
        ValueError: the prompt is an empty list or an empty Chat.
    """
    return normalize_prompt(prompt).messages


def to_prompt_text(prompt: object) -> str:
    """Turn a prompt into raw text for the ``completions`` endpoint.

    Only a ``str`` has raw text (:attr:`NormalizedPrompt.text`); a list is a user message
    with parts and a Chat is messages, and both need the chat endpoint.

    Raises:
        TypeError: the prompt is not a ``str`` (chats and images need the chat endpoint).
    """
    if isinstance(prompt, str):
        return prompt
    raise TypeError(
        f"the completions endpoint takes a str prompt, got a {type(prompt).__name__}; "
        "create the model with endpoint='chat' for Chat and Image prompts"
    )


def message_text(content: object, where: str = "content") -> str:
    """The text of one message's content, for text-only models and templates.

    Content in normal form (:func:`normalize_prompt`, or an OpenAI request's messages): a
    ``str`` is itself, ``None`` is ``""``, and a list of content parts is its text parts
    joined in order.

    Args:
        content: A message's ``content``.
        where: How to name the content in errors (``messages[2].content``).

    Raises:
        TypeError: a part is not a text part (an image, audio...), or the content is neither
            a str, ``None`` nor a list of parts.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, (list, tuple)):
        raise TypeError(f"{where} must be a string or a list of content parts")
    texts: list[str] = []
    for j, part in enumerate(content):
        if not isinstance(part, Mapping) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
            raise TypeError(
                f"{where}[{j}] is a {kind!r} part; only text parts are supported here "
                "(images need a server with a vision model)"
            )
        texts.append(str(part.get("text", "")))
    return "".join(texts)
