"""Reask: an answer that fits the constraint but fails the output type's validation is sent back.

A constraint can say what JSON looks like, not what a pydantic validator checks
(``field_validator``, ``model_validator``, rules across fields). With ``retries=N``
(``model.parse(prompt, Hero, retries=2)``, and ``complete``, ``stream_parse``, ``batch``, sync
and async, remote and local), an answer whose parsing raises a ``ParseError`` extends the
conversation with that answer (an ``assistant`` message) and what was wrong with it (a ``user``
message written by the :class:`ReaskPolicy`), and the model is asked again under the same
constraint, at most ``N`` more times.

Never asked again: a ``ConstraintViolationError`` (the server should have prevented that
answer: it is raised at once), an answer cut at ``max_tokens`` (``GenerationError``; with
``verify=False`` the ``ParseError`` of a cut answer is raised as is), refusals and API errors.
Every answer is kept as an :class:`~outlines_like.messages.Attempt`: on the final
``ParseError`` as ``error.attempts``, and on the ``Completion`` that
``model.complete(..., retries=N)`` returns as ``completion.attempts``. ``model.usage`` counts
every attempt.

The loop is written once, free of I/O, as a flow (:func:`reask_flow`) that yields :class:`Ask`
steps, run by ``models.retry``'s ``drive``/``adrive`` like every other flow; streams, whose
values come out as they are generated, go through :func:`iter_reasked` /
:func:`aiter_reasked`. Both keep their state in one :class:`Reasker`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

import pydantic

from outlines_like.errors import ConstraintViolationError, ParseError
from outlines_like.inputs import Chat, to_messages
from outlines_like.messages import Attempt, Completion
from outlines_like.models.retry import Flow
from outlines_like.streaming import aiter_partial, iter_partial

if TYPE_CHECKING:
    from outlines_like.models._call import Call, Constraint
    from outlines_like.models._core import ModelCore
    from outlines_like.models._reader import Sink, StreamView

__all__ = [
    "DEFAULT_TEMPLATE",
    "Ask",
    "Attempt",
    "ReaskPolicy",
    "Reasked",
    "Reasker",
    "Retries",
    "aiter_reasked",
    "describe",
    "iter_reasked",
    "reask_flow",
    "reask_policy",
    "remote_flow",
    "stream_opener",
]

T = TypeVar("T")
S = TypeVar("S")

DEFAULT_TEMPLATE = (
    "Your answer failed validation:\n{errors}\n"
    "Answer again in the same format, and correct these errors."
)
"""The follow-up message: ``{errors}`` is the validation error, ``{text}`` the answer."""


def describe(error: ParseError) -> str:
    """The validation error in a few lines for the model: one ``- field: message`` per error.

    A pydantic error is listed field by field (every error, no URL); any other parse error
    is its message.
    """
    cause = error.__cause__
    if isinstance(cause, pydantic.ValidationError):
        lines = []
        for err in cause.errors(include_url=False):
            where = ".".join(str(part) for part in err["loc"]) or "<root>"
            lines.append(f"- {where}: {err['msg']}")
        return "\n".join(lines)
    return f"- {error}"


@dataclasses.dataclass(frozen=True)
class ReaskPolicy:
    """How often to ask again after a validation failure, and what to say.

    ``retries=N`` is ``ReaskPolicy(max_retries=N)``; pass a policy to change the message.

    Attributes:
        max_retries: Requests after the first (0: never ask again).
        template: The follow-up user message; ``{errors}`` is replaced by the validation
            error (:func:`describe`), ``{text}`` by the rejected answer.
        message: Builds the follow-up message from the failed attempt instead of
            ``template`` (``attempt.text``, ``attempt.error``).

    Raises:
        TypeError: ``max_retries`` is not an int, or ``message`` is not callable.
        ValueError: ``max_retries < 0``, or ``template`` names other fields than
            ``{errors}`` and ``{text}``.
    """

    max_retries: int = 2
    template: str = DEFAULT_TEMPLATE
    message: Callable[[Attempt], str] | None = dataclasses.field(default=None, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise TypeError(f"max_retries must be an int, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if self.message is not None and not callable(self.message):
            raise TypeError(f"message must be callable, got {type(self.message).__name__}")
        if not isinstance(self.template, str):
            raise TypeError(f"template must be a str, got {type(self.template).__name__}")
        try:
            self.template.format(errors="", text="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"template may only use {{errors}} and {{text}} (double other braces): {exc!r}"
            ) from exc

    def feedback(self, attempt: Attempt) -> str:
        """The user message that follows ``attempt`` (which failed with ``attempt.error``).

        Raises:
            TypeError: ``message`` returned something else than a str.
        """
        if self.message is not None:
            text = self.message(attempt)
            if not isinstance(text, str):
                raise TypeError(f"ReaskPolicy.message must return a str, got {text!r}")
            return text
        assert attempt.error is not None  # only failed attempts are followed up
        return self.template.format(errors=describe(attempt.error), text=attempt.text)


Retries: TypeAlias = "int | ReaskPolicy"
"""What ``retries=`` takes: a number of retries, or a policy."""


def reask_policy(retries: Retries) -> ReaskPolicy | None:
    """Read a ``retries=`` argument: ``None`` when nothing is ever asked again.

    Raises:
        TypeError: ``retries`` is neither an int nor a ``ReaskPolicy``.
        ValueError: ``retries < 0``.
    """
    if isinstance(retries, ReaskPolicy):
        policy = retries
    elif isinstance(retries, int) and not isinstance(retries, bool):
        policy = ReaskPolicy(max_retries=retries)
    else:
        raise TypeError(f"retries must be an int or a ReaskPolicy, got {retries!r}")
    return policy if policy.max_retries > 0 else None


def check_reaskable(n: int, chat: bool) -> None:
    """Refuse what reasking cannot follow: several answers, or no conversation to extend.

    Raises:
        ValueError: ``n > 1``, or a raw-text prompt (``endpoint="completions"``).
    """
    if n > 1:
        raise ValueError(f"retries= follows one answer; n={n} asks for several")
    if not chat:
        raise ValueError(
            "retries= extends a conversation: it needs the chat endpoint (endpoint='chat')"
        )


class Reasker:
    """The state of one reasked call: the prompt to send next and every attempt so far.

    Args:
        prompt: The caller's prompt (a str, a list with images, or a ``Chat``).
        policy: How often to ask again and what to say.
    """

    __slots__ = ("_messages", "attempts", "policy", "prompt")

    def __init__(self, prompt: object, policy: ReaskPolicy) -> None:
        self.prompt = prompt
        """What to send next: the caller's prompt, then a ``Chat`` that extends it."""
        self.policy = policy
        self.attempts: list[Attempt] = []
        self._messages: list[dict[str, Any]] | None = None

    def retry(self, completion: Completion, error: ParseError) -> bool:
        """Record a failed answer; True when the model is to be asked again.

        On False the caller raises ``error``, which then carries every attempt. A
        ``ConstraintViolationError``, a cut answer and an exhausted budget end the call.
        """
        attempt = Attempt(completion, error)
        again = (
            not isinstance(error, ConstraintViolationError)
            and completion.finish_reason != "length"
            and len(self.attempts) < self.policy.max_retries
        )
        if again:
            attempt = dataclasses.replace(attempt, feedback=self.policy.feedback(attempt))
            if self._messages is None:
                self._messages = to_messages(self.prompt)
            self._messages.append({"role": "assistant", "content": completion.text})
            self._messages.append({"role": "user", "content": attempt.feedback})
            self.prompt = Chat(self._messages)
        self.attempts.append(attempt)
        error.attempts = tuple(self.attempts)
        return again

    def passed(self, completion: Completion) -> Completion:
        """Record the answer kept; return it with every attempt attached."""
        self.attempts.append(Attempt(completion))
        return dataclasses.replace(completion, attempts=tuple(self.attempts))


@dataclasses.dataclass(frozen=True, slots=True)
class Ask:
    """Flow step: generate for ``prompt`` under the constraint; answer with the completions."""

    prompt: object
    attempt: int


@dataclasses.dataclass(frozen=True, slots=True)
class Reasked(Generic[T]):
    """The end of a reasked call: the value and the answer it came from (attempts attached)."""

    value: T
    completion: Completion


def reask_flow(
    prompt: object, policy: ReaskPolicy, read: Callable[[list[Completion]], T]
) -> Flow[Reasked[T]]:
    """Ask, read, and ask again while reading raises a ``ParseError`` worth a retry.

    Args:
        prompt: The caller's prompt.
        policy: How often to ask again and what to say.
        read: Checks the answers and parses the first (``check_answers`` then ``parse``);
            its ``ParseError`` is the validation failure.

    Raises:
        ParseError: the last answer failed (``error.attempts`` holds every attempt).
        ConstraintViolationError: an answer broke the constraint (never asked again).
        GenerationError: an answer was cut, refused or filtered.
    """
    state = Reasker(prompt, policy)
    while True:
        completions: list[Completion] = yield Ask(state.prompt, len(state.attempts) + 1)
        try:
            value = read(completions)
        except ParseError as error:
            if not state.retry(completions[0], error):
                raise
            continue
        return Reasked(value, state.passed(completions[0]))


def remote_flow(
    core: ModelCore[Any],
    constraint: Constraint,
    prompt: object,
    kw: dict[str, Any],
    policy: ReaskPolicy,
    sink: Sink | None = None,
) -> Flow[Reasked[Any]]:
    """A remote model's reask flow; its arguments are checked now, before any request.

    Each answer goes through ``core.check`` (the answer rule; warnings into ``sink``, or
    pointed at the line that called ``parse`` / ``complete``: 6 frames up from the check)
    and is parsed as ``constraint``'s output type.

    Raises:
        ValueError: ``n > 1`` or the completions endpoint (see :func:`check_reaskable`).
    """
    from outlines_like.types import parse

    call = core.prepare(prompt, constraint, kw, stream=False)
    check_reaskable(call.n, call.prompt_key == "messages")

    def read(completions: list[Completion]) -> Any:
        core.check(call, completions, stacklevel=6, sink=sink)
        return parse(constraint.output_type, completions[0].text)

    return reask_flow(prompt, policy, read)


def stream_opener(
    core: ModelCore[Any],
    stream: Callable[[Call, int, list[StreamView]], S],
    call: Call,
    kw: dict[str, Any],
) -> Callable[[object], tuple[S, Callable[[], Completion]]]:
    """How a remote model opens each attempt's stream for :func:`iter_reasked`.

    Args:
        core: The model.
        stream: Its ``_stream(call, stacklevel, views)``: text deltas, and the stream's
            ``StreamView`` appended to ``views``.
        call: The first attempt's call (checked: ``n == 1``, a chat).
        kw: The caller's inference kwargs, sent with every attempt.
    """
    check_reaskable(call.n, call.prompt_key == "messages")

    def open_stream(prompt: object) -> tuple[S, Callable[[], Completion]]:
        views: list[StreamView] = []

        def final() -> Completion:
            completion = views[-1].completion if views else None
            if completion is None:
                raise RuntimeError("the stream has not ended yet")
            return completion

        # stacklevel 4: the stream, iter_partial, iter_reasked, the caller's loop
        return stream(core.prepare(prompt, call.constraint, kw, stream=True), 4, views), final

    return open_stream


OpenStream = Callable[[object], tuple[Iterator[str], Callable[[], Completion]]]
"""Opens one attempt's stream: its text deltas, and the final answer once they ran out."""
AsyncOpenStream = Callable[[object], tuple[AsyncIterator[str], Callable[[], Completion]]]


def iter_reasked(
    open_stream: OpenStream, prompt: object, output_type: object, policy: ReaskPolicy
) -> Iterator[Any]:
    """``stream_parse`` with reasking: partial values of each attempt, then the valid whole.

    A failed attempt yields partial values but never a final one: its stream is read to the
    end (so the end-of-stream checks run first: a ``ConstraintViolationError`` or a cut
    answer is raised as is), then the next attempt starts and its partial values begin
    again from nothing. The last item is the validated value.
    """
    state = Reasker(prompt, policy)
    while True:
        deltas, final = open_stream(state.prompt)
        try:
            yield from iter_partial(deltas, output_type)
        except ParseError as error:
            for _ in deltas:  # the rest of the answer; the end-of-stream check may raise
                pass
            if not state.retry(final(), error):
                raise
            continue
        state.passed(final())
        return


async def aiter_reasked(
    open_stream: AsyncOpenStream, prompt: object, output_type: object, policy: ReaskPolicy
) -> AsyncIterator[Any]:
    """Async twin of :func:`iter_reasked`."""
    state = Reasker(prompt, policy)
    while True:
        deltas, final = open_stream(state.prompt)
        try:
            async for value in aiter_partial(deltas, output_type):
                yield value
        except ParseError as error:
            async for _ in deltas:  # the rest of the answer; the end-of-stream check may raise
                pass
            if not state.retry(final(), error):
                raise
            continue
        state.passed(final())
        return
