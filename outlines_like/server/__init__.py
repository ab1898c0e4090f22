"""The reference server: an OpenAI-compatible API over a local model, constrained by our masker.

``outlines-like serve --model tiny`` runs it; :func:`outlines_like.server.app.create_app` builds
the FastAPI app; :mod:`~outlines_like.server.pipeline` and :mod:`~outlines_like.server.scheduler`
hold the batching engine; :mod:`~outlines_like.server.dialects` reads constraints in every
server dialect; :mod:`~outlines_like.server.tiny` builds the tiny random-weight model.
"""

__all__: list[str] = []
