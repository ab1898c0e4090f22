"""The masker inside other inference engines.

``outlines_like.integrations.vllm``: a batch-level vLLM logits processor that enforces our
constraints (sent by ``from_server(client, server="vllm", masker="outlines_like")``) inside
vLLM. Start vLLM with ``--logits-processors
outlines_like.integrations.vllm:OutlinesLikeLogitsProcessor`` or install the ``vllm`` extra
(an entry point in the ``vllm.logits_processors`` group); see docs/vllm.md.

Nothing here imports vLLM until vLLM loads the processor.
"""

__all__: list[str] = []
