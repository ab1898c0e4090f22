"""Compiling request constraints for the server: cached, size-limited, timed out off the loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.server.dialects import ConstraintSpec, RequestError

if TYPE_CHECKING:
    from outlines_like.fsm._protocols import Compiled
    from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["ConstraintCompiler"]

_REFUSALS: dict[type[BaseException], tuple[str, str]] = {
    asyncio.TimeoutError: (
        "did not compile within {timeout:g} s; simplify it",
        "constraint_too_complex",
    ),
    InvalidConstraintError: ("is invalid: {exc}", "invalid_constraint"),
    UnsupportedConstraintError: ("is not supported: {exc}", "unsupported_constraint"),
    RecursionError: ("is nested too deeply to compile", "constraint_too_complex"),
}
"""How a failed compile is refused: the message after the field's name, and the error code."""


class ConstraintCompiler:
    """Compile request constraints with our masker, keeping the last ``cache_size`` of them.

    Compiles run on two worker threads, so that one slow constraint cannot starve request
    handling; a compile past its timeout keeps its worker until it ends (the request gets a
    400 now).

    Args:
        vocabulary: The served model's vocabulary.
        max_states: DFA state limit.
        max_bytes: Largest constraint text.
        timeout: Seconds a compile may take.
        cache_size: Compiled constraints kept.
    """

    def __init__(
        self,
        vocabulary: Vocabulary,
        *,
        max_states: int,
        max_bytes: int,
        timeout: float,
        cache_size: int = 256,
    ) -> None:
        self.vocabulary = vocabulary
        self.max_states = max_states
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.cache_size = cache_size
        self._compiled: dict[tuple[str, str], Compiled] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(2, "outlines-like-compile")

    def shutdown(self) -> None:
        """Stop the workers (compiles in flight are dropped)."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile_now(self, spec: ConstraintSpec) -> Compiled:
        from outlines_like.fsm.compile import compile_constraint

        return compile_constraint(spec.term, self.vocabulary, max_states=self.max_states)

    async def compile(self, spec: ConstraintSpec) -> Compiled:
        """Compile (or fetch from the cache) a request's constraint.

        Raises:
            RequestError: Invalid, unsupported, too large or too slow to compile.
        """
        cached = self._compiled.get(spec.key)
        if cached is not None:
            return cached
        if len(spec.key[1]) > self.max_bytes:
            raise RequestError(
                f"{spec.field} is too large ({len(spec.key[1])} bytes; the limit is "
                f"{self.max_bytes})",
                param=spec.field,
                code="constraint_too_large",
            )
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._pool, self._compile_now, spec)
        try:
            compiled = await asyncio.wait_for(future, self.timeout)
        except tuple(_REFUSALS) as exc:
            what, code = next(v for k, v in _REFUSALS.items() if isinstance(exc, k))
            message = what.format(exc=exc, timeout=self.timeout)
            raise RequestError(f"{spec.field} {message}", param=spec.field, code=code) from exc
        if len(self._compiled) >= self.cache_size:
            self._compiled.pop(next(iter(self._compiled)))
        self._compiled[spec.key] = compiled
        return compiled
