"""The batch helpers both models share: item outcomes, the first failure in prompt order.

``Model.batch`` runs items on threads and ``AsyncModel.batch`` on tasks; what they do with
the finished items is written once here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import warnings
from typing import Any

from outlines_like.models._reader import Sink

__all__ = [
    "CANCELLED",
    "DEFAULT_MAX_CONCURRENCY",
    "check_concurrency",
    "outcome",
    "reissue",
    "results_of",
]

DEFAULT_MAX_CONCURRENCY = 16


def check_concurrency(max_concurrency: int) -> int:
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise TypeError(f"max_concurrency must be an int, got {max_concurrency!r}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    return max_concurrency


class _Cancelled:
    """Stands for a batch item that was cancelled after another one failed."""

    def __repr__(self) -> str:
        return "<cancelled>"


CANCELLED = _Cancelled()


def outcome(future: concurrent.futures.Future[Any] | asyncio.Future[Any]) -> Any:
    """A finished item's result or exception; ``CANCELLED`` for one that never ran out."""
    if future.cancelled() or not future.done():
        return CANCELLED
    return future.exception() or future.result()


def results_of(results: list[Any], return_exceptions: bool) -> list[Any]:
    """The batch's answers; without ``return_exceptions``, the first failure in prompt order.

    The raised error carries every item's outcome as ``error.batch_results`` (answers,
    exceptions, and ``CANCELLED`` for items stopped after the failure).
    """
    if return_exceptions:
        return results
    for result in results:
        if isinstance(result, BaseException):
            result.batch_results = results  # type: ignore[attr-defined]
            raise result
    return results


def reissue(sinks: list[Sink], *, stacklevel: int) -> None:
    """Issue the warnings kept by batch workers from the caller's thread (its line shown)."""
    for sink in sinks:
        for message, category in sink:
            warnings.warn(message, category, stacklevel=stacklevel + 1)
