"""Soak test of the reference server: steady mixed traffic with 5 % hostile requests (issue 12).

Starts ``outlines-like serve --model tiny`` as a subprocess on a free loopback port, then runs
two phases with the same clients: a baseline without hostile traffic, and the soak proper,
where for each victim request a hostile one is launched on the side with probability
``--hostile`` (5 %: about one request in twenty is hostile); victims keep their 32 clients in
both phases, so the latencies compare like with like. Hostile requests are the
attacks of issue 12, varied so that the server's memory of failed constraints does not make
them free (nested arrays of random depth, ``$ref`` chains, state-limit regexes, grammars
without base case, thousands of alternatives, request templates, lone surrogates, bad seeds,
clients that disconnect or drop mid-body). Victims are the other requests: free text, regex,
choice and JSON Schema constraints, some streamed; each answer is checked.

Reports the victims' error rate (goal: 0), their p50/p99 latency in both phases (goal: p99
within 2x of the baseline) and the server's resident memory over time (goal: flat): RSS and
the constraint cache's bytes every minute (sampled every 5 s), and the RSS slope over the
last 20 minutes of the soak (``--flat-minutes``), once the byte-bounded cache has filled.
The per-minute table goes to stderr, the JSON report to stdout.

    python benchmarks/soak.py                       # 30 minutes of soak, 10 of baseline
    python benchmarks/soak.py --minutes 3 --baseline-minutes 1
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

_SAMPLE_S = 5.0
"""Seconds between samples of the server's RSS and cache size."""

SCHEMA = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
    },
    "required": ["n", "ok"],
    "additionalProperties": False,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


# -- victims -----------------------------------------------------------------------------------


def _victim(rng: random.Random) -> tuple[str, dict[str, Any], Callable[[str], bool]]:
    """A normal request: (path, body, check of the answer's text)."""
    kind = rng.choice(["free", "regex", "choice", "schema"])
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"request {rng.randrange(10**6)}"}],
        "max_tokens": rng.choice([8, 16, 24]),
        "temperature": rng.choice([0.0, 0.7]),
    }
    check: Callable[[str], bool] = lambda text: isinstance(text, str)  # noqa: E731
    if kind == "regex":
        body["regex"] = "[a-z]{2,5}-[0-9]{2}"
        check = lambda text: re.fullmatch("[a-z]{2,5}-[0-9]{2}", text) is not None  # noqa: E731
    elif kind == "choice":
        body["structured_outputs"] = {"choice": ["red", "green", "blue"]}
        check = lambda text: text in ("red", "green", "blue")  # noqa: E731
    elif kind == "schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": SCHEMA},
        }
        body["max_tokens"] = 40

        def check(text: str) -> bool:
            try:
                value = json.loads(text)
            except ValueError:
                return False
            return isinstance(value, dict) and set(value) == {"n", "ok"}

    return "/v1/chat/completions", body, check


def _read_answer(http: httpx.Client, path: str, body: dict[str, Any], stream: bool) -> str:
    if not stream:
        response = http.post(path, json=body)
        response.raise_for_status()
        message = response.json()["choices"][0]["message"]
        content: str = message["content"] or ""
        return content
    parts: list[str] = []
    finished = False
    with http.stream("POST", path, json={**body, "stream": True}) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"error event: {chunk['error']}")
            for choice in chunk["choices"]:
                parts.append(choice["delta"].get("content") or "")
                finished = finished or choice.get("finish_reason") is not None
    if not finished:
        raise RuntimeError("the stream ended without a finish_reason")
    return "".join(parts)


# -- attackers ---------------------------------------------------------------------------------


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def _ref_chain(length: int, tag: str) -> dict[str, Any]:
    defs: dict[str, Any] = {f"{tag}0": {"type": "integer"}}
    for i in range(1, length):
        ref = {"$ref": f"#/$defs/{tag}{i - 1}"}
        defs[f"{tag}{i}"] = {"type": "array", "prefixItems": [ref, ref], "items": False}
    return {"$defs": defs, "$ref": f"#/$defs/{tag}{length - 1}"}


def _hostile(rng: random.Random, base: str) -> tuple[str, Callable[[], int]]:
    """One attack: (its name, a function that sends it and returns the status)."""
    tag = f"t{rng.randrange(10**9)}"
    chat: dict[str, Any] = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 16}

    def post(body: dict[str, Any], timeout: float = 300.0, path: str = "/v1/chat/completions"):
        def send() -> int:
            raw = json.dumps(body)  # ASCII: lone surrogates travel as escapes
            headers = {"content-type": "application/json"}
            with httpx.Client(base_url=base, timeout=timeout) as http:
                return http.post(path, content=raw, headers=headers).status_code

        return send

    attacks: list[tuple[str, Callable[[], int]]] = [
        ("seed", post({**chat, "seed": -1 - rng.randrange(100)})),
        ("nested-arrays", post({**chat, "json_schema": _nested(rng.randrange(22, 36))})),
        ("ref-chain", post({**chat, "json_schema": _ref_chain(rng.randrange(24, 32), tag)})),
        (
            "state-limit-regex",
            post(
                {
                    "prompt": "digits",
                    "max_tokens": 300,
                    "ignore_eos": True,
                    "regex": f"[0-9]*1[0-9]{{{3000 + rng.randrange(1000)}}}",
                },
                path="/v1/completions",
            ),
        ),
        ("no-base-case", post({**chat, "grammar": f'start: {tag}\n{tag}: "(" {tag} ")"\n'})),
        (
            "alternatives",
            post({**chat, "grammar": "start: " + " | ".join(f'"{tag}{i}"' for i in range(5001))}),
        ),
        ("template", post({**chat, "chat_template_kwargs": {"chat_template": "{{ 'x' * 9**9 }}"}})),
        ("surrogate", post({**chat, "structured_outputs": {"choice": ["a", "b\ud800"]}})),
        ("disconnect", _disconnect(base)),
        ("drop-mid-body", _drop_mid_body(base)),
    ]
    return rng.choice(attacks)


def _disconnect(base: str) -> Callable[[], int]:
    def send() -> int:
        body = {"prompt": "go", "n": 16, "max_tokens": 500, "ignore_eos": True}
        try:
            with httpx.Client(base_url=base, timeout=0.5) as http:
                return http.post("/v1/completions", json=body).status_code
        except httpx.TimeoutException:
            return 499

    return send


def _drop_mid_body(base: str) -> Callable[[], int]:
    def send() -> int:
        host, port = base.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n"
                b'Content-Type: application/json\r\n\r\n{"messages": ['
            )
        return 499

    return send


# -- the run -----------------------------------------------------------------------------------


class Phase:
    """One phase's figures."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self.hostile: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        self.seconds = 0.0

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        total = len(lat) + len(self.errors)

        def pct(p: float) -> float:
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")

        return {
            "phase": self.name,
            "victim_requests": total,
            "victim_errors": len(self.errors),
            "victim_error_rate": len(self.errors) / total if total else 0.0,
            "victim_requests_per_s": round(total / self.seconds, 1) if self.seconds else None,
            "p50_s": round(pct(0.50), 3),
            "p99_s": round(pct(0.99), 3),
            "mean_s": round(statistics.fmean(lat), 3) if lat else None,
            "hostile": dict(sorted(self.hostile.items())),
            "first_errors": self.errors[:5],
        }


def _attack(base: str, phase: Phase, rng: random.Random) -> None:
    name, send = _hostile(rng, base)
    try:
        status = send()
    except Exception as exc:  # the attacker's own trouble is not counted
        status = -1
        name += f" ({type(exc).__name__})"
    with phase.lock:
        phase.hostile[f"{name} -> {status}"] += 1


def _client(
    base: str,
    phase: Phase,
    until: float,
    hostile: float,
    seed: int,
    attackers: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """One victim client, back to back; with probability ``hostile`` it also launches an
    attack on the side (so that victims keep their concurrency whatever attacks cost)."""
    rng = random.Random(seed)
    with httpx.Client(base_url=base, timeout=300) as http:
        while time.monotonic() < until:
            if rng.random() < hostile:
                attackers.submit(_attack, base, phase, random.Random(rng.random()))
            path, body, check = _victim(rng)
            started = time.monotonic()
            try:
                text = _read_answer(http, path, body, stream=rng.random() < 0.3)
                ok = check(text)
                problem = "" if ok else f"wrong answer {text!r} for {body}"
            except Exception as exc:
                problem = f"{type(exc).__name__}: {exc}"[:300]
            with phase.lock:
                if problem:
                    phase.errors.append(problem)
                else:
                    phase.latencies.append(time.monotonic() - started)


def _cached_bytes(base: str) -> int | None:
    """The server's constraint cache size (``/stats``), or None when it does not answer."""
    try:
        stats = httpx.get(base + "/stats", timeout=10).json()
        return int(stats["constraints"]["cached_bytes"])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def _run_phase(
    base: str, name: str, minutes: float, clients: int, hostile: float, pid: int
) -> tuple[Phase, list[tuple[float, int, int | None]]]:
    """Run one phase; also sample the server's RSS and cache size every ``_SAMPLE_S``."""
    phase = Phase(name)
    until = time.monotonic() + minutes * 60
    attackers = concurrent.futures.ThreadPoolExecutor(max(1, clients // 2), "attacker")
    threads = [
        threading.Thread(
            target=_client, args=(base, phase, until, hostile, i, attackers), daemon=True
        )
        for i in range(clients)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    rss: list[tuple[float, int, int | None]] = []
    while any(t.is_alive() for t in threads):
        rss.append((time.monotonic() - started, _rss(pid), _cached_bytes(base)))
        time.sleep(_SAMPLE_S)
    rss.append((time.monotonic() - started, _rss(pid), _cached_bytes(base)))
    attackers.shutdown(wait=True, cancel_futures=True)
    phase.seconds = time.monotonic() - started
    return phase, rss


def _per_minute(samples: list[tuple[float, int, int | None]]) -> list[dict[str, Any]]:
    """One row per minute of a phase: the RSS at its end, its peak, and the cache's size (MB)."""
    rows: list[dict[str, Any]] = []
    for minute in range(1, int(samples[-1][0] // 60) + 2):
        inside = [s for s in samples if minute - 1 <= s[0] / 60 < minute]
        if not inside:
            continue
        cached = inside[-1][2]
        rows.append(
            {
                "minute": minute,
                "rss_mb": round(inside[-1][1] / 1e6),
                "peak_mb": round(max(s[1] for s in inside) / 1e6),
                "cache_mb": None if cached is None else round(cached / 1e6),
            }
        )
    return rows


def _flatness(samples: list[tuple[float, int, int | None]], minutes: float) -> dict[str, Any]:
    """How flat RSS stays over the last ``minutes`` of the soak (the cache has filled by then).

    A least-squares slope over every sample in the window (MB per minute), the window's lowest
    and highest RSS, and its growth from the first to the last minute of the window. Where the
    soak is shorter than 1.5 times the window, its last two thirds are used (the cache fills in
    the first minutes).
    """
    end = samples[-1][0]
    span = min(minutes * 60, end * 2 / 3)
    window = [(t / 60, r / 1e6) for t, r, _ in samples if t >= end - span]
    if len(window) < 2:
        return {"window_minutes": round(span / 60, 1), "slope_mb_per_min": None}
    mean_t = statistics.fmean(t for t, _ in window)
    mean_r = statistics.fmean(r for _, r in window)
    var = sum((t - mean_t) ** 2 for t, _ in window)
    slope = sum((t - mean_t) * (r - mean_r) for t, r in window) / var if var else 0.0
    first = [r for t, r in window if t <= window[0][0] + 1]
    last = [r for t, r in window if t >= window[-1][0] - 1]
    return {
        "window_minutes": round(span / 60, 1),
        "samples": len(window),
        "slope_mb_per_min": round(slope, 2),
        "slope_pct_per_10_min": round(100 * 10 * slope / mean_r, 2) if mean_r else None,
        "min_mb": round(min(r for _, r in window)),
        "max_mb": round(max(r for _, r in window)),
        "first_minute_mean_mb": round(statistics.fmean(first)),
        "last_minute_mean_mb": round(statistics.fmean(last)),
    }


def _rss_table(report: dict[str, Any]) -> str:
    """The RSS over time as a plain table (also in the JSON), and the flatness line."""
    lines = ["phase     minute  rss_mb  peak_mb  cache_mb"]
    for phase in ("baseline", "soak"):
        for row in report[f"rss_per_minute_{phase}"]:
            cache = "-" if row["cache_mb"] is None else row["cache_mb"]
            lines.append(
                f"{phase:<9}{row['minute']:>7}  {row['rss_mb']:>6}  {row['peak_mb']:>7}  {cache:>8}"
            )
    flat = report["rss_flatness"]
    lines.append(
        f"RSS slope over the last {flat['window_minutes']} min of the soak: "
        f"{flat['slope_mb_per_min']} MB/min "
        f"({flat.get('slope_pct_per_10_min')} % per 10 min), "
        f"range {flat.get('min_mb')}-{flat.get('max_mb')} MB"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the soak; print JSON figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="soak phase length")
    parser.add_argument("--baseline-minutes", type=float, default=None, help="default: 1/3")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--hostile", type=float, default=0.05, help="share of hostile requests")
    parser.add_argument(
        "--flat-minutes", type=float, default=20.0, help="window of the RSS flatness figure"
    )
    args = parser.parse_args(argv)
    baseline_minutes = args.baseline_minutes or args.minutes / 3

    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "outlines_like.cli",
            "serve",
            "--model",
            "tiny",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    log_lines = collections.Counter[str]()

    def read_log() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            log_lines["traceback" if "Traceback" in line else "line"] += 1

    threading.Thread(target=read_log, daemon=True).start()
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                httpx.get(base + "/health", timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the server did not start") from None
                time.sleep(0.5)
        for body in (_victim(random.Random(i))[1] for i in range(8)):  # warm the constraints
            httpx.post(base + "/v1/chat/completions", json=body, timeout=300)
        report: dict[str, Any] = {"clients": args.clients, "hostile_share": args.hostile}
        base_phase, base_rss = _run_phase(
            base, "baseline", baseline_minutes, args.clients, 0.0, server.pid
        )
        soak, soak_rss = _run_phase(
            base, "soak", args.minutes, args.clients, args.hostile, server.pid
        )
        report["baseline"] = base_phase.summary()
        report["soak"] = soak.summary()
        p99_base, p99_soak = report["baseline"]["p99_s"], report["soak"]["p99_s"]
        report["p99_ratio"] = round(p99_soak / p99_base, 2) if p99_base else None
        report["rss_per_minute_baseline"] = _per_minute(base_rss)
        report["rss_per_minute_soak"] = _per_minute(soak_rss)
        report["rss_flatness"] = _flatness(soak_rss, args.flat_minutes)
        soak_mb = [r / 1e6 for _, r, _ in soak_rss]
        report["rss_mb_soak_start_max_end"] = [
            round(soak_mb[0]),
            round(max(soak_mb)),
            round(soak_mb[-1]),
        ]
        report["server_stats"] = httpx.get(base + "/stats", timeout=30).json().get("constraints")
        report["server_log"] = dict(log_lines)
        print(_rss_table(report), file=sys.stderr)
        print(json.dumps(report, indent=2))
        return 0 if report["soak"]["victim_errors"] == 0 else 1
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


if __name__ == "__main__":
    sys.exit(main())
