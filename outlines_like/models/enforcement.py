"""Proof that a server enforces what it is sent: one tiny constrained request at detection.

``from_server(client, probe_enforcement=True)`` sends, once per detected server, a request no
model would answer by chance in shape (``yes-NN`` by regex, or an integer from 100 to 199 in a
JSON object where the server takes no regex), through the same adapter and fields as every
later call. A server that answers out of shape ignores the constraint fields it gets (an old
vLLM without ``structured_outputs``, a proxy that strips ``extra_body``): that is reported
when the model is made (sync) or at ``await amodel.detect()`` / the first call (async),
instead of as bad answers in production.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from outlines_like.errors import UnsupportedConstraintError
from outlines_like.models._call import Constraint, Target
from outlines_like.models._reader import read_response
from outlines_like.models.retry import Flow, retry_flow
from outlines_like.types import JsonSchema, Regex
from outlines_like.types.verify import violation

if TYPE_CHECKING:
    from outlines_like.models._core import ModelCore

__all__ = ["PROBES", "enforcement_flow"]

PROBES = (
    Constraint.of(Regex(r"(yes|no)-[0-9]{2}")),
    Constraint.of(
        JsonSchema(
            {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 100, "maximum": 199}},
                "required": ["n"],
                "additionalProperties": False,
            }
        )
    ),
)
"""The probe types, in the order tried: the first the server's dialect can carry is sent."""


def enforcement_flow(core: ModelCore[Any], target: Target, model: str) -> Flow[None]:
    """Send one probe through ``target``'s adapter; raise when the answer is out of shape.

    Raises:
        UnsupportedConstraintError: the server answered outside the constraint it was sent
            (it ignores the fields), or its dialect carries neither probe.
    """
    for constraint in PROBES:
        call = core.prepare(
            "Answer in the required format.",
            constraint,
            {"max_tokens": 24, "temperature": 0},
            stream=False,
        )
        try:
            request = core.build_request(call, target, model)
        except UnsupportedConstraintError:
            continue  # this dialect has no field for it: try the next probe
        response = yield from retry_flow(request, core._policy, core.rate_limiter)
        chat = call.prompt_key == "messages"
        completion = read_response(response, chat=chat, text_tools=False)[0]
        term = constraint.term
        reason = violation(term, completion.text)
        if reason is None or completion.finish_reason == "length":
            return  # in shape (a cut answer proves nothing against it)
        fields = sorted({**request.params.get("extra_body", {}), **request.params}.keys())
        raise UnsupportedConstraintError(
            f"the {target.info.kind} server at {core.base_url} does not enforce the constraint "
            f"fields it was sent (probe answered {completion.text[:80]!r}: {reason}; request "
            f"fields {fields}). Check the server's version and options, or name the right "
            "kind with server=...; without probe_enforcement every answer is still checked"
        )
    raise UnsupportedConstraintError(
        f"the {target.info.kind} server at {core.base_url} takes neither a regex nor a JSON "
        "Schema: there is no constraint whose enforcement can be proved"
    )
