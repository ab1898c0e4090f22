"""JSON Schema translation (schema -> regex or Lark grammar): a digest of each output; its time.

Translates every schema of the real-world corpus (``benchmarks/corpus.py``'s ``corpus.json``),
of the official JSON Schema Test Suite (``../shared/data/json-schema-test-suite``) and, with
``--calls``, the calls recorded from the test suite (a pickled list of ``(function name,
pickle of (args, kwargs))``), through ``json_schema_path``, ``json_schema_to_regex`` and
``json_schema_to_grammar``. Each output (the regex, the grammar, or the error's type and text,
and every warning) goes into a digest per job, written as JSON: two trees give the same
translations when their digest files are equal.

``--time N`` then times ``json_schema_path`` (as ``fsm.compile`` runs it, with the harness's
whitespace ``[ ]?``) per corpus schema in CPU time, N passes over the corpus, best pass per
schema, and prints p50/p75/p90 and the total.

    python benchmarks/json_schema_translation.py --tree . --corpus /tmp/corp300/corpus.json \
        --digests /tmp/mine.json --time 5
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import pickle
import sys
import time
import warnings
from pathlib import Path
from typing import Any


def _jobs(
    corpus: str | None, suite: str | None, calls: str | None
) -> list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    jobs: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]] = []
    schemas: list[tuple[str, Any]] = []
    if corpus:
        for entry in json.loads(Path(corpus).read_text())["schemas"]:
            schema = entry["schema"]
            schemas.append(
                (
                    f"corpus:{entry['name']}",
                    json.loads(schema) if isinstance(schema, str) else schema,
                )
            )
    if suite:
        for file in sorted(Path(suite).glob("draft2020-12/*.json")):
            for i, group in enumerate(json.loads(file.read_text())):
                schemas.append((f"suite:{file.stem}:{i}", group["schema"]))
    for name, schema in schemas:
        for ws in (None, "[ ]?"):
            tag = f"{name}:{ws}"
            jobs.append(
                (
                    f"{tag}:path",
                    "json_schema_path",
                    (schema,),
                    {"whitespace_pattern": ws, "regex_budget": 16_000, "max_depth": 64},
                )
            )
            if not name.startswith("corpus:"):  # unbounded: some corpus regexes run to megabytes
                jobs.append(
                    (f"{tag}:regex", "json_schema_to_regex", (schema,), {"whitespace_pattern": ws})
                )
            jobs.append(
                (f"{tag}:grammar", "json_schema_to_grammar", (schema,), {"whitespace_pattern": ws})
            )
            jobs.append(
                (
                    f"{tag}:lenient",
                    "json_schema_path",
                    (schema,),
                    {"whitespace_pattern": ws, "lenient": True, "regex_budget": 16_000},
                )
            )
    if calls:
        for i, (fname, blob) in enumerate(pickle.loads(Path(calls).read_bytes())):
            args, kwargs = pickle.loads(blob)
            jobs.append((f"tests:{i}:{fname}", fname, tuple(args), dict(kwargs)))
    return jobs


def _functions() -> dict[str, Any]:
    from outlines_like.types.json_schema import json_schema_to_regex
    from outlines_like.types.json_schema_grammar import json_schema_path, json_schema_to_grammar

    return {
        "json_schema_path": json_schema_path,
        "json_schema_to_regex": json_schema_to_regex,
        "json_schema_to_grammar": json_schema_to_grammar,
    }


def _outcome(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    args = copy.deepcopy(args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = repr(fn(*args, **kwargs))
        except Exception as exc:  # the error is part of the output
            result = f"raise {type(exc).__name__}: {exc}"
    told = [f"{w.category.__name__}: {w.message}" for w in caught]
    return json.dumps([result, told])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=".", help="the outlines_like checkout to import")
    parser.add_argument("--corpus", default="/tmp/corp300/corpus.json")
    parser.add_argument("--suite", default="../shared/data/json-schema-test-suite")
    parser.add_argument("--calls", default=None, help="pickled calls recorded from the tests")
    parser.add_argument("--digests", default=None, help="write the per-job digests here (JSON)")
    parser.add_argument("--skip", default="", help="leave out the jobs whose name holds this")
    parser.add_argument("--time", type=int, default=0, help="passes over the corpus to time")
    ns = parser.parse_args()
    sys.path.insert(0, str(Path(ns.tree).resolve()))
    import outlines_like

    print("from", outlines_like.__file__, file=sys.stderr)
    functions = _functions()
    if ns.digests:
        digests = {}
        slow = []
        for name, fname, args, kwargs in _jobs(ns.corpus, ns.suite, ns.calls):
            if ns.skip and ns.skip in name:
                continue
            t0 = time.process_time()
            digests[name] = hashlib.sha256(
                _outcome(functions[fname], args, kwargs).encode()
            ).hexdigest()
            slow.append((time.process_time() - t0, name))
        for took, name in sorted(slow)[-5:]:
            print(f"  slowest: {took:.2f} s {name}")
        Path(ns.digests).write_text(json.dumps(digests, indent=0, sort_keys=True))
        print(
            f"{len(digests)} jobs, digest of all:",
            hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:16],
        )
    if ns.time:
        path = functions["json_schema_path"]
        entries = [e for e in json.loads(Path(ns.corpus).read_text())["schemas"] if e.get("docs")]
        schemas = [
            json.loads(e["schema"]) if isinstance(e["schema"], str) else e["schema"]
            for e in entries
        ]
        best = [float("inf")] * len(schemas)
        refused = set()
        for _ in range(ns.time):
            for i, schema in enumerate(schemas):
                t0 = time.process_time()
                try:
                    path(schema, whitespace_pattern="[ ]?", regex_budget=16_000, max_depth=64)
                except Exception:  # refused schemas are timed too
                    refused.add(i)
                best[i] = min(best[i], time.process_time() - t0)
        for label, chosen in (
            ("compiled", [t for i, t in enumerate(best) if i not in refused]),
            ("all", best),
        ):
            ts = sorted(chosen)
            n = len(ts)
            print(
                f"translation ms, best of {ns.time}, {label} ({n}): p50 {ts[n // 2] * 1e3:.3f} "
                f"p75 {ts[3 * n // 4] * 1e3:.3f} p90 {ts[9 * n // 10] * 1e3:.3f} "
                f"total {sum(ts) * 1e3:.1f}"
            )


if __name__ == "__main__":
    main()
