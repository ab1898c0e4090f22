"""vLLM with our logits processor vs vLLM's own structured outputs (xgrammar) vs unconstrained.

One vLLM process serves all three modes (started here with ``--logits-processors
outlines_like.integrations.vllm:OutlinesLikeLogitsProcessor``, or given with ``--url``):

* ``unconstrained``: plain requests;
* ``xgrammar``: ``structured_outputs.regex`` (``from_server(client, "vllm")``'s fields);
* ``outlines_like``: ``vllm_xargs`` (``from_server(..., masker="outlines_like")``'s fields).

Each client sends chat requests back to back, ``max_tokens`` tokens each with ``ignore_eos`` (the
constraint is a repeating JSON-like regex that never has to end), at 1, 8 and 32 concurrent
clients. The processor writes its time per step to ``OUTLINES_LIKE_VLLM_STATS``, which gives
the masker's share of step time in the ``outlines_like`` runs.

    python -m benchmarks.vllm_plugin            # CPU: the shared toolkit's venv and tiny model
    python -m benchmarks.vllm_plugin --python .venv-vllm/bin/python --model Qwen/Qwen3-0.6B \\
        --no-enforce-eager                                # a GPU box: the same script
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import httpx

from outlines_like.adapters.vllm import VLLMAdapter
from outlines_like.types import Regex

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORKDIR = pathlib.Path(os.environ.get("OL_SERVERS_WORKDIR", ROOT / ".cache" / "servers"))
PROCESSOR = "outlines_like.integrations.vllm:OutlinesLikeLogitsProcessor"
CONSTRAINT = Regex(r'(\{"id":[0-9]{1,4},"color":"(red|green|blue)","ok":(true|false)\} ?)+')
MODES = ("unconstrained", "xgrammar", "outlines_like")


def mode_fields(mode: str) -> dict[str, Any]:
    """The request fields of each mode, as the adapters write them."""
    if mode == "unconstrained":
        return {}
    masker = "outlines_like" if mode == "outlines_like" else "server"
    fields = VLLMAdapter("0.32.0", masker=masker).constraint_fields(CONSTRAINT, endpoint="chat")
    return dict(fields.get("extra_body", {}))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    args: argparse.Namespace, stats: pathlib.Path
) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="olv-"))
    cache = WORKDIR / "cache"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OUTLINES_LIKE_VLLM_STATS": str(stats),
        "TMPDIR": str(tmp),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"),
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    env.pop("VLLM_PORT", None)
    command = [
        args.python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        args.model,
        "--served-model-name",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--logits-processors",
        PROCESSOR,
        "--structured-outputs-config",
        '{"backend": "xgrammar", "disable_any_whitespace": true}',
    ]
    if args.enforce_eager:
        command.append("--enforce-eager")
    log = open(args.log, "wb")  # noqa: SIM115 - kept open for the server's life
    proc = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, args.log)
    except SystemExit:
        os.killpg(proc.pid, signal.SIGTERM)
        raise
    return proc, url


def wait_ready(url: str, proc: subprocess.Popen[bytes] | None, log: str) -> None:
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"vLLM exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise SystemExit(f"vLLM at {url} not ready after 900 s; see {log}")


def read_stats(path: pathlib.Path) -> dict[str, float]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {"steps": 0, "processor_s": 0.0, "step_s": 0.0, "masked_rows": 0, "masked_steps": 0}


def run_case(url: str, mode: str, clients: int, per_client: int, max_tokens: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Give me records."}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "ignore_eos": True,
        **mode_fields(mode),
    }

    def client(i: int) -> int:
        tokens = 0
        with httpx.Client(timeout=600) as http:
            for j in range(per_client):
                r = http.post(url + "/v1/chat/completions", json={**body, "seed": i * 1000 + j})
                r.raise_for_status()
                answer = r.json()
                tokens += answer["usage"]["completion_tokens"]
        return tokens

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(client, range(clients)))
    wall = time.perf_counter() - start
    return {
        "mode": mode,
        "clients": clients,
        "tokens": tokens,
        "seconds": wall,
        "tok_s": tokens / wall,
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median run by tokens/s, with every run's figure and the masker's share summed."""
    ordered = sorted(runs, key=lambda r: r["tok_s"])
    result = dict(ordered[len(ordered) // 2])
    result["tok_s_runs"] = [r["tok_s"] for r in runs]
    if "processor_s" in result:
        busy = sum(r["processor_s"] for r in runs)
        step = sum(r["step_s"] for r in runs)
        steps = sum(r["steps"] for r in runs)
        result["masker_share"] = busy / step if step > 0 else None
        result["masker_ms_per_step"] = 1000 * busy / steps if steps else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running vLLM started with our processor (and stats env)")
    parser.add_argument("--stats", help="its OUTLINES_LIKE_VLLM_STATS file (with --url)")
    parser.add_argument("--python", default=str(WORKDIR / "venv-vllm" / "bin" / "python"))
    parser.add_argument("--model", default=str(WORKDIR / "tiny-qwen3"))
    parser.add_argument("--no-enforce-eager", dest="enforce_eager", action="store_false")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--requests-per-client", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--log", default=str(pathlib.Path(tempfile.gettempdir()) / "vllm-plugin-bench.log")
    )
    parser.add_argument("--out", default=str(ROOT / "bench-results" / "vllm_plugin.json"))
    args = parser.parse_args()

    proc = None
    if args.url:
        url, stats = args.url.rstrip("/"), pathlib.Path(args.stats or "/nonexistent")
        wait_ready(url, None, "its log")
    else:
        stats = pathlib.Path(tempfile.mkdtemp(prefix="olv-stats-")) / "stats.json"
        proc, url = start_server(args, stats)
    results: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    try:
        for mode in MODES:  # warm-up: compile, first masks, first xgrammar grammar
            run_case(url, mode, 1, 1, 8)
        for clients in (int(c) for c in args.clients.split(",")):
            runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            for repeat in range(args.repeats):  # interleaved, rotated: load drifts on shared CPUs
                for k in range(len(MODES)):
                    mode = MODES[(k + repeat) % len(MODES)]
                    before = read_stats(stats)
                    run = run_case(url, mode, clients, args.requests_per_client, args.max_tokens)
                    after = read_stats(stats)
                    if mode == "outlines_like":
                        run["processor_s"] = after["processor_s"] - before["processor_s"]
                        run["step_s"] = after["step_s"] - before["step_s"]
                        run["steps"] = after["steps"] - before["steps"]
                    runs[mode].append(run)
            for mode in MODES:
                result = median_run(runs[mode])
                results.append(result)
                share = result.get("masker_share")
                print(
                    f"{clients:>3} clients  {mode:<14} {result['tok_s']:8.1f} tok/s"
                    + (f"  masker {100 * share:.1f}% of step time" if share is not None else ""),
                    flush=True,
                )
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
    load_after = os.getloadavg()
    by = {(r["mode"], r["clients"]): r["tok_s"] for r in results}
    ratios = {
        str(c): {
            "outlines_like/xgrammar": by[("outlines_like", c)] / by[("xgrammar", c)],
            "outlines_like/unconstrained": by[("outlines_like", c)] / by[("unconstrained", c)],
            "xgrammar/unconstrained": by[("xgrammar", c)] / by[("unconstrained", c)],
        }
        for c in sorted({r["clients"] for r in results})
    }
    for c, r in ratios.items():
        print(f"{c:>3} clients  " + "  ".join(f"{k} {v:.2f}" for k, v in r.items()))
    cpus = os.cpu_count()
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f} ({cpus} CPUs)")
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "results": results,
                "ratios": ratios,
                "load_before": load_before,
                "load_after": load_after,
                "cpus": os.cpu_count(),
                "model": args.model,
                "max_tokens": args.max_tokens,
                "python": sys.version,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
