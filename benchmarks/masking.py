"""Token-masking benchmark: our masker beside outlines-core, xgrammar and llguidance.

Plugs :class:`OutlinesLikeEngine` into the shared harness (``../shared/bench``) and prints one
table of ratios (ours / best anchor).

    python benchmarks/masking.py                          # llama3 + qwen3, all cases
    python benchmarks/masking.py --vocab llama3 --cases re_,json_small --out /tmp/ol-bench
    python benchmarks/masking.py --summarize /tmp/ol-bench  # only re-print the table

or directly through the harness:

    python ../shared/bench/bench.py --engines benchmarks/masking.py:OutlinesLikeEngine,xgrammar
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ANCHORS = ("outlines_core", "xgrammar", "llguidance")
ENGINE_SPEC = f"{Path(__file__).resolve()}:OutlinesLikeEngine"


def _harness_error(name: str) -> type[Exception]:
    import engines  # type: ignore[import-not-found]  # the harness module (run by bench.py)

    cls: type[Exception] = getattr(engines, name)
    return cls


class OutlinesLikeMatcher:
    """Adapts an outlines-like matcher to the harness's Matcher interface."""

    __slots__ = ("_adv", "_rejected", "fill_mask", "is_finished")

    def __init__(self, matcher: Any, rejected: type[Exception]) -> None:
        self.fill_mask = matcher.fill_bitmask
        self.is_finished = matcher.is_finished
        self._adv = matcher.advance
        self._rejected = rejected

    def advance(self, token_id: int) -> None:
        from outlines_like.fsm import RejectedTokenError

        try:
            self._adv(token_id)
        except RejectedTokenError as exc:
            raise self._rejected(str(exc)) from None


class OutlinesLikeEngine:
    """The harness Engine for outlines-like (duck-typed: no import of the harness at load)."""

    name = "outlines_like"
    kinds = frozenset({"regex", "json_schema", "cfg_lark", "cfg_ebnf"})
    compile_cache = True

    def __init__(self, whitespace_pattern: str | None = r"[ ]?", **kwargs: Any) -> None:
        import outlines_like.fsm  # noqa: F401  (counted as import)

        self._vocabs: dict[str, Any] = {}
        self._whitespace = whitespace_pattern  # outlines-core's choice: the samples have ", "
        self._kwargs = kwargs

    def version(self) -> str:
        from importlib.metadata import version

        try:
            return f"outlines-like {version('outlines-like')}"
        except Exception:
            return "outlines-like (source)"

    def prepare(self, vocab: Any) -> None:
        from outlines_like.fsm import Vocabulary, prepare_vocabulary

        if vocab.name not in self._vocabs:
            v = Vocabulary(vocab.tokens, [vocab.eos_id], vocab.special_ids)
            # per-vocabulary tables and hash, as the anchors build theirs in setup
            prepare_vocabulary(v)
            self._vocabs[vocab.name] = v
            # as `outlines-like serve` does once loaded: the long-lived heap (vocabulary
            # tables, numba's modules) out of the collector's reach (server/memory.py)
            from outlines_like.server.memory import freeze_heap

            freeze_heap()

    def compile(self, kind: str, spec: str, vocab: Any) -> Any:
        from outlines_like.errors import UnsupportedConstraintError
        from outlines_like.fsm import compile_constraint
        from outlines_like.types import CFG, JsonSchema, Regex

        unsupported = _harness_error("Unsupported")
        if kind not in self.kinds:
            raise unsupported(f"{self.name} has no {kind} front-end")
        self.prepare(vocab)
        output_type: Any
        if kind == "regex":
            output_type = Regex(spec)
        elif kind == "json_schema":
            output_type = JsonSchema(spec, whitespace_pattern=self._whitespace)
        else:
            output_type = CFG(spec, "lark" if kind == "cfg_lark" else "ebnf")
        try:
            return compile_constraint(output_type, self._vocabs[vocab.name], **self._kwargs)
        except UnsupportedConstraintError as exc:
            raise unsupported(str(exc)[:200]) from None

    def matcher(self, compiled: Any) -> OutlinesLikeMatcher:
        return OutlinesLikeMatcher(compiled.matcher(), _harness_error("Rejected"))


# ----------------------------------------------------------------------------- runner


def _fmt_s(x: float | None) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    if x >= 1:
        return f"{x:.2f}s"
    if x >= 1e-3:
        return f"{x * 1e3:.1f}ms"
    return f"{x * 1e6:.0f}us"


def _fmt_us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _ratio(ours: float | None, best: float | None) -> str:
    if ours is None or best is None or best <= 0:
        return "-"
    return f"{ours / best:.2f}x"


METRICS: tuple[tuple[str, str, str], ...] = (
    # (label, json key, unit)
    ("compile cold", "compile_cold_s", "s"),
    ("1st mask", "ttfm_s", "s"),
    ("mask mean", "mask_us_mean", "us"),
    ("min-of-walks", "mask_us_min_of_walks", "us"),
    ("p99", "mask_us_p99", "us"),
    ("1st walk", "mask_us_first_walk", "us"),
)


def _get(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    if isinstance(v, (int, float)):
        return float(v)
    return None


def summarize(out_dir: Path, vocabs: list[str]) -> str:
    """Build the ratio table from the harness's JSON results."""
    lines: list[str] = []
    for vname in vocabs:
        path = out_dir / f"{vname}.json"
        if not path.exists():
            lines.append(f"(no results for {vname} in {out_dir})")
            continue
        data = json.loads(path.read_text())
        rows = _rows_by_engine_case(data)
        ours = rows.get("outlines_like", {})
        lines.append(f"\n### {vname}: outlines_like / best anchor (lower is better)\n")
        head = "| case | ok | " + " | ".join(m[0] for m in METRICS) + " |"
        lines.append(head)
        lines.append("|" + "---|" * (2 + len(METRICS)))
        for case, row in ours.items():
            cells = [case, "yes" if row["ok"] else str(row.get("status"))]
            for _, key, unit in METRICS:
                mine = _get(row, key)
                anchors = [
                    _get(rows[a][case], key)
                    for a in ANCHORS
                    if a in rows and case in rows[a] and rows[a][case].get("ok") is True
                ]
                vals = [a for a in anchors if a is not None]
                best = min(vals) if vals else None
                show = _fmt_s if unit == "s" else _fmt_us
                cells.append(f"{show(mine)} ({_ratio(mine, best)})")
            lines.append("| " + " | ".join(cells) + " |")
        peak = _peaks(data)
        if peak:
            best_peak = min((v for k, v in peak.items() if k in ANCHORS), default=None)
            mine_peak = peak.get("outlines_like")
            lines.append(
                f"\npeak RSS: outlines_like {mine_peak} MB; anchors "
                + ", ".join(f"{k} {v} MB" for k, v in peak.items() if k in ANCHORS)
                + f" ({_ratio(mine_peak, best_peak)} of the best)"
            )
    return "\n".join(lines)


def _engine_names(data: dict[str, Any]) -> dict[str, str]:
    """Engine spec -> engine name, from the harness's ``setups``."""
    return {spec: str((s or {}).get("engine", spec)) for spec, s in data.get("setups", {}).items()}


def _rows_by_engine_case(data: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    names = _engine_names(data)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for spec, cases in data.get("results", {}).items():
        for case, row in cases.items():
            row = dict(row)
            row["ok"] = row.get("status") == "ok"
            out.setdefault(names.get(spec, spec), {})[case] = row
    return out


def _peaks(data: dict[str, Any]) -> dict[str, float]:
    names = _engine_names(data)
    return {
        names[spec]: round(float(s["peak_rss_mb"]), 1)
        for spec, s in data.get("setups", {}).items()
        if isinstance(s, dict) and isinstance(s.get("peak_rss_mb"), (int, float))
    }


def main(argv: list[str] | None = None) -> int:
    """Run the harness with our engine and the anchors, then print the ratio table."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--bench", default=str(REPO.parent / "shared" / "bench"), help="harness folder")
    p.add_argument("--python", default=sys.executable, help="python that runs bench.py")
    p.add_argument("--vocab", default="llama3,qwen3")
    p.add_argument("--engines", default=",".join(ANCHORS), help="anchors beside ours")
    p.add_argument("--cases", default="")
    p.add_argument("--out", default="bench-results")
    p.add_argument("--save-masks", action="store_true")
    p.add_argument("--summarize", metavar="OUT", help="only print the table from OUT")
    p.add_argument("extra", nargs="*", help="more bench.py arguments (after --)")
    args = p.parse_args(argv)
    vocabs = [v for v in args.vocab.split(",") if v]
    if args.summarize:
        print(summarize(Path(args.summarize), vocabs))
        return 0
    engines = ENGINE_SPEC + ("," + args.engines if args.engines else "")
    cmd = [
        args.python,
        str(Path(args.bench) / "bench.py"),
        "--vocab",
        args.vocab,
        "--engines",
        engines,
        "--out",
        args.out,
        *(["--cases", args.cases] if args.cases else []),
        *(["--save-masks"] if args.save_masks else []),
        *args.extra,
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    rc = subprocess.call(cmd, env=env)
    print(summarize(Path(args.out), vocabs))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
