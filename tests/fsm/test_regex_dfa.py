"""Regex -> byte DFA: language equality with Python ``re``, UTF-8, errors, limits, lazy DFAs."""

from __future__ import annotations

import gc
import itertools
import mmap
import os
import random
import re
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from outlines_like.errors import ConstraintTooLargeError, InvalidConstraintError
from outlines_like.fsm import _accel, _row_tables
from outlines_like.fsm._row_tables import rows_table as _rows_table
from outlines_like.fsm.regex_dfa import (
    DEFAULT_MAX_STATES,
    UNKNOWN,
    ByteDFA,
    LazyByteDFA,
    compile_regex,
    compile_regex_auto,
    prime_row_table,
)
from outlines_like.types._charset import utf8_byte_ranges

ACCEPT_REJECT = [
    # (pattern, accepted, rejected)
    (r"3(x5)?", ["3", "3x5"], ["", "3x", "x5", "35"]),
    (r"-?(0|[1-9][0-9]*)", ["0", "-0", "12", "-907"], ["", "-", "01", "1a", "--1"]),
    (r"[a-c]{2,3}", ["ab", "abc", "ccc"], ["a", "abca", "ad"]),
    (r"a{,2}", ["", "a", "aa"], ["aaa"]),
    (r"a{3}", ["aaa"], ["aa", "aaaa"]),
    (r"a{2,}", ["aa", "aaaaa"], ["a", ""]),
    (r"a|b*", ["", "a", "bbb"], ["ab", "ba"]),
    (r"(?:ab)+?", ["ab", "abab"], ["", "aba"]),
    (r"(?P<x>a)(?#note)b", ["ab"], ["a", "b"]),
    (r"^abc$", ["abc"], ["ab", "abcd"]),
    (r"\d\w\s", ["1a ", "9_\t"], ["a1 ", "1a", "١a "]),
    (r"\D\W\S", ["a!x"], ["1!x", "a_x", "a! "]),
    (r"[^a]", ["b", "é", "€", "😀", "\n"], ["a", "", "bb"]),
    (r".", ["a", "é", "😀"], ["\n", ""]),
    (r"é+", ["é", "éé"], ["e", ""]),
    (r"[à-ÿ]x", ["àx", "ÿx", "éx"], ["ax", "Āx"]),
    (r"[\u4e00-\u9fff]{2}", ["中文"], ["中", "中a"]),
    (r"\x41\u00e9\U0001F600\n\t", ["Aé😀\n\t"], ["Ae😀\n\t"]),
    (r"[\]\-\\]+", ["]", "-\\]"], ["a", ""]),
    (r"[-a]", ["-", "a"], ["b"]),
    (r"[a-]", ["-", "a"], ["b"]),
    (r"\.\*\+\?\(\)\[\]\{\}\|\^\$", [".*+?()[]{}|^$"], ["a"]),
    (r"a{x}", ["a{x}"], ["a"]),
    (r"a{1,x}", ["a{1,x}"], ["a"]),
    (r"\0\07", ["\x00\x07"], ["0"]),
    (r"[\d.]+", ["1.5", "."], ["a"]),
    (r"(|a)b", ["b", "ab"], ["a"]),
    (r"x*", ["", "xxx"], ["y"]),
]


@pytest.mark.parametrize(("pattern", "accepted", "rejected"), ACCEPT_REJECT)
def test_accept_reject(pattern: str, accepted: list[str], rejected: list[str]) -> None:
    dfa = compile_regex(pattern)
    for text in accepted:
        assert dfa.fullmatch(text.encode()), (pattern, text)
    for text in rejected:
        assert not dfa.fullmatch(text.encode()), (pattern, text)


@pytest.mark.parametrize(
    "pattern",
    [
        r"(ab|a)(bc|c)?",
        r"[ab]*a[ab]",
        r"(a|b)*abb",
        r"a?b?c?",
        r"((a|b)(c|d)){1,2}",
        r"[a-c]*(ab|ba)[a-c]?",
    ],
)
def test_same_language_as_re_on_all_short_strings(pattern: str) -> None:
    dfa = compile_regex(pattern)
    for n in range(6):
        for chars in itertools.product("abcd", repeat=n):
            text = "".join(chars)
            assert dfa.fullmatch(text.encode()) == bool(re.fullmatch(pattern, text)), text


def test_multibyte_character_is_a_byte_path() -> None:
    dfa = compile_regex("é")
    mid = dfa.step(dfa.start, b"\xc3")
    assert mid >= 0
    assert not dfa.accepting[mid]
    assert dfa.accepting[dfa.step(mid, b"\xa9")]
    assert dfa.step(dfa.start, b"\xa9") == -1


def test_dfa_is_minimal_and_every_state_is_live() -> None:
    dfa = compile_regex(r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])")
    # every state reaches an accepting state
    reach = dfa.accepting.copy()
    for _ in range(dfa.n_states):
        succ = np.where(dfa.transitions >= 0, reach[np.maximum(dfa.transitions, 0)], False)
        reach = reach | succ.any(axis=1)
    assert reach.all()
    # minimal: no two states have the same row and acceptance
    rows = {(tuple(r), bool(a)) for r, a in zip(dfa.transitions, dfa.accepting, strict=True)}
    assert len(rows) == dfa.n_states


def test_byte_classes_agree_with_transitions() -> None:
    dfa = compile_regex(r"[a-f0-9]+-[xyz]")
    assert dfa.byte_classes.shape == (256,)
    np.testing.assert_array_equal(dfa.transitions, dfa.class_transitions[:, dfa.byte_classes])
    assert dfa.class_transitions.shape[1] <= 4


@pytest.mark.parametrize(
    ("pattern", "where", "what"),
    [
        ("a(b", "position 1", "missing ')'"),
        ("ab)", "position 2", "unbalanced"),
        ("[ab", "position 0", "unterminated character set"),
        ("*a", "position 0", "nothing to repeat"),
        ("a**", "position 2", "multiple repeat"),
        ("a{2}{3}", "position 4", "multiple repeat"),
        ("[z-a]", "position 1", "bad character range"),
        ("a{3,1}", "position 1", "min repeat greater than max"),
        ("(?=a)b", "position 0", "lookaround"),
        ("(?<!a)b", "position 0", "lookaround"),
        (r"(a)\1", "position 3", "backreferences"),
        (r"\bword", "position 0", "word boundary"),
        ("(?i)a", "position 0", "inline flags"),
        ("a*+", "position 2", "possessive"),
        ("a^b", "position 1", "'^'"),
        ("a$b", "position 1", "'$'"),
        (r"\q", "position 0", "bad escape"),
        (r"\x4", "position 0", "incomplete escape"),
        ("a\\", "position 1", "bad escape"),
    ],
)
def test_invalid_regex_says_where(pattern: str, where: str, what: str) -> None:
    with pytest.raises(InvalidConstraintError) as info:
        compile_regex(pattern)
    assert where in str(info.value)
    assert what in str(info.value)
    assert isinstance(info.value, ValueError)


def test_empty_language_is_an_error() -> None:
    with pytest.raises(InvalidConstraintError, match="matches no string"):
        compile_regex(r"[^\x00-\U0010FFFF]")


def test_state_limit_raises_instead_of_hanging() -> None:
    with pytest.raises(InvalidConstraintError, match="max_states=50"):
        compile_regex(r"[ab]*a[ab]{10}", max_states=50)


def test_huge_counted_repetition_is_refused() -> None:
    with pytest.raises(InvalidConstraintError, match="too large"):
        compile_regex(r"(a|b|c|d){100000}")


def test_non_str_pattern_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="str pattern"):
        compile_regex(b"abc")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        (0, 0x7F),
        (0x80, 0x7FF),
        (0x7F, 0x800),
        (0x1000, 0x2FFF),
        (0xFFF0, 0x10010),
        (0x61, 0x10FFFF),
    ],
)
def test_utf8_byte_ranges_cover_exactly(lo: int, hi: int) -> None:
    seqs = utf8_byte_ranges(lo, hi)
    samples = {lo, hi, (lo + hi) // 2, min(hi, lo + 1), max(lo, hi - 1)}
    samples |= {c for c in (0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000) if lo <= c <= hi}
    for cp in samples:
        if 0xD800 <= cp <= 0xDFFF:
            continue
        enc = chr(cp).encode()
        hits = [
            s
            for s in seqs
            if len(s) == len(enc) and all(a <= b <= z for (a, z), b in zip(s, enc, strict=True))
        ]
        assert len(hits) == 1, hex(cp)
    outside = [c for c in (lo - 1, hi + 1) if 0 <= c <= 0x10FFFF and not 0xD800 <= c <= 0xDFFF]
    for cp in outside:
        enc = chr(cp).encode()
        assert not any(
            len(s) == len(enc) and all(a <= b <= z for (a, z), b in zip(s, enc, strict=True))
            for s in seqs
        )


def test_auto_is_eager_for_small_and_lazy_for_large() -> None:
    assert isinstance(compile_regex_auto(r"[0-9]+"), ByteDFA)
    big = "(" + "|".join(f"word{i}x[a-z]{{0,5}}" for i in range(300)) + ")"
    lazy = compile_regex_auto(big)
    assert isinstance(lazy, LazyByteDFA)
    assert (lazy.transitions[1:] == UNKNOWN).all()
    assert lazy.fullmatch(b"word17xabc")
    assert not lazy.fullmatch(b"word17xabcdef")
    assert not lazy.fullmatch(b"word300x")
    assert lazy.n_states > 1


def test_lazy_and_eager_accept_the_same_strings() -> None:
    pattern = r"(ab|a)(bc|c)?[0-9]{0,3}"
    eager = compile_regex(pattern)
    lazy = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(lazy, LazyByteDFA)
    for n in range(5):
        for chars in itertools.product("abc1", repeat=n):
            text = "".join(chars).encode()
            assert lazy.fullmatch(text) == eager.fullmatch(text), text


def test_lazy_dfa_state_holds_its_rows_not_its_reserve() -> None:
    # the table reserves rows up front (untouched pages): a pickle carries only the rows of
    # the states discovered, and a loaded DFA goes on from them
    big = "(" + "|".join(f"word{i}x[a-z]{{0,5}}" for i in range(300)) + ")"
    lazy = compile_regex_auto(big)
    assert isinstance(lazy, LazyByteDFA)
    assert lazy.fullmatch(b"word17xabc")
    state = lazy.__getstate__()  # what a pickle holds (fsm._transfer pickles the lock)
    assert state["_table"].shape == (lazy.n_states, 256)  # type: ignore[attr-defined]
    loaded = LazyByteDFA.__new__(LazyByteDFA)
    loaded.__setstate__(state)
    assert (loaded.transitions == lazy.transitions).all()
    assert loaded.fullmatch(b"word299xab")
    assert not loaded.fullmatch(b"word17xabcdef")


def _vm_flags(address: int) -> list[str] | None:
    """The ``VmFlags`` of the mapping holding ``address`` (``None``: no smaps to read)."""
    try:
        with open("/proc/self/smaps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and line.startswith("VmFlags:"):
            return line.split()[1:]
    return None


@pytest.fixture
def _switch_back() -> Iterator[None]:
    yield
    _accel.set_enabled(None)


@pytest.mark.parametrize("rows", [64, 20_001])
def test_rows_table_is_a_plain_writable_table(rows: int) -> None:
    table = _rows_table(rows)
    assert table.shape == (rows, 256)
    assert table.dtype == np.int32
    assert table.flags.c_contiguous
    assert table.flags.writeable
    table[rows - 1] = UNKNOWN
    table[0, 7] = 5
    assert (table[rows - 1] == UNKNOWN).all()
    assert table[0, 7] == 5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise flags: Linux")
def test_large_rows_table_is_not_advised_to_huge_pages() -> None:
    # numpy advises huge pages for its large arrays; the lazy table must not be (a new 2 MiB
    # page zeroed, or memory compacted to find one, inside one mask)
    table = _rows_table(20_001)
    table[0] = UNKNOWN  # mapped
    flags = _vm_flags(table.ctypes.data)
    if flags is None:
        pytest.skip("no /proc/self/smaps")
    assert "nh" in flags
    assert "hg" not in flags
    assert "sh" not in flags  # private: not shared with a forked child
    plain = np.empty((20_001, 256), dtype=np.int32)
    plain[0] = UNKNOWN
    assert "nh" not in (_vm_flags(plain.ctypes.data) or [])


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("accel", [False, True])
@pytest.mark.usefixtures("_switch_back")
def test_lazy_dfa_grows_past_its_reserve(
    accel: bool, mapped: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a reserve of 64 rows: the table grows (into a new table of its own) as states come;
    # mapped: every table, the small ones too, is the mmap'd kind
    import outlines_like.fsm.regex_dfa as regex_dfa

    _accel.set_enabled(accel)
    monkeypatch.setattr(regex_dfa, "_RESERVE_ROWS", 64)
    if mapped:
        monkeypatch.setattr(_row_tables, "_NOHUGEPAGE_BYTES", 0)
    pattern = r"[ab]*a[ab]{7}"
    lazy = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(lazy, LazyByteDFA)
    rng = random.Random(3)
    for _ in range(200):
        text = bytes(97 + rng.getrandbits(1) for _ in range(rng.randrange(30)))
        assert lazy.fullmatch(text) == bool(re.fullmatch(pattern, text.decode())), text
    assert lazy.n_states > 64
    built = lazy.transitions
    assert ((built >= -1) | (built == UNKNOWN)).all()
    if mapped and hasattr(mmap, "MADV_NOHUGEPAGE"):
        base = lazy._table.base  # the grown table is mapped too
        while base is not None and not isinstance(base, mmap.mmap):
            base = base.obj if isinstance(base, memoryview) else base.base
        assert isinstance(base, mmap.mmap)


_MAPPED = hasattr(mmap, "MADV_NOHUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")


def empty_pool() -> None:
    """No table in the pool, none to stock nor being stocked (the refill thread is idle)."""
    assert _row_tables.wait_refills()
    _row_tables._wanted.clear()
    gc.collect()
    _row_tables._free_tables.clear()


@pytest.fixture
def _empty_pool() -> Iterator[None]:
    empty_pool()
    yield
    empty_pool()


@pytest.mark.skipif(not _MAPPED, reason="mapped tables: MAP_ANONYMOUS and MADV_NOHUGEPAGE")
@pytest.mark.usefixtures("_empty_pool")
def test_dropped_rows_table_is_reused_once_nothing_views_it() -> None:

    table = _rows_table(20_001)
    address = table.ctypes.data
    table[3, 5] = 77
    view = table[:10]  # a reader's view keeps the mapping in use
    del table
    gc.collect()
    assert _row_tables._free_tables == []
    other = _rows_table(20_001)
    assert other.ctypes.data != address
    del view
    assert len(_row_tables._free_tables) == 1
    again = _rows_table(20_001)
    assert again.ctypes.data == address
    assert again[3, 5] == 77  # the old rows are left as they were (a lazy DFA writes first)
    assert _row_tables._free_tables == []
    other_address = other.ctypes.data
    del other
    assert len(_row_tables._free_tables) == 1
    larger = _rows_table(30_000)  # sizes are not mixed
    assert larger.ctypes.data != other_address
    assert len(_row_tables._free_tables) == 1


@pytest.mark.skipif(not _MAPPED, reason="mapped tables: MAP_ANONYMOUS and MADV_NOHUGEPAGE")
@pytest.mark.usefixtures("_empty_pool")
def test_kept_rows_tables_are_bounded_and_release_their_far_pages() -> None:

    tables = [_rows_table(20_001) for _ in range(_row_tables._FREE_TABLES + 3)]
    far = _row_tables._KEEP_BYTES // 1024 + 5  # a row past the kept bytes
    for table in tables:
        table[0, 0] = 11
        table[far, 0] = 12
    del tables, table
    assert len(_row_tables._free_tables) == _row_tables._FREE_TABLES
    reused = _rows_table(20_001)
    assert reused[0, 0] == 11  # kept page
    assert reused[far, 0] == 0  # handed back to the OS: a fresh zero page


@pytest.mark.skipif(not _MAPPED, reason="mapped tables: MAP_ANONYMOUS and MADV_NOHUGEPAGE")
@pytest.mark.usefixtures("_empty_pool")
def test_kept_rows_table_keeps_the_rows_of_its_first_4096_states() -> None:
    # a JSON Schema's lazy DFA builds rows past its first 1,024 states (harness json_large:
    # ~4,100): the next table that reuses the mapping finds their pages touched already
    table = _rows_table(20_001)
    table[1_100, 0] = 13
    table[4_095, 255] = 14
    del table
    reused = _rows_table(20_001)
    assert reused[1_100, 0] == 13
    assert reused[4_095, 255] == 14
    # what the pool may hold: the kept pages of its tables
    assert _row_tables._FREE_TABLES * _row_tables._KEEP_BYTES <= 16 << 20


def _write_faults(region: mmap.mmap, nbytes: int) -> int:
    """Page faults taken writing one byte in each page of ``region``'s first ``nbytes``."""
    import resource

    pages = np.frombuffer(region, dtype=np.uint8, count=nbytes)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    pages[:: mmap.PAGESIZE] = 1
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(
    not _MAPPED or not sys.platform.startswith("linux"), reason="mapped tables, getrusage"
)
@pytest.mark.usefixtures("_empty_pool")
def test_primed_row_table_is_backed_and_taken_by_the_next_lazy_dfa() -> None:
    kept = _row_tables._KEEP_BYTES
    # a fresh mapping: one fault a page (the check below tells backed pages from fresh ones)
    fresh = mmap.mmap(-1, kept, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    fresh.madvise(mmap.MADV_NOHUGEPAGE)  # as the tables are (a huge page: one fault)
    assert _write_faults(fresh, kept) >= kept // mmap.PAGESIZE // 2
    prime_row_table()
    prime_row_table()  # one table of a size is enough
    assert len(_row_tables._free_tables) == 1
    region = _row_tables._free_tables[0]
    assert len(region) == (DEFAULT_MAX_STATES + 1) * 256 * 4
    assert _write_faults(region, kept) < kept // mmap.PAGESIZE // 10
    lazy = compile_regex_auto(r"[ab]*a[ab]{7}", eager_nfa_limit=0)
    assert isinstance(lazy, LazyByteDFA)
    assert lazy._table.ctypes.data == np.frombuffer(region, dtype=np.uint8).ctypes.data
    assert _row_tables._free_tables == []
    assert lazy.fullmatch(b"babbbbbbb")
    assert not lazy.fullmatch(b"abbbbbbbb")
    prime_row_table(max_states=40)  # a table numpy allocates: nothing to keep
    assert _row_tables._free_tables == []


@pytest.mark.skipif(
    not _MAPPED or not sys.platform.startswith("linux"), reason="mapped tables, getrusage"
)
@pytest.mark.usefixtures("_empty_pool")
def test_a_compile_that_took_the_stocked_table_has_the_next_one_backed() -> None:
    """After a compile whose lazy DFA took the stocked table, the refill thread stocks
    another (a new mapping, its first pages backed), for the next lazy DFA of the process
    while the first is still in use; a table taken outside a compile is stocked again at the
    end of the next compile."""
    from outlines_like.fsm.compile import clear_caches, compile_constraint
    from outlines_like.types import JsonSchema
    from tests.fsm.test_grammar import VOCAB

    kept = _row_tables._KEEP_BYTES
    nbytes = (DEFAULT_MAX_STATES + 1) * 256 * 4
    clear_caches()  # (earlier tests' cached DFAs: their tables would come back to the pool)
    empty_pool()
    prime_row_table()
    (stocked,) = _row_tables._free_tables
    schema = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "maxLength": 30} for i in range(12)},
        "required": [f"p{i}" for i in range(12)],
    }
    compiled = compile_constraint(JsonSchema(schema), VOCAB)
    lazy = compiled.dfa  # type: ignore[attr-defined]
    assert isinstance(lazy, LazyByteDFA)
    assert lazy._table.ctypes.data == np.frombuffer(stocked, dtype=np.uint8).ctypes.data
    assert _row_tables.wait_refills()
    (again,) = _row_tables._free_tables
    assert len(again) == nbytes
    assert again is not stocked
    assert _write_faults(again, kept) < kept // mmap.PAGESIZE // 10  # backed
    # taken outside a compile: stocked again once the next compile is done
    other = compile_regex_auto(r"[ab]*a[ab]{9}", eager_nfa_limit=0)
    assert isinstance(other, LazyByteDFA)
    assert _row_tables._free_tables == []
    compile_constraint(JsonSchema({"type": "integer"}), VOCAB)
    assert _row_tables.wait_refills()
    assert [len(r) for r in _row_tables._free_tables] == [nbytes]
    # a size never stocked is not stocked after it is taken
    odd = _rows_table(30_000)
    compile_constraint(JsonSchema({"type": "boolean"}), VOCAB)
    assert _row_tables.wait_refills()
    assert [len(r) for r in _row_tables._free_tables] == [nbytes]
    del compiled, lazy, other, odd
    clear_caches()


@pytest.mark.skipif(not _MAPPED or not hasattr(os, "fork"), reason="mapped tables, a forked child")
@pytest.mark.usefixtures("_empty_pool")
def test_a_forked_child_stocks_tables_with_a_refill_thread_of_its_own() -> None:
    """A child forked while the refill thread may hold the pool's lock starts with a lock of
    its own and stocks nothing until it primes again (a compile worker's trial starts no
    thread); primed, it starts its own refill thread, and its refills finish."""
    prime_row_table()
    nbytes = (DEFAULT_MAX_STATES + 1) * 256 * 4
    _rows_table(DEFAULT_MAX_STATES + 1)
    _row_tables.refill()  # the parent's refill thread runs
    assert _row_tables.wait_refills()
    with _row_tables._free_lock, warnings.catch_warnings():  # held by "another thread"
        # (Python 3.12+ warns that the process has threads: the point of the test)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            ok = False
            try:
                table = _rows_table(DEFAULT_MAX_STATES + 1)
                _row_tables.refill()
                ok = _row_tables._refill_queue is None and _row_tables._free_tables == []
                prime_row_table()
                other = _rows_table(DEFAULT_MAX_STATES + 1)
                _row_tables.refill()
                ok = ok and _row_tables.wait_refills(10.0)
                ok = ok and [len(r) for r in _row_tables._free_tables] == [nbytes]
                del table, other
            finally:
                os._exit(0 if ok else 1)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's refill did not finish")
        time.sleep(0.01)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0


@pytest.mark.skipif(not _MAPPED, reason="mapped tables: MAP_ANONYMOUS and MADV_NOHUGEPAGE")
@pytest.mark.usefixtures("_empty_pool")
def test_priming_leaves_a_full_pool_as_it_is() -> None:
    tables = [_rows_table(30_000 + i) for i in range(_row_tables._FREE_TABLES)]
    del tables
    assert len(_row_tables._free_tables) == _row_tables._FREE_TABLES
    prime_row_table()
    assert len(_row_tables._free_tables) == _row_tables._FREE_TABLES
    assert all(len(r) != (DEFAULT_MAX_STATES + 1) * 1024 for r in _row_tables._free_tables)


@pytest.mark.parametrize("accel", [False, True])
@pytest.mark.usefixtures("_switch_back", "_empty_pool")
def test_lazy_dfa_on_a_reused_table_reads_only_its_own_rows(accel: bool) -> None:
    # the second DFA's table is the first one's mapping, full of the first one's rows
    _accel.set_enabled(accel)
    first = compile_regex_auto(r"[ab]*a[ab]{7}", eager_nfa_limit=0)
    assert isinstance(first, LazyByteDFA)
    rng = random.Random(5)
    for _ in range(100):
        first.fullmatch(bytes(97 + rng.getrandbits(1) for _ in range(rng.randrange(30))))
    address = first._table.ctypes.data
    del first
    gc.collect()
    pattern = r"(b|ab)*[ab]{5}"
    second = compile_regex_auto(pattern, eager_nfa_limit=0)
    assert isinstance(second, LazyByteDFA)
    if _MAPPED:
        assert second._table.ctypes.data == address
    for _ in range(300):
        text = bytes(97 + rng.getrandbits(1) for _ in range(rng.randrange(30)))
        assert second.fullmatch(text) == bool(re.fullmatch(pattern, text.decode())), text
    built = second.transitions
    assert ((built >= -1) | (built == UNKNOWN)).all()


def test_lazy_state_limit() -> None:
    lazy = compile_regex_auto(r"[ab]*a[ab]{12}", max_states=40, eager_nfa_limit=0)
    rng = random.Random(7)
    text = bytes(97 + rng.getrandbits(1) for _ in range(300))
    with pytest.raises(InvalidConstraintError, match="max_states=40"):
        lazy.fullmatch(text)


def test_lazy_dfa_leaves_no_objects_for_the_collector() -> None:
    # the subsets are tuples of ints and the NFA flat arrays: after a collection or two, a
    # lazy DFA of hundreds of states adds only a handful of objects a collection must scan
    member = r'"k{i}": ("([^"\\]|\\.){{0,8}}"|-?[0-9]+|true|false)'
    pattern = r"\{(" + "|".join(member.format(i=i) for i in range(40)) + r")\}"
    compile_regex_auto(pattern, eager_nfa_limit=0)  # the per-process caches of set templates
    gc.collect()
    before = len(gc.get_objects())
    lazy = compile_regex_auto(pattern, eager_nfa_limit=0)
    for i in range(40):
        assert lazy.fullmatch(f'{{"k{i}": "x\\"é€😀"}}'.encode())
        assert lazy.fullmatch(f'{{"k{i}": -{i}}}'.encode())
    assert lazy.n_states > 300
    for _ in range(3):
        gc.collect()
    assert len(gc.get_objects()) - before < 50


def test_large_eager_dfa_is_exact_without_minimisation() -> None:
    pattern = r"(x|y)*x(x|y){10}z?"  # 2,048+ subset states: above the minimisation limit
    dfa = compile_regex(pattern)
    assert dfa.n_states > 1000
    rng = random.Random(3)
    for _ in range(300):
        text = "".join(rng.choice("xyz") for _ in range(rng.randrange(1, 16)))
        assert dfa.fullmatch(text.encode()) == bool(re.fullmatch(pattern, text)), text


SHARED_SETS = [
    r'[^"\\]',
    r"[^\x00-\x1f]",
    r"[\u00e0-\u00ff\u4e00-\u9fff]",
    r"[^\u0800-\uffff]",
    r"[\U0001f600-\U0001f64f a-z]",
    r"[\u07ff-\u0801\uffff\U00010000\U0010ffff]",
]
PROBES = [0, 0x1F, 0x20, 0x22, 0x5C, 0x7F, 0x80, 0xE0, 0xFF, 0x7FF, 0x800, 0x801, 0x4E00]
PROBES += [0x9FFF, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x1F600, 0x1F64F, 0x1F650, 0x10FFFF]


@pytest.mark.parametrize("cls", SHARED_SETS)
def test_shared_utf8_suffixes_keep_the_language(cls: str) -> None:
    # set templates share the suffixes of their UTF-8 tries: the set still matches exactly
    # its characters (boundaries of every UTF-8 length, both sides), whole characters only
    compiled = re.compile(cls)
    for dfa in (compile_regex(cls), compile_regex_auto(cls, eager_nfa_limit=0)):
        for cp in PROBES:
            ch = chr(cp)
            assert dfa.fullmatch(ch.encode()) == bool(compiled.fullmatch(ch)), (cls, hex(cp))
        for bad in (b"\x80", b"\xc3", b"\xe4\xb8", b"\xf0\x9f\x98", b"\xc3\xa9\xa9"):
            assert not dfa.fullmatch(bad), (cls, bad)


def test_shared_suffixes_shrink_the_template_and_keep_the_size_count() -> None:
    from outlines_like.fsm._regex_nfa import set_template
    from outlines_like.fsm.regex_dfa import _build

    n, edges, n_trie = set_template(((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)))
    assert n < n_trie
    assert {src for src, *_ in edges} | {dst for *_, dst in edges} == set(range(n))
    # size limits and the eager/lazy choice still count the unshared trie
    builder = _build(r'"[^"\\]{0,3}"', 10_000)
    assert builder.nfa.size > builder.nfa.n


def _counted_lazy_dfa(compiled: bool, monkeypatch: pytest.MonkeyPatch) -> LazyByteDFA:
    """A lazy DFA of a counted repeat (a new state a row) on a table of 64 rows."""
    from outlines_like.fsm import regex_dfa as regex_dfa_mod

    if compiled and not _accel.available():
        pytest.skip("numba is not installed")
    monkeypatch.setattr(regex_dfa_mod, "_RESERVE_ROWS", 64)
    _accel.set_enabled(compiled)
    lazy = compile_regex_auto("[a-z]{0,200}x", eager_nfa_limit=0)
    assert isinstance(lazy, LazyByteDFA)
    assert lazy.compiled is compiled
    return lazy


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.usefixtures("_switch_back")
def test_a_builder_that_raises_leaves_the_table_holding_the_states_it_found(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a budget raising inside the builder, after it found states past the table: the DFA
    # (shared by other requests through the compile cache) still reads every state in range
    lazy = _counted_lazy_dfa(compiled, monkeypatch)
    builder: Any = lazy._b
    name = "fill_rows" if compiled else "row_runs"
    real = getattr(builder, name)

    def raising(*args: Any) -> Any:
        real(*args)
        raise ConstraintTooLargeError("a budget, raised on purpose", limit="mask_seconds")

    monkeypatch.setattr(builder, name, raising)
    for _ in range(300):  # row after row, each finding a state past the last
        if lazy.n_states > 80:
            break
        with pytest.raises(ConstraintTooLargeError):
            lazy.expand([lazy.n_states - 1])
    monkeypatch.setattr(builder, name, real)
    assert lazy.n_states > 80  # past the 64 rows reserved
    for state in range(lazy.n_states):  # every found state reads in range
        lazy.step(state, b"a")
    assert lazy.fullmatch(b"a" * 150 + b"x")
    assert not lazy.fullmatch(b"a" * 201 + b"x")


@pytest.mark.usefixtures("_switch_back")
def test_an_interrupt_while_the_table_grows_after_a_compiled_walk_is_settled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a KeyboardInterrupt landing in the growth after a compiled builder found states past
    # the table: the DFA (shared through the compile cache) still reads every state in range
    lazy = _counted_lazy_dfa(True, monkeypatch)
    real = lazy._sync
    interrupts = [0]

    def interrupted(n: int = -1, mark: bool = True) -> None:
        if not mark and interrupts[0] == 0:  # the first growth after a walk
            interrupts[0] += 1
            raise KeyboardInterrupt
        real(n, mark)

    def grow() -> None:
        for _ in range(300):  # row after row, each finding a state past the last
            lazy.expand([lazy.n_states - 1])

    monkeypatch.setattr(lazy, "_sync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        grow()
    assert interrupts[0] == 1
    monkeypatch.setattr(lazy, "_sync", real)
    assert lazy.n_states > 64  # past the rows reserved
    # every found state reads in range, the last first (a request holding a state the
    # interrupted walk found: a read of an earlier one would have grown the table)
    for state in reversed(range(lazy.n_states)):
        lazy.step(state, b"a")
    assert lazy.fullmatch(b"a" * 150 + b"x")
