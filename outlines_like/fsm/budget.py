"""The masker's budget: time, automaton states, table bytes, grammar size and nesting depth.

A :class:`Budget` holds limits only (a frozen value: compiled constraints are cached per
budget). Work runs under a :class:`Meter`, the budget started for one phase (a compile, or
one later mask): the loops that can grow with the input call :func:`check` (or
``meter.check``), which reads the clock and raises
:class:`~outlines_like.errors.ConstraintTooLargeError` naming what ran out and where. The meter
of the running phase is found through a context variable, so the deep loops (subset
construction, token walks, grammar tables) need no extra argument; with no meter active,
:func:`check` does nothing.

```python
compiled = compile_constraint(schema, vocab, budget=Budget(seconds=5, max_states=10_000))
m = compiled.matcher()      # every later mask runs under Budget.mask_seconds and the same
m.fill_bitmask(out)         # state and byte limits; past them: ConstraintTooLargeError
```
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
import time
from collections.abc import Callable
from typing import Literal

from outlines_like.errors import ConstraintTooLargeError

__all__ = ["DEFAULT_BUDGET", "Budget", "Meter", "active", "check", "metered", "start", "stop"]

Phase = Literal["compile", "mask"]


@dataclasses.dataclass(frozen=True)
class Budget:
    """Limits on the work one constraint may cost; every field has a documented default.

    Attributes:
        seconds: Compiling, first mask included (regex and JSON Schema conversion, automata,
            Lark load and tables, lexer DFAs, the first mask's token walk).
        mask_seconds: Any later mask or advance (a lazy DFA's or grammar's first visit of a
            state). Steady-state masks are row copies and never reach a check.
        clock: ``"cpu"`` (the working thread's CPU time: a loaded machine does not make a
            constraint fail) or ``"wall"``.
        max_states: Automaton states: a regex's DFA (eager or lazy, growth during generation
            included), and a regex whose DFA can be estimated up front to need more is refused
            at compile.
        max_bytes: Bytes of mask rows one compiled constraint keeps (its per-state cache).
        max_grammar_size: Characters of a grammar (given, or written from a JSON Schema).
        max_depth: Nesting depth of a JSON Schema (objects and arrays inside each other).
    """

    seconds: float = 10.0
    mask_seconds: float = 2.0
    clock: Literal["cpu", "wall"] = "cpu"
    max_states: int = 20_000
    max_bytes: int = 256 * 2**20
    max_grammar_size: int = 1_000_000
    max_depth: int = 64

    def __post_init__(self) -> None:
        for name in ("seconds", "mask_seconds"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Budget.{name} must be a positive number, got {value!r}")
        for name in ("max_states", "max_bytes", "max_grammar_size", "max_depth"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Budget.{name} must be a positive int, got {value!r}")
        if self.clock not in ("cpu", "wall"):
            raise ValueError(f"Budget.clock must be 'cpu' or 'wall', got {self.clock!r}")

    def phase_seconds(self, phase: Phase) -> float:
        """The time ``phase`` may take: :attr:`seconds` to compile, :attr:`mask_seconds` else."""
        return self.seconds if phase == "compile" else self.mask_seconds

    def meter(self, phase: Phase) -> Meter:
        """Start the clock of one phase (``"compile"`` or ``"mask"``)."""
        return Meter(self, phase)

    def exceeded(self, limit: str, where: str, detail: str) -> ConstraintTooLargeError:
        """The error for ``limit`` running out at ``where`` (``detail``: what was measured)."""
        at = f" at {where}" if where else ""
        return ConstraintTooLargeError(
            f"constraint too large{at}: {detail} (pass a larger "
            f"outlines_like.fsm.Budget({_limit_field(limit)}=...) or simplify the constraint)",
            limit=limit,
            where=where,
        )

    def check_bytes(self, n: int, where: str) -> None:
        """Raise when ``n`` bytes of tables pass :attr:`max_bytes`."""
        if n > self.max_bytes:
            raise self.exceeded("bytes", where, f"its tables pass {self.max_bytes:,} bytes")

    def check_grammar_size(self, n: int, where: str) -> None:
        """Raise when a grammar of ``n`` characters passes :attr:`max_grammar_size`."""
        if n > self.max_grammar_size:
            raise self.exceeded(
                "grammar_size",
                where,
                f"a grammar of {n:,} characters is over {self.max_grammar_size:,}",
            )


def _limit_field(limit: str) -> str:
    """The :class:`Budget` field of a limit name."""
    return {"seconds": "seconds", "mask_seconds": "mask_seconds"}.get(limit, f"max_{limit}")


DEFAULT_BUDGET = Budget()
"""What ``compile_constraint`` uses when no budget is given."""

_CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}

# The CPU clock is a system call (~1-2 us in this VM: a lazy DFA's first visit of a state costs
# ~30 us, and each one starts a meter). A meter on it starts from the thread's last reading
# when that reading is at most this much wall time old (and a hundredth of the phase's
# seconds): the CPU time the thread spent since is at most that wall time, so the meter
# charges at most that much of the thread's CPU time from before its start, and never wall
# time (the deadline is on the CPU clock; a thread that waits is not charged for it).
_RECENT_S = 0.0005
_recent = threading.local()  # .reading: (CPU clock, wall clock read just before, the clock)


def _forget_reading() -> None:
    # a forked child's thread clock starts again near zero: a reading of the parent's is no
    # lower bound there, and a meter started from it would charge late
    _recent.__dict__.clear()
    _armed.__dict__.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_reading)


_active: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("ol_meter", default=None)


class Meter:
    """One phase of work under a budget: a deadline on the budget's clock.

    Use as a context manager to make it the meter :func:`check` sees.
    """

    __slots__ = ("_clock", "_tokens", "budget", "deadline", "phase")

    def __init__(self, budget: Budget, phase: Phase, started: float | None = None) -> None:
        """``started``: the phase's start on the budget's clock (:func:`_reading`), else now."""
        self.budget = budget
        self.phase = phase
        self._clock = _CLOCKS[budget.clock]
        seconds = budget.phase_seconds(phase)
        if started is None:
            started = _reading(budget, seconds)
        self.deadline = started + seconds
        self._tokens: list[contextvars.Token[Meter | None]] = []

    def check(self, where: str = "") -> None:
        """Raise :class:`ConstraintTooLargeError` when the phase's time has run out."""
        if self._clock() > self.deadline:
            b = self.budget
            limit = "seconds" if self.phase == "compile" else "mask_seconds"
            seconds = b.phase_seconds(self.phase)
            raise b.exceeded(
                limit, where, f"the {self.phase} took more than {seconds:g} s of {b.clock} time"
            )

    def __enter__(self) -> Meter:
        self._tokens.append(_active.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _active.reset(self._tokens.pop())


def _reading(budget: Budget, seconds: float) -> float:
    """Now on ``budget``'s clock, for a phase of ``seconds``: a meter's start.

    On the CPU clock, this thread's last reading when it is at most ``fresh`` s of wall time
    old (earlier: the meter's clock can only count more, never less).
    """
    clock = _CLOCKS[budget.clock]
    if budget.clock != "cpu":
        return clock()
    fresh = seconds / 100
    if fresh > _RECENT_S:
        fresh = _RECENT_S
    wall = time.perf_counter()  # (vDSO: ~0.08 us)
    last: tuple[float, float, Callable[[], float]] | None = getattr(_recent, "reading", None)
    if last is not None and wall - last[1] < fresh and last[2] is clock:
        return last[0]
    started = clock()
    _recent.reading = (started, wall, clock)  # (wall read first: never underrated)
    return started


def check(where: str = "") -> None:
    """Check the running phase's deadline (a no-op outside any :class:`Meter`)."""
    meter = _active.get()
    if meter is None:
        if _armed.arm is None:
            return
        meter = _made()
    meter.check(where)


def active() -> Meter | None:
    """The meter of the running phase, if any."""
    meter = _active.get()
    if meter is None and _armed.arm is not None:
        meter = _made()
    return meter


class _Armed(threading.local):
    """This thread's meter :func:`start` set up and no check has needed yet."""

    arm: tuple[Budget, Phase, float] | None = None  # its budget, phase and start (_reading)
    made: bool = False  # whether a check made the meter (then stop() unsets it)


_armed = _Armed()


def start(budget: Budget, phase: Phase) -> None:
    """Start ``budget``'s meter for ``phase`` on this thread; :func:`stop` ends it.

    For a first visit of a state (a lazy DFA's or a grammar's: one per row, a few us to a
    few ms), as two plain calls: the meter itself is made only when something checks it
    (:func:`check`, :func:`active`), which in most first visits nothing does (the kernels
    ask for a check every 64 rows they build). Until then only its start is kept, read now
    as a meter reads it (the same deadline). Making the meter and setting the context
    variable for every visit cost ~1 us warm and ~3 us after a kernel's walk has left the
    caches cold (~1 ms of a harness ``json_large`` first walk).

    The caller reads :func:`active` first and starts a meter only where none runs, inside
    its ``try``, and stops it in its ``finally``: an interrupt (``KeyboardInterrupt``)
    between the start and the ``try`` would otherwise leave the meter running for the
    thread's later masks.
    """
    _armed.arm = (budget, phase, _reading(budget, budget.phase_seconds(phase)))


def _made() -> Meter:
    """The meter :func:`start` set up, made now (the running one from then on)."""
    arm = _armed.arm
    assert arm is not None
    budget, phase, started = arm
    meter = Meter(budget, phase, started)
    _active.set(meter)
    _armed.made = True
    _armed.arm = None
    return meter


def stop() -> None:
    """End the meter :func:`start` started on this thread (there was none before it)."""
    _armed.arm = None
    if _armed.made:
        _armed.made = False
        _active.set(None)


class metered:
    """Run under ``budget``'s meter for ``phase``, unless a meter is running already.

    A compile's first mask runs inside the compile's meter; a later mask gets its own.
    """

    # a grammar's first visit of a state runs one of these per row: its meter is started
    # as :func:`start` starts one (made only if something checks it)
    __slots__ = ("_budget", "_own", "_phase")

    def __init__(self, budget: Budget, phase: Phase) -> None:
        self._budget = budget
        self._phase = phase
        self._own = active() is None

    def __enter__(self) -> None:
        if self._own:
            start(self._budget, self._phase)

    def __exit__(self, *exc: object) -> None:
        if self._own:
            stop()
