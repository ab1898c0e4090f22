"""Coverage of the official JSON Schema Test Suite (draft 2020-12) by the masker, as markdown.

Runs the same functions as ``tests/types/test_json_schema_suite.py`` (compile each group over a
byte vocabulary, walk every instance byte by byte) and prints: groups compiled / rejected by
reason, and instances right / wrong, with the reasons of the test's exception tables.

    python benchmarks/json_schema_suite.py              # markdown on stdout
    python benchmarks/json_schema_suite.py --json out.json
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import re
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TEST_MODULE = REPO / "tests" / "types" / "test_json_schema_suite.py"


def load_suite_module() -> ModuleType:
    """Import the test module by path (it holds the runner and the exception tables)."""
    spec = importlib.util.spec_from_file_location("json_schema_suite_test", TEST_MODULE)
    if spec is None or spec.loader is None:
        raise ImportError(TEST_MODULE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


_KEYWORD = re.compile(r"keyword '([^']+)' at \S+ is not enforced by the regex(?:: (.*))?")
_FORMAT = re.compile(r"unknown format '([^']+)'")


def rejection_reason(message: str) -> str:
    """Group an error message into a short reason (the keyword, the format ...)."""
    m = _KEYWORD.search(message)
    if m:
        keyword, detail = m.group(1), m.group(2) or ""
        fmt = _FORMAT.search(detail)
        if keyword == "format" and fmt:
            return f"`format: {fmt.group(1)}`"
        if keyword == "oneOf":
            return "`oneOf` with overlapping branches"
        if "non-integer bound" in detail:
            return "non-integer bound on a number"
        return f"`{keyword}`"
    if "is not a local JSON pointer" in message or "no $anchor" in message:
        return "`$ref` to an `$id`, `$anchor` or remote schema"
    if "accepts no document" in message:
        return "the schema accepts no document"
    if "cannot take a bool" in message:
        return "a boolean schema at the root"
    if "is not a valid regex" in message:
        return "pattern syntax (`\\p{...}`, `\\c`)"
    return message[:60]


def run() -> dict[str, Any]:
    """Run every group; return the counts."""
    suite = load_suite_module()
    start = time.perf_counter()
    rejected: collections.Counter[str] = collections.Counter()
    counts = collections.Counter[str]()
    reasons: collections.Counter[tuple[str, str]] = collections.Counter()
    errors = []
    for group in suite.GROUPS:
        try:
            outcome = suite.run_group(group)
        except Exception as exc:  # a crash or a timeout is reported, not hidden
            errors.append(f"{group.file}#{group.index}: {type(exc).__name__}: {exc}")
            continue
        if outcome.rejected is not None:
            rejected[rejection_reason(outcome.rejected)] += 1
            counts["rejected instances"] += len(group.tests)
            continue
        counts["compiled"] += 1
        for t in group.tests:
            ok = outcome.accepted[t["description"]]
            valid = t["valid"]
            kind = ("valid" if valid else "invalid") + (" right" if ok == valid else " wrong")
            counts[kind] += 1
            if ok != valid:
                table = suite.REFUSED_VALID if valid else suite.ACCEPTED_INVALID
                why = table.get(group.key, {}).get(t["description"], "(not in the tables)")
                reasons[("invalid accepted" if not valid else "valid refused", why)] += 1
    return {
        "groups": len(suite.GROUPS),
        "instances": sum(len(g.tests) for g in suite.GROUPS),
        "compiled": counts["compiled"],
        "rejected": dict(rejected.most_common()),
        "valid_accepted": counts["valid right"],
        "valid_refused": counts["valid wrong"],
        "invalid_refused": counts["invalid right"],
        "invalid_accepted": counts["invalid wrong"],
        "instances_in_rejected_groups": counts["rejected instances"],
        "wrong_by_reason": [
            {"what": what, "reason": why, "count": n} for (what, why), n in reasons.most_common()
        ],
        "errors": errors,
        "seconds": round(time.perf_counter() - start, 1),
    }


def markdown(r: dict[str, Any]) -> str:
    """Render the counts as markdown."""
    n_rej = sum(r["rejected"].values())
    valid = r["valid_accepted"] + r["valid_refused"]
    invalid = r["invalid_refused"] + r["invalid_accepted"]
    lines = [
        f"Groups: {r['groups']} ({r['instances']} instances). "
        f"**Compiled {r['compiled']}** ({100 * r['compiled'] / r['groups']:.0f}%), "
        f"rejected by name {n_rej}, crashes or timeouts {len(r['errors'])}. "
        f"Run time {r['seconds']} s.",
        "",
        "| instances in compiled groups | right | wrong |",
        "|---|---|---|",
        f"| invalid ({invalid}): refused | {r['invalid_refused']} | "
        f"**{r['invalid_accepted']} accepted** |",
        f"| valid ({valid}): accepted | {r['valid_accepted']} | {r['valid_refused']} refused |",
        "",
        "| wrong | reason (the test's tables) | instances |",
        "|---|---|---|",
    ]
    lines += [f"| {w['what']} | {w['reason']} | {w['count']} |" for w in r["wrong_by_reason"]]
    lines += ["", "| rejected groups: reason | groups |", "|---|---|"]
    lines += [f"| {why} | {n} |" for why, n in r["rejected"].items()]
    if r["errors"]:
        lines += ["", "Crashes and timeouts:", ""] + [f"- {e}" for e in r["errors"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the counts as JSON here")
    args = parser.parse_args(argv)
    result = run()
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
