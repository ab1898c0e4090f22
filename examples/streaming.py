"""Streaming: answer text as it comes, structured objects as they grow, raw chunks aggregated.

Needs an OpenAI-compatible server. Start the bundled one with
    outlines-like serve --model tiny --port 8000
or point OL_BASE_URL at any vLLM/SGLang/llama.cpp/Ollama server. Then: python examples/streaming.py
"""

import os
from typing import Literal

import openai
from pydantic import BaseModel

import outlines_like as ol
from outlines_like.streaming import StreamAggregator, iter_partial

BASE_URL = os.environ.get("OL_BASE_URL", "http://127.0.0.1:8000/v1")


class Character(BaseModel):
    name: str
    role: Literal["hero", "villain"]
    age: int


def main() -> None:
    client = openai.OpenAI(base_url=BASE_URL, api_key="-")
    model = ol.from_server(client)

    # 1. Answer text, reasoning left out.
    for delta in model.stream("Say hello in five words.", max_tokens=40):
        print(delta, end="", flush=True)
    print()

    # 2. A structured answer, shown as it grows; the last value is validated.
    for value in iter_partial(
        model.stream("Invent a character.", Character, max_tokens=200), Character
    ):
        print(repr(value))

    # 3. Raw chunks from the SDK, put back together (reasoning, tool calls, usage, finish reason).
    agg = StreamAggregator()
    model_id = client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model_id,
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=40,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        agg.feed(chunk)
    message = agg.result()
    print(repr(message.content), message.reasoning, message.usage, message.finish_reason)


if __name__ == "__main__":
    main()
