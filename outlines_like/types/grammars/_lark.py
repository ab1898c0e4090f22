"""Lark -> IR: Lark itself reads the grammar; its terminals go through the regex reader."""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any, Final, cast

from outlines_like.errors import InvalidConstraintError, UnsupportedConstraintError
from outlines_like.types.grammars._from_regex import literal, regex_node
from outlines_like.types.grammars._ir import Class, Grammar, Lit, Node, Ref, Rep, Seq, alt, rep, seq
from outlines_like.types.grammars._passes import (
    prune,
    reject_left_recursion,
    remove_immediate_left_recursion,
    substitute,
)
from outlines_like.types.grammars._write import write_grammar

# Terminals of Lark's common.lark that rely on lazy matching or lookbehind: their lexer
# meaning (shortest match) written as plain regexes with the same tokens.
_LARK_REGEX_REWRITES: Final[dict[str, str]] = {
    # ESCAPED_STRING: a quote, then escapes or non-quote characters, no newline, a quote.
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
    # C_COMMENT: /* ... */ ending at the first */.
    r"/\*(.|\n)*?\*/": r"/\*(?:[^*]|\*+[^*/])*\*+/",
}

_LARK_FLAGS: Final[dict[str, int]] = {
    "i": re.IGNORECASE,
    "s": re.DOTALL,
    "m": re.MULTILINE,
    "x": re.VERBOSE,
    "u": re.UNICODE,
    "l": re.LOCALE,
}

_IGNORE_RULE: Final = "__ignored"


_LARK_LITERALS: Final = re.compile(r'"(?:[^"\\\n]|\\.)*"|/(?:[^/\\\n]|\\.)+/|//[^\n]*')


def _position(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _find_use(text: str, word: str) -> int | None:
    """Offset of the first use of ``word`` outside strings, regexes and comments."""
    masked = _LARK_LITERALS.sub(lambda m: " " * len(m.group(0)), text)
    use = re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", masked)
    return use.start() if use else None


def _lark_error(text: str, exc: Exception) -> InvalidConstraintError:
    """Translate a Lark error about grammar text, adding the line, column and offending text."""
    message = str(exc).strip()
    line = getattr(exc, "line", None)
    column = getattr(exc, "column", None)
    offset: int | None = None
    if isinstance(exc, _regex_errors()):
        pattern = getattr(exc, "pattern", None)
        message = f"invalid regex /{pattern}/: {getattr(exc, 'msg', exc)}"
        found_at = text.find(f"/{pattern}/") if isinstance(pattern, str) else -1
        pos = getattr(exc, "pos", None)
        offset = found_at + 1 + (pos or 0) if found_at >= 0 else None
    elif isinstance(exc, OSError):
        missing = getattr(exc, "filename", None) or "?"
        module = str(missing).rsplit("/", 1)[-1].removesuffix(".lark")
        message = (
            f"%import of a grammar that does not exist: {module!r} (Lark's bundled grammars, "
            "such as common, can be imported)"
        )
        found_at = text.find(f"%import {module}")
        offset = found_at if found_at >= 0 else None
    elif not isinstance(line, int) or line < 1:
        found = re.search(r"at line (\d+),? column (\d+)", message)
        if found:
            line, column = int(found.group(1)), int(found.group(2))
            message = "unexpected input"
        else:
            # "Rule 'a' used but not defined", "Terminals {'B'} ...": point at the first use.
            quoted = re.search(r"'([^']+)'", message)
            offset = _find_use(text, quoted.group(1)) if quoted else None
    if offset is not None:
        line, column = _position(text, offset)
    first = message.splitlines()[0] if message else type(exc).__name__
    if isinstance(line, int) and line >= 1:
        lines = text.splitlines()
        source = lines[line - 1] if line <= len(lines) else ""
        col = column if isinstance(column, int) and column >= 1 else 1
        caret = " " * (col - 1) + "^"
        return InvalidConstraintError(
            f"invalid Lark grammar at line {line} column {col}: {first}\n  {source}\n  {caret}"
        )
    return InvalidConstraintError(f"invalid Lark grammar: {first}")


@functools.cache
def _regex_errors() -> tuple[type[Exception], ...]:
    """``re.error``, and ``regex.error`` when Lark uses the ``regex`` module (installed)."""
    try:
        regex = importlib.import_module("regex")
    except ImportError:
        return (re.error,)
    return (re.error, cast("type[Exception]", regex.error))


def _load_lark(text: str, start: str) -> Any:
    if not isinstance(text, str):
        raise TypeError(f"grammar text must be a str, got {type(text).__name__}")
    import lark

    errors: tuple[type[Exception], ...] = (lark.exceptions.LarkError, OSError, *_regex_errors())
    try:
        return lark.Lark(text, start=start, parser="earley", lexer="dynamic")
    except errors as exc:
        # OSError: an %import of a grammar file that is not there.
        raise _lark_error(text, exc) from exc


def validate_lark(text: str, *, start: str = "start") -> None:
    """Check that ``text`` is a valid Lark grammar (loaded with Lark's Earley parser).

    Raises:
        InvalidConstraintError: The grammar is invalid; the message gives the line, the
            column and the offending text where Lark knows them.
    """
    _load_lark(text, start)


def _terminal_node(definition: Any) -> Node:
    pattern = definition.pattern
    flags = 0
    for flag in pattern.flags:
        flags |= _LARK_FLAGS.get(flag, 0)
    where = f"Lark terminal {definition.name}"
    if type(pattern).__name__ == "PatternStr":
        value: str = pattern.value
        if flags & re.IGNORECASE:
            return seq(literal(ord(ch), flags) for ch in value)
        return seq(Lit(ch) for ch in value)
    regex: str = pattern.value
    for bad, good in _LARK_REGEX_REWRITES.items():
        regex = regex.replace(bad, f"(?:{good})")
    return regex_node(regex, flags=flags, where=where, allow_lazy=False)


def lark_grammar(text: str, start: str) -> Grammar:
    parser = _load_lark(text, start)
    terminals = {t.name: t for t in parser.terminals}
    by_origin: dict[str, list[Seq]] = {}
    used_terminals: set[str] = set()
    for rule in parser.rules:
        symbols = []
        for sym in rule.expansion:
            if sym.is_term:
                if sym.name not in terminals:
                    raise UnsupportedConstraintError(
                        f"Lark terminal {sym.name} has no definition (%declare is for custom "
                        "lexers and cannot be converted); define it with a string or a regex"
                    )
                used_terminals.add(sym.name)
            symbols.append(Ref(sym.name))
        by_origin.setdefault(str(rule.origin.name), []).append(Seq(tuple(symbols)))
    ignore = [name for name in parser.ignore_tokens if name in terminals]
    used_terminals.update(ignore)

    rules: dict[str, Node] = {}
    ign = Ref(_IGNORE_RULE) if ignore else None
    for origin, branches in by_origin.items():
        if ign is not None:
            spaced = []
            for branch in branches:
                items: list[Node] = []
                for k, item in enumerate(branch.items):
                    if k:
                        items.append(ign)
                    items.append(item)
                spaced.append(Seq(tuple(items)))
            branches = spaced
        rules[origin] = alt(branches)
    for name in sorted(used_terminals, key=list(terminals).index):
        rules[name] = _terminal_node(terminals[name])
    start_name = start
    if ign is not None:
        # (x+ | y)* is (x | y)*: unwrapping the "+" keeps the language and spares engines
        # that track every parse (llama.cpp) the ambiguity of (x+)*.
        pieces = []
        for n in ignore:
            node = rules[n]
            pieces.append(node.item if isinstance(node, Rep) and node.low <= 1 else Ref(n))
        rules[_IGNORE_RULE] = rep(alt(pieces), 0, None)
        start_name = "__start_with_ignored"
        while start_name in rules:
            start_name += "_"
        rules = {start_name: seq([ign, Ref(start), ign]), **rules}
    grammar = remove_immediate_left_recursion(Grammar(rules, start_name))
    # Inline terminals that are a literal or one character class (Lark's LPAR, PLUS, ...):
    # the output reads like hand-written EBNF.
    inline = {
        n: body
        for n, body in grammar.rules.items()
        if n in terminals and isinstance(body, (Lit, Class))
    }
    rules = {n: substitute(b, inline) for n, b in grammar.rules.items() if n not in inline}
    return prune(Grammar(rules, grammar.start))


def lark_to_ebnf(text: str, *, start: str = "start") -> str:
    """Convert a Lark grammar to EBNF in xgrammar's dialect (what SGLang's ``ebnf`` takes).

    ``%import`` of Lark's common terminals, templates, ``?rule``, aliases and priorities are
    handled (the last three do not change the language); ``%ignore`` becomes an optional
    ``(ignored)*`` rule between every two symbols and around the start rule; immediate
    left recursion is rewritten as repetition.

    Raises:
        InvalidConstraintError: The Lark grammar is invalid, or a terminal uses a regex
            feature no grammar can express (lookaround, backreference).
        UnsupportedConstraintError: ``%declare``d terminals, lazy quantifiers in terminals.
    """
    return write_grammar(lark_grammar(text, start), "ebnf")


def lark_to_gbnf(text: str, *, start: str = "start") -> str:
    """Convert a Lark grammar to llama.cpp's GBNF (rule names with dashes, ``root`` start).

    Same handling as ``lark_to_ebnf``. llama.cpp refuses left-recursive grammars: immediate
    left recursion is rewritten as repetition, and any other left-recursive cycle raises
    ``UnsupportedConstraintError`` naming the rules.
    """
    grammar = lark_grammar(text, start)
    reject_left_recursion(grammar)
    return write_grammar(grammar, "gbnf")
