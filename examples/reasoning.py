"""Reasoning models: the answer and the chain of thought, kept apart.

Needs an OpenAI-compatible server. Start the bundled one with
    outlines-like serve --model tiny --port 8000
or point OL_BASE_URL at vLLM/SGLang (--reasoning-parser ...), llama.cpp or Ollama serving a
reasoning model (Qwen3, DeepSeek-R1, QwQ...). Then: python examples/reasoning.py
"""

import os
import warnings
from typing import Literal

import openai
from pydantic import BaseModel

import outlines_like as ol
from outlines_like.reasoning import split_reasoning

BASE_URL = os.environ.get("OL_BASE_URL", "http://127.0.0.1:8000/v1")


class Verdict(BaseModel):
    larger: Literal["9.11", "9.8"]


def main() -> None:
    # The parsers work on any text, with no server: the two forms servers leave in content.
    print(split_reasoning("<think>\n9.11 < 9.80\n</think>\n\n9.8 is larger."))
    print(split_reasoning("The template opened the tag.</think>Answer."))

    model = ol.from_server(openai.OpenAI(base_url=BASE_URL, api_key="-"))
    result = model.complete("Is 9.11 larger than 9.8? Answer briefly.", max_tokens=200)
    assert not isinstance(result, list)  # one Completion unless n > 1
    print("reasoning:", result.reasoning)
    print("answer:   ", result.text)
    print("usage:    ", result.usage)

    # A constrained answer: the constraint applies to the answer, after the reasoning.
    # On a server that would constrain from the first token, a ThinkingConstrainedWarning says so.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        verdict = model.parse("Which is larger, 9.11 or 9.8?", Verdict, max_tokens=200)
    print("verdict:  ", verdict, [str(w.message) for w in caught])


if __name__ == "__main__":
    main()
