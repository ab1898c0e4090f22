"""``outlines-like demo``: the reference server on the tiny model, driven through the public API.

It starts the server on a free loopback port (in a thread), wraps an ``openai.OpenAI`` client
with ``from_server``, asks for an ``int``, a ``Literal``, a ``Regex``, a pydantic model, a Lark
grammar, a stream and an async call, prints each result after checking it, and stops the
server. The tiny model's words are noise; what it shows is that the *shape* always holds.
With ``--open`` it then opens the browser playground the server serves at ``/`` and keeps
serving until interrupted.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from typing import Any, Literal, TextIO

__all__ = ["run_demo"]

_GRAMMAR = r"""
start: "answer: " ANSWER "."
ANSWER: "yes" | "no" | "maybe"
"""


def _steps(model: Any) -> list[tuple[str, Any, Any]]:
    """``(label, thunk, check)`` for each synchronous call."""
    import pydantic

    from outlines_like.types import CFG, Regex

    class Pet(pydantic.BaseModel):
        kind: Literal["cat", "dog", "fish"]
        age: int = pydantic.Field(ge=0, le=30)
        name: str = pydantic.Field(pattern="^[a-z]{2,8}$")

    plate = Regex(r"[A-Z]{2}-[0-9]{3}")
    kw = {"max_tokens": 120, "temperature": 0.8, "seed": 7}
    return [
        (
            "int",
            lambda: model.parse("How many legs has a cat?", int, **kw),
            lambda v: type(v) is int,
        ),
        (
            "Literal",
            lambda: model.parse("Is it raining?", Literal["yes", "no"], **kw),
            lambda v: v in ("yes", "no"),
        ),
        (
            "Regex",
            lambda: model("A licence plate:", plate, **kw),
            lambda v: re.fullmatch(r"[A-Z]{2}-[0-9]{3}", v) is not None,
        ),
        (
            "pydantic",
            lambda: model.parse("Describe a pet.", Pet, **kw),
            lambda v: isinstance(v, Pet),
        ),
        (
            "Lark grammar",
            lambda: model("Answer.", CFG(_GRAMMAR), **kw),
            lambda v: re.fullmatch(r"answer: (yes|no|maybe)\.", v) is not None,
        ),
        (
            "stream",
            lambda: list(model.stream("Spell a word.", Regex("[a-z]{4,10}"), **kw)),
            lambda v: re.fullmatch("[a-z]{4,10}", "".join(v)) is not None,
        ),
    ]


def _keep_serving(url: str, say: Any) -> None:
    """Open the playground in the default browser and serve until Ctrl-C."""
    import webbrowser

    say(f"playground at {url} (Ctrl-C stops the server)")
    if not webbrowser.open(url):
        say("no browser could be opened here: open the address above yourself")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        say("stopping")


def run_demo(*, model: str = "tiny", out: TextIO | None = None, open_browser: bool = False) -> int:
    """Run the demo; return 0 when every result had its shape, 1 otherwise.

    Args:
        model: What to serve (``tiny``, or a transformers model folder).
        out: Where to print (standard output by default).
        open_browser: Then open the browser playground and serve until interrupted.
    """
    import openai

    from outlines_like.models.factories import from_server
    from outlines_like.server.config import ServerConfig
    from outlines_like.server.run import ServerThread

    stream = out or sys.stdout
    start = time.perf_counter()

    def say(text: str) -> None:
        print(text, file=stream, flush=True)

    say(f"starting the reference server on {model!r} (the tiny model is built on first use)...")
    failures = 0
    with ServerThread(ServerConfig(model=model)) as server:
        say(f"server ready at {server.base_url} in {time.perf_counter() - start:.1f} s")
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="demo")
        sync_model = from_server(client)
        for label, thunk, check in _steps(sync_model):
            t0 = time.perf_counter()
            try:
                value = thunk()
                ok = bool(check(value))
            except Exception as exc:  # report and go on: the demo shows every case
                value, ok = f"{type(exc).__name__}: {exc}", False
            failures += not ok
            mark = "ok " if ok else "BAD"
            say(f"  [{mark}] {label:<13} {value!r}  ({time.perf_counter() - t0:.2f} s)")

        async def async_part() -> list[int]:
            aclient = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="demo")
            amodel = from_server(aclient)
            try:
                return list(
                    await asyncio.gather(
                        *(
                            amodel.parse(f"Number {i}?", int, max_tokens=60, seed=i)
                            for i in range(4)
                        )
                    )
                )
            finally:
                await aclient.close()

        t0 = time.perf_counter()
        try:
            values = asyncio.run(async_part())
            ok = all(type(v) is int for v in values)
            shown: object = values
        except Exception as exc:
            ok, shown = False, f"{type(exc).__name__}: {exc}"
        failures += not ok
        mark = "ok " if ok else "BAD"
        say(f"  [{mark}] {'async x4':<13} {shown!r}  ({time.perf_counter() - t0:.2f} s)")
        client.close()
        if open_browser:
            _keep_serving(server.base_url + "/", say)
    verdict = "all shapes held" if not failures else f"{failures} failed"
    say(f"done in {time.perf_counter() - start:.1f} s: {verdict}")
    return 0 if not failures else 1
