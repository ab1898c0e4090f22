"""A forced ``tool_choice`` as a constraint: the answer must be one valid tool call."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from outlines_like.server.dialects import ConstraintSpec, RequestError

__all__ = ["tool_choice_spec"]


def _hoist_defs(params: Mapping[str, Any], tool: str, defs: dict[str, Any]) -> dict[str, Any]:
    """Move a tool schema's ``$defs`` (or ``definitions``) to the root, renaming its refs.

    The parameters are nested under ``properties.arguments`` of the call's schema, where their
    ``#/$defs/X`` refs would point to nothing; each tool's definitions become
    ``#/$defs/<tool>.X`` at the root, so that tools sharing a definition name do not collide.
    """
    local: dict[tuple[str, str], Any] = {}
    for key in ("$defs", "definitions"):
        found = params.get(key)
        if isinstance(found, Mapping):
            local.update({(key, str(k)): v for k, v in found.items()})
    renames = {f"#/{key}/{k}": f"#/$defs/{tool}.{k}" for key, k in local}

    def rewrite(node: Any) -> Any:
        if isinstance(node, Mapping):
            out = {}
            for k, v in node.items():
                if k == "$ref" and isinstance(v, str):
                    out[k] = renames.get(v, v)
                elif k in ("$defs", "definitions") and node is params:
                    continue
                else:
                    out[k] = rewrite(v)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for (_, k), v in local.items():
        defs[f"{tool}.{k}"] = rewrite(v)
    hoisted: dict[str, Any] = rewrite(params)
    return hoisted


def tool_choice_spec(
    body: Mapping[str, Any], tools: list[dict[str, Any]] | None
) -> ConstraintSpec | None:
    r"""``tool_choice`` "required" or a named function, as a constraint on the output.

    The answer is then exactly one ``<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>``
    block whose arguments follow the tool's parameter schema.
    """
    from outlines_like.types import JsonSchema

    choice = body.get("tool_choice")
    if choice in (None, "auto", "none"):
        return None
    if not tools:
        raise RequestError("tool_choice needs tools", param="tool_choice")
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    if choice == "required":
        names = list(by_name)
    elif (
        isinstance(choice, Mapping)
        and isinstance(choice.get("function"), Mapping)
        and choice["function"].get("name") in by_name
    ):
        names = [choice["function"]["name"]]
    else:
        raise RequestError(
            "tool_choice must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': <one of the tools>}}",
            param="tool_choice",
        )
    options = []
    defs: dict[str, Any] = {}
    for name in names:
        params = by_name[name].get("parameters") or {"type": "object"}
        if not isinstance(params, Mapping):
            raise RequestError(f"tool {name!r}: parameters must be a JSON Schema", param="tools")
        options.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": name},
                    "arguments": _hoist_defs(params, name, defs),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    if defs:
        schema = {**schema, "$defs": defs}
    try:
        term = "<tool_call>\n" + JsonSchema(schema) + "\n</tool_call>"
    except (ValueError, TypeError) as exc:
        raise RequestError(f"tools: {exc}", param="tools") from exc
    return ConstraintSpec(term, "tool_choice", ("tool_choice", repr(term)))
