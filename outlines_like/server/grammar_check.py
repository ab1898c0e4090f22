"""Sanity checks on a request's grammar before it is compiled: no file access, no endless rules.

A grammar from a request is refused (a 400) when it

* uses ``%import`` or ``%declare`` (an import reads files in the server's working directory, so
  its error would tell an attacker which files exist; a declared terminal can never be
  produced);
* has a rule that cannot reach a terminal string (``a: "(" a ")"``): no text can ever
  complete it, and the masker would search for one forever;
* does not build with Lark at all.
"""

from __future__ import annotations

import re

from outlines_like.types import CFG

__all__ = ["check_directives", "check_grammar"]

_DIRECTIVE = re.compile(r"^[ \t]*%(import|declare)\b", re.MULTILINE)


def check_directives(grammar: CFG) -> None:
    """Refuse ``%import`` and ``%declare`` (cheap: done when the request arrives).

    Raises:
        ValueError: the reason, worded for the client (the caller names the field).
    """
    directive = _DIRECTIVE.search(grammar.lark)
    if directive is not None:
        raise ValueError(f"%{directive.group(1)} is not allowed in a request's grammar")


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
        builder = GrammarBuilder(False, [])
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
