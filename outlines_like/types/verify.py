"""Check an answer against the term it was generated for, locally, before it is returned.

A server may drop a constraint it cannot enforce (llama.cpp ignores JSON Schema keywords it
does not know; an old vLLM ignores ``structured_outputs``), so every remote answer is checked
here. The checks are the definitions themselves, compiled once per term and cached:

- regex-shaped terms (``Regex``, ``String``, ``Choice``, combinators, and every Python type
  that becomes one: ``int``, ``Literal``, ``date``...): a full match of the term's regex;
- ``JsonSchema``: strict JSON (no ``NaN``, no duplicate-free guessing) validated by
  ``jsonschema`` for the schema's draft, ``format`` included (date-time, time, uri, hostname
  through the small checker packages the core installs; the formats the masker writes that
  ``jsonschema`` has no checker for here, ``duration`` say, are checked with the masker's own
  regex from ``FORMAT_PATTERNS``);
- ``JsonObject``: any JSON object;
- ``CFG``: a parse with Lark's Earley parser on the grammar's Lark form.

``violation(term, text)`` returns ``None`` when the text fits, else a short reason that names
where it went wrong (the JSON pointer, the regex, the grammar position).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

from outlines_like.types._python import to_regex
from outlines_like.types._terms import CFG, JsonObject, JsonSchema, Term

__all__ = ["violation"]

# A check returns None when the text fits, else why it does not.
Check = Callable[[str], "str | None"]


def _quote(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _load_json(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text, parse_constant=_reject_constant), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON: {exc.msg} at position {exc.pos}"
    except ValueError as exc:
        return None, f"not valid JSON: {exc}"


def _regex_check(term: Term) -> Check:
    pattern = to_regex(term)
    compiled = re.compile(pattern, re.ASCII)  # \d \w \s are ASCII in our regexes, as in the masker

    def check(text: str) -> str | None:
        if compiled.fullmatch(text) is not None:
            return None
        shown = pattern if len(pattern) <= 120 else pattern[:120] + "..."
        return f"{_quote(text)} does not match the regex {shown!r}"

    return check


def _exact_multiple_of(validator: Any, step: Any, instance: Any, schema: Any) -> Any:
    """``multipleOf`` in decimal arithmetic, as the masker writes it (0.07 is 7 x 0.01).

    ``jsonschema`` divides binary floats, and refuses ``0.07`` for ``multipleOf: 0.01``.
    """
    import decimal

    import jsonschema

    if not validator.is_type(instance, "number"):
        return
    with decimal.localcontext() as context:
        context.prec = 1000  # exact for any JSON number a document holds
        quotient = decimal.Decimal(repr(instance)) / decimal.Decimal(repr(step))
    if quotient != quotient.to_integral_value():
        yield jsonschema.ValidationError(f"{instance!r} is not a multiple of {step}")


def _format_checker(validator_class: Any) -> Any:
    """The draft's format checker, widened to everything the masker writes for a format.

    A string passes a format the masker enforces when ``jsonschema``'s checker accepts it or
    the masker's regex (``FORMAT_PATTERNS``) does: the local masker's answers always pass
    (``rfc3339-validator`` knows no leap second; ``duration`` has no checker installed here).
    """
    import jsonschema

    from outlines_like.types.predefined import FORMAT_PATTERNS

    base = validator_class.FORMAT_CHECKER
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(base.checkers)
    for name, regex in FORMAT_PATTERNS.items():
        checker.checks(name)(_regex_format(base, name, regex))
    return checker


def _regex_format(base: Any, name: str, regex: str) -> Callable[[object], bool]:
    """A format check: ``base``'s for ``name``, or a full match of ``regex``."""
    compiled = re.compile(regex)

    def check(value: object) -> bool:
        if not isinstance(value, str) or compiled.fullmatch(value) is not None:
            return True
        return name in base.checkers and bool(base.conforms(value, name))

    return check


def _schema_check(term: JsonSchema) -> Check:
    import jsonschema  # about 0.3 s: loaded on the first schema check, not with the package

    schema = term.schema
    validator_class = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    validator_class = jsonschema.validators.extend(
        validator_class, {"multipleOf": _exact_multiple_of}
    )
    validator = validator_class(schema, format_checker=_format_checker(validator_class))

    def check(text: str) -> str | None:
        value, error = _load_json(text)
        if error is not None:
            return error
        if validator.is_valid(value):  # the common case, without building error objects
            return None
        best = jsonschema.exceptions.best_match(validator.iter_errors(value))
        if best is None:
            return None
        pointer = "/" + "/".join(str(p) for p in best.absolute_path)
        return f"at {pointer}: {best.message}"

    return check


def _object_check(text: str) -> str | None:
    value, error = _load_json(text)
    if error is not None:
        return error
    return None if isinstance(value, dict) else "not a JSON object"


def _grammar_check(term: CFG) -> Check:
    import lark

    parser = lark.Lark(term.lark, start="start", parser="earley", lexer="dynamic")

    def check(text: str) -> str | None:
        try:
            parser.parse(text)
        except lark.exceptions.UnexpectedInput as exc:
            where = getattr(exc, "pos_in_stream", None)
            at = f" at position {where}" if isinstance(where, int) else ""
            return f"{_quote(text)} is not in the grammar{at}"
        return None

    return check


@functools.lru_cache(maxsize=256)
def _check_for(term: Term) -> Check:
    if isinstance(term, JsonSchema):
        return _schema_check(term)
    if isinstance(term, JsonObject):
        return _object_check
    if isinstance(term, CFG):
        return _grammar_check(term)
    return _regex_check(term)


def violation(term: Term | None, text: str) -> str | None:
    """Why ``text`` does not fit ``term``, or ``None`` when it does (free text always fits).

    The check is compiled on first use and cached per term (terms are hashable).
    """
    if term is None:
        return None
    return _check_for(term)(text)
