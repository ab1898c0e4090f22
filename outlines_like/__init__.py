"""outlines-like: make LLM output fit a shape, on any server or a local model.

```python
import openai
import outlines_like as ol

model = ol.from_server(openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-"))
model.parse("How many legs has a spider?", int)
```
"""

from outlines_like import errors, types
from outlines_like.adapters import ServerInfo
from outlines_like.inputs import Chat, Image
from outlines_like.models import (
    AsyncModel,
    Completion,
    Generator,
    Model,
    RateLimiter,
    RetryPolicy,
    TransformersModel,
    TruncatedOutputWarning,
    Usage,
    from_llamacpp,
    from_ollama,
    from_openai,
    from_server,
    from_sglang,
    from_tgi,
    from_transformers,
    from_vllm,
)
from outlines_like.models.tool_loop import arun_tools, run_tools
from outlines_like.reasoning import split_reasoning
from outlines_like.streaming import aggregate_chunks
from outlines_like.tools import ToolCall, tool_choice, tool_schema

__version__ = "0.1.0"

__all__ = [
    "AsyncModel",
    "Chat",
    "Completion",
    "Generator",
    "Image",
    "Model",
    "RateLimiter",
    "RetryPolicy",
    "ServerInfo",
    "ToolCall",
    "TransformersModel",
    "TruncatedOutputWarning",
    "Usage",
    "__version__",
    "aggregate_chunks",
    "arun_tools",
    "errors",
    "from_llamacpp",
    "from_ollama",
    "from_openai",
    "from_server",
    "from_sglang",
    "from_tgi",
    "from_transformers",
    "from_vllm",
    "run_tools",
    "split_reasoning",
    "tool_choice",
    "tool_schema",
    "types",
]
