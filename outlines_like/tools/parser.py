"""The streaming parser of ``<tool_call>{json}</tool_call>`` blocks (Hermes, Qwen2.5/3).

The reference server feeds it decoded text deltas and sends OpenAI-shaped tool-call deltas;
the argument text it sends is always a growing prefix of valid JSON (checked by
:class:`~outlines_like._scan.JsonPrefixScanner`).
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Callable
from typing import Any

from outlines_like._scan import JsonPrefixError, JsonPrefixScanner, partial_suffix
from outlines_like.errors import ToolCallParseWarning
from outlines_like.messages import ToolCall, new_call_id
from outlines_like.tools.calls import (
    TOOL_CALL_END,
    TOOL_CALL_START,
    call_from_body,
    parse_tool_calls,
)

__all__ = ["ContentDelta", "ParsedDelta", "ToolCallDelta", "ToolCallParser"]


@dataclasses.dataclass(frozen=True)
class ContentDelta:
    """Plain answer text to send as ``delta.content``."""

    text: str


@dataclasses.dataclass(frozen=True)
class ToolCallDelta:
    """One piece of a streamed tool call, shaped like OpenAI's ``delta.tool_calls[i]``.

    The first delta of a call carries ``id`` and ``name``; later ones append ``arguments``
    text. Concatenated, a call's ``arguments`` are always a prefix of valid JSON, and once the
    call is complete, the whole JSON object.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chunk shape: ``{"index", "id", "type", "function": {...}}``."""
        out: dict[str, Any] = {"index": self.index}
        function: dict[str, str] = {"arguments": self.arguments}
        if self.id is not None:
            out["id"] = self.id
            out["type"] = "function"
        if self.name is not None:
            function["name"] = self.name
        out["function"] = function
        return out


ParsedDelta = ContentDelta | ToolCallDelta

_NAME_FIELD = re.compile(r'"name"\s*:\s*("(?:[^"\\]|\\.)*")')
_ARGS_FIELD = re.compile(r'"(?:arguments|parameters)"\s*:\s*')


class ToolCallParser:
    """Streaming parser of ``<tool_call>{json}</tool_call>`` blocks (Hermes, Qwen2.5/3).

    The server feeds each decoded text delta to :meth:`parse_delta`, which returns:

    - a non-empty list of :class:`ContentDelta` / :class:`ToolCallDelta`: send them;
    - ``[]``: the text was consumed inside a tool-call section and produced nothing new
      yet: send nothing (the text must not reach ``content``);
    - ``None``: more tokens are needed to decide (the text may be the start of
      ``<tool_call>``): send nothing yet.

    :meth:`finish` flushes held-back text at the end; blank text after a tool call is sent
    only when real text follows it. The argument text of every call is a
    growing prefix of valid JSON: characters are checked as they arrive and only sent once
    they keep the prefix valid. :meth:`parse_complete` reads a whole text at once.

    Args:
        id_factory: Makes the id of the n-th call.
    """

    def __init__(self, *, id_factory: Callable[[int], str] = new_call_id) -> None:
        self._id_factory = id_factory
        self._buf = ""
        self._in_call = False
        self._body = ""
        self._count = 0  # calls started
        self._named = False
        self._args_start: int | None = None  # offset of the arguments value in _body
        self._args_sent = 0  # characters of the arguments value sent
        self._scanner = JsonPrefixScanner()
        self._broken = False
        self._deferred = False  # arguments not an object yet (e.g. a JSON string): send at close
        self._call_id = ""
        self._blank = ""  # blank text after a tool call, held
        self.calls: list[ToolCall] = []
        """The calls read so far, complete."""

    def parse_complete(self, text: str) -> tuple[list[ToolCall], str]:
        """Read a whole output: ``(calls, remaining content)`` (see :func:`parse_tool_calls`)."""
        return parse_tool_calls(text, id_factory=self._id_factory)

    def parse_delta(self, delta: str) -> list[ParsedDelta] | None:
        """Take the next text delta; see the class docstring for the three answers."""
        self._buf += delta
        out: list[ParsedDelta] = []
        was_in_call = self._in_call
        self._run(out, final=False)
        if out:
            return out
        if was_in_call or self._in_call:
            return []
        return None if self._buf else []

    def finish(self) -> list[ParsedDelta]:
        """Flush at the end of the output (held-back text, an unterminated call)."""
        out: list[ParsedDelta] = []
        self._run(out, final=True)
        if self._in_call:
            self._close_call(out, terminated=False)
        return out

    def _run(self, out: list[ParsedDelta], *, final: bool) -> None:
        while self._buf:
            if not self._in_call:
                i = self._buf.find(TOOL_CALL_START)
                if i >= 0:
                    self._content(self._buf[:i], out)
                    self._buf = self._buf[i + len(TOOL_CALL_START) :]
                    self._open_call()
                    continue
                k = 0 if final else partial_suffix(self._buf, TOOL_CALL_START)
                self._content(self._buf[: len(self._buf) - k], out)
                self._buf = self._buf[len(self._buf) - k :]
                return
            i = self._buf.find(TOOL_CALL_END)
            if i >= 0:
                self._body += self._buf[:i]
                self._buf = self._buf[i + len(TOOL_CALL_END) :]
                self._advance(out)
                self._close_call(out, terminated=True)
                continue
            k = 0 if final else partial_suffix(self._buf, TOOL_CALL_END)
            self._body += self._buf[: len(self._buf) - k]
            self._buf = self._buf[len(self._buf) - k :]
            self._advance(out)
            return

    def _content(self, text: str, out: list[ParsedDelta]) -> None:
        """Send content; after a tool call, blank text waits for real text (or is dropped)."""
        if self._count:
            text = self._blank + text
            if not text.strip():
                self._blank = text
                return
            self._blank = ""
        if text:
            out.append(ContentDelta(text))

    def _open_call(self) -> None:
        self._in_call = True
        self._body = ""
        self._named = False
        self._args_start = None
        self._args_sent = 0
        self._scanner = JsonPrefixScanner()
        self._broken = False
        self._deferred = False
        self._call_id = ""

    def _advance(self, out: list[ParsedDelta]) -> None:
        """Send the name once known, then any new valid argument text."""
        if self._broken or self._deferred:
            return
        index = self._count
        body = self._body
        if not self._named:
            name_m = _NAME_FIELD.search(body)
            args_m = _ARGS_FIELD.search(body)
            if name_m is None:
                return
            if args_m is not None and args_m.start() < name_m.start():
                return  # arguments before the name: sent whole when the block closes
            try:
                name = json.loads(name_m.group(1))
            except json.JSONDecodeError:
                self._broken = True
                return
            self._call_id = self._id_factory(index)
            out.append(ToolCallDelta(index, id=self._call_id, name=name))
            self._named = True
        if self._args_start is None:
            args_m = _ARGS_FIELD.search(body)
            if args_m is None:
                return
            self._args_start = args_m.end()
        if self._scanner.done:
            return
        new = body[self._args_start + self._args_sent :]
        if not new.strip():
            return
        if self._args_sent == 0 and not new.lstrip().startswith("{"):
            self._deferred = True
            return
        try:
            taken = self._scanner.feed(new)
        except JsonPrefixError as exc:
            # Send the part that was still valid; nothing more of this call streams.
            self._broken = True
            taken = exc.taken
        piece = new[:taken]
        if self._args_sent == 0:
            piece = piece.lstrip()
            self._args_start += taken - len(piece)
            self._args_sent = len(piece)
        else:
            self._args_sent += taken
        if piece:
            out.append(ToolCallDelta(index, arguments=piece))

    def _close_call(self, out: list[ParsedDelta], *, terminated: bool) -> None:
        index = self._count
        body = self._body.strip()
        self._in_call = False
        try:
            call = call_from_body(body, index, lambda _: "")
        except ValueError as exc:
            warnings.warn(
                f"tool call #{index} is unreadable ({exc}): {body[:200]!r}",
                ToolCallParseWarning,
                stacklevel=3,
            )
            self._count += 1
            return
        if not self._named:
            self._call_id = self._id_factory(index)
            out.append(ToolCallDelta(index, id=self._call_id, name=call.name))
        if self._args_sent == 0 or not self._scanner.done:
            # Not streamed (odd key order, or a string-encoded object): send what is left so
            # that the whole arguments text is the JSON object.
            full = json.dumps(call.arguments, ensure_ascii=False)
            if self._args_sent == 0:
                out.append(ToolCallDelta(index, arguments=full))
            elif not self._scanner.done:
                warnings.warn(
                    f"tool call #{index} arguments ended early: {body[:200]!r}",
                    ToolCallParseWarning,
                    stacklevel=3,
                )
        self.calls.append(dataclasses.replace(call, id=self._call_id))
        self._count += 1
