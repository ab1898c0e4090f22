"""The reference server: an OpenAI-compatible API over a local model, constrained by our masker.

``outlines-like serve --model tiny`` runs it (:mod:`~outlines_like.server.run`). The HTTP side
is :func:`outlines_like.server.app.create_app` (routes only); under it, plain code:
:mod:`~outlines_like.server.config` (options), :mod:`~outlines_like.server.loading` (the
model), :mod:`~outlines_like.server.validation` (request bodies -> validated requests, or
OpenAI-style 4xx errors), :mod:`~outlines_like.server.dialects` (constraints in every server
dialect), :mod:`~outlines_like.server.tool_choice`, :mod:`~outlines_like.server.constraints`
(compiling them), :mod:`~outlines_like.server.service` (generation on the engine,
:mod:`outlines_like.engine`) and :mod:`~outlines_like.server.responses` (OpenAI JSON and SSE).
:mod:`~outlines_like.server.tiny` builds the tiny random-weight model.
"""

__all__: list[str] = []
