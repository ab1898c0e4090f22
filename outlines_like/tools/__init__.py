"""Tool calls: schemas from Python functions, and calls read from any server's answer.

- ``schema``: :func:`tool_schema` builds the OpenAI function tool from a Python function
  (annotations, defaults, docstring summary and ``Args:`` / ``Parameters`` / ``:param:``
  descriptions); :func:`tool_choice` builds the ``tool_choice`` request field.
- ``calls``: :func:`tool_calls_from_message` reads OpenAI ``tool_calls``;
  :func:`parse_tool_calls` reads Hermes/Qwen ``<tool_call>{json}</tool_call>`` text.
- ``parser``: :class:`ToolCallParser`, the streaming (server-side) parser of the same blocks.

The tool loop (call, execute, answer) sits above the models: ``outlines_like.run_tools`` /
``outlines_like.arun_tools`` (``outlines_like.models.tool_loop``).
"""

from outlines_like.errors import MaxToolStepsError, ToolCallParseWarning
from outlines_like.messages import ToolCall
from outlines_like.tools.calls import decode_arguments, parse_tool_calls, tool_calls_from_message
from outlines_like.tools.parser import ContentDelta, ParsedDelta, ToolCallDelta, ToolCallParser
from outlines_like.tools.schema import (
    FunctionSpec,
    FunctionTool,
    NamedToolChoice,
    parse_docstring,
    tool_choice,
    tool_schema,
)

__all__ = [
    "ContentDelta",
    "FunctionSpec",
    "FunctionTool",
    "MaxToolStepsError",
    "NamedToolChoice",
    "ParsedDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallParseWarning",
    "ToolCallParser",
    "decode_arguments",
    "parse_docstring",
    "parse_tool_calls",
    "tool_calls_from_message",
    "tool_choice",
    "tool_schema",
]
