"""The driver: dispatch on type, unions, enums, and ``json_schema_to_regex``."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from outlines_like.errors import InvalidConstraintError
from outlines_like.types.json_schema._base import (
    CLOSED,
    EXTRA_FORMATS,
    EXTRA_PATTERNS,
    KINDS,
    NEVER,
    REF_ONLY,
    TYPE_HINTS,
    TYPES,
    ConverterBase,
    canonical,
    check_whitespace_pattern,
    kind_of_value,
)
from outlines_like.types.json_schema._containers import ContainersMixin
from outlines_like.types.json_schema._logic import NOT_STRINGS
from outlines_like.types.json_schema._numbers import NumbersMixin
from outlines_like.types.json_schema._quick import (
    Check,
    UnknownValue,
    listed_values,
    quick_value_check,
    surely_valid,
)
from outlines_like.types.json_schema._refs import RefsMixin
from outlines_like.types.json_schema._strings import StringsMixin
from outlines_like.types.json_schema._text import Rx, alt, esc


class _Converter(RefsMixin, StringsMixin, NumbersMixin, ContainersMixin):
    """The whole converter: the passes' mixins and the dispatch that joins them."""

    def convert(self, schema: Any, path: str) -> Rx:
        """Regex for the documents ``schema`` accepts (``None``: none)."""
        self.work(path)
        refs: list[str] = []
        flat = self.flatten(schema, path, refs, ())
        if isinstance(schema, dict) and "$ref" in schema and schema.keys() <= REF_ONLY:
            path = self.resolve(schema["$ref"], path)[1]  # report errors where the target is
        for ref in refs:
            if self.ref_stack.count(ref) > self.max_recursion_depth:
                return None  # recursion unrolled as deep as allowed: stop here
        self.ref_stack.extend(refs)
        try:
            return self.convert_flat(flat, path)
        finally:
            del self.ref_stack[len(self.ref_stack) - len(refs) :]

    def convert_flat(self, s: dict[str, Any], path: str) -> Rx:
        if s.get(NEVER):
            return None
        if not s:
            return self.any_value(self.max_any_depth)
        union = self.take_union(s, path)
        if union is not None:
            return self.convert_union(s, *union, path)
        if "enum" in s:
            return self.convert_enum(s, path)
        types = self.types_of(s, path)
        builders: dict[str, Callable[[dict[str, Any], str], Rx]] = {
            "null": lambda s, p: "null",
            "boolean": lambda s, p: "(?:true|false)",
            "string": self.convert_string,
            "integer": self.convert_integer,
            "number": self.convert_number,
            "array": self.convert_array,
            "object": self.convert_object,
        }
        if "number" in types and "integer" in types:
            types.remove("integer")
        return alt(builders[t](s, path) for t in types)

    def types_of(self, s: dict[str, Any], path: str) -> list[str]:
        declared = s.get("type")
        if declared is None:
            implied = {TYPE_HINTS[k] for k in s if k in TYPE_HINTS}
            return [t for t in TYPES if t in implied] if implied else list(TYPES)
        names = [declared] if isinstance(declared, str) else declared
        if not isinstance(names, list):
            raise self.invalid(path + "/type", f"type must be a string or a list, not {declared!r}")
        for name in names:
            if name not in TYPES:
                raise self.invalid(
                    path + "/type", f"unknown type {name!r} (expected one of {', '.join(TYPES)})"
                )
        return [t for t in TYPES if t in names]

    def branches(self, base: dict[str, Any], key: str, branches: list[Any]) -> list[Any]:
        """The union's branches, each with the keywords beside the union merged in.

        ``oneOf`` branches are closed: an object branch that declares members and has no
        ``additionalProperties`` writes only its declared members, so a member one branch
        requires and another does not declare tells them apart.

        A branch that only lists values (:func:`~outlines_like.types.json_schema._quick.\
listed_values`), none of which passes the keywords beside the union, is ``None`` (no document
        fits it), told by the quick check of values before it is merged, keyed and converted.
        Catalogues write such unions: Azure Pipelines' ``task`` member is a union of 259
        one-name branches, merged with each of its 259 tasks' ``pattern`` for one name (67,000
        merges, all but 259 empty, took its grammar past the size budget in 2.5 s; without
        them the grammar met another keyword's refusal in 0.9 s).
        """
        fits = quick_value_check(base, self.root) if base else None
        listed: list[list[Any] | None] = []
        if fits is not None:
            seen = self.listed.get(id(branches))
            if seen is None:
                seen = self.listed[id(branches)] = (branches, [*map(listed_values, branches)])
            listed = seen[1]
        subs: list[Any] = []
        for i, branch in enumerate(branches):
            if fits is not None and _refuted(listed[i], fits):
                subs.append(None)
            elif not base:
                subs.append(branch)
            else:
                subs.append({"allOf": [dict(base), branch]})
        if key == "oneOf":
            subs = [None if sub is None else {"allOf": [sub, {CLOSED: True}]} for sub in subs]
        return subs

    def convert_union(self, base: dict[str, Any], key: str, branches: list[Any], path: str) -> Rx:
        regexes: list[Rx] = []
        subs = self.branches(base, key, branches)
        written = _Written(self, path)
        for i, sub in enumerate(subs):
            regexes.append(None if sub is None else self.convert(sub, f"{path}/{key}/{i}"))
            written.add(regexes[-1])
        if key == "oneOf":
            live = [(s, r) for s, r in zip(subs, regexes, strict=True) if r is not None]
            flats = [self.flatten(s, path, [], ()) for s, _ in live]
            self.check_disjoint(flats, [r for _, r in live], path)
        return alt(regexes)

    def kinds_of(self, flat: dict[str, Any], path: str) -> set[str]:
        """The JSON kinds (first characters) the documents of a flattened schema can have."""
        if "anyOf" in flat or "oneOf" in flat:
            return set(KINDS.values())
        if "enum" in flat:
            return {kind_of_value(v) for v in flat["enum"]}
        return {KINDS[t] for t in self.types_of(flat, path)}

    @staticmethod
    def enums_differ(a: dict[str, Any], b: dict[str, Any]) -> bool:
        """Whether both are enums (or consts) with no value in common."""
        if "enum" not in a or "enum" not in b:
            return False
        return not {canonical(v) for v in a["enum"]} & {canonical(v) for v in b["enum"]}

    def discriminated(self, a: dict[str, Any], b: dict[str, Any], path: str) -> bool:
        """Whether a property both objects require takes disjoint const/enum values."""
        both = set(a.get("required", [])) & set(b.get("required", []))
        for name in sorted(both):
            left = a.get("properties", {}).get(name)
            right = b.get("properties", {}).get(name)
            if left is None or right is None:
                continue
            if self.enums_differ(
                self.flatten(left, path, [], ()), self.flatten(right, path, [], ())
            ):
                return True
        return False

    def members_written(self, flat: dict[str, Any], path: str) -> set[str] | None:
        """The member names a closed branch's objects can have (``None``: any)."""
        declared = self.declared_members(dict(flat), path)
        if declared is None:
            return set()
        return None if self.allows_extra(flat, declared) else set(declared)

    def required_apart(self, a: dict[str, Any], b: dict[str, Any], path: str) -> bool:
        """Whether two object-only branches each require a member the other never writes."""
        if self.kinds_of(a, path) != {"object"} or self.kinds_of(b, path) != {"object"}:
            return False
        if "enum" in a or "enum" in b:  # enum objects may hold any members
            return False
        names_a, names_b = self.members_written(a, path), self.members_written(b, path)
        if names_a is None or names_b is None:
            return False
        return bool(set(b.get("required", [])) - names_a) and bool(
            set(a.get("required", [])) - names_b
        )

    def check_disjoint(self, flats: list[dict[str, Any]], regexes: list[str], path: str) -> None:
        """``oneOf`` is enforced as ``anyOf``: exact only when no document fits two branches.

        Branches are disjoint when their JSON kinds differ, when a property both require has
        disjoint const/enum values (a discriminator), when each requires a member the other
        never writes (branches are closed: see :meth:`branches`), or, for scalar branches
        only, when the intersection of their regexes is empty (interegular, for regexes of
        moderate size). Objects and arrays are never told apart by their regexes: a regex
        writes members in one order, and a document in another order may still fit both.
        """
        import interegular

        kinds = [self.kinds_of(flat, path) for flat in flats]
        fsms: dict[int, Any] = {}
        for i in range(len(regexes)):
            for j in range(i + 1, len(regexes)):
                if (
                    not kinds[i] & kinds[j]
                    or self.enums_differ(flats[i], flats[j])
                    or self.discriminated(flats[i], flats[j], path)
                    or self.required_apart(flats[i], flats[j], path)
                ):
                    continue
                overlap = True
                scalar = not (kinds[i] | kinds[j]) & {"object", "array"}
                if (
                    scalar
                    and regexes[i] != regexes[j]
                    and max(len(regexes[i]), len(regexes[j])) < 5000
                ):
                    try:
                        for k in (i, j):
                            if k not in fsms:
                                fsms[k] = interegular.parse_pattern(regexes[k]).to_fsm()
                        overlap = not (fsms[i] & fsms[j]).empty()
                    except Exception:  # interegular failed on it: assume the branches overlap
                        overlap = True
                if overlap:
                    self.unenforced(
                        "oneOf",
                        path,
                        f"branches {i} and {j} may both accept a document, and a regex cannot "
                        "exclude documents that fit more than one branch (use anyOf)",
                    )
                    return

    def convert_enum(self, s: dict[str, Any], path: str) -> Rx:
        values = s.pop("enum")
        if not isinstance(values, list):
            raise self.invalid(path + "/enum", "enum must be a list")
        if s:
            fits = self.validator(s)
            values = [v for v in values if fits(v)]
        literals: list[Rx] = []
        written = _Written(self, path)
        for v in values:
            literals.append(self.literal(v, path))
            written.add(literals[-1])
        return alt(literals)

    def validator(self, rest: dict[str, Any]) -> Callable[[Any], bool]:
        """A check that a value passes ``rest`` (the keywords beside ``enum``/``const``).

        Type, length and range keywords are checked here
        (:func:`~outlines_like.types.json_schema._quick.quick_value_check`), anything else
        and any value that is not JSON by ``jsonschema``, with formats asserted.
        """
        quick = quick_value_check(rest, self.root)
        if quick is None:
            return self.slow_validator(rest)
        slow: list[Callable[[Any], bool]] = []

        def fits(value: Any) -> bool:
            try:
                return quick(value)
            except UnknownValue:
                if not slow:
                    slow.append(self.slow_validator(rest))
                return slow[0](value)

        return fits

    def slow_validator(self, rest: dict[str, Any]) -> Callable[[Any], bool]:
        """:meth:`validator` by ``jsonschema``."""
        import jsonschema

        document = {k: v for k, v in rest.items() if not k.startswith("x-outlines-like")}
        also: list[Any] = [{"not": {"enum": rest[NOT_STRINGS]}}] if NOT_STRINGS in rest else []
        also += [{"pattern": p} for p in rest.get(EXTRA_PATTERNS, [])]
        also += [{"format": f} for f in rest.get(EXTRA_FORMATS, [])]
        if also:
            document["allOf"] = [*document.get("allOf", []), *also]
        for defs in ("$defs", "definitions"):
            if defs in self.root:
                document[defs] = self.root[defs]
        validator_class = jsonschema.validators.validator_for(
            self.root, default=jsonschema.Draft202012Validator
        )
        checker = validator_class.FORMAT_CHECKER  # formats are assertions here
        return validator_class(document, format_checker=checker).is_valid  # type: ignore[no-any-return]

    def literal(self, value: Any, path: str) -> str:
        """Regex for exactly ``value``, written in the whitespace policy."""
        ws = self.ws
        if isinstance(value, dict):
            items = [
                f"{esc(json.dumps(k, ensure_ascii=False))}{ws}:{ws}{self.literal(v, path)}"
                for k, v in value.items()
            ]
            return "\\{" + ws + f"{ws},{ws}".join(items) + ws + "\\}"
        if isinstance(value, list):
            inner = f"{ws},{ws}".join(self.literal(v, path) for v in value)
            return "\\[" + ws + inner + ws + "\\]"
        if isinstance(value, float) and not math.isfinite(value):
            raise self.invalid(path, f"{value!r} is not a JSON value")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return number_literal(value)
        return esc(json.dumps(value, ensure_ascii=False))

    def sub(self, schema: Any, path: str) -> Rx:
        """Regex for a sub-schema; ``True``/``{}`` is any value up to ``max_any_depth``."""
        return self.convert(schema, path)


def number_literal(value: float) -> str:
    """Regex for the spellings of a number JSON compares equal to ``value``.

    ``2``, ``2.0`` and ``2.00`` are one number (so are ``0``, ``-0`` and ``0.0``): an integral
    value is its digits with an optional ``.0...``, a fraction its shortest digits with optional
    trailing zeros. Exponent spellings (``2e0``) are not written, except for the values
    ``json.dumps`` itself writes with one (``1e-07``), which keep that one spelling.
    """
    text = json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        digits = str(abs(value))
        sign = "-?" if value == 0 else "-" if value < 0 else ""
        plain = f"{sign}{digits}(?:\\.0+)?"
        return f"(?:{plain}|{esc(text)})" if "e" in text else plain
    if "e" in text or "E" in text:
        return esc(text)
    return esc(text) + "0*"


def json_schema_to_regex(
    schema: dict[str, Any],
    *,
    whitespace_pattern: str | None = None,
    lenient: bool = False,
    max_recursion_depth: int = 3,
    max_any_depth: int = 2,
) -> str:
    """Return a regex matching exactly the JSON documents valid under ``schema``.

    Documents are written in one whitespace policy: compact (``json.dumps`` with
    ``separators=(",", ":")``) by default, object properties in schema order.

    Args:
        schema: The JSON Schema (draft 2020-12; drafts 4-7 spellings are read too).
        whitespace_pattern: Regex for the whitespace allowed between JSON tokens (e.g.
            ``"[ ]?"``); ``None`` allows none.
        lenient: Warn (:class:`UnenforcedKeywordWarning`) instead of raising when a keyword
            cannot be enforced, and ignore it.
        max_recursion_depth: How many times a recursive ``$ref`` is followed inside itself;
            deeper documents are excluded.
        max_any_depth: How deeply a value of the empty schema (``{}``/``true``, free
            ``additionalProperties`` or ``items``) may nest arrays and objects.

    Returns:
        A regex for ``re.fullmatch`` (also readable by ``interegular``).

    Raises:
        InvalidConstraintError: The schema is invalid, accepts no document, or uses a keyword
            the regex cannot enforce (unless ``lenient``); the message says where.
    """
    if not isinstance(schema, Mapping):
        raise InvalidConstraintError(
            f"a JSON Schema must be a dict (or a boolean), not {type(schema).__name__}"
        )
    schema = dict(schema)
    for name, value in (
        ("max_recursion_depth", max_recursion_depth),
        ("max_any_depth", max_any_depth),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidConstraintError(f"{name} must be a non-negative int, not {value!r}")
    check_whitespace_pattern(whitespace_pattern)
    _check_against_metaschema(schema)
    converter = _Converter(
        schema,
        whitespace_pattern=whitespace_pattern,
        lenient=lenient,
        max_recursion_depth=max_recursion_depth,
        max_any_depth=max_any_depth,
    )
    regex = converter.sub(schema, "#")
    if regex is None:
        raise InvalidConstraintError("the JSON Schema accepts no document (within the bounds)")
    return regex


def _check_against_metaschema(schema: dict[str, Any]) -> None:
    """Raise ``InvalidConstraintError`` naming where ``schema`` breaks its metaschema.

    Without ``$schema``, a schema valid under draft 2020-12, 7 or 4 passes (the converter reads
    the older spellings: tuple ``items``, boolean ``exclusiveMinimum``). A schema the fast
    check (:func:`~outlines_like.types.json_schema._quick.surely_valid`) passes is not
    shown to ``jsonschema``.
    """
    if surely_valid(schema):
        return
    import jsonschema

    declared = jsonschema.validators.validator_for(schema, default=None)
    candidates = (
        [declared]
        if declared is not None
        else [
            jsonschema.Draft202012Validator,
            jsonschema.Draft7Validator,
            jsonschema.Draft4Validator,
        ]
    )
    first_error = None
    for validator_class in candidates:
        error = jsonschema.exceptions.best_match(
            validator_class(validator_class.META_SCHEMA).iter_errors(schema)
        )
        if error is None:
            return
        first_error = first_error or error
    assert first_error is not None
    where = "#" + "".join(f"/{p}" for p in first_error.absolute_path)
    raise InvalidConstraintError(f"invalid JSON Schema at {where}: {first_error.message}")


def _refuted(values: list[Any] | None, fits: Check) -> bool:
    """Whether a branch lists ``values`` and ``fits`` refuses every one of them."""
    if values is None:
        return False
    try:
        return not any(fits(v) for v in values)
    except UnknownValue:  # not a JSON value: the conversion says what is wrong with it
        return False


class _Written:
    """The length of an alternation being written, told to :meth:`ConverterBase.grown`.

    The distinct parts so far (:func:`~outlines_like.types.json_schema._text.alt` drops
    repeats) with their bars and group: the alternation of those parts, a floor under its
    final length (exact at its end). A budget then stops a union of many branches (or an enum
    of many values) as it passes, not after writing every branch (a 620 KB schema's union of
    150 tasks: 4.5 s -> 0.16 s to its verdict).
    """

    __slots__ = ("converter", "path", "seen", "size")

    def __init__(self, converter: ConverterBase, path: str) -> None:
        self.converter = converter
        self.path = path
        self.seen: set[str] = set()
        self.size = 0

    def add(self, part: Rx) -> None:
        if part is None or part in self.seen:
            return
        self.seen.add(part)
        self.size += len(part)
        count = len(self.seen)  # ``(?:`` ``|`` between them ``)`` from two on
        self.converter.grown(self.size + count + 3 if count > 1 else self.size, self.path)
