"""The local token masker: vocabulary, regex -> byte DFA, token index, matchers.

```python
from outlines_like.fsm import Vocabulary, compile_constraint
compiled = compile_constraint(int, Vocabulary(tokens, eos_token_ids=[2]))
m = compiled.matcher()
m.fill_bitmask(out); m.advance(token_id)
```
"""

from outlines_like.fsm._protocols import Compiled, Matcher, RejectedTokenError
from outlines_like.fsm.regex_dfa import ByteDFA, compile_regex
from outlines_like.fsm.vocabulary import Vocabulary

__all__ = [
    "ByteDFA",
    "Compiled",
    "Matcher",
    "RejectedTokenError",
    "Vocabulary",
    "compile_regex",
]
