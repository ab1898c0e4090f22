"""Streams: chat-completion chunks aggregated into one message, and JSON read as it grows.

- ``aggregate``: :class:`StreamAggregator` takes chunks one by one, returns what each added,
  and builds the final :class:`AggregatedMessage` per choice; :func:`aggregate_chunks` and
  :func:`aggregate_choices` do it for a whole stream. ``model.stream`` reads through it.
- ``partial``: :func:`partial_json` closes an incomplete JSON prefix into the largest valid
  value; :func:`iter_partial` yields partial objects as a structured answer streams in.
"""

from outlines_like.messages import read_usage
from outlines_like.streaming.aggregate import (
    AggregatedMessage,
    ChoiceDelta,
    RawToolCall,
    StreamAggregator,
    aaggregate_chunks,
    aggregate_choices,
    aggregate_chunks,
)
from outlines_like.streaming.partial import aiter_partial, iter_partial, partial_json

__all__ = [
    "AggregatedMessage",
    "ChoiceDelta",
    "RawToolCall",
    "StreamAggregator",
    "aaggregate_chunks",
    "aggregate_choices",
    "aggregate_chunks",
    "aiter_partial",
    "iter_partial",
    "partial_json",
    "read_usage",
]
