"""Tool calls: schemas from Python functions, and calls read from any server's answer.

- :func:`tool_schema` builds the OpenAI function tool from a Python function (annotations,
  defaults, docstring summary and ``Args:`` / ``Parameters`` / ``:param:`` descriptions).
- :func:`tool_calls_from_message` reads OpenAI ``tool_calls`` (SDK objects or dicts, arguments
  as a JSON string or, as TGI sends them, a dict).
- :func:`parse_tool_calls` reads Hermes/Qwen ``<tool_call>{json}</tool_call>`` blocks from text.
- :class:`ToolCallParser` is the server-side streaming parser of the same blocks.
- :func:`run_tools` / :func:`arun_tools` run the call-execute-answer loop; the flow is written
  once as a generator and driven by a sync and an async driver.
- :func:`tool_choice` builds the ``tool_choice`` request field.

Malformed ``<tool_call>`` JSON is not dropped: by default the block stays in the remaining
text and a :class:`ToolCallParseWarning` says why; with ``strict=True`` a ``ParseError`` is
raised instead.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import uuid
import warnings
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, get_type_hints

import pydantic
from typing_extensions import Required, TypedDict

from outlines_like.errors import MaxToolStepsError, ParseError, ToolCallParseWarning

if TYPE_CHECKING:
    from outlines_like.models.result import Completion

__all__ = [
    "ContentDelta",
    "MaxToolStepsError",
    "NamedToolChoice",
    "ParsedDelta",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallParseWarning",
    "ToolCallParser",
    "ToolResult",
    "ToolRun",
    "arun_tools",
    "decode_arguments",
    "parse_tool_calls",
    "run_tools",
    "tool_calls_from_message",
    "tool_choice",
    "tool_schema",
]


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: ``name(**arguments)``."""

    id: str
    name: str
    arguments: dict[str, Any]


def _default_id(index: int) -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


# --------------------------------------------------------------------------- schemas


class FunctionSpec(TypedDict, total=False):
    """The ``function`` member of an OpenAI function tool."""

    name: Required[str]
    description: str
    parameters: Required[dict[str, Any]]
    strict: bool


class FunctionTool(TypedDict):
    """An OpenAI function tool: ``{"type": "function", "function": {...}}``."""

    type: Literal["function"]
    function: FunctionSpec


_SECTION = re.compile(
    r"^(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters|"
    r"Returns|Return|Yields|Raises|Examples?|Notes?|Attributes|See Also|Warns?|References)"
    r"\s*:?\s*$"
)
_ARG_SECTIONS = {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")
_REST_PARAM = re.compile(r"^:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Read a docstring's description and its parameter descriptions.

    Understands Google (``Args:``), NumPy (``Parameters`` + dashes) and reST (``:param x:``)
    styles. The description is the text before the first section, paragraphs kept.

    Returns:
        ``(description, {parameter: description})``.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    params: dict[str, str] = {}
    description: list[str] = []
    i = 0
    in_description = True
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        numpy_header = (
            i + 1 < len(lines)
            and re.fullmatch(r"-{3,}", lines[i + 1].strip()) is not None
            and stripped != ""
        )
        header = _SECTION.match(stripped) if (stripped.endswith(":") or numpy_header) else None
        rest = _REST_PARAM.match(stripped)
        if rest:
            in_description = False
            name, text = rest.group(1), [rest.group(2)]
            i += 1
            while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(":"):
                text.append(lines[i].strip())
                i += 1
            params[name] = " ".join(t for t in text if t)
            continue
        if stripped.startswith(":") and re.match(r"^:(returns?|rtype|raises?|type)\b", stripped):
            in_description = False
            i += 1
            continue
        if header or numpy_header:
            in_description = False
            title = header.group(1) if header else stripped
            base = _indent(line)
            i += 2 if numpy_header else 1
            entry_indent: int | None = None
            current: str | None = None
            while i < len(lines):
                body = lines[i]
                if body.strip():
                    ind = _indent(body)
                    is_next_numpy = i + 1 < len(lines) and re.fullmatch(
                        r"-{3,}", lines[i + 1].strip()
                    )
                    if (not numpy_header and ind <= base) or is_next_numpy:
                        break
                    if numpy_header and ind <= base and _SECTION.match(body.strip()):
                        break
                    if entry_indent is None:
                        entry_indent = ind
                    if title in _ARG_SECTIONS:
                        if ind == entry_indent:
                            m = (_NUMPY_ENTRY if numpy_header else _GOOGLE_ENTRY).match(
                                body.strip()
                            )
                            if m:
                                current = m.group(1)
                                first = m.group(2) if not numpy_header else ""
                                params[current] = (first or "").strip()
                        elif current is not None:
                            params[current] = (params[current] + " " + body.strip()).strip()
                i += 1
            continue
        if in_description:
            description.append(stripped)
        i += 1
    joined = "\n".join(description).strip()
    paragraphs = "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", joined) if p.strip())
    return paragraphs, params


def _strip_titles(schema: object) -> None:
    if isinstance(schema, dict):
        if isinstance(schema.get("title"), str):
            del schema["title"]
        for key, value in schema.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(
                value, dict
            ):
                for sub in value.values():
                    _strip_titles(sub)
            else:
                _strip_titles(value)
    elif isinstance(schema, list):
        for item in schema:
            _strip_titles(item)


def _strictify(schema: object) -> None:
    if isinstance(schema, dict):
        if schema.get("type") == "object" and isinstance(schema.get("properties"), dict):
            schema["additionalProperties"] = False
            schema["required"] = list(schema["properties"])
        for value in schema.values():
            _strictify(value)
    elif isinstance(schema, list):
        for item in schema:
            _strictify(item)


@dataclasses.dataclass(frozen=True)
class _ToolSpec:
    fn: Callable[..., object]
    name: str
    description: str
    model: type[pydantic.BaseModel]
    positional: tuple[str, ...]  # positional-only parameters, in order
    keyword: tuple[str, ...]

    def parameters(self) -> dict[str, Any]:
        schema = self.model.model_json_schema()
        _strip_titles(schema)
        schema.setdefault("properties", {})
        schema["type"] = "object"
        return schema

    def bind(self, arguments: Mapping[str, Any]) -> tuple[list[object], dict[str, object]]:
        """Validate model-given arguments; raise ``pydantic.ValidationError`` when wrong."""
        validated = self.model.model_validate(dict(arguments))
        values = {name: getattr(validated, name) for name in self.model.model_fields}
        return [values[p] for p in self.positional], {k: values[k] for k in self.keyword}


def _spec(fn: Callable[..., object], name: str | None = None) -> _ToolSpec:
    if not callable(fn):
        raise TypeError(f"a tool must be a function, got {type(fn).__name__}: {fn!r:.80}")
    tool_name = name or getattr(fn, "__name__", None)
    if not tool_name or tool_name == "<lambda>":
        raise TypeError(f"tool {fn!r:.80} has no usable name; pass name=...")
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", tool_name):
        raise ValueError(
            f"tool name {tool_name!r} is not allowed by the OpenAI API "
            "(letters, digits, '_' and '-', at most 64); pass name=..."
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of tool {tool_name!r}: {exc}") from exc
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception as exc:  # NameError and friends from unresolvable string annotations
        raise TypeError(f"cannot resolve the annotations of tool {tool_name!r}: {exc}") from exc
    description, docs = parse_docstring(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    positional: list[str] = []
    keyword: list[str] = []
    for param in sig.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} is *args/**kwargs, which a "
                "JSON schema cannot describe; name each parameter"
            )
        if param.name in ("self", "cls") and param.annotation is inspect.Parameter.empty:
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            annotation,
            pydantic.Field(default, description=docs.get(param.name) or None),
        )
        (positional if param.kind == param.POSITIONAL_ONLY else keyword).append(param.name)
    try:
        model = pydantic.create_model(
            f"{tool_name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
        )
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as exc:
        raise TypeError(f"tool {tool_name!r}: a parameter type has no JSON schema: {exc}") from exc
    return _ToolSpec(fn, tool_name, description, model, tuple(positional), tuple(keyword))


def tool_schema(
    fn: Callable[..., object],
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
) -> FunctionTool:
    """Build the OpenAI function tool for a Python function.

    Parameter types come from the annotations (anything pydantic can describe: scalars,
    ``Optional``, ``Literal``, enums, containers, pydantic models, dataclasses, TypedDicts),
    defaults from the signature, descriptions from the docstring.

    Args:
        fn: The function.
        name: The tool name; defaults to ``fn.__name__``.
        description: The tool description; defaults to the docstring's text before its sections.
        strict: Mark the tool ``strict`` (OpenAI) and close every object: all properties
            required, no additional properties.

    Returns:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``.

    Raises:
        TypeError: ``fn`` is not a function, has ``*args``/``**kwargs``, or a parameter type
            has no JSON schema.
    """
    spec = _spec(fn, name)
    parameters = spec.parameters()
    if strict:
        _strictify(parameters)
    function: FunctionSpec = {"name": spec.name, "parameters": parameters}
    desc = spec.description if description is None else description
    if desc:
        function["description"] = desc
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


class NamedToolChoice(TypedDict):
    """``tool_choice`` forcing one function."""

    type: Literal["function"]
    function: dict[str, str]


def tool_choice(
    target: Callable[..., object] | str,
) -> NamedToolChoice | Literal["auto", "none", "required"]:
    """Build the ``tool_choice`` request field.

    Args:
        target: ``"auto"``, ``"none"`` or ``"required"`` (any tool must be called), or a
            function or tool name to force that tool.

    Returns:
        The mode string, or ``{"type": "function", "function": {"name": ...}}``.
    """
    if target == "auto":
        return "auto"
    if target == "none":
        return "none"
    if target == "required":
        return "required"
    name = target if isinstance(target, str) else _spec(target).name
    return {"type": "function", "function": {"name": name}}


# --------------------------------------------------------------------------- reading calls


def _get(obj: object, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None)
        if isinstance(extra, Mapping):
            value = extra.get(name)
    return value


def decode_arguments(arguments: object, *, tool: str = "?") -> dict[str, Any]:
    """Turn a tool call's ``arguments`` (a JSON string, a dict, or empty) into a dict.

    Raises:
        ParseError: the string is not JSON, or not a JSON object.
    """
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, Mapping):
        return dict(arguments)
    if not isinstance(arguments, str):
        raise ParseError(
            f"arguments of tool call {tool!r} should be a JSON string or an object, "
            f"got {type(arguments).__name__}",
            text=repr(arguments),
        )
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"arguments of tool call {tool!r} are not valid JSON ({exc.msg} at {exc.pos}): "
            f"{arguments[:200]!r}",
            text=arguments,
        ) from exc
    if not isinstance(value, dict):
        raise ParseError(
            f"arguments of tool call {tool!r} should be a JSON object, got {arguments[:200]!r}",
            text=arguments,
        )
    return value


def tool_calls_from_message(
    message: object, *, id_factory: Callable[[int], str] = _default_id
) -> list[ToolCall]:
    """Read the OpenAI ``tool_calls`` of a message (SDK object or dict).

    Handles arguments as a JSON string (OpenAI, vLLM, SGLang, llama.cpp) or as an object
    (TGI, Ollama's native API), a missing ``id`` (made with ``id_factory``), a single call
    sent as an object instead of a list, and the legacy ``function_call`` field.

    Raises:
        ParseError: a call's arguments are not a JSON object.
        ProviderResponseError: a call has no function name.
    """
    raw = _get(message, "tool_calls")
    if raw is None:
        legacy = _get(message, "function_call")
        raw = [{"function": legacy}] if legacy else []
    if isinstance(raw, Mapping):
        raw = [raw]
    calls: list[ToolCall] = []
    for i, item in enumerate(raw):
        function = _get(item, "function") or item
        name = _get(function, "name")
        if not isinstance(name, str) or not name:
            from outlines_like.errors import ProviderResponseError

            raise ProviderResponseError(f"tool call #{i} has no function name: {item!r:.200}")
        args = _get(function, "arguments")
        if args is None:
            args = _get(function, "parameters")
        call_id = _get(item, "id")
        calls.append(
            ToolCall(
                id=call_id if isinstance(call_id, str) and call_id else id_factory(i),
                name=name,
                arguments=decode_arguments(args, tool=name),
            )
        )
    return calls


TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
_BLOCK = re.compile(
    re.escape(TOOL_CALL_START) + r"(.*?)(?:" + re.escape(TOOL_CALL_END) + r"|\Z)", re.S
)


def _call_from_body(body: str, index: int, id_factory: Callable[[int], str]) -> ToolCall:
    """Read ``{"name": ..., "arguments": {...}}``; raise ``ValueError`` saying what is wrong."""
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at {exc.pos})") from exc
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError("no 'name' string")
    args = value.get("arguments", value.get("parameters"))
    if isinstance(args, str):  # some templates double-encode
        try:
            args = json.loads(args)
        except json.JSONDecodeError as exc:
            raise ValueError(f"'arguments' is a string that is not JSON ({exc.msg})") from exc
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ValueError("'arguments' is not a JSON object")
    return ToolCall(id=id_factory(index), name=name, arguments=args)


def parse_tool_calls(
    text: str,
    *,
    strict: bool = False,
    id_factory: Callable[[int], str] = _default_id,
) -> tuple[list[ToolCall], str]:
    """Read Hermes/Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks.

    Blanks around the JSON and between blocks are allowed, ``"parameters"`` is read as
    ``"arguments"``, and a last block cut before its ``</tool_call>`` is read when its JSON is
    complete.

    Args:
        text: The model's text.
        strict: Raise on a malformed block instead of warning.
        id_factory: Makes the id of the n-th call (the text carries none).

    Returns:
        The calls, and the text left once the blocks are removed (stripped). A malformed block
        stays in that text.

    Raises:
        ParseError: with ``strict=True``, a block is not a JSON object with a ``name``.
    """
    calls: list[ToolCall] = []
    kept: list[str] = []
    pos = 0
    for match in _BLOCK.finditer(text):
        kept.append(text[pos : match.start()])
        pos = match.end()
        body = match.group(1).strip()
        try:
            calls.append(_call_from_body(body, len(calls), id_factory))
        except ValueError as exc:
            message = (
                f"tool call block at character {match.start()} is unreadable: {exc}: {body[:200]!r}"
            )
            if strict:
                raise ParseError(message, text=text) from exc
            warnings.warn(message + "; it was left in the text", ToolCallParseWarning, stacklevel=2)
            kept.append(match.group(0))
    kept.append(text[pos:])
    if not calls:
        return [], text
    return calls, "".join(kept).strip()


# --------------------------------------------------------------------------- JSON prefixes


class _JsonPrefixError(ValueError):
    """Text that no JSON value starts with; ``taken`` characters of the chunk were fine."""

    def __init__(self, message: str, *, taken: int) -> None:
        super().__init__(message)
        self.taken = taken


class _JsonScanner:
    """Checks, one character at a time, that text is a prefix of one valid JSON value.

    ``feed`` returns how many characters it took: all, or up to the end of the value.
    It raises ``ValueError`` at the first character that no valid JSON could have.
    """

    _LITERALS: ClassVar[dict[str, str]] = {"t": "true", "f": "false", "n": "null"}
    _WS = " \t\n\r"

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.mode = "value"
        self.key = False  # the string being read is an object key
        self.pending = ""  # rest of a literal, or hex digits left of a \\u escape
        self.num = ""  # number sub-state
        self.done = False
        self.seen = 0

    def _close(self) -> None:
        if self.stack:
            self.mode = "after"
        else:
            self.done = True

    def _bad(self, ch: str) -> ValueError:
        return ValueError(f"unexpected {ch!r} at character {self.seen} of the JSON text")

    def feed(self, text: str) -> int:
        for i, ch in enumerate(text):
            try:
                if self.done or not self._step(ch):
                    return i
            except ValueError as exc:
                raise _JsonPrefixError(str(exc), taken=i) from None
            self.seen += 1
        return len(text)

    def _step(self, ch: str) -> bool:
        """Take one character; ``False`` when it lies past the end of the value."""
        if self.mode == "number" and not self._number(ch):
            self._close()
            if self.done:
                return False
        self._take(ch)
        return True

    def _take(self, ch: str) -> None:
        mode = self.mode
        if mode == "number":
            return
        if mode == "string":
            if ch == "\\":
                self.mode = "escape"
            elif ch == '"':
                if self.key:
                    self.key = False
                    self.mode = "colon"
                else:
                    self._close()
            elif ord(ch) < 0x20:
                raise self._bad(ch)
            return
        if mode == "escape":
            if ch in '"\\/bfnrt':
                self.mode = "string"
            elif ch == "u":
                self.mode, self.pending = "unicode", "0000"
            else:
                raise self._bad(ch)
            return
        if mode == "unicode":
            if ch not in "0123456789abcdefABCDEF":
                raise self._bad(ch)
            self.pending = self.pending[1:]
            if not self.pending:
                self.mode = "string"
            return
        if mode == "literal":
            if ch != self.pending[0]:
                raise self._bad(ch)
            self.pending = self.pending[1:]
            if not self.pending:
                self._close()
            return
        if ch in self._WS:
            return
        if mode in ("value", "value_or_end"):
            if mode == "value_or_end" and ch == "]":
                self.stack.pop()
                self._close()
            elif ch == "{":
                self.stack.append("{")
                self.mode = "key_or_end"
            elif ch == "[":
                self.stack.append("[")
                self.mode = "value_or_end"
            elif ch == '"':
                self.mode = "string"
            elif ch == "-" or ch.isdigit():
                self.mode = "number"
                self.num = "sign" if ch == "-" else ("zero" if ch == "0" else "int")
            elif ch in self._LITERALS:
                self.mode, self.pending = "literal", self._LITERALS[ch][1:]
            else:
                raise self._bad(ch)
        elif mode in ("key_or_end", "key"):
            if mode == "key_or_end" and ch == "}":
                self.stack.pop()
                self._close()
            elif ch == '"':
                self.mode, self.key = "string", True
            else:
                raise self._bad(ch)
        elif mode == "colon":
            if ch != ":":
                raise self._bad(ch)
            self.mode = "value"
        elif mode == "after":
            top = self.stack[-1]
            if ch == ",":
                self.mode = "key" if top == "{" else "value"
            elif (ch == "}" and top == "{") or (ch == "]" and top == "["):
                self.stack.pop()
                self._close()
            else:
                raise self._bad(ch)

    def _number(self, ch: str) -> bool:
        """Advance the number; ``False`` when ``ch`` ends it (if it may end here)."""
        s = self.num
        digit = ch.isdigit() and ch.isascii()
        nxt = {
            "sign": "zero" if ch == "0" else ("int" if digit else None),
            "zero": "dot" if ch == "." else ("exp" if ch in "eE" else None),
            "int": "int" if digit else ("dot" if ch == "." else ("exp" if ch in "eE" else None)),
            "dot": "frac" if digit else None,
            "frac": "frac" if digit else ("exp" if ch in "eE" else None),
            "exp": "expsign" if ch in "+-" else ("expdig" if digit else None),
            "expsign": "expdig" if digit else None,
            "expdig": "expdig" if digit else None,
        }[s]
        if nxt is not None:
            self.num = nxt
            return True
        if s in ("zero", "int", "frac", "expdig"):
            return False
        raise self._bad(ch)


# --------------------------------------------------------------------------- server parser


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


def _partial_suffix(text: str, tag: str) -> int:
    for k in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-k:]):
            return k
    return 0


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

    def __init__(self, *, id_factory: Callable[[int], str] = _default_id) -> None:
        self._id_factory = id_factory
        self._buf = ""
        self._in_call = False
        self._body = ""
        self._count = 0  # calls started
        self._named = False
        self._args_start: int | None = None  # offset of the arguments value in _body
        self._args_sent = 0  # characters of the arguments value sent
        self._scanner = _JsonScanner()
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
                k = 0 if final else _partial_suffix(self._buf, TOOL_CALL_START)
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
            k = 0 if final else _partial_suffix(self._buf, TOOL_CALL_END)
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
        self._scanner = _JsonScanner()
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
        except _JsonPrefixError as exc:
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
            call = _call_from_body(body, index, lambda _: "")
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


# --------------------------------------------------------------------------- tool loop


class _CompletingModel(Protocol):
    def complete(self, prompt: Any, **kwargs: Any) -> Completion | list[Completion]: ...


class _AsyncCompletingModel(Protocol):
    def complete(self, prompt: Any, **kwargs: Any) -> Awaitable[Completion | list[Completion]]: ...


@dataclasses.dataclass(frozen=True)
class ToolResult:
    """One executed call: what the function returned, and what the model was told."""

    call: ToolCall
    output: object
    content: str
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class ToolRun:
    """The end of a tool loop.

    Attributes:
        text: The model's final answer.
        completion: The final completion (reasoning, usage, finish reason...).
        messages: The whole conversation, final answer included.
        results: Every executed call, in order.
        steps: How many model calls were made.
    """

    text: str
    completion: Completion
    messages: list[dict[str, Any]]
    results: list[ToolResult]
    steps: int


@dataclasses.dataclass(frozen=True)
class _Ask:
    messages: list[dict[str, Any]]
    kwargs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Invoke:
    fn: Callable[..., object]
    args: list[object]
    kwargs: dict[str, object]


@dataclasses.dataclass(frozen=True)
class _Outcome:
    value: object = None
    error: BaseException | None = None


def _to_messages(prompt: object) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    messages = getattr(prompt, "messages", prompt)
    if isinstance(messages, Sequence) and all(isinstance(m, Mapping) for m in messages):
        return [dict(m) for m in messages]
    raise TypeError(
        "run_tools takes a prompt string, a list of OpenAI message dicts, or a Chat; "
        f"got {type(prompt).__name__}"
    )


def _render(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, pydantic.BaseModel):
        return output.model_dump_json()
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


def _tool_flow(
    prompt: object,
    tools: Sequence[Callable[..., object]],
    max_steps: int,
    catch_errors: bool,
    kwargs: dict[str, Any],
) -> Generator[_Ask | _Invoke, object, ToolRun]:
    """The tool loop, free of I/O: yields what to do, receives the result."""
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    specs: dict[str, _ToolSpec] = {}
    for fn in tools:
        spec = _spec(fn)
        if spec.name in specs:
            raise ValueError(f"two tools are named {spec.name!r}")
        specs[spec.name] = spec
    schemas = [tool_schema(spec.fn) for spec in specs.values()]
    messages = _to_messages(prompt)
    results: list[ToolResult] = []
    request = {k: v for k, v in kwargs.items() if k != "tools"}
    for step in range(1, max_steps + 1):
        if step > 1:
            # A forced tool_choice applies to the first call only, or the loop never ends.
            request.pop("tool_choice", None)
        completion = yield _Ask(list(messages), {**request, "tools": schemas})
        if not isinstance(completion, _completion_type()):
            raise TypeError(
                f"model.complete() returned {type(completion).__name__}, expected one Completion"
                " (the tool loop follows one answer: do not pass n > 1)"
            )
        if not completion.tool_calls:
            messages.append({"role": "assistant", "content": completion.text})
            return ToolRun(completion.text, completion, messages, results, step)
        messages.append(
            {
                "role": "assistant",
                "content": completion.text or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.arguments, ensure_ascii=False),
                        },
                    }
                    for call in completion.tool_calls
                ],
            }
        )
        for call in completion.tool_calls:
            tool = specs.get(call.name)
            error: str | None = None
            output: object = None
            if tool is None:
                error = f"unknown tool {call.name!r}; the tools are: {', '.join(specs)}"
            else:
                try:
                    args, kw = tool.bind(call.arguments)
                except pydantic.ValidationError as exc:
                    error = f"invalid arguments for {call.name}: {exc}"
                else:
                    outcome = yield _Invoke(tool.fn, args, kw)
                    assert isinstance(outcome, _Outcome)
                    if outcome.error is not None:
                        if not catch_errors:
                            raise outcome.error
                        error = f"{type(outcome.error).__name__}: {outcome.error}"
                    output = outcome.value
            content = f"error: {error}" if error is not None else _render(output)
            results.append(ToolResult(call, output, content, error))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
    raise MaxToolStepsError(
        f"the model still asked for tools after max_steps={max_steps} calls; "
        "raise max_steps or check the tools' answers (messages are on the error)",
        messages=messages,
        steps=max_steps,
    )


def _chat(messages: list[dict[str, Any]]) -> object:
    """The conversation as the models take it: an ``outlines_like.Chat``."""
    from outlines_like.inputs import Chat

    return Chat(messages)


def _completion_type() -> type[Completion]:
    from outlines_like.models.result import Completion

    return Completion


def run_tools(
    model: _CompletingModel,
    prompt: object,
    tools: Sequence[Callable[..., object]],
    *,
    max_steps: int = 5,
    catch_errors: bool = False,
    **kwargs: Any,
) -> ToolRun:
    """Let the model call Python functions until it answers.

    Each step calls ``model.complete(Chat(messages), tools=[tool_schema(f) ...], **kwargs)``; the
    calls it asks for are validated against the functions' signatures, run, and fed back as
    ``role: tool`` messages. Unknown tools and invalid arguments are reported to the model.
    A ``tool_choice`` in ``kwargs`` applies to the first step only.

    Args:
        model: A model with ``complete(messages, **kw) -> Completion``.
        prompt: A string, a list of OpenAI message dicts, or a ``Chat``.
        tools: The functions the model may call.
        max_steps: The most model calls.
        catch_errors: Report an exception raised by a tool to the model instead of raising.
        **kwargs: Passed to every ``model.complete`` call.

    Returns:
        The final answer with the conversation and every executed call.

    Raises:
        MaxToolStepsError: the model still asked for tools after ``max_steps`` calls.
    """
    flow = _tool_flow(prompt, tools, max_steps, catch_errors, kwargs)
    reply: object = None
    try:
        while True:
            op = flow.send(reply)
            if isinstance(op, _Ask):
                reply = model.complete(_chat(op.messages), **op.kwargs)
            else:
                try:
                    value = op.fn(*op.args, **op.kwargs)
                except Exception as exc:
                    reply = _Outcome(error=exc)
                    continue
                if inspect.isawaitable(value):
                    if inspect.iscoroutine(value):
                        value.close()
                    raise TypeError(
                        f"tool {getattr(op.fn, '__name__', op.fn)!r} is async; use arun_tools"
                    )
                reply = _Outcome(value)
    except StopIteration as stop:
        result: ToolRun = stop.value
        return result


async def arun_tools(
    model: _AsyncCompletingModel,
    prompt: object,
    tools: Sequence[Callable[..., object]],
    *,
    max_steps: int = 5,
    catch_errors: bool = False,
    **kwargs: Any,
) -> ToolRun:
    """Async twin of :func:`run_tools`; tools may be ``async def`` or plain functions."""
    flow = _tool_flow(prompt, tools, max_steps, catch_errors, kwargs)
    reply: object = None
    try:
        while True:
            op = flow.send(reply)
            if isinstance(op, _Ask):
                reply = await model.complete(_chat(op.messages), **op.kwargs)
            else:
                try:
                    value = op.fn(*op.args, **op.kwargs)
                    if inspect.isawaitable(value):
                        value = await value
                except Exception as exc:
                    reply = _Outcome(error=exc)
                    continue
                reply = _Outcome(value)
    except StopIteration as stop:
        result: ToolRun = stop.value
        return result
