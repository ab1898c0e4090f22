"""Indexes on several threads sharing one lazy DFA give the eager DFA's masks (both walks)."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest

from outlines_like.fsm import Vocabulary, _accel
from outlines_like.fsm.index import TokenIndex
from outlines_like.fsm.regex_dfa import LazyByteDFA, compile_regex, compile_regex_auto
from outlines_like.types.json_schema import json_schema_to_regex


def _vocabulary() -> Vocabulary:
    rng = random.Random(8)
    tokens = {bytes([b]) for b in range(32, 127)}
    for word in ("name", "id", "tag", "foo", "bar", "hello", "true", "null"):
        for pre in ("", " ", '"', '{"', ',"', '": "'):
            for post in ("", '"', '",', '":', '"}'):
                tokens.add((pre + word + post).encode())
    for text in ("\\n", '\\"', "\\u00e9", '", "', "]}", "12", "-1", "1.5", "é", "€", "中"):
        tokens.add(text.encode())
    alphabet = "abcdefghijklmnopqrstuvwxyz ABC0123456789"
    for _ in range(2000):
        tokens.add("".join(rng.choice(alphabet) for _ in range(rng.randint(2, 12))).encode())
    ordered = [*sorted(tokens), b"<eos>"]
    return Vocabulary(ordered, [len(ordered) - 1], ())


VOCAB = _vocabulary()
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "id": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "id"],
}


@pytest.fixture(params=["accel", "pure"])
def walk_path(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "accel" and not _accel.available():
        pytest.skip("numba is not installed")
    before = _accel.enabled()
    _accel.set_enabled(request.param == "accel")
    try:
        yield request.param
    finally:
        _accel.set_enabled(before)


def _walk(eager: TokenIndex, lazy: TokenIndex, rng: random.Random) -> str | None:
    es, ls = eager.dfa.start, lazy.dfa.start
    for depth in range(60):
        er, lr = eager.row(es), lazy.row(ls)
        want, got = er.ids(VOCAB.size).tolist(), lr.ids(VOCAB.size).tolist()
        if want != got:
            return f"masks differ at depth {depth}"
        choices = [t for t in want if t not in VOCAB.eos_token_ids]
        if not choices:
            return None
        token = rng.choice(choices)
        es, ls = er.next_state(token), lr.next_state(token)
    return None


def test_threads_sharing_a_lazy_dfa_see_the_eager_masks(walk_path: str) -> None:
    # one thread's walk holds a view of the rows while another's builds rows past it: the
    # pure walk once read a state past its view (IndexError)
    pattern = json_schema_to_regex(SCHEMA)
    eager = TokenIndex(compile_regex(pattern), VOCAB)
    failures: list[str] = []
    for seed in range(3):
        shared = compile_regex_auto(pattern, eager_nfa_limit=0)
        assert isinstance(shared, LazyByteDFA)

        def worker(seed: int, shared: LazyByteDFA = shared) -> None:
            rng = random.Random(seed)
            index = TokenIndex(shared, VOCAB)
            try:
                for _ in range(6):
                    if (message := _walk(eager, index, rng)) is not None:
                        failures.append(message)
                        return
            except Exception as exc:  # reported below, with its type
                failures.append(repr(exc))

        threads = [threading.Thread(target=worker, args=(seed * 10 + k,)) for k in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
