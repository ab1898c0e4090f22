"""EBNF/GBNF with real lexemes for the local masker: the same language as the scannerless form.

The reference is the scannerless grammar (``ebnf_to_lark(..., one_char_terminals=True)``:
every lexeme one character, no lexer choice) under the same masker, and, independently, a
character-level Earley recognizer of the EBNF itself. Along random strings over the
grammar's alphabet, generated sentences and their mutations, every mask (all tokens of a
vocabulary of single bytes and multi-byte tokens, EOS included) must be the same, and every
prefix must be live exactly when the Earley recognizer says it is.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outlines_like.fsm._grammar_tables import lexer_contexts
from outlines_like.fsm.compile import compile_constraint
from outlines_like.fsm.grammar import CompiledGrammar, GrammarMatcher
from outlines_like.types import CFG
from outlines_like.types._charset import complement
from outlines_like.types.grammars import ebnf_to_lark, ebnf_to_lexeme_lark
from outlines_like.types.grammars._automata import table_contexts
from outlines_like.types.grammars._ebnf import ebnf_grammar
from outlines_like.types.grammars._ir import Alt, Class, Grammar, Lit, Node, Ref, Rep, Seq
from tests.fsm.test_grammar import EOS_ID, VOCAB
from tests.types.test_grammars import BENCH, EBNF_CORPUS, LEXER_SENSITIVE

ADVERSARIAL = {
    # wholly regular: one terminal each (the lexer has nothing to split)
    "digits_then_digit": "root ::= [0-9]+ [0-9]",
    "num_num": "root ::= num num\nnum ::= [0-9]+",
    "utf8_same_lead": 'root ::= word [é]? "è" word\nword ::= [a-z]*',
    # a regular run next to a recursive rule: the boundary is the lexer's to find
    # a number, then a rule that may start with a digit
    "num_then_digit_or_group": 'root ::= num tail\ntail ::= [0-9] | "(" root ")"\nnum ::= [0-9]+',
    "num_sep_num": 'root ::= num ("," num)* ("[" root "]")?\nnum ::= [0-9]+',
    # whitespace before a literal that starts with a space
    "ws_before_space": 'root ::= "a" ws tail\ntail ::= " b" ws "c" | " b" root\nws ::= [ ]*',
    "ws_between_tokens": 'root ::= item (ws "," ws item)*\nitem ::= [a-z]+ | "[" ws root ws "]"\n'
    "ws ::= [ ]*",
    # keywords and names
    "keywords_vs_names": 'root ::= tok (" " root)?\ntok ::= kw | name\nkw ::= "if" | "then"\n'
    "name ::= [a-z]+",
    "keyword_then_name": 'root ::= kw name ("(" root ")")?\nkw ::= "if"\nname ::= [a-z]+',
    "keyword_or_name_call": 'root ::= kw "(" root? ")" | name "=" root? ";"\nkw ::= "if"\n'
    "name ::= [a-z]+",
    "keyword_or_name_alone": 'root ::= (kw | name) ("(" root ")")?\nkw ::= "if"\nname ::= [a-z]+',
    # an optional prefix sharing the next item's bytes
    "optional_chain": 'root ::= a b c\na ::= "x"*\nb ::= "x" "y" | ""\n'
    'c ::= "xz" | "y" | "(" root ")"',
    # UTF-8: a word that may end in é (C3 A9), then è (C3 A8) or a group
    "utf8_lead_byte": 'root ::= word tail\nword ::= [a-z]+ "é"?\ntail ::= "è" | "(" root ")"',
    "recursive_parens": 'root ::= item\nitem ::= "(" ws item* ws ")" | [a-z]+\nws ::= [ ]*',
    "empty_language_start": "root ::= [a]*",
    "nullable_rules": 'root ::= "<" a b ">" root?\na ::= [x]*\nb ::= [x]? [y]*',
    "nullable_between": 'root ::= a "(" root? ")" b | "."\na ::= [x]*\nb ::= [x]? [y]*',
    "bounded": 'root ::= ([a-c]{2,3} ";"){1,2} [a]{0,2} ("(" root ")")?',
    # a keyword that really is ambiguous: `returnx;` returns x, `returnx = y;` assigns
    "return_ws_optional": "root ::= stmt*\n"
    'stmt ::= "return" ws? expr ";" | name ws? "=" ws? expr ";"\n'
    'expr ::= name | "(" expr ")"\nname ::= [a-z]+\nws ::= [ ]+',
    # `true` is a word too, read alike (both a value): the overlap is harmless
    "keywords_beside_words": "root ::= value\n"
    'value ::= "true" | "false" | "null" | word | number |\n'
    '  "[" ws (value ws ("," ws value ws)*)? "]"\n'
    "word ::= [a-z]+\nnumber ::= [0-9]+\nws ::= [ ]*",
    # `true;` is a word then ";", `true` alone the keyword: a word merged with its ";" is
    # never `true`, and `true` is never followed by ";"
    "keyword_or_word_then_semicolon": 'root ::= "true" | word ";" | "(" root ")"\nword ::= [a-z]+',
    # a keyword-or-word whose two readings reduce alike, then differ on what follows
    "keyword_or_key": 'root ::= val ("," root)?\n'
    'val ::= "true" | key "=" val | word | "(" root ")"\n'
    "key ::= [a-z]+\nword ::= [a-z]+",
}

# SQL-like: keywords beside names, names at a statement's start and in expressions
SQL_LIKE = r"""
root ::= stmt (";" ws stmt)*
stmt ::= "select" ws expr ws "from" ws name | "delete" ws "from" ws name ws "where" ws expr |
    name ws "=" ws expr
expr ::= name | number | "(" ws expr ws ")" | name "(" expr ")"
name ::= [a-z_] [a-z0-9_]*
number ::= [0-9]+
ws ::= [ ]+
"""

# llama.cpp's grammars/c.gbnf: keywords that identifiers may start with (or be)
C_GBNF = r"""
root ::= (declaration)*
declaration ::= dataType identifier "(" parameter? ")" "{" statement* "}"
dataType  ::= "int" ws | "float" ws | "char" ws
identifier ::= [a-zA-Z_] [a-zA-Z_0-9]*
parameter ::= dataType identifier
statement ::=
    ( dataType identifier ws "=" ws expression ";" ) |
    ( identifier ws "=" ws expression ";" ) |
    ( identifier ws "(" argList? ")" ";" ) |
    ( "return" ws expression ";" ) |
    ( "while" "(" condition ")" "{" statement* "}" ) |
    ( "for" "(" forInit ";" ws condition ";" ws forUpdate ")" "{" statement* "}" ) |
    ( "if" "(" condition ")" "{" statement* "}" ("else" "{" statement* "}")? ) |
    ( singleLineComment ) |
    ( multiLineComment )
forInit ::= dataType identifier ws "=" ws expression | identifier ws "=" ws expression
forUpdate ::= identifier ws "=" ws expression
condition ::= expression relationOperator expression
relationOperator ::= ("<=" | "<" | "==" | "!=" | ">=" | ">")
expression ::= term (("+" | "-") term)*
term ::= factor(("*" | "/") factor)*
factor ::= identifier | number | unaryTerm | funcCall | parenExpression
unaryTerm ::= "-" factor
funcCall ::= identifier "(" argList? ")"
parenExpression ::= "(" ws expression ws ")"
argList ::= expression ("," ws expression)*
number ::= [0-9]+
singleLineComment ::= "//" [^\n]* "\n"
multiLineComment ::= "/*" ( [^*] | ("*" [^/]) )* "*/"
ws ::= ([ \t\n]+)
"""

GRAMMARS: dict[str, str] = {
    "c_gbnf": C_GBNF,
    "sql_like": SQL_LIKE,
    **{n: BENCH[n] for n in ("arith_ebnf", "json_ebnf", "json_ebnf_star")},
    **{name: g for name, g, _, _ in EBNF_CORPUS if name not in BENCH},
    **{name: g for name, g, _, _ in LEXER_SENSITIVE},
    **ADVERSARIAL,
}

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------ the Earley reference

Sym = str | tuple[tuple[int, int], ...]  # a rule, or one character from these ranges


class Earley:
    """A character-level Earley recognizer of an EBNF grammar (prefix and sentence)."""

    def __init__(self, grammar: Grammar) -> None:
        self.rules: dict[str, list[tuple[Sym, ...]]] = {}
        self.count = 0
        for name, body in grammar.rules.items():
            self.rules[name] = self._alts(body)
        self.start = grammar.start
        self.nullable: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, alts in self.rules.items():
                if name not in self.nullable and any(
                    all(isinstance(s, str) and s in self.nullable for s in a) for a in alts
                ):
                    self.nullable.add(name)
                    changed = True

    def _new(self, alts: list[tuple[Sym, ...]]) -> str:
        self.count += 1
        name = f"\x00{self.count}"
        self.rules[name] = alts
        return name

    def _alts(self, node: Node) -> list[tuple[Sym, ...]]:
        if isinstance(node, Ref):
            return [(node.name,)]
        if isinstance(node, Lit):
            return [tuple(((ord(c), ord(c)),) for c in node.text)]
        if isinstance(node, Class):
            return [(complement(node.ranges) if node.negated else node.ranges,)]
        if isinstance(node, Seq):
            out: list[tuple[Sym, ...]] = [()]
            for item in node.items:
                sym = self._sym(item)
                out = [(*a, sym) for a in out]
            return out
        if isinstance(node, Alt):
            return [a for item in node.items for a in self._alts(item)]
        assert isinstance(node, Rep)
        item = self._sym(node.item)
        tail: list[tuple[Sym, ...]]
        if node.high is None:
            star = self._new([()])
            self.rules[star].append((item, star))
            tail = [(star,)]
        else:
            tail = [()]
            for _ in range(node.high - node.low):
                opt = self._new([(), *[(item, *a) for a in tail]])
                tail = [(opt,)]
        return [(item,) * node.low + a for a in tail]

    def _sym(self, node: Node) -> Sym:
        alts = self._alts(node)
        if len(alts) == 1 and len(alts[0]) == 1:
            return alts[0][0]
        return self._new(alts)

    def run(self, text: str) -> tuple[bool, bool]:
        """Whether ``text`` is a prefix of a sentence, and whether it is one."""
        return self.statuses(text)[-1]

    def statuses(self, text: str) -> list[tuple[bool, bool]]:
        """``run`` of every prefix of ``text``, shortest first, in one pass."""
        Item = tuple[str, int, int, int]  # rule, alternative, dot, origin
        charts: list[set[Item]] = [set()]

        def close(k: int) -> None:
            todo = list(charts[k])
            while todo:
                rule, a, dot, origin = todo.pop()
                alt = self.rules[rule][a]
                new: list[Item] = []
                if dot == len(alt):  # complete
                    for r2, a2, d2, o2 in list(charts[origin]):
                        alt2 = self.rules[r2][a2]
                        if d2 < len(alt2) and alt2[d2] == rule:
                            new.append((r2, a2, d2 + 1, o2))
                else:
                    sym = alt[dot]
                    if isinstance(sym, str):
                        new.extend((sym, i, 0, k) for i in range(len(self.rules[sym])))
                        if sym in self.nullable:
                            new.append((rule, a, dot + 1, origin))
                for item in new:
                    if item not in charts[k]:
                        charts[k].add(item)
                        todo.append(item)

        def done() -> bool:
            return any(
                r == self.start and o == 0 and d == len(self.rules[r][a])
                for r, a, d, o in charts[-1]
            )

        charts[0].update((self.start, i, 0, 0) for i in range(len(self.rules[self.start])))
        close(0)
        out = [(True, done())]
        for k, ch in enumerate(text):
            point = ord(ch)
            nxt: set[Item] = set()
            for rule, a, dot, origin in charts[k]:
                alt = self.rules[rule][a]
                sym = alt[dot] if dot < len(alt) else ""
                if not isinstance(sym, str) and any(lo <= point <= hi for lo, hi in sym):
                    nxt.add((rule, a, dot + 1, origin))
            charts.append(nxt)
            if not nxt:
                return out + [(False, False)] * (len(text) - k)
            close(k + 1)
            out.append((True, done()))
        return out

    def sentence(self, rng: random.Random, budget: int = 60) -> str | None:
        """A random sentence (None when the budget of expansions runs out)."""
        out: list[str] = []
        left = [budget]

        def expand(sym: Sym, depth: int) -> bool:
            if not isinstance(sym, str):
                lo, hi = rng.choice(sym)
                point = rng.randint(lo, min(hi, lo + 200))
                out.append(chr(lo if 0xD800 <= point <= 0xDFFF else point))
                return True
            if depth > 200:
                return False
            left[0] -= 1
            alts = self.rules[sym]
            if left[0] < 0:  # out of budget: the fewest rule references
                fewest = min(sum(isinstance(s, str) for s in a) for a in alts)
                alts = [a for a in alts if sum(isinstance(s, str) for s in a) == fewest]
            return all(expand(s, depth + 1) for s in rng.choice(alts))

        return "".join(out) if expand(self.start, 0) else None


# ------------------------------------------------------------------ the two matchers


MODES = ["runs", "items", "no_contexts"]
"""Runs of regular items merged (the default); one terminal per item; no LALR contexts."""


@functools.cache
def lexeme_grammar(name: str, mode: str = "runs") -> CompiledGrammar:
    contexts = None if mode == "no_contexts" else lexer_contexts
    text = ebnf_to_lexeme_lark(GRAMMARS[name], contexts=contexts, merge=mode != "items")
    return CompiledGrammar(text, VOCAB)


@functools.cache
def scannerless(name: str) -> CompiledGrammar:
    return CompiledGrammar(ebnf_to_lark(GRAMMARS[name], one_char_terminals=True), VOCAB)


@functools.cache
def earley(name: str) -> Earley:
    return Earley(ebnf_grammar(GRAMMARS[name]))


def alphabet(name: str) -> list[str]:
    """Characters the grammar reads (a sample of each class), plus two it may not."""
    chars: set[str] = {"z", "\x7f"}
    for body in ebnf_grammar(GRAMMARS[name]).rules.values():
        for leaf in _leaves(body):
            if isinstance(leaf, Lit):
                chars.update(leaf.text)
            else:
                ranges = complement(leaf.ranges) if leaf.negated else leaf.ranges
                for lo, hi in ranges[:6]:
                    chars.update(chr(p) for p in {lo, hi, (lo + hi) // 2} if p < 0x3000)
    return sorted(c for c in chars if not 0xD800 <= ord(c) <= 0xDFFF)


def _leaves(node: Node) -> Iterator[Lit | Class]:
    if isinstance(node, (Lit, Class)):
        yield node
    elif isinstance(node, (Seq, Alt)):
        for item in node.items:
            yield from _leaves(item)
    elif isinstance(node, Rep):
        yield from _leaves(node.item)


def compare_walk(name: str, text: str, mode: str = "runs") -> None:
    """Walk ``text`` byte by byte through both matchers: every mask the same, and live/accept
    exactly as the Earley recognizer says at every character boundary."""
    ours, ref = lexeme_grammar(name, mode).matcher(), scannerless(name).matcher()
    status = earley(name).statuses(text)
    data = text.encode("utf-8")
    boundaries = {len(text[:k].encode("utf-8")): k for k in range(len(text) + 1)}
    for k in range(len(data) + 1):
        assert np.array_equal(_ids(ours), _ids(ref)), (name, data[:k])
        if k in boundaries:
            live, done = status[boundaries[k]]
            assert live, (name, data[:k])
            assert ours.is_allowed(EOS_ID) == done, (name, data[:k])
        if k == len(data):
            return
        token = data[k]  # the single-byte tokens are ids 0..255
        allowed = ours.is_allowed(token)
        assert allowed == ref.is_allowed(token), (name, data[: k + 1])
        if not allowed:  # then the character holding this byte makes the prefix dead
            end = boundaries[min(j for j in boundaries if j > k)]
            assert not status[end][0], (name, text[:end])
            return
        ours.advance(token)
        ref.advance(token)


def _ids(matcher: GrammarMatcher) -> np.ndarray:
    return matcher.allowed_token_ids()


# ------------------------------------------------------------------ properties


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(GRAMMARS))
@SETTINGS
@given(data=st.data())
def test_random_strings_agree(name: str, mode: str, data: st.DataObject) -> None:
    chars = alphabet(name)
    text = data.draw(st.text(alphabet=st.sampled_from(chars), max_size=12))
    compare_walk(name, text, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(GRAMMARS))
@SETTINGS
@given(rng=st.randoms(use_true_random=False), data=st.data())
def test_sentences_and_their_mutations_agree(
    name: str, mode: str, rng: random.Random, data: st.DataObject
) -> None:
    sentence = earley(name).sentence(rng)
    if sentence is None:
        return
    assert earley(name).run(sentence) == (True, True)
    compare_walk(name, sentence, mode)
    if sentence:
        k = data.draw(st.integers(0, len(sentence)))
        ch = data.draw(st.sampled_from(alphabet(name)))
        how = data.draw(st.sampled_from(["insert", "replace", "delete"]))
        mutated = {
            "insert": sentence[:k] + ch + sentence[k:],
            "replace": sentence[:k] + ch + sentence[k + 1 :],
            "delete": sentence[:k] + sentence[k + 1 :],
        }[how]
        compare_walk(name, mutated, mode)


@pytest.mark.parametrize("name", ["arith_ebnf", "json_ebnf", "json_ebnf_star"])
def test_bench_samples_agree(name: str) -> None:
    sample = BENCH["json_sample" if "json" in name else "arith_sample"]
    compare_walk(name, sample)
    compare_walk(name, sample[: len(sample) // 2] + "@")


# ------------------------------------------------------------------ what the pass writes


def test_bench_grammars_get_real_terminals() -> None:
    arith = ebnf_to_lexeme_lark(BENCH["arith_ebnf"], contexts=lexer_contexts)
    assert "NUMBER: /[0-9]+(?:\\.[0-9]+)?/" in arith
    assert "/[ ]*[+\\-][ ]*/" in arith  # `ws [+-] ws` is one lexeme
    assert CompiledGrammar(arith, VOCAB).is_lalr  # the scannerless form is not LALR(1)
    assert not scannerless("arith_ebnf").is_lalr
    for name in ("json_ebnf", "json_ebnf_star"):
        text = ebnf_to_lexeme_lark(BENCH[name], contexts=lexer_contexts)
        assert "\nSTRING: /" in text
        assert "\nNUMBER: /" in text
        assert "\nWS: /[\\t\\n\\r ]+/" in text
        assert CompiledGrammar(text, VOCAB).is_lalr


def test_adjacent_regular_items_are_one_lexeme() -> None:
    """`[0-9]+ [0-9]` as one terminal: the lexer never has to split the digits."""
    text = ebnf_to_lexeme_lark(GRAMMARS["digits_then_digit"], contexts=lexer_contexts)
    assert text == "start: T\nT: /[0-9]+[0-9]/\n"


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        # the number cannot end where the grammar wants it to: digits stay one per lexeme
        ("num_then_digit_or_group", "/[0-9]/"),
        # `ws` ends where " b" begins: the space stays its own lexeme
        ("ws_before_space", '" "'),
    ],
)
def test_unsafe_parts_stay_scannerless(name: str, kept: str) -> None:
    text = ebnf_to_lexeme_lark(GRAMMARS[name], contexts=lexer_contexts)
    terminals = [line.split(": ", 1)[1] for line in text.splitlines() if line[0].isupper()]
    assert kept in terminals, text
    assert not [t for t in terminals if "[ ]*" in t and t.startswith("/a")], text
    assert not [t for t in terminals if "[0-9]+" in t], text


def test_without_contexts_every_terminal_is_one_context() -> None:
    """No LALR table: the check assumes every terminal at once (fewer lexemes, still exact)."""
    text = ebnf_to_lexeme_lark(BENCH["arith_ebnf"])
    assert "NUMBER: /" in text
    assert "/[ ]*[+\\-][ ]*/" not in text  # "-" (negation) is a text of it: no merge
    assert CompiledGrammar(text, VOCAB).accepts_text(b"(1 + 2) * -3")


def test_compile_constraint_uses_the_lexeme_grammar_and_cfg_lark_is_unchanged() -> None:
    cfg = CFG(BENCH["arith_ebnf"], "ebnf")
    compiled = compile_constraint(cfg, VOCAB)
    assert isinstance(compiled, CompiledGrammar)
    assert compiled.grammar == ebnf_to_lexeme_lark(cfg.definition, contexts=lexer_contexts)
    assert compiled.is_lalr
    assert cfg.lark == ebnf_to_lark(cfg.definition)  # what servers taking Lark get


def test_a_lexer_sensitive_grammar_keeps_its_language_through_compile_constraint() -> None:
    """`"ab" | [a-z]{3}` reads `abc` (the compact `CFG.lark` form, lexed, would not)."""
    cfg = CFG('root ::= "ab" | [a-z] [a-z] [a-z]', "ebnf")
    compiled = compile_constraint(cfg, VOCAB)
    assert isinstance(compiled, CompiledGrammar)
    assert [compiled.accepts_text(s) for s in (b"ab", b"abc", b"xyz")] == [True] * 3
    assert [compiled.accepts_text(s) for s in (b"a", b"abcd", b"")] == [False] * 3
    assert not CompiledGrammar(cfg.lark, VOCAB).accepts_text(b"abc")


def test_identifiers_that_start_with_keywords() -> None:
    """llama.cpp's C grammar: `returned` is a name (the compact form, lexed, took `return`)."""
    cfg = CFG(C_GBNF, "ebnf")
    compiled = compile_constraint(cfg, VOCAB)
    assert isinstance(compiled, CompiledGrammar)
    for text in (b"int f(){returned = 1;}", b"int f(){interval = 2;}", b"int f(){return f(1)+2;}"):
        assert compiled.accepts_text(text), text
    assert not compiled.accepts_text(b"int f(){return1;}")
    assert not CompiledGrammar(cfg.lark, VOCAB).accepts_text(b"int f(){returned = 1;}")


# ------------------------------------------------------------------ keywords and names


C_SENTENCES = [
    "int f(){returned = 1;}",
    "int interval(){interval = 2;}",
    "float iffy(char c){iffy = c;}",
    "int f(){return x;}",
    "int f(){while(a<b){}}",
    "int f(){return (x);}",  # a call of a function named `return`
    "int f(){return ( x );}",  # a return statement
    "int f(){int = 1;}",  # a name `int`
    "int f(){int x = 1;}",
    "int f(){for(int i = 0; i<n; i = i+1){if(i==2){x = f(i);}else{}}}",
]


@pytest.mark.parametrize("text", C_SENTENCES)
def test_c_sentences_agree(text: str) -> None:
    assert earley("c_gbnf").run(text) == (True, True)
    compare_walk("c_gbnf", text)
    compare_walk("c_gbnf", text[:-1] + "@")


def _terminals(text: str) -> dict[str, str]:
    lines = [line.split(": ", 1) for line in text.splitlines() if line[:1].isupper()]
    return dict((name, body) for name, body in lines)


def test_what_may_follow_a_terminal_is_per_state() -> None:
    """`A` is followed by `B` where a sentence starts, by `D` after `C`: each state knows."""
    text = 'start: A B | C A D\nA: "a"\nB: "b"\nC: "c"\nD: "d"\n'
    contexts = table_contexts(lexer_contexts(text), {"A", "B", "C", "D"})
    first = [c for c in contexts if c.names == {"A", "C"}]
    assert len(first) == 1
    assert first[0].follow["A"] == {"B"}  # the grammar's FOLLOW(A) is {B, D}
    after_c = [c for c in contexts if c.names == {"A"}]
    assert [c.follow["A"] for c in after_c] == [{"D"}]


def test_keywords_beside_words_keep_their_lexemes() -> None:
    """`true` is a word too: both readings reduce to `value` alike, so both stay lexemes."""
    text = ebnf_to_lexeme_lark(GRAMMARS["keywords_beside_words"], contexts=lexer_contexts)
    terminals = _terminals(text)
    assert terminals["TRUE"] == '"true"'
    assert terminals["WORD"] == "/[a-z]+/"
    assert CompiledGrammar(text, VOCAB).is_lalr


def test_an_ambiguous_keyword_stays_scannerless() -> None:
    """`returnx` may return x or be a name: the keyword and names stay one letter per lexeme
    (the space and `=` stay lexemes)."""
    text = ebnf_to_lexeme_lark(GRAMMARS["return_ws_optional"], contexts=lexer_contexts)
    bodies = set(_terminals(text).values())
    assert not [b for b in bodies if "return" in b or "[a-z]+" in b], text
    assert {"/[ ]+/", '"="'} <= bodies


def test_a_keyword_merged_with_what_follows_a_word_keeps_both() -> None:
    text = ebnf_to_lexeme_lark(GRAMMARS["keyword_or_word_then_semicolon"], contexts=lexer_contexts)
    assert {'"true"', "/[a-z]+;/"} <= set(_terminals(text).values())


def test_c_grammar_keeps_the_lexemes_it_can() -> None:
    """c.gbnf: a statement's head cannot be lexed (`return (x);` calls a function named
    `return`, `return ( x );` returns: the lexer would have to see past the `(`), so names
    and keywords stay one letter per lexeme, and the masker runs GLR; punctuation and
    operators next to them stay lexemes."""
    text = ebnf_to_lexeme_lark(C_GBNF, contexts=lexer_contexts)
    bodies = set(_terminals(text).values())
    assert {'"="', '"("', '";"', '"){"', "/<=|<|==|!=|>=|>/", "/,[\\t\\n ]+/"} <= bodies
    assert not CompiledGrammar(text, VOCAB).is_lalr


def test_sql_like_keeps_keywords_and_names() -> None:
    text = ebnf_to_lexeme_lark(SQL_LIKE, contexts=lexer_contexts)
    bodies = set(_terminals(text).values())
    assert "/select[ ]+/" in bodies
    assert "/[_a-z][0-9_a-z]*[ ]+=[ ]+/" in bodies  # a statement's name with its `=`
    assert "/[_a-z][0-9_a-z]*/" in bodies  # a name in an expression
