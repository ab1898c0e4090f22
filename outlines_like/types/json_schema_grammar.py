r"""JSON Schema -> a context-free grammar (Lark text) whose size is linear in the schema.

One cohesive algorithm (the schema walk that writes rules and terminals), hence its length.

The grammar accepts the same documents as
:func:`~outlines_like.types.json_schema.json_schema_to_regex` (same whitespace policy,
properties in schema order, same keywords enforced or refused with the same errors), with two
differences that only widen it towards the schema: a recursive ``$ref`` is a rule reference,
followed as deep as the document goes (no ``max_recursion_depth``), and a free value
(``{}``/``true``) nests without ``max_any_depth``.

How the schema maps:

* every ``$ref`` target (``$defs``, ``definitions``, ``#``, any local pointer) is one rule,
  converted once however often it is referenced; ``anyOf``/``oneOf`` are alternatives;
* objects are a chain of rules, one per member position: ``first_i`` (nothing written yet,
  member ``i`` is next or, when optional, skipped) and ``tail_i`` (something written, so member
  ``i`` comes after a comma), so optional members never multiply; extra members
  (``additionalProperties``) are a left-recursive list after the declared ones;
* arrays are ``prefixItems`` positions, then a bounded chain or a left-recursive list;
* strings, numbers, integers with bounds, enums and consts, ``null`` and booleans are
  terminals (lexemes) whose regexes come from the regex path's own builders;
* punctuation carries the whitespace: ``{`` is ``\{ws``, ``}`` is ``ws\}``, ``,`` is
  ``ws,ws``, ``:`` is ``ws:ws`` (with ``ws`` the whitespace pattern), which writes exactly the
  whitespace the regex path allows between two JSON tokens.

Rules and terminals are deduplicated, rules no document can complete are pruned (a schema that
can only recurse accepts no document and raises), and the grammar's size is checked as it
grows: past ``max_size`` symbols the conversion stops with
:class:`~outlines_like.errors.InvalidConstraintError` naming the construct (a JSON pointer).

:func:`json_schema_path` chooses between this grammar and the regex path for the token masker,
by measured size (:mod:`outlines_like.types.json_schema_budget`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.types.json_schema._base import NEVER, REF_ONLY, FlatCache
from outlines_like.types.json_schema._driver import _Converter
from outlines_like.types.json_schema._text import NUMBER, STRING, Rx, lark_terminal
from outlines_like.types.json_schema._text import alt as regex_alt
from outlines_like.types.json_schema_budget import (
    RegexBudgetExceeded,
    _bounded_regex,
    _BudgetedConverter,
    _options_checked,
    check_depth,
    regex_surely_past,
    schema_is_recursive,
)

__all__ = [
    "DEFAULT_MAX_GRAMMAR_SIZE",
    "GrammarParts",
    "json_schema_path",
    "json_schema_to_grammar",
]

DEFAULT_MAX_GRAMMAR_SIZE: Final = 200_000
"""Most grammar symbols (rule references and terminal uses) a schema may become."""

# Keywords whose arrays the grammar takes from the regex path, as one lexeme.
COUNTING: Final = frozenset({"uniqueItems", "contains"})

MAX_OPTIONAL_RUN: Final = 100  # optional properties in a row: Lark's time grows with the cube

# A sequence of grammar symbols (rule or terminal names); None: the empty language.
_Seq = list[str] | None


# ------------------------------------------------------------------------- the grammar


@dataclasses.dataclass(frozen=True)
class GrammarParts:
    """A JSON Schema's grammar as the converter built it: what its Lark text says, as data.

    The token masker reads these instead of reading the text back (plain BNF, ~3 us a line).

    Attributes:
        rules: ``(origin, expansion)`` per alternative, ``start`` first, in the text's order.
        terminals: ``(name, Lark definition)`` per terminal (``"..."`` or ``/.../``), in the
            text's order.
    """

    rules: tuple[tuple[str, tuple[str, ...]], ...]
    terminals: tuple[tuple[str, str], ...]


class _GrammarConverter(_Converter):
    """Walks one schema and writes its grammar: rules by name, terminals by regex."""

    def __init__(
        self, root: dict[str, Any], *, whitespace_pattern: str | None, lenient: bool, max_size: int
    ) -> None:
        super().__init__(
            root,
            whitespace_pattern=whitespace_pattern,
            lenient=lenient,
            max_recursion_depth=3,
            max_any_depth=2,
        )
        self.whitespace_pattern = whitespace_pattern
        self.max_size = max_size
        self.parts: GrammarParts | None = None  # (written by lark())
        self.check: Callable[[str], None] = lambda path: None  # a budget's, per sub-schema
        self.max_optional_run: int | None = None
        self.size = 0
        self.rules: dict[str, list[Sequence[str]]] = {}
        self._rule_by_body: dict[tuple[tuple[str, ...], ...], str] = {}
        self.terminals: dict[str, str] = {}  # name -> regex
        self._terminal_by_regex: dict[str, str] = {}
        self._ref_rules: dict[str, str] = {}
        self._building: set[str] = set()  # shared rules whose bodies are being converted
        # every rule completes a document: rule() keeps only alternatives that do, and only a
        # shared rule met inside its own body or with no body breaks that (prune then checks)
        self.all_productive = True
        self._any: str | None = None
        ws = self.ws
        self.lbrace = self.terminal("\\{" + ws, "#")
        self.rbrace = self.terminal(ws + "\\}", "#")
        self.lbrack = self.terminal("\\[" + ws, "#")
        self.rbrack = self.terminal(ws + "\\]", "#")
        self.comma = self.terminal(f"{ws},{ws}", "#")
        self.colon = self.terminal(f"{ws}:{ws}", "#")

    # ------------------------------------------------------------------ building blocks

    def grow(self, amount: int, path: str) -> None:
        """Count ``amount`` more symbols; raise past the budget, naming ``path``."""
        self.size += amount
        if self.size > self.max_size:
            raise ConstraintTooLargeError(
                f"the JSON Schema's grammar grows past {self.max_size:,} symbols at {path} "
                "(a very large minItems/maxItems or a schema this size cannot be compiled)",
                limit="grammar_size",
                where=path,
            )

    def terminal(self, regex: str, path: str) -> str:
        """The terminal of a lexeme regex."""
        name = self._terminal_by_regex.get(regex)
        if name is None:
            self.grow(1 + len(regex) // 64, path)
            name = f"T{len(self.terminals)}"
            self.terminals[name] = regex
            self._terminal_by_regex[regex] = name
        return name

    def rule(self, alternatives: list[_Seq], path: str) -> _Seq:
        """A rule for the alternatives that are not empty languages, as a one-symbol sequence.

        One alternative of one symbol is returned as it is; an identical rule is reused.
        """
        if len(alternatives) == 1 and (alternatives[0] is None or len(alternatives[0]) == 1):
            return alternatives[0]
        # the alternatives as tuples, duplicates dropped in order (a dict keeps the first):
        # the rule's key and its body at once (~120 rules a Kubernetes schema)
        key = tuple(dict.fromkeys([tuple(alt) for alt in alternatives if alt is not None]))
        if not key:
            return None
        if len(key) == 1 and len(key[0]) == 1:
            return [key[0][0]]
        name = self._rule_by_body.get(key)
        if name is None:
            self.grow(sum(map(len, key)) + len(key), path)
            name = f"r{len(self.rules)}"
            self.rules[name] = list(key)
            self._rule_by_body[key] = name
        return [name]

    @staticmethod
    def cat(*parts: _Seq) -> _Seq:
        if any(p is None for p in parts):
            return None
        return [sym for p in parts if p is not None for sym in p]

    def optional(self, seq: _Seq, path: str) -> list[str]:
        if not seq:
            return []
        result = self.rule([seq, []], path)
        assert result is not None
        return result

    def star(self, seq: list[str], path: str) -> list[str]:
        """Zero or more ``seq``, as a left-recursive list (the parser stack stays flat)."""
        key = (("*",), tuple(seq))
        name = self._rule_by_body.get(key)
        if name is None:
            name = self._rule_by_body[key] = f"r{len(self.rules)}"
            self.grow(len(seq) + 3, path)
            self.rules[name] = [[], [name, *seq]]
        return [name]

    def star_right(self, seq: list[str], path: str) -> list[str]:
        """Zero or more ``seq``, right-recursive.

        The choice to go on is made after ``seq``'s first symbol, which LALR(1) needs when a
        sibling also starts with it.
        """
        key = (("*>",), tuple(seq))
        name = self._rule_by_body.get(key)
        if name is None:
            name = self._rule_by_body[key] = f"r{len(self.rules)}"
            self.grow(len(seq) + 3, path)
            self.rules[name] = [[], [*seq, name]]
        return [name]

    def repeat(self, seq: _Seq, low: int, high: int | None, path: str) -> _Seq:
        """``seq`` ``low`` to ``high`` times (``None``: unbounded); optional ones as a chain."""
        if high is not None and high < low:
            return None
        if high == 0:
            return []
        if seq is None:
            return [] if low == 0 else None
        self.grow(low * len(seq), path)
        out = seq * low
        if high is None:
            return out + self.star(seq, path)
        rest: list[str] = []
        for _ in range(high - low):
            rest = self.optional(seq + rest, path)
        return out + rest

    # ---------------------------------------------------------------------- conversion

    def symbol(self, schema: Any, path: str, text: str | None = None) -> _Seq:
        """The grammar of a sub-schema: a one-symbol sequence, or ``None`` (no document).

        ``text``: the schema's JSON text (keys sorted) when the caller has it.
        """
        self.check(path)
        if isinstance(schema, dict) and "$ref" in schema and schema.keys() <= REF_ONLY:
            target, target_path = self.resolve(schema["$ref"], path)
            return self.shared(target_path, target, target_path)
        if isinstance(schema, dict) and "allOf" in schema:
            # merged schemas (allOf, properties merged with each other) can combine two
            # recursive ones into the same combination again: one rule per combination
            if text is None:
                text = json.dumps(schema, sort_keys=True, default=repr)
            return self.shared("allOf " + text, schema, path, inline=True)
        flat = self.flatten(schema, path, [], ())
        return self.symbol_flat(flat, path)

    def shared(self, key: str, schema: Any, path: str, inline: bool = False) -> list[str]:
        """One rule per ``key``, reserved before its body is converted (for recursion)."""
        name = self._ref_rules.get(key)
        if name is None:
            name = self._ref_rules[key] = f"r{len(self.rules)}"
            self.rules[name] = []
            self._building.add(name)
            if inline:
                body = self.symbol_flat(self.flatten(schema, path, [], ()), path)
            else:
                body = self.symbol(schema, path)
            self._building.discard(name)
            self.rules[name] = [] if body is None else [body]
            self.all_productive &= body is not None
            self.grow(2, path)
        elif name in self._building:  # used inside its own body: it may never complete
            self.all_productive = False
        return [name]

    def symbol_flat(self, s: dict[str, Any], path: str) -> _Seq:
        if s.get(NEVER):
            return None
        if not s:
            return self.any_value_rule()
        if COUNTING & s.keys():  # the regex path writes these: one lexeme
            return self.lexeme(self.convert_flat(s, path), path)
        union = self.take_union(s, path)
        if union is not None:
            return self.union(s, *union, path)
        if "enum" in s:
            return self.enum(s, path)
        types = self.types_of(s, path)
        if "number" in types and "integer" in types:
            types.remove("integer")
        scalars: list[Rx] = []
        alternatives: list[_Seq] = []
        for t in types:
            if t == "null":
                scalars.append("null")
            elif t == "boolean":
                scalars.append("(?:true|false)")
            elif t == "string":
                scalars.append(self.convert_string(s, path))
            elif t == "integer":
                scalars.append(self.convert_integer(s, path))
            elif t == "number":
                scalars.append(self.convert_number(s, path))
            elif t == "array":
                alternatives.append(self.array(s, path))
            else:
                alternatives.append(self.object(s, path))
        alternatives.insert(0, self.lexeme(regex_alt(scalars), path))
        return self.rule(alternatives, path)

    def enum(self, s: dict[str, Any], path: str) -> _Seq:
        """One terminal per value (literals: cheap DFAs), filtered by the keywords beside."""
        values = s.pop("enum")
        if not isinstance(values, list):
            raise self.invalid(path + "/enum", "enum must be a list")
        fits = self.validator(s) if s else None
        return self.rule(
            [self.lexeme(self.literal(v, path), path) for v in values if fits is None or fits(v)],
            path,
        )

    def lexeme(self, regex: Rx, path: str) -> _Seq:
        """The terminal of a lexeme regex as a sequence (``None``: the empty language)."""
        return None if regex is None else [self.terminal(regex, path)]

    def union(self, base: dict[str, Any], key: str, branches: list[Any], path: str) -> _Seq:
        subs = self.branches(base, key, branches)
        if key == "oneOf":  # before the branches' rules: a refusal comes before their work
            self.check_one_of(subs, path)
        # each branch merged with ``base`` is keyed by its JSON text: ``base``'s written once
        # (a catalogue's union: hundreds of branches beside the same large keywords)
        head = None
        if base and key == "anyOf":
            head = '{"allOf": [' + json.dumps(base, sort_keys=True, default=repr) + ", "
        symbols: list[_Seq] = []
        for i, sub in enumerate(subs):
            if sub is None:
                symbols.append(None)
                continue
            text = None
            if head is not None:
                text = head + json.dumps(sub["allOf"][1], sort_keys=True, default=repr) + "]}"
            symbols.append(self.symbol(sub, f"{path}/{key}/{i}", text))
        return self.rule(symbols, path)

    def check_one_of(self, subs: list[Any], path: str) -> None:
        """The regex path's ``oneOf`` check, on the branches' regexes under a budget.

        A branch whose regex is past the budget (a recursive one, say) counts as overlapping
        unless kinds, enums or a discriminator already tell the branches apart.
        """
        regexes: list[str] = []
        live: list[Any] = []
        for i, sub in enumerate(subs):
            if sub is None:  # lists values that fit none of the keywords beside
                continue
            converter = _BudgetedConverter(
                self.root,
                5_000,
                True,
                whitespace_pattern=self.whitespace_pattern,
                lenient=True,
                max_recursion_depth=self.max_recursion_depth,
                max_any_depth=self.max_any_depth,
            )
            converter.flat_cache = self.flat_cache
            try:
                regex = converter.convert(sub, path)
            except RegexBudgetExceeded:
                regex = "\x00" * 5_000 + str(i)  # too large to compare: assume it overlaps
            if regex is not None:
                regexes.append(regex)
                live.append(sub)
        self.check_disjoint([self.flatten(s, path, [], ()) for s in live], regexes, path)

    def any_value_rule(self) -> list[str]:
        """Any JSON value, nested as deep as the document goes (one recursive rule)."""
        if self._any is None:
            value = self._any = f"r{len(self.rules)}"
            members, values = value + "m", value + "v"  # left-recursive lists of the value
            key = self.terminal(STRING, "#")
            scalar = self.terminal(f"(?:null|true|false|{NUMBER}|{STRING})", "#")
            member = [key, self.colon, value]
            self.rules[members] = [member, [members, self.comma, *member]]
            self.rules[values] = [[value], [values, self.comma, value]]
            self.rules[value] = [
                [scalar],
                [self.lbrace, self.rbrace],
                [self.lbrace, members, self.rbrace],
                [self.lbrack, self.rbrack],
                [self.lbrack, values, self.rbrack],
            ]
            self.grow(30, "#")
        return [self._any]

    def array(self, s: dict[str, Any], path: str) -> _Seq:
        min_items, max_items, prefix = self.array_bounds(s, path)
        count = len(prefix) if max_items is None else min(len(prefix), max_items)
        item = self.symbol(s.get("items", True), path + "/items")
        tail: _Seq
        if count < len(prefix):
            tail = []
        else:
            rest_min = max(min_items - count, 0)
            rest_max = None if max_items is None else max_items - count
            more = self.cat([self.comma], item)
            if count > 0:
                tail = self.repeat(more, rest_min, rest_max, path)
            elif rest_max == 0 or item is None:
                tail = [] if rest_min == 0 else None
            else:
                tail = self.cat(
                    item,
                    self.repeat(
                        more, max(rest_min - 1, 0), None if rest_max is None else rest_max - 1, path
                    ),
                )
                if rest_min == 0:
                    tail = self.optional(tail, path)
        for i in range(count - 1, -1, -1):
            element = self.symbol(prefix[i], f"{path}/prefixItems/{i}")
            tail = self.rule([self.cat([self.comma] if i > 0 else [], element, tail)], path)
            if i >= min_items:
                tail = self.optional(tail, path)
        return self.cat([self.lbrack], tail, [self.rbrack])

    def object(self, s: dict[str, Any], path: str) -> _Seq:
        declared = self.declared_members(s, path)
        if declared is not None:
            declared = self.named_members(s, declared, path)
        if declared is None:
            return None
        required = s.get("required", [])
        members: list[tuple[list[str], bool]] = []
        for name, schema in declared.items():
            pointer = name.replace("~", "~0").replace("/", "~1")
            value = self.symbol(schema, f"{path}/properties/{pointer}")
            is_required = name in required
            if value is None:
                if is_required:
                    return None
                continue
            key = self.terminal(self.member_key(name), path)
            members.append(([key, self.colon, *value], is_required))
        n_required = sum(r for _, r in members)
        fewest, most, extras_allowed = self.member_counts(s, len(members), n_required, path)
        kinds: list[_Seq] = []
        for key_rx, schema, where in (
            self.extra_members(s, declared, path) if extras_allowed else []
        ):
            value = self.symbol(schema, where)
            if value is not None:
                kinds.append([self.terminal(key_rx, path), self.colon, *value])
        extra = self.rule(kinds, path)
        if not members:  # only extra members: their count is bounded by min/maxProperties
            if most is not None and most < fewest:
                return None
            body: _Seq
            if extra is None or most == 0:
                body = [] if fewest == 0 else None
            else:
                more = self.repeat(
                    self.cat([self.comma], extra),
                    max(fewest - 1, 0),
                    None if most is None else most - 1,
                    path,
                )
                body = self.cat(extra, more)
                body = self.optional(body, path) if fewest == 0 else body
            return self.cat([self.lbrace], body, [self.rbrace])
        # tail: members i.. after something was written; first: members i.. with none written
        # extra members right-recursive: after a member, a comma starts a declared member or an
        # extra one and the key after it decides (left recursion would need two lookaheads)
        tail: list[str] = [] if extra is None else self.star_right([self.comma, *extra], path)
        starts: list[_Seq] = [] if extra is None else [extra + tail]
        if not fewest:  # minProperties: 1 leaves {} out
            starts.append([])
        first: _Seq = self.rule(starts, path)
        run = 0
        for member, is_required in reversed(members):
            run = 0 if is_required else run + 1
            if self.max_optional_run is not None and run > self.max_optional_run:
                raise ConstraintTooLargeError(
                    f"the JSON Schema at {path} has over {self.max_optional_run} optional "
                    "properties in a row (the LALR table grows with their cube): make some "
                    "required, or split the object",
                    limit="grammar_size",
                    where=path,
                )
            written = member + tail
            first = self.rule([written] if is_required else [written, first], path)
            after = [self.comma, *written]
            tail_rule = self.rule([after] if is_required else [after, tail], path)
            assert tail_rule is not None
            tail = tail_rule
        return self.cat([self.lbrace], first, [self.rbrace])

    # ------------------------------------------------------------------------- output

    def prune(self, start: list[str]) -> None:
        """Drop alternatives no document completes, then rules the start cannot reach."""
        rules = self.rules
        if self.all_productive:
            self.rules, self.terminals = self.reachable(start, None)
            return
        productive = set(self.terminals)
        # rules are mostly written after the rules they use: one pass in that order finds
        # most productive ones, then a worklist the rest (an alternative is productive once
        # its count of symbols not yet known productive reaches 0, each use counted)
        rest: list[str] = []
        for name, alternatives in rules.items():
            for alt in alternatives:
                if productive.issuperset(alt):
                    productive.add(name)
                    break
            else:
                rest.append(name)
        waiting: dict[str, list[tuple[str, int]]] = {}  # symbol -> (rule, alternative) uses
        missing: dict[tuple[str, int], int] = {}
        todo: list[str] = []
        for name in rest:
            for i, alt in enumerate(rules[name]):
                count = 0
                for sym in alt:
                    if sym not in productive:
                        count += 1
                        waiting.setdefault(sym, []).append((name, i))
                if count == 0 and name not in productive:
                    productive.add(name)
                    todo.append(name)
                missing[(name, i)] = count
        while todo:
            for name, i in waiting.pop(todo.pop(), ()):
                missing[(name, i)] -= 1
                if missing[(name, i)] == 0 and name not in productive:
                    productive.add(name)
                    todo.append(name)
        if not productive.issuperset(start):
            raise InvalidConstraintError("the JSON Schema accepts no document")
        self.rules, self.terminals = self.reachable(start, productive)

    def reachable(
        self, start: list[str], productive: set[str] | None
    ) -> tuple[dict[str, list[Sequence[str]]], dict[str, str]]:
        """The rules and terminals ``start`` reaches, in the order written.

        Only through ``productive`` symbols, unless ``None`` (every symbol is).
        """
        rules = self.rules
        kept: dict[str, list[Sequence[str]]] = {}  # the reachable rules' kept alternatives
        reached: set[str] = set()
        todo = list(start)
        while todo:
            sym = todo.pop()
            if sym in reached:
                continue
            reached.add(sym)
            alternatives = rules.get(sym)
            if alternatives is not None:
                if productive is not None:
                    alternatives = [a for a in alternatives if productive.issuperset(a)]
                kept[sym] = alternatives
                for alt in alternatives:
                    todo.extend(alt)
        return (
            {n: kept[n] for n in rules if n in kept},
            {n: rx for n, rx in self.terminals.items() if n in reached},
        )

    def lark(self, start: list[str]) -> str:
        """The grammar's Lark text; :attr:`parts` says the same, as data."""
        self.prune(start)
        lines = ["start: " + " ".join(start)]
        rules = [("start", tuple(start))]
        for name, alternatives in self.rules.items():
            lines.append(f"{name}: " + " | ".join(" ".join(alt) for alt in alternatives))
            rules += [(name, tuple(alt)) for alt in alternatives]
        terminals = [(name, lark_terminal(regex)) for name, regex in self.terminals.items()]
        lines += [f"{name}: {body}" for name, body in terminals]
        self.parts = GrammarParts(tuple(rules), tuple(terminals))
        return "\n".join(lines) + "\n"


def json_schema_to_grammar(
    schema: dict[str, Any],
    *,
    whitespace_pattern: str | None = None,
    lenient: bool = False,
    max_size: int = DEFAULT_MAX_GRAMMAR_SIZE,
) -> str:
    """Return a Lark grammar (start rule ``start``) for the JSON documents ``schema`` accepts.

    Documents are written in the regex path's policy (``docs/json_schema.md``): whitespace
    only where ``whitespace_pattern`` allows it, object members in schema order. Recursive
    ``$ref``s and free values nest without a depth limit.

    Args:
        schema: The JSON Schema (draft 2020-12; drafts 4-7 spellings are read too).
        whitespace_pattern: Regex for the whitespace allowed between JSON tokens; ``None``
            allows none.
        lenient: Warn instead of raising when a keyword cannot be enforced, and ignore it.
        max_size: Most grammar symbols; a larger grammar raises as soon as it passes this.

    Raises:
        InvalidConstraintError: The schema is invalid, accepts no document, uses a keyword
            that cannot be enforced (unless ``lenient``), or its grammar passes ``max_size``;
            the message says where.
    """
    schema = _options_checked(schema, whitespace_pattern)
    return _grammar_of(schema, whitespace_pattern, lenient, max_size)


def _grammar_of(
    schema: dict[str, Any],
    whitespace_pattern: str | None,
    lenient: bool,
    max_size: int,
    check: Callable[[str], None] | None = None,
    max_optional_run: int | None = None,
    flat_cache: FlatCache | None = None,
    parts: list[GrammarParts] | None = None,
) -> str:
    """The grammar of a checked schema (``check(pointer)`` once per sub-schema).

    ``flat_cache``: shared with the regex path's converter of the same schema; ``parts``: the
    grammar's :class:`GrammarParts` are appended to it.
    """
    converter = _GrammarConverter(
        schema, whitespace_pattern=whitespace_pattern, lenient=lenient, max_size=max_size
    )
    if flat_cache is not None:
        converter.flat_cache = flat_cache
    converter.max_optional_run = max_optional_run
    if check is not None:
        converter.check = check
    start = converter.symbol({"$ref": "#"}, "#")
    if start is None:
        raise InvalidConstraintError("the JSON Schema accepts no document")
    text = converter.lark(start)
    if parts is not None and converter.parts is not None:
        parts.append(converter.parts)
    return text


def json_schema_path(
    schema: dict[str, Any],
    *,
    whitespace_pattern: str | None = None,
    lenient: bool = False,
    regex_budget: int,
    max_size: int = DEFAULT_MAX_GRAMMAR_SIZE,
    max_depth: int | None = None,
    check: Callable[[str], None] | None = None,
    grammar_parts: list[GrammarParts] | None = None,
) -> tuple[str, str | None]:
    """Choose how the token masker compiles a schema: ``(regex, None)`` or ``("", grammar)``.

    A schema with a reachable ``$ref`` cycle takes the grammar (recursion without a depth
    limit); any other takes the regex while it stays within ``regex_budget`` characters
    (checked as it grows, so a schema past it costs about the time to write that many), else
    the grammar. A schema whose regex is surely past the budget
    (:func:`~outlines_like.types.json_schema_budget.regex_surely_past`, a floor under its
    size) takes the grammar without the attempt; should the grammar raise, the attempt runs
    then, so that its error, when it has one, is the one raised, as when it runs first.
    Lenient warnings come once, from the path taken.

    ``max_depth`` bounds the nesting (checked first), ``check(pointer)`` runs per sub-schema (a
    time budget), and over :data:`MAX_OPTIONAL_RUN` optional properties in a row are refused.
    Where the grammar is taken, its :class:`GrammarParts` are appended to ``grammar_parts``.

    Raises:
        ConstraintTooLargeError: Past ``max_depth``, ``max_size`` or the optional run (or
            raised by ``check``).
        InvalidConstraintError: As :func:`json_schema_to_grammar` (the regex path's errors when
            the regex is taken).
    """
    if max_depth is not None:
        check_depth(schema, max_depth)
    schema = _options_checked(schema, whitespace_pattern)
    flat_cache: FlatCache = {}

    def regex_attempt() -> tuple[str, None] | None:
        try:
            regex, converter = _bounded_regex(
                schema,
                regex_budget,
                whitespace_pattern,
                lenient,
                defer=True,
                check=check,
                flat_cache=flat_cache,
            )
        except RegexBudgetExceeded:
            return None
        converter.emit()
        return regex, None

    # a regex surely past the budget would be written nearly whole before it stops: skipped
    skipped = False
    if not schema_is_recursive(schema):
        skipped = regex_surely_past(schema, regex_budget, whitespace_pattern)
        taken = None if skipped else regex_attempt()
        if taken is not None:
            return taken
    try:
        grammar = _grammar_of(
            schema,
            whitespace_pattern,
            lenient,
            max_size,
            check,
            MAX_OPTIONAL_RUN,
            flat_cache,
            grammar_parts,
        )
    except InvalidConstraintError:
        # the regex attempt comes first: its own error (which may name another pointer for
        # the same fault) is the one raised, as when it is not skipped
        taken = regex_attempt() if skipped else None
        if taken is not None:  # (never: the floor is exact; but then the regex, as before)
            return taken
        raise
    return "", grammar
