"""Reasoning: split a model's thinking from its answer, in whole texts, streams and token ids.

Servers report reasoning in several ways, all handled here:

- a separate message field: ``message.reasoning`` (vLLM >= 0.11, Ollama's ``/v1``),
  ``message.reasoning_content`` (SGLang, llama.cpp, older vLLM, DeepSeek), ``message.thinking``
  (Ollama's native API);
- ``<think>...</think>`` at the start of the text (a server without a reasoning parser);
- a lone ``</think>`` when the chat template already opened the tag in the prompt
  (DeepSeek-R1, Qwen3 thinking templates);
- the same in streams, where a tag may be split across chunks (:class:`ReasoningStream`);
- token ids on the server side (:class:`ReasoningTokenParser`, in
  :mod:`outlines_like._reasoning_tokens`, re-exported here).

The text rules, shared by :func:`split_reasoning` and :class:`ReasoningStream` (their results
agree for any split of the text into chunks):

1. Text whose first non-blank characters are ``<think>``: the reasoning runs to the first
   ``</think>`` (or to the end when the tag is never closed: the model was cut while thinking).
2. Otherwise, the first ``</think>`` ends a reasoning that the template opened: everything
   before it is reasoning.
3. Otherwise there is no reasoning and the text is the answer, unchanged.

Reasoning taken from tags is stripped of surrounding blanks, and the answer after a
reasoning block loses its leading blanks. Reasoning from a server field is kept as sent, and
the answer after it loses its leading blanks too.
"""

from __future__ import annotations

import re
import warnings
from typing import Literal

from outlines_like._reasoning_tokens import (
    THINK_END,
    THINK_START,
    ReasoningSpan,
    ReasoningTokenParser,
)
from outlines_like._scan import partial_suffix
from outlines_like.errors import ReasoningRecoveredWarning, ThinkingConstrainedWarning
from outlines_like.messages import REASONING_FIELDS, read_field

__all__ = [
    "THINK_END",
    "THINK_START",
    "ReasoningRecoveredWarning",
    "ReasoningSpan",
    "ReasoningStream",
    "ReasoningTokenParser",
    "ThinkingConstrainedWarning",
    "model_thinks",
    "reasoning_from_message",
    "resolve_reasoning",
    "split_reasoning",
    "warn_if_thinking_unconstrained",
]


# --------------------------------------------------------------------------- text


def _first_end(text: str, end: str) -> int:
    return text.find(end)


def split_reasoning(
    text: str,
    *,
    think_open: bool = False,
    start: str = THINK_START,
    end: str = THINK_END,
) -> tuple[str | None, str]:
    """Return ``(reasoning, answer)`` from a text that may hold a ``<think>`` block.

    Args:
        text: The model's text.
        think_open: The chat template opened the reasoning tag in the prompt, so the text
            starts inside the reasoning even without a ``</think>`` (cut while thinking).
        start: The opening tag.
        end: The closing tag.

    Returns:
        The reasoning (``None`` when there is none, or when it is empty) and the answer.
    """
    stripped = text.lstrip()
    if stripped.startswith(start):
        body = stripped[len(start) :]
        i = _first_end(body, end)
        if i < 0:
            return body.strip() or None, ""
        return body[:i].strip() or None, body[i + len(end) :].lstrip()
    i = _first_end(text, end)
    if i >= 0:
        return text[:i].strip() or None, text[i + len(end) :].lstrip()
    if think_open:
        return text.strip() or None, ""
    return None, text


def _text_field(message: object, name: str) -> str | None:
    value = read_field(message, name)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: [{"type": "text", "text": ...}]
        parts = [read_field(p, "text") for p in value]
        return "".join(p for p in parts if isinstance(p, str))
    raise TypeError(
        f"message field {name!r} should be a string, got {type(value).__name__}: {value!r:.80}"
    )


def resolve_reasoning(
    field_reasoning: str | None,
    content: str | None,
    *,
    finish_reason: str | None,
    think_open: bool,
    recover: bool,
    has_tool_calls: bool = False,
) -> tuple[str | None, str]:
    """Combine a reasoning field and the content into ``(reasoning, answer)``.

    This is the single place where the "answer in the reasoning field" bug is repaired, for
    whole messages and for aggregated streams alike.
    """
    tag_reasoning, answer = split_reasoning(content or "", think_open=think_open)
    field = field_reasoning or None
    if (
        recover
        and field is not None
        and tag_reasoning is None
        and not answer.strip()
        and not has_tool_calls
        and finish_reason != "tool_calls"
    ):
        if THINK_END in field:
            # The server's parser missed the end tag: the answer follows it.
            inner, after = split_reasoning(field)
            if after.strip():
                warnings.warn(
                    "the answer was inside the reasoning field after a '</think>' the server "
                    "did not split; it was moved to the answer",
                    ReasoningRecoveredWarning,
                    stacklevel=3,
                )
                return inner, after
        elif finish_reason != "length":
            warnings.warn(
                "the server returned an empty content and put the text in the reasoning "
                "field (a known reasoning-parser bug, e.g. vLLM with thinking disabled or a "
                "constrained output); it was used as the answer. Pass recover=False to keep it "
                "as reasoning.",
                ReasoningRecoveredWarning,
                stacklevel=3,
            )
            return None, field
    if field is not None and tag_reasoning is not None:
        return field + "\n" + tag_reasoning, answer
    if field is not None:
        # After server-split reasoning the content often starts with the template's blank lines.
        return field, answer.lstrip()
    return tag_reasoning, answer


def reasoning_from_message(
    message: object,
    *,
    finish_reason: str | None = None,
    think_open: bool = False,
    recover: bool = True,
) -> tuple[str | None, str]:
    """Return ``(reasoning, answer)`` from a chat message of any server.

    Reads ``reasoning_content``, ``reasoning`` and ``thinking`` (attributes, pydantic
    ``model_extra`` or dict keys), and splits ``<think>`` tags out of ``content``.

    Args:
        message: ``choice.message`` as an openai SDK object or a dict.
        finish_reason: The choice's finish reason. With ``"length"`` an empty answer means
            the model was cut while thinking, so the reasoning is never moved to the answer.
        think_open: The template opened ``<think>`` in the prompt (see :func:`split_reasoning`).
        recover: When ``content`` is empty, no tool call was made, the output was not cut,
            and a reasoning field holds text (a known server bug), use that text as the
            answer and warn with :class:`ReasoningRecoveredWarning`.

    Returns:
        The reasoning (``None`` when there is none) and the answer text (``""`` when none).

    Raises:
        TypeError: a field holds something that is not text.
    """
    field: str | None = None
    for name in REASONING_FIELDS:
        value = _text_field(message, name)
        if value:
            field = value
            break
    content = _text_field(message, "content")
    return resolve_reasoning(
        field,
        content,
        finish_reason=finish_reason,
        think_open=think_open,
        recover=recover,
        has_tool_calls=bool(read_field(message, "tool_calls")),
    )


_State = Literal["start", "reasoning", "answer"]


class ReasoningStream:
    """Split a stream of text chunks into reasoning and answer deltas.

    Each :meth:`feed` returns ``(reasoning_delta, answer_delta)``. Text that may be the start
    of a tag (``"<thi"``), leading blanks before a possible ``<think>``, and trailing blanks of
    the reasoning are held back until the next chunk decides; :meth:`finish` flushes them.
    Deltas concatenate to what :func:`split_reasoning` returns for the whole text, whatever
    the split, with one exception: when ``think_open`` is ``False`` and a lone ``</think>``
    arrives, the text before it was already sent as answer. The totals (:attr:`reasoning`,
    :attr:`answer`) are then corrected; pass ``think_open=True`` when the template opens the
    tag to get correct deltas too, or ``hold=True`` when it is not known whether the template
    opens it: answer text is then held until a ``</think>``, a reasoning-field delta (the
    server splits the reasoning itself) or :meth:`finish` decides it, and the deltas are exact
    for any text (at the cost of streaming such an answer late).

    Example:
        >>> s = ReasoningStream()
        >>> s.feed("<thi"), s.feed("nk>hmm</th"), s.feed("ink> 42"), s.finish()
        (('', ''), ('hmm', ''), ('', '42'), ('', ''))
    """

    def __init__(
        self,
        *,
        think_open: bool = False,
        hold: bool = False,
        start: str = THINK_START,
        end: str = THINK_END,
    ) -> None:
        self._start, self._end = start, end
        self._think_open = think_open
        self._hold = hold
        self._state: _State = "start"
        self._buf = ""
        self._ws = ""  # blanks held at the end of the reasoning
        self._reasoning_begun = False  # leading blanks of tag reasoning are dropped
        self._after_reasoning = False  # a reasoning block ended: no lone end tag to look for
        self._strip_answer = False  # the answer follows reasoning: drop its leading blanks
        self._answer_begun = False
        self._field_parts: list[str] = []
        self._tag_parts: list[str] = []
        self._answer_parts: list[str] = []
        self._finished = False

    @property
    def reasoning(self) -> str | None:
        """All reasoning so far (server field first, then tag reasoning), or ``None``."""
        field = "".join(self._field_parts)
        tag = "".join(self._tag_parts)
        if field and tag:
            return field + "\n" + tag
        return field or tag or None

    @property
    def answer(self) -> str:
        """All answer text so far."""
        return "".join(self._answer_parts)

    @property
    def field_reasoning(self) -> str | None:
        """Reasoning received through the server's reasoning field only."""
        return "".join(self._field_parts) or None

    @property
    def in_reasoning(self) -> bool:
        """Whether the text is inside a reasoning block now."""
        return self._state == "reasoning"

    def feed(self, text: str | None = "", *, reasoning: str | None = None) -> tuple[str, str]:
        """Take one chunk of content (and/or of a server's reasoning field).

        Args:
            text: The content delta (may hold ``<think>`` tags, whole or split).
            reasoning: The reasoning-field delta (``delta.reasoning`` or
                ``delta.reasoning_content``), passed through unchanged.

        Returns:
            ``(reasoning_delta, answer_delta)``, either possibly empty.
        """
        if self._finished:
            raise RuntimeError("ReasoningStream.feed() after finish(); make a new stream")
        r_out: list[str] = []
        if reasoning:
            self._field_parts.append(reasoning)
            r_out.append(reasoning)
            if not self._answer_begun:
                self._strip_answer = True
            self._hold = False  # the server splits the reasoning: no lone end tag will come
        a_out: list[str] = []
        if text or (reasoning and self._buf):
            self._buf += text or ""
            self._run(r_out, a_out, final=False)
        return "".join(r_out), "".join(a_out)

    def finish(self) -> tuple[str, str]:
        """Flush held-back text at the end of the stream."""
        r_out: list[str] = []
        a_out: list[str] = []
        if not self._finished:
            self._run(r_out, a_out, final=True)
            self._finished = True
        return "".join(r_out), "".join(a_out)

    # -- internals

    def _emit_reasoning(self, text: str, out: list[str], *, closing: bool) -> None:
        if not self._reasoning_begun:
            text = text.lstrip()
            if not text:
                return
            self._reasoning_begun = True
        text = self._ws + text
        if closing:
            text = text.rstrip()
            self._ws = ""
        else:
            body = text.rstrip()
            self._ws = text[len(body) :]
            text = body
        if text:
            out.append(text)
            self._tag_parts.append(text)

    def _emit_answer(self, text: str, out: list[str]) -> None:
        if self._strip_answer and not self._answer_begun:
            text = text.lstrip()
        if text:
            self._answer_begun = True
            out.append(text)
            self._answer_parts.append(text)

    def _run(self, r_out: list[str], a_out: list[str], *, final: bool) -> None:
        start, end = self._start, self._end
        while True:
            buf = self._buf
            if self._state == "start":
                head = buf.lstrip()
                if head.startswith(start):
                    self._buf = head[len(start) :]
                    self._state = "reasoning"
                    continue
                if not final and start.startswith(head):  # blanks, or a prefix of the tag
                    return
                self._state = "reasoning" if self._think_open else "answer"
                continue
            if self._state == "reasoning":
                i = buf.find(end)
                if i >= 0:
                    self._emit_reasoning(buf[:i], r_out, closing=True)
                    self._buf = buf[i + len(end) :]
                    self._state = "answer"
                    self._after_reasoning = self._strip_answer = True
                    continue
                if final:
                    self._emit_reasoning(buf, r_out, closing=True)
                    self._buf = ""
                    return
                k = partial_suffix(buf, end)
                self._emit_reasoning(buf[: len(buf) - k], r_out, closing=False)
                self._buf = buf[len(buf) - k :]
                return
            # answer
            if self._after_reasoning:
                self._emit_answer(buf, a_out)
                self._buf = ""
                return
            i = buf.find(end)
            if i >= 0:
                # A lone end tag: everything so far was reasoning the template opened.
                before = "".join(self._answer_parts) + buf[:i]
                self._answer_parts.clear()
                self._emit_reasoning(before, r_out, closing=True)
                self._buf = buf[i + len(end) :]
                self._after_reasoning = self._strip_answer = True
                self._answer_begun = False
                continue
            if self._hold and not final:
                return  # a lone end tag may still come: the text is not known to be answer
            k = 0 if final else partial_suffix(buf, end)
            self._emit_answer(buf[: len(buf) - k], a_out)
            self._buf = buf[len(buf) - k :]
            return


# --------------------------------------------------------------------------- warnings

_THINKING_NAME = re.compile(
    r"deepseek-?r1|(?<![a-z])r1-distill|qwq|qwen3(?!.*instruct)|thinking|reason|gpt-oss|"
    r"magistral|phi-4-(mini-)?reasoning|glm-4\.[5-9]|glm-z1|exaone-deep|skywork-or1|"
    r"openthinker|marco-o1|(?<![a-z])o[134](-mini)?(?![a-z0-9])",
    re.IGNORECASE,
)


def model_thinks(model_name: str | None) -> bool | None:
    """Guess from its name whether a model emits reasoning before its answer.

    Returns ``True`` for known reasoning families (DeepSeek-R1 and its distills, QwQ,
    Qwen3 except the ``Instruct`` releases, ``*-Thinking``, gpt-oss, Magistral, o1/o3/o4...),
    ``None`` when the name says nothing (the guess is a name match, not a fact).
    """
    if not model_name:
        return None
    return True if _THINKING_NAME.search(model_name) else None


_PARSES_BEFORE_CONSTRAINING: dict[str, bool | None] = {
    # The server applies constraints after the reasoning on its own.
    "openai": True,
    "ollama": True,  # `think` + `format`: the format applies to the answer (Ollama >= 0.9)
    # Only when started with --reasoning-parser (vLLM, SGLang): we cannot see that.
    "vllm": None,
    "sglang": None,
    "generic": None,
    # No reasoning-aware constraining: the grammar starts at token 0.
    "tgi": False,
    "llamacpp": False,
}


def warn_if_thinking_unconstrained(
    *,
    server: str,
    constrained: bool,
    thinks: bool | None,
    reasoning_parser: bool | None = None,
    stacklevel: int = 2,
) -> bool:
    """Warn when a constraint would be applied to a thinking model from its first token.

    A server without a reasoning parser enforces the regex or schema from token 0, so the
    model's ``<think>`` block is forced into the schema too: the thinking silently vanishes.

    Args:
        server: The server kind (``"vllm"``, ``"sglang"``, ``"llamacpp"``, ``"tgi"``,
            ``"ollama"``, ``"openai"``, ``"generic"``; ``"local"`` for our own masker).
        constrained: Whether the request carries a constraint (regex, schema, grammar).
        thinks: Whether the model reasons before answering (``None``: unknown; see
            :func:`model_thinks`).
        reasoning_parser: Whether the server runs a reasoning parser that delays the
            constraint until the reasoning ends (vLLM and SGLang ``--reasoning-parser``, our
            masker's reasoning-aware mode). ``None``: unknown, judged from ``server``.
        stacklevel: Passed to :func:`warnings.warn`.

    Returns:
        Whether a :class:`ThinkingConstrainedWarning` was issued.
    """
    if not constrained or not thinks:
        return False
    parses = reasoning_parser
    if parses is None:
        parses = _PARSES_BEFORE_CONSTRAINING.get(server)
    if parses:
        return False
    how = {
        "vllm": "start vLLM with --reasoning-parser (e.g. qwen3, deepseek_r1)",
        "sglang": "start SGLang with --reasoning-parser (e.g. qwen3, deepseek-r1)",
        "llamacpp": "llama.cpp applies the grammar from the first token; disable thinking "
        "(chat_template_kwargs={'enable_thinking': False}) or constrain in a second call",
        "tgi": "TGI applies the grammar from the first token; disable thinking in the template",
    }.get(server, "run the server with a reasoning parser, or disable thinking")
    unknown = " (if it runs one, pass reasoning_parser=True)" if parses is None else ""
    warnings.warn(
        f"the model thinks, but the {server} server may enforce the constraint from the first "
        f"token{unknown}: the reasoning would be forced into the output type and lost. "
        f"To keep it: {how}.",
        ThinkingConstrainedWarning,
        stacklevel=stacklevel + 1,
    )
    return True
