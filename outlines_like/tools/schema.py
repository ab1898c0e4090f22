"""Tool schemas from Python functions: signature, annotations, defaults and docstring.

:func:`tool_schema` builds the OpenAI function tool, :func:`tool_choice` the ``tool_choice``
field; :func:`read_tool` reads a function once into a :class:`ToolSpec` that also validates
and binds the arguments a model sends (used by the tool loop in ``models.tool_loop``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, get_type_hints

import pydantic
from typing_extensions import Required, TypedDict

__all__ = [
    "FunctionSpec",
    "FunctionTool",
    "NamedToolChoice",
    "ToolSpec",
    "parse_docstring",
    "read_tool",
    "tool_choice",
    "tool_schema",
]


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
class ToolSpec:
    """A function read as a tool: its name, description, and a pydantic model of its arguments."""

    fn: Callable[..., object]
    name: str
    description: str
    model: type[pydantic.BaseModel]
    positional: tuple[str, ...]  # positional-only parameters, in order
    keyword: tuple[str, ...]

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments (titles removed, always an object)."""
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


def read_tool(fn: Callable[..., object], name: str | None = None) -> ToolSpec:
    """Read a function as a tool (see :func:`tool_schema` for what is read and raised)."""
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
    return ToolSpec(fn, tool_name, description, model, tuple(positional), tuple(keyword))


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
    spec = read_tool(fn, name)
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
    name = target if isinstance(target, str) else read_tool(target).name
    return {"type": "function", "function": {"name": name}}
