"""The message layer: results, the one field accessor, the one usage reader, no imports above."""

from __future__ import annotations

import ast
import pathlib

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.completion_usage import CompletionUsage

import outlines_like
from outlines_like import messages
from outlines_like.messages import REASONING_FIELDS, Completion, ToolCall, Usage, read_field
from outlines_like.messages import read_usage as read_usage_
from outlines_like.streaming import read_usage

PACKAGE = pathlib.Path(outlines_like.__file__).parent


def test_public_homes_are_the_message_types() -> None:
    import outlines_like.models as models
    import outlines_like.tools as tools

    assert outlines_like.Completion is models.Completion is Completion
    assert outlines_like.Usage is models.Usage is Usage
    assert outlines_like.ToolCall is tools.ToolCall is ToolCall
    assert read_usage is read_usage_


def _imports(path: pathlib.Path) -> set[str]:
    """Every ``outlines_like`` module a source file imports, at any depth (lazy ones too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("outlines_like")}


def test_the_message_layer_imports_nothing_above_it() -> None:
    assert _imports(PACKAGE / "messages.py") <= {"outlines_like.errors"}
    assert _imports(PACKAGE / "_scan.py") == set()


PARSERS = [
    "reasoning.py",
    "_scan.py",
    *(f"{d}/{f.name}" for d in ("streaming", "tools") for f in (PACKAGE / d).glob("*.py")),
]


@pytest.mark.parametrize("path", PARSERS)
def test_message_parsers_never_import_the_models(path: str) -> None:
    assert not {m for m in _imports(PACKAGE / path) if m.startswith("outlines_like.models")}


def test_one_list_of_reasoning_fields() -> None:
    assert REASONING_FIELDS == ("reasoning_content", "reasoning", "thinking")
    for path in PACKAGE.rglob("*.py"):
        if path.name != "messages.py":
            assert '"reasoning_content", "reasoning", "thinking"' not in path.read_text(), path


def _with_extra(name: str, value: str) -> ChatCompletionMessage:
    return ChatCompletionMessage.model_validate({"role": "assistant", name: value})


class Plain:
    def __init__(self) -> None:
        self.content = "c"

    @property
    def computed(self) -> str:
        return "p"


@pytest.mark.parametrize(
    ("obj", "name", "expected"),
    [
        ({"a": 1}, "a", 1),
        ({"a": 1}, "b", None),
        (ChatCompletionMessage(role="assistant", content="x"), "content", "x"),
        (ChatCompletionMessage(role="assistant", content=None), "content", None),
        (
            ChatCompletionMessage.model_validate({"role": "assistant", "reasoning": "r"}),
            "reasoning",
            "r",
        ),
        (ChatCompletionMessage(role="assistant", content="x"), "reasoning", None),
        (Plain(), "content", "c"),
        (Plain(), "computed", "p"),
        (Plain(), "missing", None),
        (None, "x", None),
    ],
)
def test_read_field(obj: object, name: str, expected: object) -> None:
    assert read_field(obj, name) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # what models/_core.read_usage read (a usage object)
        (None, None),
        ({"prompt_tokens": 1, "completion_tokens": 2}, Usage(1, 2, 3)),
        ({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 4}, Usage(1, 2, 4)),
        (
            {
                "prompt_tokens": 1,
                "completion_tokens": 5,
                "total_tokens": 6,
                "completion_tokens_details": {"reasoning_tokens": 4},
            },
            Usage(1, 5, 6, 4),
        ),
        ({"prompt_tokens": None, "completion_tokens": True}, Usage(0, 0, 0)),
        # what streaming.read_usage read (a response carrying one, Ollama's top-level field)
        (
            {"usage": {"prompt_tokens": 4, "completion_tokens": 0, "reasoning_tokens": 0}},
            Usage(4, 0, 4, 0),
        ),
        ({"choices": [], "usage": None}, None),
        ({"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 0}, Usage(2, 3, 5)),
        (CompletionUsage(prompt_tokens=1, completion_tokens=2, total_tokens=3), Usage(1, 2, 3)),
    ],
)
def test_read_usage(raw: object, expected: Usage | None) -> None:
    assert read_usage(raw) == expected


def test_read_usage_of_a_whole_response() -> None:
    response = ChatCompletion.model_validate(
        {
            "id": "r",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    )
    assert read_usage(response) == Usage(1, 1, 2)
    assert read_usage(response.model_copy(update={"usage": None})) == None  # noqa: E711


def test_usage_adds_up() -> None:
    assert Usage(1, 2, 3) + Usage(1, 1, 2, 5) == Usage(2, 3, 5, 5)
    assert (Usage(1, 2, 3) + Usage()).reasoning_tokens is None


def test_new_call_ids_are_unique() -> None:
    assert messages.new_call_id(0) != messages.new_call_id(0)
    assert messages.new_call_id(3).startswith("call_")
