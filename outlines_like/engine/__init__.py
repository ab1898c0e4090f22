"""The local generation engine, shared by ``from_transformers`` and the reference server.

:mod:`~outlines_like.engine.pipeline` runs one forward pass for a whole batch
(``execute(batch)`` -> ``{request_id: output}``, ``release(request_id)``);
:mod:`~outlines_like.engine.scheduler` admits requests between steps on a background thread;
:mod:`~outlines_like.engine.prepare` turns prompts into requests (chat template, token ids,
the seeded ``n`` expansion, the ``</think>`` check); :mod:`~outlines_like.engine.runs` runs
requests to the end. It imports the masker, ``inputs`` and ``reasoning``, numpy and torch;
never ``models`` or ``server``.
"""

__all__: list[str] = []
