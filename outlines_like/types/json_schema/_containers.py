"""Arrays and objects (and the free value of the empty schema)."""

from __future__ import annotations

from typing import Any

from outlines_like.types.json_schema._base import CLOSED
from outlines_like.types.json_schema._counting import CountingMixin
from outlines_like.types.json_schema._strings import text_excluding
from outlines_like.types.json_schema._text import (
    NUMBER,
    STRING,
    Rx,
    alt,
    opt,
    repeat,
    seq,
)


class ContainersMixin(CountingMixin):
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
        counted, regex = self.counted_array(s, path)
        if counted:
            return regex
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
        if declared is not None:
            declared = self.named_members(s, declared, path)
        if declared is None:
            return None
        required = s.get("required", [])
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
            key = self.member_key(name)
            members.append((f"{key}{ws}:{ws}{value}", is_required))
        n_required = sum(r for _, r in members)
        fewest, most, extras_allowed = self.member_counts(s, len(members), n_required, path)
        extras: list[Rx] = []
        for key_rx, schema, where in (
            self.extra_members(s, declared, path) if extras_allowed else []
        ):
            value = self.sub(schema, where)
            if value is not None:
                extras.append(f"{key_rx}{ws}:{ws}{value}")
        extra = alt(extras)
        if not members:  # only extra members: their count is bounded by min/maxProperties
            if most is not None and most < fewest:
                return None
            if extra is None or most == 0:
                body: Rx = "" if fewest == 0 else None
            else:
                more = repeat(
                    seq(sep, extra), max(fewest - 1, 0), None if most is None else most - 1
                )
                body = seq(extra, more)
                body = opt(body) if fewest == 0 else body
            return seq("\\{", ws, body, ws, "\\}")
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
        if all_optional and not fewest:
            body = opt(body)
        return seq("\\{", ws, body, ws, "\\}")

    @staticmethod
    def allows_extra(s: dict[str, Any], declared: dict[str, Any]) -> bool:
        """Whether members beyond the declared ones may be written (after them).

        Policy: an object with ``properties`` is written with those members only when
        ``additionalProperties`` is absent (as pydantic models, dataclasses and most tool
        schemas are meant), so a model cannot pad an answer with invented members; a valid
        document with extra members is then outside what is generated, as one with its
        members in another order is (docs/json_schema.md). An object without
        ``properties`` is free-form and takes any member (``required`` names included),
        except on a closed ``oneOf`` branch that declares members. ``additionalProperties``
        given (a schema or ``true``) allows extras after the declared members.
        """
        additional = s.get("additionalProperties")
        if additional is None:
            return not s.get("properties") and not (s.get(CLOSED) and declared)
        return additional is not False

    key_excluding = staticmethod(text_excluding)
