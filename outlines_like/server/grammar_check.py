"""Sanity checks on a request's grammar before it is compiled: no file access, no endless rules.

A grammar from a request is refused (a 400) when it

* uses ``%declare`` (a declared terminal can never be produced), or ``%import``s anything but
  Lark's bundled ``common`` grammar (``%import common.NUMBER``, ``%import common (WS, INT)``,
  ``%import common.INT -> N``). Any other import would read a file: a relative one
  (``%import .x``) from the server's working directory or script folder, so its error would
  tell an attacker which files exist. ``common`` is read from Lark's package (Lark tries no
  path of its own for a library import: the server passes none), whatever the working
  directory holds;
* has a rule that cannot reach a terminal string (``a: "(" a ")"``): no text can ever
  complete it, and the masker would search for one forever;
* does not build with Lark at all.
"""

from __future__ import annotations

import re

from outlines_like.types import CFG

__all__ = ["ALLOWED_IMPORTS", "check_directives", "check_grammar"]

ALLOWED_IMPORTS = frozenset({"common"})
"""The grammars a request may ``%import`` from: Lark's bundled ``common`` only."""

_DECLARE = re.compile(r"^[ \t]*%declare\b", re.MULTILINE)
_IMPORT = re.compile(r"^[ \t]*%import\b[ \t]*(?P<path>[^\s(]*)[ \t]*(?P<rest>[^\n]*)", re.MULTILINE)
_LIBRARY_PATH = re.compile(r"\w+(?:\.\w+)*")


def check_directives(grammar: CFG) -> None:
    """Refuse ``%declare``, and ``%import`` of anything but Lark's ``common`` grammar.

    Cheap (a scan of the text): done when the request arrives, and again before the grammar
    is built.

    Raises:
        ValueError: the reason, worded for the client (the caller names the field).
    """
    text = grammar.lark
    if _DECLARE.search(text) is not None:
        raise ValueError("%declare is not allowed in a request's grammar")
    for found in _IMPORT.finditer(text):
        path, rest = found.group("path"), found.group("rest")
        # `%import common.NUMBER [-> ALIAS]` names the terminal last; `%import common (A, B)`
        # names the grammar whole; `%import .x.Y` is relative to a folder
        module = path if rest.startswith("(") else path.rpartition(".")[0]
        if _LIBRARY_PATH.fullmatch(path) is None or module not in ALLOWED_IMPORTS:
            shown = f"{path} {rest}".strip()[:80] or "(nothing)"
            raise ValueError(
                f"%import {shown} is not allowed in a request's grammar: only Lark's bundled "
                "common grammar can be imported (e.g. %import common.NUMBER)"
            )


def check_grammar(grammar: CFG) -> None:
    """Refuse a grammar the server will not compile.

    Building the grammar costs as much as compiling it (seconds for thousands of
    alternatives), so the server runs this in its trial compile, under the compile budget.

    Args:
        grammar: The request's grammar (Lark or EBNF).

    Raises:
        ValueError: the reason, worded for the client (the caller names the field).
    """
    check_directives(grammar)
    text = grammar.lark
    from lark.exceptions import LarkError
    from lark.load_grammar import GrammarBuilder

    try:
        builder = GrammarBuilder(False, [])  # no import paths: `common` comes from Lark's package
        builder.load_grammar(text, "<request>")
        _, rules, _ = builder.build().compile(["start"], set())
    except LarkError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"the grammar does not build: {first}") from exc
    if not any(rule.origin.name == "start" for rule in rules):
        raise ValueError("the grammar has no 'start' rule")
    productive: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule in rules:
            name = rule.origin.name
            if name not in productive and all(
                sym.is_term or sym.name in productive for sym in rule.expansion
            ):
                productive.add(name)
                changed = True
    stuck = sorted({str(rule.origin.name) for rule in rules} - productive)
    if stuck:
        raise ValueError(
            f"rule {stuck[0]!r} never reaches a terminal string (every alternative recurses); "
            "give it a base case"
        )
