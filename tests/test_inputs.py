"""Prompts: text, text with images, chats, and how they become messages."""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from PIL import Image as PILImage

from outlines_like.inputs import (
    Chat,
    Image,
    NormalizedPrompt,
    message_text,
    normalize_prompt,
    to_messages,
    to_prompt_text,
)


def png(size: tuple[int, int] = (2, 2)) -> PILImage.Image:
    return PILImage.new("RGB", size, (255, 0, 0))


def test_str_is_one_user_message() -> None:
    assert to_messages("hi") == [{"role": "user", "content": "hi"}]


def test_list_with_images_is_one_message_with_parts() -> None:
    image = Image(png())
    [message] = to_messages(["What is this?", image, "Be brief."])
    assert message["role"] == "user"
    text, picture, tail = message["content"]
    assert text == {"type": "text", "text": "What is this?"}
    assert tail == {"type": "text", "text": "Be brief."}
    url = picture["image_url"]["url"]
    assert picture["type"] == "image_url"
    assert url.startswith("data:image/png;base64,")
    decoded = PILImage.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.size == (2, 2)
    assert decoded.getpixel((0, 0)) == (255, 0, 0)


def test_image_keeps_its_format() -> None:
    buffer = io.BytesIO()
    png().save(buffer, format="JPEG")
    image = Image(PILImage.open(io.BytesIO(buffer.getvalue())))
    assert image.media_type == "image/jpeg"
    assert image.data_url.startswith("data:image/jpeg;base64,")
    assert image.data_url is image.data_url  # encoded once
    assert repr(image) == "Image(JPEG, size=(2, 2))"


def test_image_needs_a_pil_image() -> None:
    with pytest.raises(TypeError, match=r"PIL\.Image\.Image"):
        Image(b"not an image")  # type: ignore[arg-type]


def test_chat_helpers_and_copies() -> None:
    source = [{"role": "system", "content": "Be terse."}]
    chat = Chat(source).add_user(["Look:", Image(png())]).add_assistant("A red square.")
    chat.add_user("Sure?")
    assert source == [{"role": "system", "content": "Be terse."}]
    messages = to_messages(chat)
    assert [msg["role"] for msg in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"][1]["type"] == "image_url"
    assert isinstance(chat.messages[1]["content"][1], Image)  # the chat itself is unchanged
    assert len(chat) == 4
    assert chat == Chat(chat.messages)


@pytest.mark.parametrize(
    ("prompt", "error", "match"),
    [
        (3, TypeError, "expected a str, a list"),
        ([], ValueError, "empty list"),
        (Chat(), ValueError, "no messages"),
        (["ok", 5], TypeError, r"prompt\[1\] is a int"),
        ([{"no": "type"}], TypeError, r"prompt\[0\]"),
    ],
)
def test_bad_prompts(prompt: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        to_messages(prompt)


@pytest.mark.parametrize(
    ("messages", "error", "match"),
    [
        ("hello", TypeError, "list of message dicts"),
        ([{"content": "x"}], TypeError, r"messages\[0\] has no string 'role'"),
        ([{"role": "robot", "content": "x"}], ValueError, r"role 'robot'"),
        (["x"], TypeError, r"messages\[0\] is a str"),
    ],
)
def test_bad_chats(messages: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        Chat(messages)


def test_content_part_dicts_pass_through() -> None:
    part = {"type": "input_audio", "input_audio": {"data": "...", "format": "wav"}}
    [message] = to_messages(["Listen:", part])
    assert message["content"][1] == part
    assert message["content"][1] is not part


def test_prompt_text_for_completions() -> None:
    assert to_prompt_text("Once upon") == "Once upon"
    with pytest.raises(TypeError, match="endpoint='chat'"):
        to_prompt_text(Chat([{"role": "user", "content": "x"}]))


def test_one_normal_form() -> None:
    assert normalize_prompt("hi") == NormalizedPrompt([{"role": "user", "content": "hi"}], "hi")
    listed = normalize_prompt(["a", "b"])
    assert listed.text is None  # a list is a message with parts, not raw text
    assert listed.messages == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]
    chat = Chat([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert normalize_prompt(chat) == NormalizedPrompt(chat.to_messages())
    assert to_messages(["a", "b"]) == listed.messages


def test_message_text_for_text_only_models() -> None:
    [message] = to_messages(["a", "b"])
    assert message_text(message["content"]) == "ab"
    assert message_text("x") == "x"
    assert message_text(None) == ""
    [with_image] = to_messages(["look", Image(png())])
    with pytest.raises(TypeError, match=r"content\[1\] is a 'image_url' part"):
        message_text(with_image["content"])
    with pytest.raises(TypeError, match=r"messages\[0\]\.content must be a string"):
        message_text(3, "messages[0].content")
