"""The official JSON Schema Test Suite (draft 2020-12) walked byte by byte through the masker.

Every group of ``tests/data/json-schema-test-suite/draft2020-12`` (``optional/`` included) is
compiled with ``compile_constraint(JsonSchema(schema), vocab)`` over a byte vocabulary (256
single-byte tokens + EOS), so the real masker runs: the schema-to-regex step, the byte DFA and
the token index. Each instance is written the way the engine writes documents (compact
``json.dumps``, raw non-ASCII, members in schema order: see docs/json_schema.md) and fed one
byte at a time to ``advance``; at every step the mask must agree with ``advance``. Then EOS.

* A group the engine rejects must raise ``InvalidConstraintError`` or
  ``UnsupportedConstraintError``; a crash, a ``RecursionError`` or a compile-and-walk past
  ``GROUP_BUDGET_S`` fails.
* Soundness: in a compiled group, no invalid instance may be accepted, except the ones listed
  in ``ACCEPTED_INVALID`` (each one an engine bug, with its reason).
* Completeness: every valid instance is accepted, except the ones in ``REFUSED_VALID`` (a
  documented policy or a known gap, with its reason).
* Both tables are strict: a listed instance that now behaves correctly fails too ("remove it
  from the table"), so the tables only shrink. ``COMPILED_FLOOR`` is the same for coverage.

``benchmarks/json_schema_suite.py`` prints the coverage summary from the same functions.
``refRemote.json`` needs the suite's remote schemas, which are not copied: its groups must be
rejected (a remote ``$ref`` raises), and they count as rejected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from outlines_like.errors import (
    InvalidConstraintError,
    RejectedTokenError,
    UnsupportedConstraintError,
)
from outlines_like.fsm import Compiled, Vocabulary, compile_constraint
from outlines_like.types import JsonSchema

SUITE = Path(__file__).resolve().parent.parent / "data" / "json-schema-test-suite" / "draft2020-12"
GROUP_BUDGET_S = 10.0  # compile + every instance of one group; the slowest takes ~2 s
EOS = 256
BYTE_VOCAB = Vocabulary([bytes([b]) for b in range(256)] + [b"<eos>"], eos_token_ids=[EOS])
COMPILED_FLOOR = 251  # groups that compile today (of 461); raise it when coverage grows

# ------------------------------------------------------------------ the exception tables

# Soundness gaps: invalid instances the engine accepts (engine bugs, to be fixed).
ECMA_NON_SPACE = "pattern \\S is ASCII: it matches U+FEFF, which ECMA-262 counts as whitespace"

# Completeness gaps: valid instances the engine refuses (policy or known gaps).
IMPLIED_TYPE = (
    "a keyword implies its type (format/pattern -> string, properties -> object ...): values "
    "of other JSON types, which JSON Schema lets through, are refused"
)
NUMBER_TEXT = "integers are written as digits: 1.0 or 1e+308 is not written for type integer"
PROPERTY_ORDER = (
    "members are written in one order (schema order; required names that properties does not "
    "declare in the order of required): a document in another order is refused"
)
ANY_DEPTH = "free values nest at most max_any_depth=2 deep"
FORMAT_NARROW = (
    "the format regex is narrower than its RFC (leap seconds only at 23:59:60 UTC, quoted "
    "local parts in e-mails, A-labels xn--... in host names)"
)
ECMA_SPACE = "pattern \\s is ASCII: U+FEFF is whitespace in ECMA-262, not for us"
FORMAT_ASSERTION = (
    "format is an assertion here (draft 2020-12 makes it an annotation by default): a string "
    "that breaks the format is refused"
)
PATTERN_EXTRAS = (
    "with patternProperties, extra members are written only with keys a pattern matches (none "
    "for a pattern a declared name matches), their values under every pattern's schema"
)
DECLARED_ONLY = (
    "an object with declared members (properties, or names a dependency keyword adds) is "
    "written with those members only when additionalProperties is absent: a document with "
    "extra members is refused (docs/json_schema.md)"
)
VOCABULARY = "$vocabulary is not read: the schema is validated as if every vocabulary were on"

Key = tuple[str, str]  # (file relative to the suite folder, group description)

ACCEPTED_INVALID: dict[Key, dict[str, str]] = {}

REFUSED_VALID: dict[Key, dict[str, str]] = {
    (
        "additionalProperties.json",
        "additionalProperties being false does not allow other properties",
    ): {
        "ignores arrays": IMPLIED_TYPE,
        "ignores strings": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("const.json", "const with object"): {
        "same object with different property order is valid": PROPERTY_ORDER,
    },
    ("dependentRequired.json", "dependencies with escaped characters"): {
        "quoted quotes": PROPERTY_ORDER,
    },
    ("dependentRequired.json", "empty dependents"): {
        "non-object is valid": IMPLIED_TYPE,
    },
    ("dependentRequired.json", "multiple dependents required"): {
        "with dependencies": PROPERTY_ORDER,
    },
    ("dependentRequired.json", "single dependency"): {
        "with dependency": PROPERTY_ORDER,
        "ignores arrays": IMPLIED_TYPE,
        "ignores strings": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("dependentSchemas.json", "single dependency"): {
        "ignores arrays": IMPLIED_TYPE,
        "ignores strings": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("exclusiveMaximum.json", "exclusiveMaximum validation"): {
        "ignores non-numbers": IMPLIED_TYPE,
    },
    ("format.json", "date format"): {
        "invalid date string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "date-time format"): {
        "invalid date-time string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "duration format"): {
        "invalid duration string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "email format"): {
        "invalid email string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "hostname format"): {
        "invalid hostname string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "ipv4 format"): {
        "invalid ipv4 string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "ipv6 format"): {
        "invalid ipv6 string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "time format"): {
        "invalid time string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "uri format"): {
        "invalid uri string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "uri-reference format"): {
        "invalid uri-reference string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("format.json", "uuid format"): {
        "invalid uuid string is only an annotation by default": FORMAT_ASSERTION,
    },
    ("items.json", "a schema given for items"): {
        "ignores non-arrays": IMPLIED_TYPE,
        "JavaScript pseudo-array is valid": IMPLIED_TYPE,
    },
    ("maxItems.json", "maxItems validation"): {
        "ignores non-arrays": IMPLIED_TYPE,
    },
    ("maxLength.json", "maxLength validation"): {
        "ignores non-strings": IMPLIED_TYPE,
    },
    ("maximum.json", "maximum validation"): {
        "ignores non-numbers": IMPLIED_TYPE,
    },
    ("minItems.json", "minItems validation"): {
        "ignores non-arrays": IMPLIED_TYPE,
    },
    ("minLength.json", "minLength validation"): {
        "ignores non-strings": IMPLIED_TYPE,
    },
    ("minimum.json", "minimum validation with signed integer"): {
        "ignores non-numbers": IMPLIED_TYPE,
    },
    ("optional/dependencies-compatibility.json", "dependencies with escaped characters"): {
        "quoted quotes": PROPERTY_ORDER,
    },
    ("optional/dependencies-compatibility.json", "empty dependents"): {
        "non-object is valid": IMPLIED_TYPE,
    },
    ("optional/dependencies-compatibility.json", "multiple dependents required"): {
        "with dependencies": PROPERTY_ORDER,
    },
    ("optional/dependencies-compatibility.json", "single dependency"): {
        "with dependency": PROPERTY_ORDER,
        "ignores arrays": IMPLIED_TYPE,
        "ignores strings": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("optional/dependencies-compatibility.json", "single schema dependency"): {
        "ignores arrays": IMPLIED_TYPE,
        "ignores strings": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("optional/ecmascript-regex.json", "ECMA 262 \\s matches whitespace"): {
        "zero-width whitespace matches": ECMA_SPACE,
    },
    ("optional/float-overflow.json", "all integers are multiples of 0.5, if overflow is handled"): {
        "valid if optional overflow handling is implemented": NUMBER_TEXT,
    },
    ("optional/format/date-time.json", "validation of date-time strings"): {
        "a valid date-time with a leap second, with minus offset": FORMAT_NARROW,
    },
    ("optional/format/email.json", "validation of e-mail addresses"): {
        "a quoted string with a space in the local part is valid": FORMAT_NARROW,
        "a quoted string with a double dot in the local part is valid": FORMAT_NARROW,
        "a quoted string with a @ in the local part is valid": FORMAT_NARROW,
    },
    ("optional/format/hostname.json", "validation of A-label (punycode) host names"): {
        "a valid host name (example.test in Hangul)": FORMAT_NARROW,
        "Exceptions that are PVALID, left-to-right chars": FORMAT_NARROW,
        "Exceptions that are PVALID, right-to-left chars": FORMAT_NARROW,
        "MIDDLE DOT with surrounding 'l's": FORMAT_NARROW,
        "Greek KERAIA followed by Greek": FORMAT_NARROW,
        "Hebrew GERESH preceded by Hebrew": FORMAT_NARROW,
        "Hebrew GERSHAYIM preceded by Hebrew": FORMAT_NARROW,
        "KATAKANA MIDDLE DOT with Hiragana": FORMAT_NARROW,
        "KATAKANA MIDDLE DOT with Katakana": FORMAT_NARROW,
        "KATAKANA MIDDLE DOT with Han": FORMAT_NARROW,
        "Arabic-Indic digits not mixed with Extended Arabic-Indic digits": FORMAT_NARROW,
        "Extended Arabic-Indic digits not mixed with Arabic-Indic digits": FORMAT_NARROW,
        "ZERO WIDTH JOINER preceded by Virama": FORMAT_NARROW,
        "ZERO WIDTH NON-JOINER preceded by Virama": FORMAT_NARROW,
        "ZERO WIDTH NON-JOINER not preceded by Virama but matches regexp": FORMAT_NARROW,
    },
    ("optional/format/time.json", "validation of time strings"): {
        "valid leap second, positive time-offset": FORMAT_NARROW,
        "valid leap second, large positive time-offset": FORMAT_NARROW,
        "valid leap second, negative time-offset": FORMAT_NARROW,
        "valid leap second, large negative time-offset": FORMAT_NARROW,
    },
    ("optional/no-schema.json", "validation without $schema"): {
        "a non-string is valid": IMPLIED_TYPE,
    },
    ("pattern.json", "pattern validation"): {
        "ignores booleans": IMPLIED_TYPE,
        "ignores integers": IMPLIED_TYPE,
        "ignores floats": IMPLIED_TYPE,
        "ignores objects": IMPLIED_TYPE,
        "ignores arrays": IMPLIED_TYPE,
        "ignores null": IMPLIED_TYPE,
    },
    ("patternProperties.json", "multiple simultaneous patternProperties are validated"): {
        "a single valid match is valid": PATTERN_EXTRAS,
        "multiple matches is valid": PATTERN_EXTRAS,
    },
    ("patternProperties.json", "patternProperties with boolean schemas"): {
        "object with property matching schema true is valid": PATTERN_EXTRAS,
    },
    ("patternProperties.json", "regexes are not anchored by default and are case sensitive"): {
        "non recognized members are ignored": PATTERN_EXTRAS,
        "regexes are case sensitive": PATTERN_EXTRAS,
    },
    ("prefixItems.json", "a schema given for prefixItems"): {
        "JavaScript pseudo-array is valid": IMPLIED_TYPE,
    },
    ("properties.json", "object properties validation"): {
        "ignores arrays": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("properties.json", "properties whose names are Javascript object property names"): {
        "ignores arrays": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("properties.json", "properties, patternProperties, additionalProperties interaction"): {
        "patternProperty validates nonproperty": PATTERN_EXTRAS,
        "additionalProperty validates others": PATTERN_EXTRAS,
    },
    ("ref.json", "root pointer ref"): {
        "match": IMPLIED_TYPE,
        "recursive match": IMPLIED_TYPE,
    },
    ("required.json", "required properties whose names are Javascript object property names"): {
        "ignores arrays": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
    },
    ("required.json", "required validation"): {
        "ignores arrays": IMPLIED_TYPE,
        "ignores strings": IMPLIED_TYPE,
        "ignores other non-objects": IMPLIED_TYPE,
        "ignores null": IMPLIED_TYPE,
        "ignores boolean": IMPLIED_TYPE,
    },
    ("type.json", "integer type matches integers"): {
        "a float with zero fractional part is an integer": NUMBER_TEXT,
    },
    ("uniqueItems.json", "uniqueItems=false validation"): {
        "unique array of nested objects is valid": ANY_DEPTH,
        "non-unique array of nested objects is valid": ANY_DEPTH,
    },
    ("vocabulary.json", "schema that uses custom metaschema with with no validation vocabulary"): {
        "no validation: invalid number, but it still validates": VOCABULARY,
    },
}

# the declared-members-only policy, beside the other reasons of the same groups
for _key, _descriptions in {
    ("additionalProperties.json", "additionalProperties are allowed by default"): [
        "additional properties are allowed"
    ],
    ("anyOf.json", "anyOf complex types"): ["both anyOf valid (complex)"],
    ("dependentRequired.json", "single dependency"): ["nondependant"],
    ("dependentRequired.json", "multiple dependents required"): ["nondependants"],
    ("dependentSchemas.json", "single dependency"): ["no dependency"],
    ("dependentSchemas.json", "dependent subschema incompatible with root"): [
        "matches dependency",
        "no dependency",
    ],
    ("not.json", "forbidden property"): ["property absent"],
    ("optional/dependencies-compatibility.json", "single dependency"): ["nondependant"],
    ("optional/dependencies-compatibility.json", "multiple dependents required"): ["nondependants"],
    ("optional/dependencies-compatibility.json", "single schema dependency"): ["no dependency"],
    ("properties.json", "object properties validation"): ["doesn't invalidate other properties"],
}.items():
    REFUSED_VALID.setdefault(_key, {}).update(dict.fromkeys(_descriptions, DECLARED_ONLY))

# ------------------------------------------------------------------ running the suite


@dataclasses.dataclass(frozen=True, eq=False)
class Group:
    """One test group of the suite: a schema and its instances."""

    file: str
    index: int
    description: str
    schema: Any
    tests: tuple[dict[str, Any], ...]

    @property
    def key(self) -> Key:
        return (self.file, self.description)

    @property
    def test_id(self) -> str:
        return f"{self.file}#{self.index}"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the engine did with one group."""

    rejected: str | None  # the error message when the schema was rejected
    accepted: dict[str, bool]  # test description -> accepted (compiled groups)
    seconds: float


def load_groups() -> list[Group]:
    """Return every group of the suite, in file order."""
    groups = []
    for path in sorted(SUITE.rglob("*.json")):
        rel = path.relative_to(SUITE).as_posix()
        for i, g in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            groups.append(Group(rel, i, g["description"], g["schema"], tuple(g["tests"])))
    return groups


def _property_ranks(schema: Any, ranks: dict[str, int]) -> dict[str, int]:
    """Rank every name declared under a ``properties`` keyword, in schema text order."""
    if isinstance(schema, dict):
        for k, v in schema.items():
            if k == "properties" and isinstance(v, dict):
                for name in v:
                    ranks.setdefault(name, len(ranks))
            _property_ranks(v, ranks)
    elif isinstance(schema, list):
        for v in schema:
            _property_ranks(v, ranks)
    return ranks


def _reorder(value: Any, ranks: dict[str, int]) -> Any:
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: ranks.get(kv[0], len(ranks)))
        return {k: _reorder(v, ranks) for k, v in items}
    if isinstance(value, list):
        return [_reorder(v, ranks) for v in value]
    return value


def canonical_text(data: Any, schema: Any) -> str:
    """Write ``data`` as the engine writes documents: compact, raw non-ASCII, schema order.

    Members are sorted by where their name is first declared under ``properties`` in the
    schema text (that is the schema order, ``allOf`` entries in turn); undeclared members
    keep their order after the declared ones (a stable sort).
    """
    ranks = _property_ranks(schema, {})
    return json.dumps(_reorder(data, ranks), separators=(",", ":"), ensure_ascii=False)


class GroupTimeout(Exception):
    """A group ran past its time budget."""


@contextlib.contextmanager
def time_budget(seconds: float) -> Iterator[None]:
    """Raise :class:`GroupTimeout` inside the block after ``seconds`` (main thread, POSIX).

    A timer already set (pytest-timeout's) is restored afterwards; elsewhere the block runs
    unbounded.
    """
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable:
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise GroupTimeout(f"past the {seconds:g} s budget")

    old_handler = signal.signal(signal.SIGALRM, expire)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay > 0:
            left = max(old_delay - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


def walk(compiled: Compiled, text: str) -> bool:
    """Feed ``text`` byte by byte, then EOS; return whether it was accepted.

    At every step the bitmask must agree with ``advance`` (a token is allowed iff advancing
    with it succeeds).
    """
    matcher = compiled.matcher()
    mask = np.zeros(BYTE_VOCAB.mask_words, dtype=np.int32)
    for token in [*text.encode("utf-8"), EOS]:
        matcher.fill_bitmask(mask)
        allowed = bool((int(mask[token // 32]) >> (token % 32)) & 1)
        try:
            matcher.advance(token)
        except RejectedTokenError:
            assert not allowed, f"token {token} is in the mask but advance refused it"
            return False
        assert allowed, f"advance took token {token} that the mask refused"
    return matcher.is_finished()


@functools.cache
def run_group(group: Group, budget: float = GROUP_BUDGET_S) -> Outcome:
    """Compile ``group``'s schema and walk each instance (cached per group).

    Raises:
        GroupTimeout: compile and walks took more than ``budget`` seconds.
    """
    start = time.perf_counter()
    with time_budget(budget):
        try:
            compiled = compile_constraint(JsonSchema(group.schema), BYTE_VOCAB)
        except (InvalidConstraintError, UnsupportedConstraintError) as exc:
            return Outcome(str(exc), {}, time.perf_counter() - start)
        accepted = {
            t["description"]: walk(compiled, canonical_text(t["data"], group.schema))
            for t in group.tests
        }
    return Outcome(None, accepted, time.perf_counter() - start)


def mismatches(group: Group, outcome: Outcome) -> list[str]:
    """Return what is wrong with ``outcome`` given the tables (empty when all is as listed)."""
    listed_invalid = ACCEPTED_INVALID.get(group.key, {})
    listed_valid = REFUSED_VALID.get(group.key, {})
    if outcome.rejected is not None:
        stale = sorted(listed_invalid) + sorted(listed_valid)
        return [f"rejected, yet listed in a table (remove it): {d!r}" for d in stale]
    problems = []
    for t in group.tests:
        desc, valid = t["description"], t["valid"]
        ok = outcome.accepted[desc]
        table = listed_valid if valid else listed_invalid
        wrong = ok != valid
        if wrong and desc not in table:
            what = "valid instance refused" if valid else "INVALID INSTANCE ACCEPTED"
            problems.append(f"{what}: {desc!r} {json.dumps(t['data'])[:120]}")
        elif not wrong and desc in table:
            problems.append(f"listed as wrong but now right (remove it from the table): {desc!r}")
    return problems


GROUPS = load_groups()


def test_suite_is_complete() -> None:
    assert (SUITE.parent / "LICENSE").is_file()
    assert len(GROUPS) == 461, len(GROUPS)
    assert sum(len(g.tests) for g in GROUPS) == 2225


def test_tables_name_real_instances() -> None:
    by_key = {g.key: g for g in GROUPS}
    for table, valid in ((ACCEPTED_INVALID, False), (REFUSED_VALID, True)):
        for key, entries in table.items():
            assert key in by_key, f"no group {key}"
            tests = {t["description"]: t["valid"] for t in by_key[key].tests}
            for desc in entries:
                assert tests.get(desc) is valid, (
                    f"{key}: no {'valid' if valid else 'invalid'} {desc!r}"
                )


@pytest.mark.parametrize("group", GROUPS, ids=[g.test_id for g in GROUPS])
def test_group(group: Group) -> None:
    try:
        outcome = run_group(group)
    except GroupTimeout as exc:
        pytest.fail(f"{group.key}: {exc}")
    assert not mismatches(group, outcome), (group.key, mismatches(group, outcome))


def test_coverage_floor() -> None:
    compiled = sum(run_group(g).rejected is None for g in GROUPS)
    assert compiled >= COMPILED_FLOOR, f"{compiled} groups compile, the floor is {COMPILED_FLOOR}"
