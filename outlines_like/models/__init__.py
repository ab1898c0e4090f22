"""Models: remote servers through their ``openai`` client (sync and async), and generators.

```python
import openai
from outlines_like.models import from_server
model = from_server(openai.OpenAI(base_url="http://localhost:8000/v1", api_key="-"))
```

``Constraint.of(T)`` validates and compiles an output type once; a remote model's
``__call__``, ``parse``, ``complete``, ``stream`` and ``batch`` take the result in place of
``T`` (``Generator`` does this for you).
"""

from outlines_like.errors import TruncatedOutputWarning
from outlines_like.messages import Attempt, Completion, Usage
from outlines_like.models._call import Constraint
from outlines_like.models.factories import (
    from_llamacpp,
    from_ollama,
    from_openai,
    from_server,
    from_sglang,
    from_tgi,
    from_vllm,
)
from outlines_like.models.generator import AsyncModelGenerator, Generator, ModelGenerator
from outlines_like.models.local import TransformersModel, from_transformers
from outlines_like.models.reask import ReaskPolicy
from outlines_like.models.remote import AsyncModel, Model
from outlines_like.models.retry import RateLimiter, RetryPolicy

__all__ = [
    "AsyncModel",
    "AsyncModelGenerator",
    "Attempt",
    "Completion",
    "Constraint",
    "Generator",
    "Model",
    "ModelGenerator",
    "RateLimiter",
    "ReaskPolicy",
    "RetryPolicy",
    "TransformersModel",
    "TruncatedOutputWarning",
    "Usage",
    "from_llamacpp",
    "from_ollama",
    "from_openai",
    "from_server",
    "from_sglang",
    "from_tgi",
    "from_transformers",
    "from_vllm",
]
