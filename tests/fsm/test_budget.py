"""The masker's budget: hostile constraints compile or fail fast with a typed error, never hang.

Each hostile input either compiles within the default budget or raises
``InvalidConstraintError`` (``ConstraintTooLargeError`` for a budget) quickly; the wall-time
bounds are hang guards for a loaded 2-core machine, not benchmarks.
"""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pytest

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.fsm import (
    Budget,
    Vocabulary,
    clear_caches,
    compile_constraint,
)
from outlines_like.fsm import budget as budget_mod
from outlines_like.fsm.budget import DEFAULT_BUDGET, Meter, active, check, metered, start, stop
from outlines_like.types import CFG, JsonSchema, Regex

HANG_GUARD_S = 20.0

# printable ASCII, every 2- and 3-digit string, a few words; EOS last
TOKENS = (
    [bytes([b]) for b in range(32, 127)]
    + [str(n).encode() for n in range(10, 1000)]
    + [b"word", b"true", b"false", b"null", b'{"', b'":', b"[[", b"]]", b"<eos>"]
)
EOS = len(TOKENS) - 1
VOCAB = Vocabulary(TOKENS, [EOS])


def nested_arrays(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def nested_objects(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def ref_doubling(n: int) -> dict[str, Any]:
    defs: dict[str, Any] = {"d0": {"type": "integer"}}
    for i in range(1, n + 1):
        ref = {"$ref": f"#/$defs/d{i - 1}"}
        defs[f"d{i}"] = {
            "type": "object",
            "properties": {"a": ref, "b": ref},
            "required": ["a", "b"],
        }
    return {"$defs": defs, "$ref": f"#/$defs/d{n}"}


def optional_properties(n: int) -> dict[str, Any]:
    return {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}


def words(n: int) -> CFG:
    return CFG("start: " + " | ".join(f'"word{i}x"' for i in range(n)), "lark")


OK = None  # compiles
TOO_LARGE = ConstraintTooLargeError
INVALID = InvalidConstraintError

HOSTILE: dict[str, tuple[Callable[[], object], type[Exception] | None]] = {
    "arrays_20_deep": (lambda: JsonSchema(nested_arrays(20)), OK),
    "arrays_50_deep": (lambda: JsonSchema(nested_arrays(50)), OK),
    "arrays_200_deep": (lambda: JsonSchema(nested_arrays(200)), TOO_LARGE),
    "arrays_1000_deep": (lambda: JsonSchema(nested_arrays(1000)), INVALID),
    "objects_20_deep": (lambda: JsonSchema(nested_objects(20)), OK),
    "objects_50_deep": (lambda: JsonSchema(nested_objects(50)), TOO_LARGE),
    "objects_200_deep": (lambda: JsonSchema(nested_objects(200)), TOO_LARGE),
    "objects_1000_deep": (lambda: JsonSchema(nested_objects(1000)), INVALID),
    "number_pm_1e300": (
        lambda: JsonSchema({"type": "number", "minimum": -1e300, "maximum": 1e300}),
        OK,
    ),
    "integer_pm_1e300": (
        lambda: JsonSchema({"type": "integer", "minimum": -1e300, "maximum": 1e300}),
        OK,
    ),
    "integer_pm_10_300": (
        lambda: JsonSchema({"type": "integer", "minimum": -(10**300), "maximum": 10**300}),
        OK,
    ),
    "integer_10_500": (lambda: JsonSchema({"type": "integer", "maximum": 10**500}), INVALID),
    "ref_doubling_x30": (lambda: JsonSchema(ref_doubling(30)), OK),
    "optional_properties_2000": (lambda: JsonSchema(optional_properties(2000)), TOO_LARGE),
    "optional_properties_40": (lambda: JsonSchema(optional_properties(40)), OK),
    "regex_groups_150_deep": (lambda: Regex("(" * 150 + "a" + ")" * 150), TOO_LARGE),
    "regex_groups_5000_deep": (lambda: Regex("(" * 5000 + "a" + ")" * 5000), INVALID),
    "regex_counted_in_counted": (lambda: Regex("(a{1000}){1000}"), TOO_LARGE),
    "regex_huge_count": (lambda: Regex("(a|b|c|d){100000}"), TOO_LARGE),
    "regex_exponential_dfa": (lambda: Regex("[0-9]*1[0-9]{3000}"), TOO_LARGE),
    "lark_5000_literals": (lambda: words(5000), OK),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_input_compiles_or_fails_typed_and_fast(case: str) -> None:
    make, expected = HOSTILE[case]
    clear_caches()
    start = time.perf_counter()
    if expected is None:
        compiled = compile_constraint(make(), VOCAB)
        m = compiled.matcher()
        out = np.zeros(VOCAB.mask_words, dtype=np.int32)
        m.fill_bitmask(out)
        assert out.any()
    else:
        with pytest.raises(expected) as info:
            compile_constraint(make(), VOCAB)
        assert not isinstance(info.value, RecursionError)
        if isinstance(info.value, ConstraintTooLargeError):
            assert info.value.limit in {"seconds", "states", "bytes", "grammar_size", "depth"}
            assert info.value.where
    assert time.perf_counter() - start < HANG_GUARD_S


def test_depth_error_names_the_pointer() -> None:
    with pytest.raises(ConstraintTooLargeError) as info:
        compile_constraint(JsonSchema(nested_arrays(80)), VOCAB)
    assert info.value.limit == "depth"
    assert info.value.where.startswith("#/items/items/")
    assert "max_depth" in str(info.value)


def test_a_budget_raises_the_depth_limit() -> None:
    with pytest.raises(ConstraintTooLargeError):
        compile_constraint(JsonSchema(nested_objects(40)), VOCAB)
    compiled = compile_constraint(
        JsonSchema(nested_objects(40)), VOCAB, budget=Budget(max_depth=90)
    )
    m = compiled.matcher()
    for byte in b'{"a":' * 40 + b"7" + b"}" * 40:
        m.advance(byte - 32)
    m.advance(EOS)
    assert m.is_finished()


def test_the_state_estimate_refuses_at_compile() -> None:
    with pytest.raises(ConstraintTooLargeError, match="max_states=20000") as info:
        compile_constraint(Regex("[0-9]*1[0-9]{3000}"), VOCAB)
    assert info.value.limit == "states"
    # a loop whose followers are a literal (KMP: linear) is not refused
    compile_constraint(Regex("[a-z]*abcdefghijklmnopqrstuvwxyz"), VOCAB)
    # nor a blowup that fits the budget
    compile_constraint(Regex("[0-9]*1[0-9]{8}"), VOCAB)


def test_lazy_dfa_growth_during_generation_raises_the_typed_error() -> None:
    # the loop hides inside an alternative (the estimate does not see it), and the
    # z{4000} branch makes the NFA large enough for the lazy DFA
    pattern = "(?:(?:a|[0-9]*)1[0-9]{30}|z{4000})"
    # this walk reaches ~240 states with the compiled token walk (~340 with the pure one,
    # which builds a few rows ahead): both pass 200, the first mask stays below
    budget = Budget(max_states=200)
    compiled = compile_constraint(Regex(pattern), VOCAB, budget=budget)
    m = compiled.matcher()
    out = np.zeros(VOCAB.mask_words, dtype=np.int32)
    start = time.perf_counter()
    digits = [b"1", b"7", b"11", b"17", b"71", b"111", b"101"]
    ids = [TOKENS.index(d) for d in digits]

    def generate() -> None:
        for step in range(2000):
            m.fill_bitmask(out)
            m.advance(ids[step % len(ids)])

    with pytest.raises(ConstraintTooLargeError) as info:
        generate()
    assert info.value.limit == "states"
    assert time.perf_counter() - start < HANG_GUARD_S
    # the failed constraint is not served from the cache again
    assert compile_constraint(Regex(pattern), VOCAB, budget=budget) is not compiled


@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_mask_time_budget_raises_during_generation(clock: Literal["wall", "cpu"]) -> None:
    # cpu (the default): each first visit's meter started from a recent reading
    clear_caches()  # (another test's walk may have built the rows: no check would come)
    budget = Budget(mask_seconds=1e-9, clock=clock)
    compiled = compile_constraint(Regex("(?:[0-9]x){0,40}|z{4000}"), VOCAB, budget=budget)
    m = compiled.matcher()
    out = np.zeros(VOCAB.mask_words, dtype=np.int32)

    def generate() -> None:
        for _ in range(40):
            m.fill_bitmask(out)
            m.advance(TOKENS.index(b"7"))
            m.advance(TOKENS.index(b"x"))

    with pytest.raises(ConstraintTooLargeError) as info:
        generate()
    assert info.value.limit == "mask_seconds"


def test_bytes_budget() -> None:
    budget = Budget(max_bytes=1000)
    with pytest.raises(ConstraintTooLargeError) as info:
        compile_constraint(Regex("[a-z]{3}[0-9]{3}[a-z]{3}"), VOCAB, budget=budget)
    assert info.value.limit == "bytes"


def test_grammar_size_budget() -> None:
    with pytest.raises(ConstraintTooLargeError) as info:
        compile_constraint(words(200), VOCAB, budget=Budget(max_grammar_size=1000))
    assert info.value.limit == "grammar_size"


def test_compile_time_budget() -> None:
    with pytest.raises(ConstraintTooLargeError) as info:
        compile_constraint(
            JsonSchema(optional_properties(300)), VOCAB, budget=Budget(seconds=1e-9, clock="wall")
        )
    assert info.value.limit == "seconds"


def test_budget_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="max_states"):
        Budget(max_states=0)
    with pytest.raises(ValueError, match="clock"):
        Budget(clock="sundial")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Budget"):
        compile_constraint(int, VOCAB, budget={"seconds": 1})  # type: ignore[arg-type]
    check("outside any meter: a no-op")


NORMAL: dict[str, object] = {
    "regex": Regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?"),
    "schema": JsonSchema(
        {
            "type": "object",
            "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["name"],
        }
    ),
    "grammar": CFG('start: "(" start ")" | "x"', "lark"),
}
NORMAL_TEXT = {"regex": "-12.5", "schema": '{"name":"ab","n":17}', "grammar": "((x))"}


@pytest.mark.parametrize("case", sorted(NORMAL))
def test_normal_constraints_are_unaffected_by_the_default_budget(case: str) -> None:
    clear_caches()
    generous = Budget(seconds=1e6, mask_seconds=1e6, max_bytes=2**40, max_depth=10_000)
    a = compile_constraint(NORMAL[case], VOCAB).matcher()
    b = compile_constraint(NORMAL[case], VOCAB, budget=generous).matcher()
    out_a = np.zeros(VOCAB.mask_words, dtype=np.int32)
    out_b = np.zeros(VOCAB.mask_words, dtype=np.int32)
    for byte in NORMAL_TEXT[case].encode():
        a.fill_bitmask(out_a)
        b.fill_bitmask(out_b)
        assert np.array_equal(out_a, out_b)
        a.advance(byte - 32)
        b.advance(byte - 32)
    a.advance(EOS)
    assert a.is_finished()
    assert Budget() == DEFAULT_BUDGET


def test_loading_the_kernels_is_not_the_constraints_compile_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process's first compile loads the compiled kernels (on a machine's first run numba
    compiles them: tens of seconds); that set-up runs before the compile's meter starts."""
    from outlines_like.fsm import _accel

    _accel.warm_up()  # the real one, and the parsers' imports, before the clock matters
    compile_constraint(CFG('start: "x"'), VOCAB)
    calls: list[float] = []

    def slow_warm_up() -> float:  # slow the first time, then a no-op (as the real one)
        if calls:
            return 0.0
        start = time.process_time()
        while time.process_time() - start < 0.6:  # CPU time, as the meter counts it
            pass
        calls.append(time.process_time() - start)
        return calls[-1]

    monkeypatch.setattr(_accel, "warm_up", slow_warm_up)
    budget = Budget(seconds=0.5)
    # the grammar first: its compile would load the kernels inside the meter otherwise
    for constraint in (
        CFG('start: "a" "b"'),
        Regex(r"[0-9]{1,3}"),
        JsonSchema({"type": "integer"}),
    ):
        compile_constraint(constraint, VOCAB, budget=budget)
    assert len(calls) == 1


def _counted_cpu_clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads = [0]

    def clock() -> float:
        reads[0] += 1
        return time.thread_time()

    monkeypatch.setitem(budget_mod._CLOCKS, "cpu", clock)
    return reads


def test_meters_in_a_row_share_a_recent_cpu_clock_reading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the CPU clock is a system call: meters started within _RECENT_S of wall time of the
    # thread's last reading start from it (earlier: they can only count more)
    reads = _counted_cpu_clock(monkeypatch)
    monkeypatch.setattr(budget_mod, "_RECENT_S", 10.0)  # (a slow machine: still "recent")
    budget_mod._recent.__dict__.clear()
    first = Meter(Budget(), "mask")
    for _ in range(5):
        with metered(Budget(), "mask"):
            assert active() is not None
    assert reads[0] == 1
    assert Meter(Budget(), "mask").deadline == first.deadline
    monkeypatch.setattr(budget_mod, "_RECENT_S", 0.0)  # none is recent: each reads it
    later = Meter(Budget(), "mask")
    assert reads[0] == 2
    assert later.deadline >= first.deadline
    Meter(Budget(mask_seconds=1e-9), "mask")  # (and never past a hundredth of the budget)
    assert reads[0] == 3


def test_start_and_stop_run_a_mask_meter() -> None:
    # metered's two plain calls (a lazy DFA's first visit of a state)
    assert active() is None
    start(Budget(mask_seconds=3.0), "mask")
    meter = active()
    assert meter is not None
    assert meter.phase == "mask"
    assert meter.budget.mask_seconds == 3.0
    stop()
    assert active() is None


def test_an_interrupt_at_a_first_visit_leaves_no_meter_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a KeyboardInterrupt right after the first visit's meter starts (a signal can land at
    # any bytecode): the thread's later masks and compiles must not run under that meter
    from outlines_like.fsm import index

    clear_caches()
    # (a schema's regex: the compile computes the first mask only; the next is a first visit)
    compiled = compile_constraint(JsonSchema({"type": "integer", "maximum": 99}), VOCAB)
    matcher = compiled.matcher()
    matcher.advance(int(matcher.allowed_token_ids()[0]))

    def interrupted(b: Budget, phase: budget_mod.Phase) -> None:
        start(b, phase)
        raise KeyboardInterrupt

    monkeypatch.setattr(index, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        matcher.fill_bitmask(np.zeros(VOCAB.mask_words, dtype=np.int32))
    assert active() is None
    monkeypatch.undo()
    mask = np.zeros(VOCAB.mask_words, dtype=np.int32)
    matcher.fill_bitmask(mask)
    assert mask.any()


def test_a_cpu_meter_charges_cpu_time_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # a meter started from a recent reading still raises once the phase's CPU time is spent,
    # and never counts time the thread spent waiting (the wall clock) against it
    monkeypatch.setattr(budget_mod, "_RECENT_S", 10.0)
    budget = Budget(mask_seconds=0.05)
    Meter(budget, "mask")  # the reading the next meters start from
    with metered(budget, "mask"):
        time.sleep(0.1)  # wall time past the budget, no CPU time
        check("after a sleep")  # does not raise

    def busy() -> None:
        end = time.thread_time() + 1.0
        while time.thread_time() < end:  # CPU time past the budget
            check("a busy loop")

    with metered(budget, "mask"), pytest.raises(ConstraintTooLargeError) as info:
        busy()
    assert info.value.limit == "mask_seconds"
    meter = Meter(budget, "mask")
    assert meter.deadline <= time.thread_time() + 0.05  # never a later start than now


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_does_not_start_from_its_parents_cpu_reading() -> None:
    # the child's thread clock starts again near zero: a parent's reading would set a late
    # deadline there (an under-charge), so the child reads its own clock
    Meter(Budget(), "mask")
    assert getattr(budget_mod._recent, "reading", None) is not None
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (fork with threads: 3.12+)
        pid = os.fork()
    if pid == 0:  # the child: report and leave at once
        kept = getattr(budget_mod._recent, "reading", None) is not None
        os.write(write, b"kept" if kept else b"clear")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"clear"


def test_a_started_meter_is_made_when_checked_with_its_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # start() keeps only the clock's reading; the first check (or active()) makes the meter,
    # its deadline from that start
    budget = Budget(mask_seconds=5.0, clock="wall")
    before = time.perf_counter()
    start(budget, "mask")
    assert budget_mod._active.get() is None  # nothing made yet
    time.sleep(0.05)
    check("a first check")
    meter = budget_mod._active.get()
    assert meter is not None
    assert meter.deadline <= before + 5.0 + 0.01  # from the start, not from the check
    assert active() is meter
    stop()
    assert active() is None
    assert budget_mod._active.get() is None
    # a start no check needed: stop leaves nothing behind
    start(budget, "mask")
    stop()
    assert active() is None
    # a metered block inside a started meter runs under it (it is running, if not made yet)
    start(budget, "mask")
    with metered(Budget(mask_seconds=1e-9), "mask"):
        inner = active()
        check("inside")  # the started meter's 5 s, not the block's own budget
    assert inner is not None
    assert inner.budget is budget
    assert active() is inner
    stop()
    assert active() is None
    # a CPU-clock meter made late: the deadline of one made at the start (waiting in
    # between is not charged)
    monkeypatch.setattr(budget_mod, "_RECENT_S", 0.0)
    cpu = Budget(mask_seconds=5.0)
    before_cpu = time.thread_time()
    start(cpu, "mask")
    after_cpu = time.thread_time()
    time.sleep(0.05)
    made = active()
    assert made is not None
    assert before_cpu + 5.0 <= made.deadline <= after_cpu + 5.0
    stop()
