"""Reference-server throughput: tokens/s and p50/p99 latency at 1, 8 and 32 concurrent clients.

Each client sends chat requests back to back (``max_tokens`` tokens each, ``ignore_eos`` so
every request generates exactly that many), unconstrained or constrained by a JSON-like regex
that walks many DFA states. The server's ``/stats`` gives the masker's share of step time
(filling and applying bitmasks, advancing matchers).

    python benchmarks/server_throughput.py                 # tiny model, both modes
    python benchmarks/server_throughput.py --model PATH --max-tokens 64 --requests-per-client 4
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import statistics
import time
from typing import Any

import httpx

from outlines_like.server.config import ServerConfig
from outlines_like.server.run import ServerThread

CONSTRAINT = r'(\{"id":[0-9]{1,4},"color":"(red|green|blue)","ok":(true|false)\} ?)+'


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


def run_case(
    base: str, clients: int, per_client: int, max_tokens: int, constrained: bool
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Give me records."}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "ignore_eos": True,
    }
    if constrained:
        body["structured_outputs"] = {"regex": CONSTRAINT}
    before = httpx.get(base + "/stats").json()

    def client(i: int) -> tuple[list[float], int]:
        latencies, tokens = [], 0
        with httpx.Client(timeout=300) as http:
            for j in range(per_client):
                t0 = time.perf_counter()
                r = http.post(base + "/v1/chat/completions", json={**body, "seed": i * 1000 + j})
                r.raise_for_status()
                latencies.append(time.perf_counter() - t0)
                tokens += r.json()["usage"]["completion_tokens"]
        return latencies, tokens

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(client, range(clients)))
    wall = time.perf_counter() - start
    after = httpx.get(base + "/stats").json()
    latencies = [x for lat, _ in results for x in lat]
    tokens = sum(t for _, t in results)
    step = after["step_seconds"] - before["step_seconds"]
    mask = after["mask_seconds"] - before["mask_seconds"]
    steps = after["steps"] - before["steps"]
    rows = after["rows"] - before["rows"]
    return {
        "clients": clients,
        "mode": "constrained" if constrained else "unconstrained",
        "requests": len(latencies),
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "p50_s": statistics.median(latencies),
        "p99_s": _percentile(latencies, 0.99),
        "mean_batch": rows / steps if steps else 0.0,
        "step_ms": 1000 * step / steps if steps else 0.0,
        "mask_share": mask / step if step else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--requests-per-client", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per cell, interleaved; the fastest is kept"
    )
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    args = parser.parse_args()
    with ServerThread(ServerConfig(model=args.model, max_batch_size=64)) as server:
        base = server.base_url
        # warm-up: compile the constraint and visit its states once
        run_case(base, 2, 1, args.max_tokens, True)
        run_case(base, 2, 1, args.max_tokens, False)
        rows = []
        for clients in (int(c) for c in args.clients.split(",")):
            best: dict[bool, dict[str, Any]] = {}
            for _ in range(args.repeat):  # interleaved, so that load spikes hit both modes
                for constrained in (False, True):
                    got = run_case(
                        base, clients, args.requests_per_client, args.max_tokens, constrained
                    )
                    if (
                        constrained not in best
                        or got["tokens_per_s"] > best[constrained]["tokens_per_s"]
                    ):
                        best[constrained] = got
            for constrained in (False, True):
                result = best[constrained]
                rows.append(result)
                if args.json:
                    print(json.dumps(result), flush=True)
                else:
                    print(
                        f"{clients:>3} clients {result['mode']:<13} "
                        f"{result['tokens_per_s']:8.1f} tok/s  "
                        f"p50 {result['p50_s']:6.2f} s  p99 {result['p99_s']:6.2f} s  "
                        f"batch {result['mean_batch']:5.1f}  step {result['step_ms']:6.1f} ms  "
                        f"masker {100 * result['mask_share']:4.1f}% of step",
                        flush=True,
                    )
        for clients in sorted({r["clients"] for r in rows}):
            free = next(r for r in rows if r["clients"] == clients and r["mode"] == "unconstrained")
            cons = next(r for r in rows if r["clients"] == clients and r["mode"] == "constrained")
            print(
                f"{clients:>3} clients: constrained/unconstrained = "
                f"{cons['tokens_per_s'] / free['tokens_per_s']:.2f}"
            )


if __name__ == "__main__":
    main()
