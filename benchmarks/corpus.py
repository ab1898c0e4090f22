"""Real-world JSON Schema corpus: our masker beside llguidance and xgrammar, one pass per document.

Schemas come from packages on the registry (``pip install -e '.[bench]'``): the Kubernetes
schemas of ``kubernetes-validate`` (the newest ``-local-strict`` release, with the shared
``_definitions.json`` inlined as ``$defs``), the schemastore schemas vendored by
``check-jsonschema``, and the schemas of our tests (``tests/types/schemas``: OpenAI
function-calling tools, pydantic models ...). A seeded sample (``--limit``) takes every
non-Kubernetes schema, then Kubernetes ones up to the limit.

Each schema gets a few valid documents (``corpus_docs``: a seeded generator, each document
checked with ``jsonschema`` and its format checker) and invalid ones (seeded mutations of the
valid ones: a value of another type, a member removed or added, a string or number out of
range; kept only when ``jsonschema`` rejects them). Documents are written compact, members in
schema order, and tokenized with llama3 (``quicktok-v1``, through the harness's ``vocab.py``).

Each engine runs in its own worker process, one engine after the other (the machine's cores are
not shared between engines): per schema one compile, then each document walked once (no
repeated walks), timing every ``fill_mask``. A schema that runs past ``--budget`` seconds or
past ``--mem-limit-mb`` of resident memory kills the worker (reported as timeout / oom) and a
fresh worker takes the next schema.

    python benchmarks/corpus.py --limit 300                      # -> ~/.cache/ol-bench/corpus
    python benchmarks/corpus.py --limit 50 --engines outlines_like,llguidance --out /tmp/c
    python benchmarks/corpus.py --summarize ~/.cache/ol-bench/corpus   # re-print the tables

The engines are the shared harness's wrappers (``--harness``, default ``../shared/bench``):
xgrammar with ``any_whitespace=True`` and its default threads, llguidance with its defaults,
ours through ``benchmarks/masking.py``'s ``OutlinesLikeEngine`` (``whitespace_pattern="[ ]?"``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import random
import sys
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

# this checkout's package (not another installed copy), and the sibling module; spawned
# workers inherit the path
sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
import corpus_docs  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
MASKING = Path(__file__).resolve().parent / "masking.py"
ENGINES = ("outlines_like", "llguidance", "xgrammar")
ANCHORS = ("llguidance", "xgrammar")
K8S_FLAVOUR = "-local-strict"  # the newest release of this flavour is used


def default_harness() -> Path:
    for path in (REPO.parent / "shared" / "bench", Path("/work/shared/bench")):
        if (path / "engines.py").is_file():
            return path
    return REPO.parent / "shared" / "bench"


# ------------------------------------------------------------------------- schemas


def _site_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not installed: pip install -e '.[bench]'")
    return Path(next(iter(spec.submodule_search_locations)))


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for v in node.values():
            yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _rewrite_refs(node: Any, prefix: str) -> Any:
    if isinstance(node, dict):
        out = {k: _rewrite_refs(v, prefix) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith(prefix):
            out["$ref"] = "#" + ref[len(prefix) :]
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v, prefix) for v in node]
    return node


def kubernetes_schemas() -> list[tuple[str, dict[str, Any]]]:
    """Every Kubernetes schema of one release, made standalone (``$defs`` inlined)."""
    base = _site_dir("kubernetes_validate") / "kubernetes-json-schema"
    releases = [p for p in base.iterdir() if p.name.endswith(K8S_FLAVOUR)]
    folder = max(releases, key=lambda p: tuple(int(x) for x in p.name[1:].split("-")[0].split(".")))
    defs = json.loads((folder / "_definitions.json").read_text())["$defs"]
    prefix = "/api/_definitions.json#"
    out = []
    for path in sorted(folder.glob("*.json")):
        if path.name in ("_definitions.json", "all.json"):
            continue
        schema = _rewrite_refs(json.loads(path.read_text()), prefix)
        needed: dict[str, Any] = {}
        todo = [r for r in _refs(schema) if r.startswith("#/$defs/")]
        while todo:
            name = todo.pop()[len("#/$defs/") :]
            if name in needed or name not in defs:
                continue
            needed[name] = defs[name]
            todo.extend(r for r in _refs(defs[name]) if r.startswith("#/$defs/"))
        if needed:
            schema["$defs"] = {k: needed[k] for k in sorted(needed)}
        schema.pop("$id", None)
        out.append((f"k8s/{path.stem}", schema))
    return out


def schemastore_schemas() -> list[tuple[str, dict[str, Any]]]:
    """The schemastore schemas vendored by check-jsonschema."""
    folder = _site_dir("check_jsonschema") / "builtin_schemas"
    return [
        (f"schemastore/{p.stem}", json.loads(p.read_text())) for p in sorted(folder.rglob("*.json"))
    ]


def test_schemas() -> list[tuple[str, dict[str, Any]]]:
    """The schemas of our tests (OpenAI tools, pydantic models, hand-written cases)."""
    folder = REPO / "tests" / "types" / "schemas"
    return [(f"tests/{p.stem}", json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]


def sample_schemas(limit: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """Every non-Kubernetes schema, then a seeded sample of Kubernetes ones, up to ``limit``."""
    rng = random.Random(seed)
    small = test_schemas() + schemastore_schemas()
    k8s = kubernetes_schemas()
    rng.shuffle(small)
    rng.shuffle(k8s)
    picked = (small + k8s[: max(0, limit - len(small))])[:limit]
    return sorted(picked, key=lambda item: item[0])


# ------------------------------------------------------------------------- documents


def _compact(text: str) -> str:
    return json.dumps(json.loads(text), separators=(",", ":"), ensure_ascii=False)


def _generate_worker(conn: Connection) -> None:
    while True:
        job = conn.recv()
        if job is None:
            return
        try:
            docs = corpus_docs.make_documents(
                job["schema"], job["seed"], job["n_valid"], job["n_invalid"]
            )
            conn.send({"ok": True, **docs})
        except Exception as exc:
            conn.send({"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})


# ------------------------------------------------------------------------- workers


class Worker:
    """A child process answering jobs over a pipe, killed on a time or memory overrun."""

    def __init__(self, target: Any, args: tuple[Any, ...], mem_limit_mb: int) -> None:
        self.target, self.args, self.mem_limit_mb = target, args, mem_limit_mb
        self.proc: Any = None
        self.conn: Connection | None = None

    def start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=self.target, args=(child, *self.args), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent

    def rss_mb(self) -> float:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def ask(self, job: Any, budget: float) -> tuple[str, Any]:
        """Send ``job``; return ("ok", answer), ("timeout", None), ("oom", mb) or ("died", None)."""
        if self.proc is None or not self.proc.is_alive():
            self.start()
        assert self.conn is not None
        self.conn.send(job)
        deadline = time.monotonic() + budget
        peak = 0.0
        while True:
            if self.conn.poll(0.05):
                try:
                    return "ok", self.conn.recv()
                except EOFError:
                    self.stop()
                    return "died", None
            peak = max(peak, self.rss_mb())
            if peak > self.mem_limit_mb:
                self.stop()
                return "oom", round(peak)
            if not self.proc.is_alive():
                self.stop()
                return "died", None
            if time.monotonic() > deadline:
                self.stop()
                return "timeout", None

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
        self.proc, self.conn = None, None


def _load_engine(name: str, harness: str) -> Any:
    sys.path.insert(0, harness)
    import engines  # type: ignore[import-not-found]

    if name == "outlines_like":
        spec = importlib.util.spec_from_file_location("ol_masking", MASKING)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["ol_masking"] = module
        spec.loader.exec_module(module)
        return module.OutlinesLikeEngine()
    cls = engines.ENGINES[name]
    return cls()


def _engine_worker(conn: Connection, name: str, harness: str, vocab_name: str, log: str) -> None:
    """Compile each schema once and walk each of its documents once, timing every mask."""
    with open(log, "a") as f:  # the engines' warnings go to OUT/<engine>.log
        os.dup2(f.fileno(), 2)
    t0 = time.perf_counter()
    engine = _load_engine(name, harness)
    import engines
    import vocab as vocab_mod  # type: ignore[import-not-found]

    vocab = vocab_mod.get_vocab(vocab_name)
    engine.prepare(vocab)
    conn.send({"setup_s": time.perf_counter() - t0, "version": engine.version()})
    rejected_types: tuple[type[BaseException], ...] = (engines.Unsupported,)
    if name == "outlines_like":
        from outlines_like.errors import OutlinesLikeError

        rejected_types = (engines.Unsupported, OutlinesLikeError)
    mask = np.zeros((1, vocab.mask_words), dtype=np.int32)
    eos = vocab.eos_id
    while True:
        job = conn.recv()
        if job is None:
            return
        out: dict[str, Any] = {}
        try:
            start = time.perf_counter()
            compiled = engine.compile("json_schema", job["schema"], vocab)
            matcher = engine.matcher(compiled)
            out["compile_s"] = time.perf_counter() - start
        except rejected_types as exc:  # (the time to the verdict: a refusal should be quick)
            verdict_s = time.perf_counter() - start
            conn.send({"status": "rejected", "error": str(exc)[:300], "verdict_s": verdict_s})
            continue
        except Exception as exc:
            conn.send({"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            continue
        masks: list[float] = []
        results = []
        try:
            for i, doc in enumerate(job["docs"]):
                if i:
                    matcher = engine.matcher(compiled)
                accepted, why = True, ""
                for tok in [*doc["tokens"], eos]:
                    mask.fill(-1)
                    t = time.perf_counter()
                    matcher.fill_mask(mask)
                    masks.append(time.perf_counter() - t)
                    if len(masks) == 1:
                        out["first_mask_s"] = masks[0]
                    if not (int(mask[0, tok // 32]) >> (tok % 32)) & 1:
                        accepted, why = False, "not in mask"
                        break
                    try:
                        matcher.advance(tok)
                    except engines.Rejected:
                        accepted, why = False, "MASK ALLOWED, ADVANCE REFUSED"
                        break
                if accepted and not matcher.is_finished():
                    accepted, why = False, "not finished after EOS"
                results.append({"accepted": accepted, "why": why})
        except Exception:
            conn.send({"status": "error", "error": traceback.format_exc()[-400:]})
            continue
        out.update(status="ok", masks_us=[round(m * 1e6, 2) for m in masks], results=results)
        conn.send(out)


# ------------------------------------------------------------------------- running


def prepare_corpus(args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Sample the schemas and generate their documents.

    Documents are cached per schema in ``out/corpus.json`` (for the same seed and counts), so a
    run with another ``--limit`` only generates what is new.
    """
    cache = out / "corpus.json"
    key = {
        "seed": args.seed,
        "docs": [args.valid, args.invalid],
        "vocab": args.vocab,
        "generator": corpus_docs.GENERATOR,
    }
    known: dict[str, dict[str, Any]] = {}
    if cache.exists():
        data = json.loads(cache.read_text())
        if data.get("key") == key:
            known = {e["name"]: e for e in data["schemas"]}
    sys.path.insert(0, str(args.harness))
    import vocab as vocab_mod

    vocab = vocab_mod.get_vocab(args.vocab)
    schemas = sample_schemas(args.limit, args.seed)
    worker = Worker(_generate_worker, (), args.mem_limit_mb)
    entries = []
    start = time.monotonic()
    for i, (name, schema) in enumerate(schemas):
        text = json.dumps(schema)
        if name in known and known[name]["schema"] == text:
            entries.append(known[name])
            continue
        job = {
            "schema": schema,
            "seed": args.seed,
            "n_valid": args.valid,
            "n_invalid": args.invalid,
        }
        status, answer = worker.ask(job, args.gen_budget)
        entry: dict[str, Any] = {"name": name, "schema": text, "docs": []}
        if status != "ok" or not answer["ok"]:
            entry["gen_error"] = answer["error"] if status == "ok" else status
        else:
            for valid in (True, False):
                for doc in answer["valid" if valid else "invalid"]:
                    compact = _compact(doc)
                    entry["docs"].append(
                        {"valid": valid, "text": compact, "tokens": vocab.encode(compact)}
                    )
        entries.append(entry)
        known[name] = entry
        if (i + 1) % 25 == 0:
            elapsed = time.monotonic() - start
            print(f"corpus: {i + 1}/{len(schemas)} in {elapsed:.0f} s", file=sys.stderr)
    worker.stop()
    cache.write_text(json.dumps({"key": key, "schemas": list(known.values())}))
    return entries


def _start_engine_worker(worker: Worker, name: str) -> dict[str, Any]:
    worker.start()
    assert worker.conn is not None
    if not worker.conn.poll(300):
        raise SystemExit(f"{name}: the worker did not start within 300 s")
    hello: dict[str, Any] = worker.conn.recv()
    return hello


def run_engine(name: str, corpus: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Run one engine over the corpus in its own (restartable) worker."""
    log = str(args.out.resolve() / f"{name}.log")
    worker = Worker(_engine_worker, (name, str(args.harness), args.vocab, log), args.mem_limit_mb)
    hello = _start_engine_worker(worker, name)
    print(f"{name}: {hello['version']}, setup {hello['setup_s']:.1f} s", file=sys.stderr)
    rows = []
    start = time.monotonic()
    for i, entry in enumerate(corpus):
        if not entry["docs"]:
            continue
        if worker.proc is None:  # killed on the previous schema
            _start_engine_worker(worker, name)
        job = {"schema": entry["schema"], "docs": entry["docs"]}
        status, answer = worker.ask(job, args.budget)
        row: dict[str, Any] = {"name": entry["name"]}
        if status == "ok":
            row.update(answer)
        else:
            row.update(status=status, error=f"{status} ({answer} MB)" if answer else status)
        rows.append(row)
        if (i + 1) % 25 == 0:
            print(
                f"{name}: {i + 1}/{len(corpus)} in {time.monotonic() - start:.0f} s",
                file=sys.stderr,
            )
    worker.stop()
    return {
        "engine": name,
        "version": hello["version"],
        "setup_s": hello["setup_s"],
        "rows": rows,
        "wall_s": time.monotonic() - start,
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return float(np.percentile(np.asarray(values), q))


def summarize(
    run: dict[str, Any], corpus: list[dict[str, Any]], only: set[str] | None = None
) -> dict[str, Any]:
    """Per-engine figures: coverage, correctness, compile / first-mask / mask percentiles.

    ``only``: restrict to these schemas (those every engine compiled, for the ratios).
    """
    docs = {e["name"]: e["docs"] for e in corpus}
    rows = [r for r in run["rows"] if only is None or r["name"] in only]
    ok = [r for r in rows if r["status"] == "ok"]
    counts = {
        s: sum(r["status"] == s for r in rows)
        for s in ("ok", "rejected", "timeout", "oom", "error", "died")
    }
    inv_acc = val_ref = inv_n = val_n = disagree = 0
    wrong: list[dict[str, Any]] = []
    for r in ok:
        for doc, res in zip(docs[r["name"]], r["results"], strict=True):
            if "ADVANCE" in res["why"]:
                disagree += 1
            if doc["valid"]:
                val_n += 1
                val_ref += not res["accepted"]
            else:
                inv_n += 1
                inv_acc += res["accepted"]
            if res["accepted"] != doc["valid"]:
                wrong.append(
                    {
                        "schema": r["name"],
                        "valid": doc["valid"],
                        "text": doc["text"][:300],
                        "why": res["why"],
                    }
                )
    compile_ms = [r["compile_s"] * 1e3 for r in ok]
    ttfm_ms = [(r["compile_s"] + r.get("first_mask_s", 0.0)) * 1e3 for r in ok]
    masks = [m for r in ok for m in r["masks_us"]]
    reject_ms = [r["verdict_s"] * 1e3 for r in rows if "verdict_s" in r]
    return {
        "engine": run["engine"],
        "version": run["version"],
        "schemas": len(rows),
        "counts": counts,
        "coverage": counts["ok"] / max(1, len(rows)),
        "invalid_accepted": inv_acc,
        "invalid": inv_n,
        "valid_refused": val_ref,
        "valid": val_n,
        "mask_advance_disagree": disagree,
        "compile_ms": {q: _pct(compile_ms, q) for q in (50, 75, 99)},
        "ttfm_ms": {q: _pct(ttfm_ms, q) for q in (50, 75, 99)},
        "mask_us": {**{q: _pct(masks, q) for q in (50, 90, 99)}, "max": max(masks, default=None)},
        "reject_ms": {
            **{q: _pct(reject_ms, q) for q in (50, 99)},
            "max": max(reject_ms, default=None),
        },
        "masks": len(masks),
        "wall_s": run["wall_s"],
        "wrong": wrong,
        "rejections": [
            {
                "schema": r["name"],
                "status": r["status"],
                "error": r.get("error", ""),
                "ms": r["verdict_s"] * 1e3 if "verdict_s" in r else None,
            }
            for r in rows
            if r["status"] != "ok"
        ],
    }


def _f(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:,.0f}{unit}"
    return f"{x:.1f}{unit}" if x >= 10 else f"{x:.2f}{unit}"


def _qs(figures: dict[Any, float | None], qs: tuple[Any, ...]) -> str:
    return " / ".join(_f(figures[q]) for q in qs)


def _engine_table(summaries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| engine | compiled | rejected | timeout / oom / crash | invalid accepted "
        "| valid refused | compile ms p50 / p75 / p99 | first mask ms p50 / p75 / p99 "
        "| mask µs p50 / p90 / p99 / max | rejected in ms p50 / p99 / max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        c = s["counts"]
        lines.append(
            f"| {s['engine']} {s['version'].split()[-1]} "
            f"| {c['ok']}/{s['schemas']} ({100 * s['coverage']:.1f}%) | {c['rejected']} "
            f"| {c['timeout']} / {c['oom']} / {c['error'] + c['died']} "
            f"| {s['invalid_accepted']}/{s['invalid']} | {s['valid_refused']}/{s['valid']} "
            f"| {_qs(s['compile_ms'], (50, 75, 99))} | {_qs(s['ttfm_ms'], (50, 75, 99))} "
            f"| {_qs(s['mask_us'], (50, 90, 99, 'max'))} "
            f"| {_qs(s['reject_ms'], (50, 99, 'max'))} |"
        )
    return lines


def _ratios(summaries: list[dict[str, Any]], coverage: dict[str, float]) -> list[str]:
    ours = next((s for s in summaries if s["engine"] == "outlines_like"), None)
    anchors = [s for s in summaries if s["engine"] in ANCHORS]
    if not ours or not anchors:
        return []
    lines = ["| figure | ours | best anchor | ours / best |", "|---|---|---|---|"]
    for label, field, qs in (
        ("compile ms", "compile_ms", (50, 75, 99)),
        ("first mask ms", "ttfm_ms", (50, 75, 99)),
        ("mask µs", "mask_us", (50, 90, 99, "max")),
    ):
        for q in qs:
            vals = [(a[field][q], a["engine"]) for a in anchors if a[field][q] is not None]
            if not vals or ours[field][q] is None:
                continue
            best, who = min(vals)
            name = f"{label} {'p' if q != 'max' else ''}{q}"
            lines.append(
                f"| {name} | {_f(ours[field][q])} | {_f(best)} ({who}) "
                f"| {ours[field][q] / best:.1f}x |"
            )
    best_cov, who = max((coverage[a["engine"]], a["engine"]) for a in anchors)
    lines.append(
        f"| coverage (all schemas) | {100 * coverage['outlines_like']:.1f}% "
        f"| {100 * best_cov:.1f}% ({who}) | {coverage['outlines_like'] / best_cov:.2f}x |"
    )
    return lines


def markdown(
    summaries: list[dict[str, Any]], common: list[dict[str, Any]], meta: dict[str, Any]
) -> str:
    """The tables: per engine (all schemas, then those every engine compiled), and ratios."""
    walls = ", ".join(f"{s['engine']} {s['wall_s']:.0f} s" for s in summaries)
    lines = [
        f"Corpus: {meta['schemas']} schemas sampled (seed {meta['seed']}), "
        f"{meta['with_docs']} with documents, {meta['valid']} valid and {meta['invalid']} "
        f"invalid documents, vocabulary {meta['vocab']}, budget {meta.get('budget', '?')} s "
        f"per schema. {meta['date']}, load average {meta['load_before']} before / "
        f"{meta['load_after']} after; wall {walls}.",
        "",
        "All schemas with documents:",
        "",
        *_engine_table(summaries),
        "",
        f"The {common[0]['schemas'] if common else 0} schemas every engine compiled:",
        "",
        *_engine_table(common),
        "",
        "Ours against the best anchor on those schemas (lower is better):",
        "",
        *_ratios(common, {s["engine"]: s["coverage"] for s in summaries}),
    ]
    return "\n".join(lines)


def report(
    runs: list[dict[str, Any]], corpus: list[dict[str, Any]], meta: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The markdown, and the summaries over all schemas and over those every engine compiled."""
    summaries = [summarize(r, corpus) for r in runs]
    compiled = [{row["name"] for row in r["rows"] if row["status"] == "ok"} for r in runs]
    common_names = set.intersection(*compiled) if compiled else set()
    common = [summarize(r, corpus, common_names) for r in runs]
    text = markdown(summaries, common, meta)
    return text, {"meta": meta, "summaries": summaries, "common": common, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=300, help="schemas in the sample")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--valid", type=int, default=3, help="valid documents per schema")
    p.add_argument("--invalid", type=int, default=3, help="invalid documents per schema")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--vocab", default="llama3")
    p.add_argument("--budget", type=float, default=30.0, help="seconds per schema and engine")
    p.add_argument("--gen-budget", type=float, default=20.0, help="seconds to generate documents")
    p.add_argument("--mem-limit-mb", type=int, default=4000, help="worker resident memory limit")
    p.add_argument("--harness", type=Path, default=default_harness())
    p.add_argument("--out", type=Path, default=Path.home() / ".cache" / "ol-bench" / "corpus")
    p.add_argument("--summarize", type=Path, help="only re-print the tables of a finished run")
    args = p.parse_args(argv)
    if args.summarize:
        data = json.loads((args.summarize / "corpus-results.json").read_text())
        corpus = json.loads((args.summarize / "corpus.json").read_text())["schemas"]
        print(report(data["runs"], corpus, data["meta"])[0])
        return 0
    out = args.out.resolve()
    if out == REPO or REPO in out.parents:
        raise SystemExit(f"--out {out} is inside the repository; pick a folder outside it")
    out.mkdir(parents=True, exist_ok=True)
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    corpus = prepare_corpus(args, out)
    runs = [run_engine(name, corpus, args) for name in args.engines.split(",")]
    meta = {
        "schemas": len(corpus),
        "with_docs": sum(bool(e["docs"]) for e in corpus),
        "valid": sum(d["valid"] for e in corpus for d in e["docs"]),
        "invalid": sum(not d["valid"] for e in corpus for d in e["docs"]),
        "gen_errors": {e["name"]: e["gen_error"] for e in corpus if "gen_error" in e},
        "seed": args.seed,
        "vocab": args.vocab,
        "budget": args.budget,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_before": load_before,
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
    }
    text, results = report(runs, corpus, meta)
    (out / "corpus-results.md").write_text(text + "\n")
    (out / "corpus-results.json").write_text(json.dumps(results, indent=1))
    print(text)
    print(f"\nresults: {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
