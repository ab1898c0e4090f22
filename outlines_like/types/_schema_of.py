"""The JSON Schema of a Python type: pydantic models, dataclasses, TypedDicts, functions, types.

Below the terms (``_terms`` builds ``JsonSchema`` from these) and the type mapping (``_python``):
it imports neither.
"""

from __future__ import annotations

import dataclasses
import inspect
import types as _pytypes
import typing
from collections.abc import Callable
from typing import Any, Union, cast, get_origin

import pydantic
from typing_extensions import is_typeddict

from outlines_like.errors import UnsupportedConstraintError

__all__ = ["is_model_like", "is_union", "json_schema_of"]


def is_union(tp: object) -> bool:
    """Whether ``tp`` is a ``Union``/``X | Y`` type."""
    return get_origin(tp) is Union or isinstance(tp, _pytypes.UnionType)


def is_model_like(tp: object) -> bool:
    """Whether ``tp`` is a pydantic model, a dataclass or a TypedDict class."""
    return isinstance(tp, type) and (
        issubclass(tp, pydantic.BaseModel) or dataclasses.is_dataclass(tp) or is_typeddict(tp)
    )


def _function_schema(fn: Callable[..., object]) -> dict[str, Any]:
    sig = inspect.signature(fn)
    hints = typing.get_type_hints(fn)
    fields: dict[str, Any] = {}
    for name, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise UnsupportedConstraintError(
                f"cannot build a JSON Schema from {fn.__name__}(): *args/**kwargs have no schema"
            )
        annotation = hints.get(name, Any)
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (annotation, default)
    model = pydantic.create_model(fn.__name__, **fields)
    schema: dict[str, Any] = model.model_json_schema()
    return schema


def json_schema_of(source: object) -> dict[str, Any] | None:
    """Return the JSON Schema of a pydantic model, dataclass, TypedDict, type or function.

    Returns ``None`` when ``source`` has no JSON Schema.

    Raises:
        UnsupportedConstraintError: pydantic refuses the type, with pydantic's reason (e.g.
            ``typing.TypedDict`` before Python 3.12).
    """
    if is_model_like(source):
        try:
            if isinstance(source, type) and issubclass(source, pydantic.BaseModel):
                return source.model_json_schema()
            return pydantic.TypeAdapter(cast(Any, source)).json_schema()
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError) as exc:
            raise UnsupportedConstraintError(
                f"cannot use {source!r} as an output type: pydantic says: {exc.message}"
            ) from exc
    if inspect.isfunction(source) or inspect.ismethod(source):
        return _function_schema(source)
    try:
        return pydantic.TypeAdapter(cast(Any, source)).json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError):
        return None
