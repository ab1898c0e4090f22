"""Tool calling: Python functions the model may call, run in a loop until it answers.

Needs an OpenAI-compatible server with a tool parser. Start the bundled one with
    outlines-like serve --model tiny --port 8000
or point OL_BASE_URL at vLLM (--enable-auto-tool-choice --tool-call-parser hermes), SGLang
(--tool-call-parser qwen25), llama.cpp (--jinja) or Ollama. Then: python examples/tools.py
(The tiny model's words are noise: it may or may not call a tool; real models do.)
"""

import json
import os
from typing import Literal

import openai

import outlines_like as ol
from outlines_like import run_tools
from outlines_like.tools import MaxToolStepsError, tool_choice, tool_schema

BASE_URL = os.environ.get("OL_BASE_URL", "http://127.0.0.1:8000/v1")


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, object]:
    """Get the current weather in a city.

    Args:
        city: The city, e.g. "Paris".
        unit: The temperature unit.
    """
    return {"city": city, "temperature": 21 if unit == "celsius" else 70, "sky": "clear"}


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def main() -> None:
    print(json.dumps(tool_schema(get_weather), indent=2))

    model = ol.from_server(openai.OpenAI(base_url=BASE_URL, api_key="-"))
    try:
        run = run_tools(
            model,
            "What's the weather in Paris, and what is 2 + 3?",
            [get_weather, add],
            max_steps=4,
            tool_choice=tool_choice("required"),  # first step only
            max_tokens=200,
        )
    except MaxToolStepsError as exc:
        print("the model kept calling tools:", exc)
        return
    for r in run.results:
        print(f"{r.call.name}({r.call.arguments}) -> {r.content}")
    print("answer:", run.text)


if __name__ == "__main__":
    main()
