"""Array and object keywords that count or pick members (``uniqueItems``, ``contains``...).

``uniqueItems``, ``contains``, ``patternProperties``, ``propertyNames``, ``minProperties`` and
``maxProperties``: each is enforced exactly where a regex can say it, and otherwise raises by
name (see docs/json_schema.md for the cases):

* ``uniqueItems`` on arrays of at most :data:`MAX_UNIQUE` scalar values (an ``enum``,
  ``boolean``, ``null``): every sequence without a repeat is written out as a trie;
* ``contains`` (with ``minContains``): the items, with ``minContains`` of them also under the
  ``contains`` schema (no ``prefixItems``, no ``maxItems``, no ``maxContains``);
* ``patternProperties``: extra members are the keys a pattern matches (values under every
  pattern's schema), declared members matching a pattern take its schema too;
  ``additionalProperties`` members are then not written (their keys would be "matches no
  pattern", which has no regex);
* ``propertyNames``: declared names that fail it are left out; extra keys are written from
  its string regex when the object declares no member;
* ``minProperties``/``maxProperties``: bound the extra members of an object that declares none;
  with declared members, ``minProperties: 1`` (not empty) and a ``maxProperties`` at or above
  the declared count (extra members are then not written) are enforced.
"""

from __future__ import annotations

import re
from typing import Any, Final

from outlines_like.types.json_schema._base import ConverterBase, canonical
from outlines_like.types.json_schema._text import Rx, alt, opt, seq

MAX_UNIQUE: Final = 5  # 5 values: 325 sequences

MAX_CONTAINS_REGEX: Final = 8_000  # characters; a lexeme of the grammar path past it is slow


class CountingMixin(ConverterBase):
    """The counting keywords of arrays and objects (used by the containers' builders)."""

    # ------------------------------------------------------------------------- arrays

    def counted_array(self, s: dict[str, Any], path: str) -> tuple[bool, Rx]:
        """``(True, regex)`` when ``uniqueItems``/``contains`` shape the array; else ``False``."""
        min_items, max_items, prefix = self.array_bounds(s, path)
        unique = s.get("uniqueItems") is True and not (max_items is not None and max_items <= 1)
        contains = "contains" in s
        min_contains = self.natural(s, "minContains", path)
        if "maxContains" in s and contains:
            self.unenforced("maxContains", path, "an upper bound on matching items")
        if contains and min_contains == 0:
            contains = False  # zero matches needed (maxContains, if any, was refused above)
        if unique and contains:
            self.unenforced("uniqueItems", path, "together with contains")
            unique = False
        if unique:
            return self.unique_array(s, path, min_items, max_items, prefix)
        if contains:
            return self.contains_array(s, path, min_items, max_items, prefix, min_contains or 1)
        return False, None

    def unique_array(
        self, s: dict[str, Any], path: str, min_items: int, max_items: int | None, prefix: list[Any]
    ) -> tuple[bool, Rx]:
        values = None if prefix else self.scalar_values(s.get("items", True), path + "/items")
        if values is None or len(values) > MAX_UNIQUE:
            self.unenforced(
                "uniqueItems",
                path,
                f"only arrays of at most {MAX_UNIQUE} scalar values (an enum, boolean, null)",
            )
            return False, None
        literals = [self.literal(v, path) for v in values]
        sep = f"{self.ws},{self.ws}"
        top = len(literals) if max_items is None else min(max_items, len(literals))

        def after(left: tuple[int, ...], written: int) -> Rx:
            more = (
                alt(
                    seq(sep, literals[i], after(tuple(j for j in left if j != i), written + 1))
                    for i in left
                )
                if written < top
                else None
            )
            if written >= min_items:
                return opt(more)
            return more

        everything = tuple(range(len(literals)))
        if top == 0:
            body: Rx = "" if min_items == 0 else None
        else:
            first = alt(
                seq(literals[i], after(tuple(j for j in everything if j != i), 1))
                for i in everything
            )
            body = opt(first) if min_items == 0 else first
        return True, seq("\\[", self.ws, body, self.ws, "\\]")

    def scalar_values(self, items: Any, path: str) -> list[Any] | None:
        """The values an item schema allows when they are few scalars, else ``None``."""
        flat = self.flatten(items, path, [], ())
        if "enum" in flat:
            rest = {k: v for k, v in flat.items() if k != "enum"}
            fits = self.validator(rest) if rest else None
            values = [v for v in flat["enum"] if fits is None or fits(v)]
        elif set(flat) == {"type"}:
            kinds = [flat["type"]] if isinstance(flat["type"], str) else flat["type"]
            if not set(kinds) <= {"boolean", "null"}:
                return None
            values = ([True, False] if "boolean" in kinds else []) + (
                [None] if "null" in kinds else []
            )
        else:
            return None
        if any(isinstance(v, (list, dict)) for v in values):
            return None
        unique: dict[str, Any] = {}
        for v in values:
            unique.setdefault(canonical(v), v)
        return list(unique.values())

    def contains_array(
        self,
        s: dict[str, Any],
        path: str,
        min_items: int,
        max_items: int | None,
        prefix: list[Any],
        min_contains: int,
    ) -> tuple[bool, Rx]:
        if prefix or max_items is not None or min_items > min_contains:
            self.unenforced(
                "contains", path, "only without prefixItems, maxItems, or minItems above it"
            )
            return False, None
        items = s.get("items", True)
        item = self.sub(items, path + "/items")
        match = self.sub({"allOf": [items, s["contains"]]}, path + "/contains")
        if item is None or match is None:
            return True, None
        sep = f"{self.ws},{self.ws}"
        before = f"(?:(?:{item}){sep})*"
        body = before + f"(?:{match})" + f"(?:{sep}{before}(?:{match}))" * (min_contains - 1)
        body += f"(?:{sep}(?:{item}))*"
        if len(body) > MAX_CONTAINS_REGEX:  # the items' regex is copied minContains + 1 times
            self.unenforced(
                "contains", path, f"its regex is {len(body):,} characters (the most: 8,000)"
            )
            return False, None
        return True, seq("\\[", self.ws, body, self.ws, "\\]")

    # ------------------------------------------------------------------------ objects

    def named_members(
        self, s: dict[str, Any], declared: dict[str, Any], path: str
    ) -> dict[str, Any] | None:
        """``declared`` under ``propertyNames`` and ``patternProperties`` (``None``: no doc)."""
        required = set(s.get("required", []))
        names = s.get("propertyNames")
        if names is not None and names is not True:
            fits = self.validator({"allOf": [names]})
            for name in list(declared):
                if not fits(name):
                    if name in required:
                        return None
                    del declared[name]
        patterns = s.get("patternProperties") or {}
        for name in declared:
            matching = [sub for p, sub in patterns.items() if self.pattern_matches(p, name, path)]
            if matching:
                declared[name] = {"allOf": [declared[name], *matching]}
        return declared

    def pattern_matches(self, pattern: str, name: str, path: str) -> bool:
        try:
            return re.search(pattern, name, re.ASCII) is not None
        except re.error:
            self.unenforced("patternProperties", path, f"{pattern!r} is not a Python regex")
            return False

    def extra_members(
        self, s: dict[str, Any], declared: dict[str, Any], path: str
    ) -> list[tuple[str, Any, str]]:
        """The extra members an object may write: ``(key regex, value schema, its path)``.

        The key regex includes the quotes. Empty when no extra member is written.
        """
        patterns = s.get("patternProperties") or {}
        names = s.get("propertyNames")
        if names is False:
            return []
        if patterns:
            if names is not None and names is not True:
                self.unenforced("propertyNames", path, "together with patternProperties")
            value = list(patterns.values())
            out = []
            for pattern, sub in patterns.items():
                if any(self.pattern_matches(pattern, name, path) for name in declared):
                    continue  # its keys could repeat a declared member
                key = self.convert({"type": "string", "pattern": pattern}, path)
                schema = sub if len(value) == 1 else {"allOf": value}
                if key is not None:
                    out.append((key, schema, f"{path}/patternProperties"))
            return out
        if not self.allows_extra(s, declared):
            return []
        additional = s.get("additionalProperties")
        schema = True if additional is None else additional
        where = path + "/additionalProperties"
        if names is not None and names is not True:
            if declared:
                return []  # a declared name fits propertyNames: extra keys could repeat it
            key = self.convert({"allOf": [names, {"type": "string"}]}, path + "/propertyNames")
            return [] if key is None else [(key, schema, where)]
        return [(f'"{self.key_excluding(list(declared))}"', schema, where)]

    def member_counts(
        self, s: dict[str, Any], declared: int, required: int, path: str
    ) -> tuple[int, int | None, bool]:
        """``(fewest, most extra members, whether extras stay allowed)``, from the bounds.

        Raises (by name) when the bounds need a count over declared and extra members.
        """
        low = self.natural(s, "minProperties", path) or 0
        high = self.natural(s, "maxProperties", path)
        extras = True
        if not declared:
            return low, high, extras
        if high is not None:
            if declared > high:
                self.unenforced("maxProperties", path, "fewer members than the declared ones")
            extras = False  # policy: no extra member beside a maxProperties
        if low > max(required, 1):
            self.unenforced("minProperties", path, "more members than the required ones")
        return (1 if low > required else 0), None, extras

    def flatten(
        self, schema: Any, path: str, refs: list[str], seen: tuple[str, ...]
    ) -> dict[str, Any]:
        """``schema`` with ``$ref``/``allOf`` inlined (the refs pass defines it)."""
        raise NotImplementedError

    def validator(self, rest: dict[str, Any]) -> Any:
        """A check that a value passes ``rest`` (the driver defines it)."""
        raise NotImplementedError

    def literal(self, value: Any, path: str) -> str:
        """Regex for exactly ``value`` (the driver defines it)."""
        raise NotImplementedError

    def key_excluding(self, names: list[str]) -> str:
        """Regex for a key's text that is none of ``names`` (the containers define it)."""
        raise NotImplementedError

    def allows_extra(self, s: dict[str, Any], declared: dict[str, Any]) -> bool:
        """Whether members beyond the declared ones may be written (the containers decide)."""
        raise NotImplementedError

    def convert(self, schema: Any, path: str) -> Rx:
        """The regex of a schema (the driver defines it)."""
        raise NotImplementedError
