"""Scanners of growing text: is it still a prefix of one JSON value, or of a tag?

:class:`JsonPrefixScanner` checks text character by character as it streams in; the
streaming tool-call parser (``tools.parser``) sends argument text only while it stays a
prefix of valid JSON, and ``streaming`` closes partial JSON answers with it.
:func:`partial_suffix` says how much of a text's end may still become a tag (``<think>``,
``<tool_call>``), so that text is held back until the next chunk decides.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["JsonPrefixError", "JsonPrefixScanner", "partial_suffix"]


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of ``text`` that is a proper prefix of ``tag``."""
    for k in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-k:]):
            return k
    return 0


class JsonPrefixError(ValueError):
    """Text that no JSON value starts with; ``taken`` characters of the chunk were fine."""

    def __init__(self, message: str, *, taken: int) -> None:
        super().__init__(message)
        self.taken = taken


class JsonPrefixScanner:
    """Checks, one character at a time, that text is a prefix of one valid JSON value.

    ``feed`` returns how many characters it took: all, or up to the end of the value.
    It raises ``ValueError`` at the first character that no valid JSON could have.
    """

    _LITERALS: ClassVar[dict[str, str]] = {"t": "true", "f": "false", "n": "null"}
    _WS = " \t\n\r"

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.mode = "value"
        self.key = False  # the string being read is an object key
        self.pending = ""  # rest of a literal, or hex digits left of a \\u escape
        self.num = ""  # number sub-state
        self.done = False
        self.seen = 0

    def _close(self) -> None:
        if self.stack:
            self.mode = "after"
        else:
            self.done = True

    def _bad(self, ch: str) -> ValueError:
        return ValueError(f"unexpected {ch!r} at character {self.seen} of the JSON text")

    def feed(self, text: str) -> int:
        for i, ch in enumerate(text):
            try:
                if self.done or not self._step(ch):
                    return i
            except ValueError as exc:
                raise JsonPrefixError(str(exc), taken=i) from None
            self.seen += 1
        return len(text)

    def _step(self, ch: str) -> bool:
        """Take one character; ``False`` when it lies past the end of the value."""
        if self.mode == "number" and not self._number(ch):
            self._close()
            if self.done:
                return False
        self._take(ch)
        return True

    def _take(self, ch: str) -> None:
        mode = self.mode
        if mode == "number":
            return
        if mode == "string":
            if ch == "\\":
                self.mode = "escape"
            elif ch == '"':
                if self.key:
                    self.key = False
                    self.mode = "colon"
                else:
                    self._close()
            elif ord(ch) < 0x20:
                raise self._bad(ch)
            return
        if mode == "escape":
            if ch in '"\\/bfnrt':
                self.mode = "string"
            elif ch == "u":
                self.mode, self.pending = "unicode", "0000"
            else:
                raise self._bad(ch)
            return
        if mode == "unicode":
            if ch not in "0123456789abcdefABCDEF":
                raise self._bad(ch)
            self.pending = self.pending[1:]
            if not self.pending:
                self.mode = "string"
            return
        if mode == "literal":
            if ch != self.pending[0]:
                raise self._bad(ch)
            self.pending = self.pending[1:]
            if not self.pending:
                self._close()
            return
        if ch in self._WS:
            return
        if mode in ("value", "value_or_end"):
            if mode == "value_or_end" and ch == "]":
                self.stack.pop()
                self._close()
            elif ch == "{":
                self.stack.append("{")
                self.mode = "key_or_end"
            elif ch == "[":
                self.stack.append("[")
                self.mode = "value_or_end"
            elif ch == '"':
                self.mode = "string"
            elif ch == "-" or ch.isdigit():
                self.mode = "number"
                self.num = "sign" if ch == "-" else ("zero" if ch == "0" else "int")
            elif ch in self._LITERALS:
                self.mode, self.pending = "literal", self._LITERALS[ch][1:]
            else:
                raise self._bad(ch)
        elif mode in ("key_or_end", "key"):
            if mode == "key_or_end" and ch == "}":
                self.stack.pop()
                self._close()
            elif ch == '"':
                self.mode, self.key = "string", True
            else:
                raise self._bad(ch)
        elif mode == "colon":
            if ch != ":":
                raise self._bad(ch)
            self.mode = "value"
        elif mode == "after":
            top = self.stack[-1]
            if ch == ",":
                self.mode = "key" if top == "{" else "value"
            elif (ch == "}" and top == "{") or (ch == "]" and top == "["):
                self.stack.pop()
                self._close()
            else:
                raise self._bad(ch)

    def _number(self, ch: str) -> bool:
        """Advance the number; ``False`` when ``ch`` ends it (if it may end here)."""
        s = self.num
        digit = ch.isdigit() and ch.isascii()
        nxt = {
            "sign": "zero" if ch == "0" else ("int" if digit else None),
            "zero": "dot" if ch == "." else ("exp" if ch in "eE" else None),
            "int": "int" if digit else ("dot" if ch == "." else ("exp" if ch in "eE" else None)),
            "dot": "frac" if digit else None,
            "frac": "frac" if digit else ("exp" if ch in "eE" else None),
            "exp": "expsign" if ch in "+-" else ("expdig" if digit else None),
            "expsign": "expdig" if digit else None,
            "expdig": "expdig" if digit else None,
        }[s]
        if nxt is not None:
            self.num = nxt
            return True
        if s in ("zero", "int", "frac", "expdig"):
            return False
        raise self._bad(ch)
