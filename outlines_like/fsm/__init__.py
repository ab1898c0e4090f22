"""The local token masker: vocabulary, regex -> byte DFA, token index, matchers.

```python
from outlines_like.fsm import Vocabulary, compile_constraint
compiled = compile_constraint(int, Vocabulary(tokens, eos_token_ids=[2]))
m = compiled.matcher()
m.fill_bitmask(out); m.advance(token_id)
```

``compile_constraint(..., budget=Budget(...))`` bounds the work (time, states, bytes, grammar
size, schema depth) of the compile and of every later mask; past a limit it raises
``ConstraintTooLargeError`` (see :mod:`outlines_like.fsm.budget`).

``LogitsProcessor`` (``outlines_like.fsm.processors``) plugs a compiled constraint into
transformers' ``generate()``; torch is imported only when it runs.
"""

from outlines_like.fsm._protocols import Compiled, Matcher, RejectedTokenError
from outlines_like.fsm.budget import Budget
from outlines_like.fsm.compile import clear_caches, compile_constraint
from outlines_like.fsm.grammar import (
    JSON_OBJECT_GRAMMAR,
    CompiledGrammar,
    GrammarMatcher,
    compile_grammar,
    compile_json_object,
)
from outlines_like.fsm.index import (
    TokenIndex,
    TokenTable,
    prepare_vocabulary,
    token_table,
    walk_tokens,
)
from outlines_like.fsm.matcher import FreeTextCompiled, RegexCompiled, RegexMatcher
from outlines_like.fsm.processors import LogitsProcessor
from outlines_like.fsm.regex_dfa import ByteDFA, compile_regex
from outlines_like.fsm.vocabulary import Vocabulary

__all__ = [
    "JSON_OBJECT_GRAMMAR",
    "Budget",
    "ByteDFA",
    "Compiled",
    "CompiledGrammar",
    "FreeTextCompiled",
    "GrammarMatcher",
    "LogitsProcessor",
    "Matcher",
    "RegexCompiled",
    "RegexMatcher",
    "RejectedTokenError",
    "TokenIndex",
    "TokenTable",
    "Vocabulary",
    "clear_caches",
    "compile_constraint",
    "compile_grammar",
    "compile_json_object",
    "compile_regex",
    "prepare_vocabulary",
    "token_table",
    "walk_tokens",
]
