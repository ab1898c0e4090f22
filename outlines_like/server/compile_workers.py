"""Trial compiles in processes that are killed past their time or memory budget.

A constraint from a request is first compiled, with its first mask, outside the server: each
worker (``python -m outlines_like.server.compile_workers``, a plain subprocess at a lower CPU
priority) imports the masker once, then forks one child per trial; a child that runs past
``timeout`` seconds or grows past ``memory_bytes`` of resident memory is killed, so the work
stops instead of running on after the client got its 400, and the next trial starts at once
(a fork costs milliseconds, a fresh interpreter seconds). Where there is no ``fork`` the
worker compiles itself and the server kills and replaces it.

A trial that passed sends its compiled constraint back (:mod:`outlines_like.fsm._transfer`:
its tables and first mask, without the vocabulary, which the server re-attaches by hash), so
each constraint is compiled once. Writing the bytes is not part of the compile's budget: the
child says when it has compiled, and the writing gets the same time budget again.
Where the bytes cannot come back (the constraint does not pickle, its bytes pass
``max_transfer_bytes``, or writing them ran past its budget) the trial still passed and the
server compiles the constraint itself, knowing the same work fits the same budgets
(compiling is deterministic).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from outlines_like.fsm.vocabulary import Vocabulary
    from outlines_like.types import Term

__all__ = ["CompileWorkers", "TrialResult"]

_log = logging.getLogger("outlines_like.server")
_WALL_FACTOR = 10.0
"""A trial may take this many times its CPU budget in wall time (it runs at a low priority)."""
_GRACE_S = 2.0
"""Seconds past the compile budget before the server gives up on a worker itself."""
_STARTUP_S = 120.0
"""Seconds a worker may take to import the masker (slow on a busy machine)."""


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """How a trial compile ended.

    Attributes:
        outcome: ``"ok"``, ``"invalid"`` (the masker refused it), ``"unsupported"``,
            ``"timeout"`` or ``"memory"`` (the worker was killed).
        message: The masker's message for ``invalid`` / ``unsupported``.
        seconds: How long the trial took.
        compiled: For ``ok``: the compiled constraint's bytes
            (:func:`~outlines_like.fsm._transfer.load_compiled` re-attaches the vocabulary), or
            ``None`` where it could not be sent.
    """

    outcome: str
    message: str = ""
    seconds: float = 0.0
    compiled: bytes | None = None


_Reply = tuple[str, str, bytes | None]
"""What a trial sends back: outcome, message, the compiled constraint's bytes."""
_COMPILED: _Reply = ("compiled", "", None)
"""Sent ahead of the reply once the compile and first mask are done (then the bytes are
written): the budgets of the compile are over, the writing gets an allowance of its own."""


def _compile_once(
    term: Term,
    vocabulary: Vocabulary,
    max_states: int,
    max_transfer: int,
    compiled_hook: Callable[[], None],
) -> _Reply:
    """Compile ``term`` and compute its first mask; ``(outcome, message, compiled bytes)``.

    ``compiled_hook`` runs between the compile and the writing of its bytes.
    """
    import numpy as np

    from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
    from outlines_like.fsm._transfer import dump_compiled
    from outlines_like.fsm.compile import clear_caches, compile_constraint
    from outlines_like.fsm.processors import bitmask_words
    from outlines_like.server.grammar_check import check_grammar
    from outlines_like.types import CFG

    words = np.zeros(bitmask_words(len(vocabulary)), dtype=np.int32)
    try:
        if isinstance(term, CFG):
            check_grammar(term)  # every rule productive, and it builds
        compiled = compile_constraint(term, vocabulary, max_states=max_states)
        compiled.matcher().fill_bitmask(words)
    except InvalidConstraintError as exc:
        return ("invalid", str(exc), None)
    except UnsupportedConstraintError as exc:
        return ("unsupported", str(exc), None)
    except RecursionError:
        return ("invalid", "it is nested too deeply", None)
    except ValueError as exc:  # the grammar check
        return ("invalid", str(exc), None)
    except MemoryError:
        return ("memory", "", None)
    except Exception as exc:  # the masker failed on it: the constraint is at fault
        return ("invalid", f"{type(exc).__name__}: {exc}", None)
    finally:
        clear_caches()
    compiled_hook()
    try:
        data: bytes | None = dump_compiled(compiled)
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as exc:
        _log.warning("a compiled %s could not be sent back (%s)", type(term).__name__, exc)
        data = None
    if data is not None and len(data) > max_transfer:
        data = None  # the server compiles it itself rather than take it through a pipe
    return ("ok", "", data)


def _forked_trial(
    term: Term,
    vocabulary: Vocabulary,
    budget: tuple[int, float, int, int],
    compiled_hook: Callable[[], None],
) -> _Reply:
    """Run one trial in a forked child of this (single-threaded) worker, under the budgets.

    The child starts with every module already imported (a fork costs milliseconds), and is
    killed past the time or memory budget: the worker itself never runs masker code, so it
    never needs replacing. Once the child has compiled (``compiled_hook`` passes the news on),
    writing the compiled constraint's bytes gets the same time budget again; a child killed
    then has still passed (``ok`` without bytes: the server compiles it itself).
    """
    max_states, timeout, memory_bytes, max_transfer = budget
    read, write = multiprocessing.Pipe(duplex=False)
    pid = os.fork()
    if pid == 0:  # the child
        read.close()
        try:
            result = _compile_once(
                term, vocabulary, max_states, max_transfer, lambda: write.send(_COMPILED)
            )
            write.send(result)
        finally:
            os._exit(0)
    write.close()
    # the budget is CPU time (a niced child on a busy machine gets little of the wall clock),
    # capped at _WALL_FACTOR times as much wall time
    deadline = time.monotonic() + _WALL_FACTOR * timeout
    cpu_limit = timeout
    compiled = False
    try:
        while True:
            if read.poll(0.02):
                try:
                    reply: _Reply = read.recv()
                except (EOFError, OSError):  # the child died: the OS's memory limit
                    return ("ok", "", None) if compiled else ("memory", "", None)
                if reply[0] != _COMPILED[0]:
                    return reply
                compiled = True
                compiled_hook()
                deadline = time.monotonic() + _WALL_FACTOR * timeout
                cpu_limit = _cpu_seconds(pid) + timeout
                continue
            if time.monotonic() > deadline or _cpu_seconds(pid) > cpu_limit:
                return ("ok", "", None) if compiled else ("timeout", "", None)
            if _rss(pid) > memory_bytes:
                return ("ok", "", None) if compiled else ("memory", "", None)
    finally:
        read.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _serve(conn_in: Connection, conn_out: Connection) -> None:
    """A worker process: trial-compile each term it is sent, report how it went."""
    # everything a trial needs is imported once, here, before any fork
    import lark.load_grammar  # noqa: F401
    import numpy  # noqa: F401

    import outlines_like.fsm._transfer
    import outlines_like.fsm.compile
    import outlines_like.fsm.index
    import outlines_like.server.grammar_check

    vocabulary, budget = conn_in.recv()
    # once, not in every trial; no row table in stock (a trial would take it copy-on-write)
    # and no refill thread: this worker stays single-threaded for its forks
    outlines_like.fsm.index.prepare_vocabulary(vocabulary, stock_row_tables=False)
    conn_out.send(("ready", "", None))
    forks = hasattr(os, "fork")
    while True:
        try:
            term = conn_in.recv()
        except EOFError:
            return

        def compiled_hook() -> None:
            conn_out.send(_COMPILED)

        if forks:
            reply = _forked_trial(term, vocabulary, budget, compiled_hook)
        else:  # no fork: compile here, the parent watches and kills this worker
            reply = _compile_once(term, vocabulary, budget[0], budget[3], compiled_hook)
        conn_out.send(reply)


def _cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` has used (0 where ``/proc`` cannot tell)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _rss(pid: int) -> int:
    """Resident bytes of process ``pid`` (0 where ``/proc`` cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Worker:
    """One worker: ``python -m outlines_like.server.compile_workers`` over two pipes.

    A plain subprocess rather than ``multiprocessing``: it never re-imports the parent's main
    script, and the server process (with its threads) is never forked.
    """

    def __init__(self, vocabulary: Vocabulary, budget: tuple[int, float, int, int]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "outlines_like.server.compile_workers"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.send = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.recv = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.process.stdin.close()
        self.process.stdout.close()
        self.send.send((vocabulary, budget))
        self.ready = False

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=5)
        self.send.close()
        self.recv.close()


class CompileWorkers:
    """A few compile worker processes, each running one trial at a time.

    Args:
        vocabulary: The served model's vocabulary (sent to each worker once).
        processes: Worker processes.
        timeout: Seconds a trial may take (the worker is killed after).
        memory_bytes: Resident memory a worker may reach (killed after).
        max_states: The DFA state limit.
        max_transfer_bytes: Largest compiled constraint a trial sends back (a larger one is
            compiled again by the server).
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        *,
        processes: int,
        timeout: float,
        memory_bytes: int,
        max_states: int,
        max_transfer_bytes: int = 1_000_000_000,
    ) -> None:
        self.vocabulary = vocabulary
        self.max_transfer_bytes = max_transfer_bytes
        self.timeout = timeout
        self.memory_bytes = memory_bytes
        self.max_states = max_states
        self.processes = max(1, processes)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
        self._guard = threading.Lock()
        self._starting = threading.Lock()
        self._started = False
        self.killed = 0
        """Workers killed for running past a budget (tests and ``/stats``)."""
        self.trials = 0
        """Trials that ended (each one compile of one constraint)."""

    def _spawn(self) -> None:
        """Start a worker; it joins the idle queue once loaded (start-up is no request's time)."""
        budget = (self.max_states, self.timeout, self.memory_bytes, self.max_transfer_bytes)
        worker = _Worker(self.vocabulary, budget)
        with self._guard:
            self._all.append(worker)
        threading.Thread(
            target=self._when_ready, args=(worker,), name="outlines-like-compile-start", daemon=True
        ).start()

    def _when_ready(self, worker: _Worker) -> None:
        try:
            if worker.recv.poll(_STARTUP_S) and worker.recv.recv()[0] == "ready":
                worker.ready = True
                self._idle.put(worker)
                return
        except (EOFError, OSError):
            pass
        self._retire(worker)  # it could not even start: leave the pool short, say so
        _log.error("a compile worker failed to start (exit code %s)", worker.process.poll())

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        with self._guard:
            if worker in self._all:
                self._all.remove(worker)

    def _replace(self, worker: _Worker) -> None:
        self._retire(worker)
        with self._starting:
            if self._started:
                self._spawn()

    def start(self) -> None:
        """Start the workers (they load in the background); idempotent."""
        with self._starting:
            if self._started:
                return
            self._started = True
            for _ in range(self.processes):
                self._spawn()

    def shutdown(self) -> None:
        """Kill every worker (a later :meth:`start` makes new ones)."""
        with self._starting:
            self._started = False
            with self._guard:
                workers = list(self._all)
            for worker in workers:
                self._retire(worker)
            while not self._idle.empty():
                self._idle.get_nowait()

    def trial_sync(self, term: Term) -> TrialResult:
        """Compile ``term`` (and its first mask) in a worker, within the budgets (blocking)."""
        self.start()
        try:
            worker = self._idle.get(timeout=_STARTUP_S)
        except queue.Empty:
            return TrialResult("timeout", "no compile worker is available")
        try:
            result, stalled = self._run(worker, term)
        except BaseException:
            self._replace(worker)
            raise
        self.trials += 1
        if result.outcome in ("timeout", "memory"):
            self.killed += 1
        if stalled:  # the worker itself ran past the budget (no fork): replace it
            self._replace(worker)
        else:
            self._idle.put(worker)
        return result

    def _run(self, worker: _Worker, term: Term) -> tuple[TrialResult, bool]:
        """Send one term and watch the worker (on a helper thread); whether it stalled.

        The worker enforces the budgets on its forked child; this watch is the safety net
        (and the enforcement where there is no fork), with a grace period past the budget.
        """
        start = time.monotonic()
        worker.send.send(term)
        deadline = start + _WALL_FACTOR * self.timeout + _GRACE_S
        died = "memory"  # what a dead or stalled worker means (once it compiled: a pass)
        stalled = "timeout"
        while True:
            elapsed = time.monotonic() - start
            if worker.recv.poll(0.02):
                try:
                    outcome, message, compiled = worker.recv.recv()
                except (EOFError, OSError):  # the worker died (the OS's memory limit, a crash)
                    return TrialResult(died, "", elapsed), True
                if outcome == _COMPILED[0]:  # compiled: writing its bytes gets its own time
                    deadline = time.monotonic() + _WALL_FACTOR * self.timeout + _GRACE_S
                    died = stalled = "ok"
                    continue
                return TrialResult(outcome, message, elapsed, compiled), False
            if not worker.alive():
                return TrialResult(died, "", elapsed), True
            if time.monotonic() > deadline:
                return TrialResult(stalled, "", elapsed), True
            if _rss(worker.process.pid) > self.memory_bytes:
                return TrialResult(died, "", elapsed), True

    def status(self) -> dict[str, Any]:
        """Worker counts for ``/stats``."""
        return {"workers": len(self._all), "trials": self.trials, "killed": self.killed}


def _main() -> None:
    """Entry point of a worker process: the parent speaks over stdin and stdout."""
    out = os.dup(1)
    os.dup2(2, 1)  # stray prints go to stderr, not into the reply pipe
    if hasattr(os, "nice"):
        os.nice(10)  # the engine's forward passes come first on a busy machine
    _serve(Connection(0, writable=False), Connection(out, readable=False))


if __name__ == "__main__":
    _main()
