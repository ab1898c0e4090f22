"""Arrays and objects (and the free value of the empty schema)."""

from __future__ import annotations

import json
from typing import Any

from outlines_like.types.json_schema._base import CLOSED, ConverterBase
from outlines_like.types.json_schema._strings import class_char
from outlines_like.types.json_schema._text import (
    NUMBER,
    STRING,
    STRING_CHAR,
    Rx,
    alt,
    esc,
    opt,
    repeat,
    seq,
)


class ContainersMixin(ConverterBase):
    """``array`` and ``object`` schemas."""

    def any_value(self, depth: int) -> str:
        """Any JSON value nested at most ``depth`` containers deep."""
        if depth not in self._any_cache:
            scalars = ["null", "true", "false", NUMBER, STRING]
            if depth > 0:
                inner = self.any_value(depth - 1)
                sep = f"{self.ws},{self.ws}"
                member = f"{STRING}{self.ws}:{self.ws}{inner}"
                scalars.append(f"\\[{self.ws}(?:{inner}(?:{sep}{inner})*)?{self.ws}\\]")
                scalars.append(f"\\{{{self.ws}(?:{member}(?:{sep}{member})*)?{self.ws}\\}}")
            self._any_cache[depth] = "(?:" + "|".join(scalars) + ")"
        return self._any_cache[depth]

    def convert_array(self, s: dict[str, Any], path: str) -> Rx:
        min_items, max_items, prefix = self.array_bounds(s, path)
        sep = f"{self.ws},{self.ws}"
        count = len(prefix) if max_items is None else min(len(prefix), max_items)
        item_rx = self.sub(s.get("items", True), path + "/items")
        if count < len(prefix):
            tail: Rx = ""
        else:
            rest_min = max(min_items - count, 0)
            rest_max = None if max_items is None else max_items - count
            if count == 0:
                if rest_max == 0 or item_rx is None:
                    tail = "" if rest_min == 0 else None
                else:
                    more = repeat(
                        seq(sep, item_rx),
                        max(rest_min - 1, 0),
                        None if rest_max is None else rest_max - 1,
                    )
                    tail = seq(item_rx, more)
                    if rest_min == 0:
                        tail = opt(tail)
            else:
                tail = repeat(seq(sep, item_rx), rest_min, rest_max)
        for i in range(count - 1, -1, -1):
            element = self.sub(prefix[i], f"{path}/prefixItems/{i}")
            tail = seq(sep if i > 0 else "", element, tail)
            if i >= min_items:
                tail = opt(tail)
        return seq("\\[", self.ws, tail, self.ws, "\\]")

    def convert_object(self, s: dict[str, Any], path: str) -> Rx:
        declared = self.declared_members(s, path)
        if declared is None:
            return None
        required = s.get("required", [])
        additional = s.get("additionalProperties")
        ws, sep = self.ws, f"{self.ws},{self.ws}"
        members: list[tuple[str, bool]] = []
        for name, schema in declared.items():
            value = self.sub(
                schema, f"{path}/properties/{name.replace('~', '~0').replace('/', '~1')}"
            )
            is_required = name in required
            if value is None:
                if is_required:
                    return None
                continue
            key = esc(json.dumps(name, ensure_ascii=False))
            members.append((f"{key}{ws}:{ws}{value}", is_required))
        extra: Rx = None
        if self.allows_extra(s, declared):
            value = self.sub(
                True if additional is None else additional, path + "/additionalProperties"
            )
            if value is not None:
                extra = f'"{self.key_excluding(list(declared))}"{ws}:{ws}{value}'
        # tails[i]: members i.. after something was written (each then needs a comma)
        tails: list[str] = [""] * (len(members) + 1)
        tails[-1] = "" if extra is None else f"(?:{sep}{extra})*"
        for i in range(len(members) - 1, -1, -1):
            member, is_required = members[i]
            tails[i] = (f"{sep}{member}" if is_required else f"(?:{sep}{member})?") + tails[i + 1]
            self.grown(len(tails[i]), path)
        firsts: list[str] = []
        all_optional = True
        written = 0
        for i, (member, is_required) in enumerate(members):
            firsts.append(member + tails[i + 1])
            written += len(firsts[-1])
            self.grown(written, path)
            if is_required:
                all_optional = False
                break
        if all_optional and extra is not None:
            firsts.append(f"{extra}(?:{sep}{extra})*")
        body = alt(firsts)
        if all_optional:
            body = opt(body)
        return seq("\\{", ws, body, ws, "\\}")

    @staticmethod
    def allows_extra(s: dict[str, Any], declared: dict[str, Any]) -> bool:
        """Whether members beyond the declared ones may be written (after them).

        ``additionalProperties`` absent allows them (as JSON Schema does), except on a closed
        ``oneOf`` branch that declares members.
        """
        additional = s.get("additionalProperties")
        if additional is None and s.get(CLOSED) and declared:
            return False
        return additional is not False

    @staticmethod
    def key_excluding(names: list[str]) -> str:
        r"""Regex for a key's text (inside the quotes) that decodes to none of ``names``.

        Built on the trie of ``names``: at each node, either stop (if the prefix is not a
        name), or write a character no name continues with and then anything, or follow a
        child. Up to the first difference, characters are written raw (a ``\u`` escape could
        spell a name's character); two-character escapes count as different characters when
        no name contains what they decode to.
        """
        escapes_differ = not any(c in name for name in names for c in '"\\\b\f\n\r\t')
        escape = r'\\["\\bfnrt]' if escapes_differ else ""
        anything = f"{STRING_CHAR}*"
        if not names:
            return anything
        trie: dict[str, Any] = {}
        for name in names:
            node = trie
            for c in name:
                node = node.setdefault(c, {})
            node[""] = {}

        def walk(node: dict[str, Any]) -> str:
            options = [] if "" in node else [""]
            children = [c for c in node if c]
            if children:
                others = "".join(class_char(ord(c)) for c in children)
                differ = f'[^"\\\\\\x00-\\x1f{others}]'
                if escape:
                    differ = f"(?:{differ}|{escape})"
                options.append(differ + anything)
            else:
                options.append(f"{STRING_CHAR}+")
            options.extend(
                esc(c) + walk(node[c]) for c in children if c not in '"\\' and ord(c) >= 0x20
            )
            return "(?:" + "|".join(options) + ")"

        return walk(trie)
