"""Rendering chat templates under limits: time and output size, a sandbox for request templates.

The model's own chat template renders through ``transformers`` (whose Jinja environment is
already an ``ImmutableSandboxedEnvironment``). A template sent in a request (allowed only with
``--allow-request-templates``) renders in our own immutable sandbox, which also refuses
repetition (``"x" * n``, ``**``) past the output budget and checks the time budget on every
call. Either render runs on its own thread and is stopped where it is past ``timeout`` plus a
short grace (an exception raised inside the thread), so a template loop cannot outlive its
request. The grace lets a request template's own deadline check, which unwinds cleanly, fire
first: the thread kill lands at any bytecode, possibly between a file's open and its close.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from outlines_like.engine.masking import raise_in_thread
from outlines_like.engine.prepare import render_chat

__all__ = ["TemplateLimitError", "TemplateRenderer"]


class TemplateLimitError(Exception):
    """A chat template ran past its time or output budget."""


_GRACE = 0.5
"""Seconds past ``timeout`` before a render thread is stopped from outside."""


class _Stopped(BaseException):
    """Raised inside a render thread past its time budget (not swallowed by ``except``)."""


def _sandbox(max_bytes: int, deadline: list[float]) -> Any:
    import time

    # jinja2 imports its traceback rewriter on a render's first error: import it now, so that
    # a deadline's error does not run an import (file reads) in the render thread.
    import jinja2.debug  # noqa: F401
    from jinja2.exceptions import SecurityError, TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Limited(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset({"*", "**"})

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**" and isinstance(right, int) and abs(right) > 64:
                raise SecurityError("exponent too large")
            if operator == "*":
                for seq, count in ((left, right), (right, left)):
                    if (
                        isinstance(seq, (str, list, tuple))
                        and isinstance(count, int)
                        and len(seq) * count > max_bytes
                    ):
                        raise SecurityError("repetition over the output budget")
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            if time.monotonic() > deadline[0]:
                raise TemplateLimitError("ran past its time budget")
            return super().call(__context, __obj, *args, **kwargs)

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = Limited(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


class TemplateRenderer:
    """Render chat prompts within ``timeout`` seconds and ``max_bytes`` of output.

    Args:
        timeout: Seconds a render may take.
        max_bytes: Largest rendered prompt (UTF-8 bytes).
    """

    def __init__(self, *, timeout: float, max_bytes: int) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes

    def render(
        self,
        tokenizer: Any,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """The rendered prompt (with the generation prompt) of ``tokenizer``'s chat template.

        Raises:
            TemplateLimitError: past the time or size budget.
            Exception: the template's own error (the messages do not fit it).
        """
        kwargs = dict(template_kwargs or {})
        source = kwargs.pop("chat_template", None) or kwargs.pop("template", None)
        if source is None:
            text = self._bounded(
                lambda: render_chat(tokenizer, messages, tools=tools, template_kwargs=kwargs)
            )
        else:
            text = self._bounded(
                lambda: self._render_request(tokenizer, str(source), messages, tools, kwargs)
            )
        if len(text.encode("utf-8", "surrogatepass")) > self.max_bytes:
            raise TemplateLimitError(f"rendered more than {self.max_bytes} bytes")
        return text

    def _render_request(
        self,
        tokenizer: Any,
        source: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        kwargs: dict[str, Any],
    ) -> str:
        import time

        deadline = [time.monotonic() + self.timeout]
        template = _sandbox(self.max_bytes, deadline).from_string(source)
        special = {k: v for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)}
        out: list[str] = []
        size = 0
        for chunk in template.generate(
            messages=[dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools is not None else None,
            add_generation_prompt=True,
            **special,
            **kwargs,
        ):
            size += len(chunk)
            if size > self.max_bytes:
                raise TemplateLimitError(f"rendered more than {self.max_bytes} bytes")
            out.append(chunk)
        return "".join(out)

    def _bounded(self, work: Any) -> str:
        """Run ``work`` on its own thread; stop it past the time budget and its grace."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["text"] = work()
            except _Stopped:
                box["error"] = TemplateLimitError(f"ran past {self.timeout:g} s")
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=run, name="outlines-like-template", daemon=True)
        thread.start()
        thread.join(self.timeout + _GRACE)
        if thread.is_alive() and thread.ident is not None:
            raise_in_thread(thread.ident, _Stopped)
            thread.join(1.0)
            raise TemplateLimitError(f"ran past {self.timeout:g} s")
        if "error" in box:
            error: BaseException = box["error"]
            raise error
        text: str = box["text"]
        return text
