"""Client overhead: outlines-like's added time per request vs the raw ``openai`` SDK.

A minimal HTTP server (in a child process, so that its CPU is not counted) answers every
chat completion instantly with a fixed body. The same requests are then sent

* with the raw SDK (``client.chat.completions.create``, the constraint fields written by hand),
* through ``Model`` / ``AsyncModel`` (type -> term -> adapter fields -> request -> checks -> text),

sequentially, with 64 threads (sync ``batch``) and with 64 tasks (async ``batch``). Reported:
added wall time (%) and added client CPU per call (µs), best of ``--rounds`` (alternating
raw/ours so that machine noise hits both), plus the pure per-call cost of the core (no I/O).

    python benchmarks/client_overhead.py [--requests 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable
from typing import Any, Literal

import httpx2
import openai
import pydantic

import outlines_like.models as m
from outlines_like.models._call import Constraint


def _chat_body(content: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "tiny",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 9, "total_tokens": 19},
        }
    ).encode()


# Every answer fits its request's type, as a server's would: each call's answer is checked.
BODY = _chat_body('{"name": "Ada", "age": 36}')
COLOUR_BODY = _chat_body("green")


def _answer_for(request_body: bytes) -> bytes:
    """The colour for a regex request (Literal), the Hero JSON otherwise."""
    return COLOUR_BODY if b'"regex"' in request_body else BODY


MODELS = json.dumps({"object": "list", "data": [{"id": "tiny", "object": "model"}]}).encode()


def _response(body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


CHAT, COLOUR_CHAT, LIST = _response(BODY), _response(COLOUR_BODY), _response(MODELS)


async def _connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Keep-alive HTTP/1.1: read a request, answer it in one write (no Nagle stalls)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length) if length else b""
            if not head.startswith(b"POST"):
                writer.write(LIST)
            else:
                writer.write(COLOUR_CHAT if b'"regex"' in body else CHAT)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def serve(port_queue: Any) -> None:
    async def run() -> None:
        server = await asyncio.start_server(_connection, "127.0.0.1", 0, backlog=1024)
        port_queue.put(server.sockets[0].getsockname()[1])  # a free port
        await server.serve_forever()

    asyncio.run(run())


class Hero(pydantic.BaseModel):
    name: str
    age: int


Colour = Literal["red", "green", "blue"]


def measure(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def compare(
    name: str, raw: Callable[[], object], ours: Callable[[], object], calls: int, rounds: int
) -> dict[str, Any]:
    raw()  # warm up: connections, caches
    ours()
    raw_w, raw_c, our_w, our_c = [], [], [], []
    for _ in range(rounds):
        w, c = measure(raw)
        raw_w.append(w)
        raw_c.append(c)
        w, c = measure(ours)
        our_w.append(w)
        our_c.append(c)
    rw, rc, ow, oc = min(raw_w), min(raw_c), min(our_w), min(our_c)
    row = {
        "case": name,
        "calls": calls,
        "raw_us_per_call": 1e6 * rw / calls,
        "ours_us_per_call": 1e6 * ow / calls,
        "added_wall_pct": 100 * (ow - rw) / rw,
        "added_cpu_us_per_call": 1e6 * (oc - rc) / calls,
        "median_added_wall_pct": 100
        * (statistics.median(our_w) - statistics.median(raw_w))
        / statistics.median(raw_w),
    }
    print(
        f"{name:<46} raw {row['raw_us_per_call']:6.0f} µs/call, ours {row['ours_us_per_call']:6.0f}"
        f"; added wall {row['added_wall_pct']:+5.1f}% "
        f"(median {row['median_added_wall_pct']:+5.1f}%), "
        f"added CPU {row['added_cpu_us_per_call']:+5.0f} µs/call"
    )
    return row


def mock_transport_cost(output_type: object, n: int, rounds: int) -> dict[str, Any]:
    """Client CPU per call with no network at all (httpx2.MockTransport): the purest A/B."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = _answer_for(request.content)
        return httpx2.Response(200, content=body, headers={"content-type": "application/json"})

    http = httpx2.Client(transport=httpx2.MockTransport(handler))
    client = openai.OpenAI(base_url="http://mock/v1", api_key="x", max_retries=0, http_client=http)
    model = m.from_sglang(client, "tiny")
    extra = constraint_params(model, output_type)
    messages: Any = [{"role": "user", "content": "Hi"}]
    run = model.parse if output_type is Hero else model

    def raw() -> None:
        for _ in range(n):
            client.chat.completions.create(
                model="tiny",
                messages=messages,
                max_tokens=20,
                **extra,
            )

    def ours() -> None:
        for _ in range(n):
            run("Hi", output_type, max_tokens=20)

    label = "Literal (regex)" if output_type is not Hero else "pydantic model (JSON Schema)"
    return compare(f"no network (mock), {label}", raw, ours, n, rounds)


def paired(
    name: str, raw: Callable[[], object], ours: Callable[[], object], calls: int
) -> dict[str, Any]:
    """Alternate one raw call and one of ours: both see the same machine load.

    Reports the median per-call difference (robust to the spikes of a shared machine).
    """
    raw()
    ours()
    clock, cpu = time.perf_counter, time.thread_time
    d_wall, d_cpu, raw_wall = [], [], []
    for i in range(calls):
        first, second = (raw, ours) if i % 2 == 0 else (ours, raw)
        w0, c0 = clock(), cpu()
        first()
        w1, c1 = clock(), cpu()
        second()
        w2, c2 = clock(), cpu()
        rw, rc, ow, oc = (w1 - w0, c1 - c0, w2 - w1, c2 - c1)
        if first is ours:
            rw, rc, ow, oc = ow, oc, rw, rc
        d_wall.append(ow - rw)
        d_cpu.append(oc - rc)
        raw_wall.append(rw)
    base = statistics.median(raw_wall)
    row = {
        "case": name,
        "calls": calls,
        "raw_us_per_call": 1e6 * base,
        "added_wall_us_per_call": 1e6 * statistics.median(d_wall),
        "added_wall_pct": 100 * statistics.median(d_wall) / base,
        "added_cpu_us_per_call": 1e6 * statistics.median(d_cpu),
    }
    print(
        f"{name:<46} raw {row['raw_us_per_call']:6.0f} µs/call (median); "
        f"added wall {row['added_wall_us_per_call']:+5.0f} µs = {row['added_wall_pct']:+5.1f}%, "
        f"added CPU {row['added_cpu_us_per_call']:+5.0f} µs/call (medians of per-call pairs)"
    )
    return row


def core_cost(model: m.Model, output_type: object, n: int = 20000) -> float:
    """µs per call of the pure core: prepare + build_request + read + check (no I/O)."""
    body = BODY if output_type is Hero else COLOUR_BODY
    response = openai.types.chat.ChatCompletion.model_validate_json(body)
    ready = model.ready_now(None)
    assert ready is not None  # the model has made calls already
    start = time.process_time()
    for _ in range(n):
        call = model.prepare("Hi", Constraint.of(output_type), {"max_tokens": 20}, stream=False)
        model.build_request(call, *ready)
        completions = model.read(call, response)
        if output_type is Hero:
            model.values(call, completions)
        else:
            model.texts(call, completions, stacklevel=1)
    return 1e6 * (time.process_time() - start) / n


def async_case(base: str, label: str, output_type: object, n: int, rounds: int) -> dict[str, Any]:
    """64 tasks on one event loop: raw SDK under a semaphore vs ``await amodel.batch``."""
    loop = asyncio.new_event_loop()
    limits = httpx2.Limits(max_connections=128, max_keepalive_connections=128)
    http = httpx2.AsyncClient(limits=limits)
    aclient = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=0, http_client=http)
    amodel = m.from_sglang(aclient, "tiny")
    extra = constraint_params(amodel, output_type)
    messages: Any = [{"role": "user", "content": "Hi"}]

    async def raw() -> None:
        limit = asyncio.Semaphore(64)

        async def one() -> None:
            async with limit:
                await aclient.chat.completions.create(
                    model="tiny",
                    messages=messages,
                    max_tokens=20,
                    **extra,
                )

        await asyncio.gather(*(one() for _ in range(n)))

    async def ours() -> None:
        await amodel.batch(["Hi"] * n, output_type, max_concurrency=64, max_tokens=20)

    try:
        return compare(
            f"async 64 tasks, {label}",
            lambda: loop.run_until_complete(raw()),
            lambda: loop.run_until_complete(ours()),
            n,
            rounds,
        )
    finally:
        loop.run_until_complete(aclient.close())
        loop.close()


def constraint_params(model: m.Model | m.AsyncModel, output_type: object) -> dict[str, Any]:
    """The constraint fields our adapter sends, for the raw SDK to send by hand."""
    call = model.prepare("Hi", Constraint.of(output_type), {}, stream=False)
    target = model.ready_now(None)
    if target is None:  # resolve the fixed server without I/O (model_name is given)
        flow = model.resolve_flow(None)
        try:
            next(flow)
        except StopIteration as stop:
            target = stop.value
    assert target is not None
    params = model.build_request(call, *target).params
    return {k: v for k, v in params.items() if k not in ("messages", "model")}


def sync_cases(base: str, label: str, output_type: object, n: int, rounds: int) -> list[Any]:
    """Sequential calls and 64 threads: raw SDK vs ``model(...)`` / ``model.batch``."""
    limits = httpx2.Limits(max_connections=128, max_keepalive_connections=128)
    http = httpx2.Client(limits=limits)
    client = openai.OpenAI(base_url=base, api_key="x", max_retries=0, http_client=http)
    model = m.from_sglang(client, "tiny")
    extra = constraint_params(model, output_type)
    messages: Any = [{"role": "user", "content": "Hi"}]

    def raw_one() -> object:
        return client.chat.completions.create(
            model="tiny",
            messages=messages,
            max_tokens=20,
            **extra,
        )

    # Hero: parse (pydantic validation included); Literal: the text (the body is JSON)
    ours_one = model.parse if output_type is Hero else model

    def raw_seq() -> None:
        for _ in range(n):
            raw_one()

    def ours_seq() -> None:
        for _ in range(n):
            ours_one("Hi", output_type, max_tokens=20)

    def raw_threads() -> None:
        with concurrent.futures.ThreadPoolExecutor(64) as pool:
            for future in [pool.submit(raw_one) for _ in range(n)]:
                future.result()

    def ours_threads() -> None:
        model.batch(["Hi"] * n, output_type, max_concurrency=64, max_tokens=20)

    rows = [
        paired(f"noise floor: raw vs raw (paired), {label}", raw_one, raw_one, n * rounds),
        paired(
            f"sync sequential (paired), {label}",
            raw_one,
            lambda: ours_one("Hi", output_type, max_tokens=20),
            n * rounds,
        ),
        compare(f"sync sequential, {label}", raw_seq, ours_seq, n, rounds),
        compare(f"sync 64 threads, {label}", raw_threads, ours_threads, n, rounds),
    ]
    cost = core_cost(model, output_type)
    print(f"{'core only (no I/O), ' + label:<46} {cost:.1f} µs/call CPU")
    rows.append({"case": f"core only, {label}", "cpu_us_per_call": cost})
    client.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    n, rounds = args.requests, args.rounds

    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=serve, args=(ports,), daemon=True)
    server.start()
    base = f"http://127.0.0.1:{ports.get(timeout=30)}/v1"
    rows: list[Any] = []
    try:
        for label, output_type in (
            ("Literal (regex)", Colour),
            ("pydantic model (JSON Schema)", Hero),
        ):
            rows.extend(sync_cases(base, label, output_type, n, rounds))
            rows.append(async_case(base, label, output_type, n, rounds))
            rows.append(mock_transport_cost(output_type, n, rounds))
    finally:
        server.terminate()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
