"""The compiled kernels of the subset construction (numba): see :mod:`._accel_dfa`.

Plain typed functions over flat arrays, compiled with ``njit(cache=True, nogil=True)`` and no
reference counting (no array is allocated inside; a helper's call would otherwise pay atomic
count updates for each array it is passed, more than its work). A builder's arrays travel as
one tuple (:data:`Store`); the NFA's arrays are one ``int32`` array read at offsets (``lay``).
Where every non-ASCII character leads from a state is in :mod:`._accel_utf8`, over these.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import numba
import numpy as np
import numpy.typing as npt

__all__ = [
    "Store",
    "entry_point",
    "expand_all_kernel",
    "expand_kernel",
    "rehash_kernel",
    "start_kernel",
]

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]
Store = tuple[I32, I64, I64, I32, I64, I32, I64, U8, I32, I64, I32]
"""A builder's arrays, in the kernels' order: ``nfa32, lay, clo_idx, clo_pool, set_off,
set_pool, set_hash, acc, htab, meta, scr`` (see :class:`KernelSubsetBuilder`)."""

# meta: counters and the status of the last call
N, POOL, CLO, STAMP, STATUS, BUILT = 0, 1, 2, 3, 4, 5
OK, GROW_STATES, GROW_POOL, GROW_CLO, GROW_HASH, TOO_MANY, GROW_ROWS, PAUSE = range(8)
# the budget's clock is read after every CHECK_ROWS rows built, and a kernel pauses for it
# after PAUSE_ROWS rows in one call
CHECK_ROWS, PAUSE_ROWS = 64, 4096
# lay: sizes, then where each static array starts in nfa32 (and ends: the next one's start),
# then where each scratch array starts in scr
LN, LE, LFINAL, LK = 0, 1, 2, 3
OFF, EFIRST, ELAST, DST, EPS_OFF, EPS_DST, LIVE, CSTART, CLS = 4, 5, 6, 7, 8, 9, 10, 11, 12
NFA_END = 13
MARK1, MARK2, STACK, BUF_A, BUF_B, BUF_C, BUF_D, BUF_E = 14, 15, 16, 17, 18, 19, 20, 21
EA, EB, ET, CUTS, RA, RB, RJ = 22, 23, 24, 25, 26, 27, 28
SCR_END = 29
_STAMP_LIMIT = 1 << 30

_F = TypeVar("_F", bound=Callable[..., Any])

_OPTIONS: dict[str, Any] = {"cache": True, "nogil": True, "boundscheck": False, "_nrt": False}


_ENTRIES: dict[Any, Callable[..., Any]] = {}


def entry_point(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """The compiled function of a kernel of one signature, to call past numba's dispatcher.

    The dispatcher types every argument of every call to pick an overload (~1 us for a
    kernel that takes a builder's arrays, more than a first visit's walk of a string body's
    boundary tokens); the compiled function unboxes them as its signature says. The caller
    passes exactly those types, arrays C-contiguous (a wrong dtype raises ``TypeError``; a
    strided view is not checked: it would be read and written as if contiguous). Anything
    else (a plain function) is returned as it is. With ``OUTLINES_LIKE_ACCEL_CHECKS=1`` in the
    environment (the tests set it), every call first checks that its arrays, tuples' included,
    are C-contiguous.
    """
    run = _ENTRIES.get(kernel)
    if run is None:
        overloads = getattr(kernel, "overloads", None)
        signatures: list[Any] = list(getattr(kernel, "signatures", ()))
        run = kernel
        if overloads is not None and len(signatures) == 1:
            run = overloads[signatures[0]].entry_point
            if os.environ.get("OUTLINES_LIKE_ACCEL_CHECKS") == "1":
                run = _contiguous_only(run, getattr(kernel, "__name__", "kernel"))
        _ENTRIES[kernel] = run
    return run


def _contiguous_only(run: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``run``, refusing a strided array (what numba's dispatcher would refuse)."""

    def check(args: tuple[Any, ...], where: str) -> None:
        for i, arg in enumerate(args):
            if isinstance(arg, np.ndarray) and not arg.flags.c_contiguous:
                raise TypeError(f"{name}: argument {where}{i} is not C-contiguous")
            if isinstance(arg, tuple):
                check(arg, f"{where}{i}.")

    def call(*args: Any) -> Any:
        check(args, "")
        return run(*args)

    return call


def _inner(func: _F) -> _F:
    """Compile a helper the kernels call (typed by its callers; cached with them)."""
    compiled: _F = numba.njit(**_OPTIONS)(func)
    return compiled


@_inner
def _sift(a: I32, lo: int, root: int, end: int) -> None:  # pragma: no cover - compiled
    """Move ``a[lo + root]`` down the max-heap ``a[lo : lo + end]``."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and a[lo + child] < a[lo + child + 1]:
            child += 1
        if a[lo + root] >= a[lo + child]:
            return
        a[lo + root], a[lo + child] = a[lo + child], a[lo + root]
        root = child


@_inner
def _isort(a: I32, lo: int, hi: int) -> None:  # pragma: no cover - compiled
    """Sort ``a[lo:hi]`` in place: insertion sort for the usual handful, else heapsort."""
    n = hi - lo
    if n > 32:
        for root in range(n // 2 - 1, -1, -1):
            _sift(a, lo, root, n)
        for end in range(n - 1, 0, -1):
            a[lo], a[lo + end] = a[lo + end], a[lo]
            _sift(a, lo, 0, end)
        return
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@_inner
def _new_stamp(meta: I64, scr: I32, lay: I64) -> int:  # pragma: no cover - compiled
    """A fresh mark value for the two mark arrays (cleared when the counter wraps)."""
    st = meta[STAMP] + 1
    if st >= _STAMP_LIMIT:
        scr[lay[MARK1] : lay[STACK]] = 0
        st = 1
    meta[STAMP] = st
    return int(st)


@_inner
def _closure(s: int, store: Store) -> bool:  # pragma: no cover - compiled
    """Memoise the live epsilon closure of ``s`` (states with byte edges, or final), sorted.

    ``False`` when the pool is full (``meta[STATUS]`` says so). Arrays are read at offsets
    (``nfa[lay[OFF] + x]``) rather than through views: a view costs reference counting.
    """
    nfa, lay, clo_idx = store[0], store[1], store[2]
    clo_pool, meta, scr = store[3], store[9], store[10]
    if clo_idx[2 * s] >= 0:
        return True
    o_off, o_eo, o_ed, o_live = lay[OFF], lay[EPS_OFF], lay[EPS_DST], lay[LIVE]
    o_mark, o_stack, o_buf = lay[MARK1], lay[STACK], lay[BUF_D]
    final = lay[LFINAL]
    st = _new_stamp(meta, scr, lay)
    scr[o_mark + s] = st
    scr[o_stack] = s
    sp = 1
    m = 0
    while sp:
        sp -= 1
        x = scr[o_stack + sp]
        if nfa[o_off + x] < nfa[o_off + x + 1] or x == final:
            scr[o_buf + m] = x
            m += 1
        for k in range(nfa[o_eo + x], nfa[o_eo + x + 1]):
            y = nfa[o_ed + k]
            if scr[o_mark + y] != st and nfa[o_live + y]:
                scr[o_mark + y] = st
                scr[o_stack + sp] = y
                sp += 1
    used = meta[CLO]
    if used + m > clo_pool.shape[0]:
        meta[STATUS] = GROW_CLO
        return False
    _isort(scr, o_buf, o_buf + m)
    for q in range(m):
        clo_pool[used + q] = scr[o_buf + q]
    clo_idx[2 * s] = used
    clo_idx[2 * s + 1] = m
    meta[CLO] = used + m
    return True


@_inner
def _cuts(
    o_sub: int, n_sub: int, sub: I32, store: Store
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Collect the live edges of the set ``sub[o_sub : o_sub + n_sub]`` and their cuts.

    The cuts (the classes where an edge starts or ends) go sorted and distinct at
    ``lay[CUTS]``. Returns ``(edges, cuts)``; ``cuts = -1`` when a closure did not fit its pool.
    """
    nfa, lay, scr = store[0], store[1], store[10]
    o_off, o_ef, o_el, o_dst, o_live = lay[OFF], lay[EFIRST], lay[ELAST], lay[DST], lay[LIVE]
    o_ea, o_eb, o_et, o_cuts = lay[EA], lay[EB], lay[ET], lay[CUTS]
    n_e = 0
    for p in range(o_sub, o_sub + n_sub):
        s = sub[p]
        for k in range(nfa[o_off + s], nfa[o_off + s + 1]):
            t = nfa[o_dst + k]
            if nfa[o_live + t]:
                scr[o_ea + n_e] = nfa[o_ef + k]
                scr[o_eb + n_e] = nfa[o_el + k]
                scr[o_et + n_e] = t
                n_e += 1
    for q in range(n_e):
        if not _closure(scr[o_et + q], store):
            return n_e, -1
    for q in range(n_e):
        scr[o_cuts + 2 * q] = scr[o_ea + q]
        scr[o_cuts + 2 * q + 1] = scr[o_eb + q] + 1
    _isort(scr, o_cuts, o_cuts + 2 * n_e)
    nu = 0
    for q in range(2 * n_e):
        c = scr[o_cuts + q]
        if nu == 0 or c != scr[o_cuts + nu - 1]:
            scr[o_cuts + nu] = c
            nu += 1
    return n_e, nu


@_inner
def _union(a: int, n_e: int, store: Store, o_out: int) -> int:  # pragma: no cover - compiled
    """The union of the closures of the edges covering class ``a``, sorted, at ``o_out``.

    Returns its size, or -1 when no edge covers ``a`` (a dead run).
    """
    lay, clo_idx, clo_pool, meta, scr = store[1], store[2], store[3], store[9], store[10]
    o_ea, o_eb, o_et, o_mark = lay[EA], lay[EB], lay[ET], lay[MARK2]
    covering = 0
    m = 0
    st = 0
    for q in range(n_e):
        if scr[o_ea + q] <= a <= scr[o_eb + q]:
            t = scr[o_et + q]
            cs = clo_idx[2 * t]
            cl = clo_idx[2 * t + 1]
            if covering == 0:
                st = _new_stamp(meta, scr, lay)
            covering += 1
            for p in range(cs, cs + cl):
                x = clo_pool[p]
                if scr[o_mark + x] != st:
                    scr[o_mark + x] = st
                    scr[o_out + m] = x
                    m += 1
    if covering == 0:
        return -1
    if covering > 1:
        _isort(scr, o_out, o_out + m)
    return m


@_inner
def _hash(buf: I32, lo: int, m: int) -> int:  # pragma: no cover - compiled
    h = np.int64(m) * np.int64(-7046029254386353131)
    for q in range(lo, lo + m):
        h = (h ^ np.int64(buf[q])) * np.int64(-4658895280553007687)
    return int(h ^ (h >> np.int64(29)))


@_inner
def _intern(
    buf: I32, lo: int, m: int, store: Store, max_states: int
) -> int:  # pragma: no cover - compiled
    """The DFA state of the set ``buf[lo : lo + m]``, added if new; -1 when it must stop."""
    lay, set_off, set_pool, set_hash = store[1], store[4], store[5], store[6]
    acc, htab, meta = store[7], store[8], store[9]
    h = _hash(buf, lo, m)
    mask = htab.shape[0] - 1
    i = h & mask
    while True:
        j = htab[i]
        if j < 0:
            break
        if set_hash[j] == h and set_off[j + 1] - set_off[j] == m:
            base = set_off[j]
            same = True
            for q in range(m):
                if set_pool[base + q] != buf[lo + q]:
                    same = False
                    break
            if same:
                return int(j)
        i = (i + 1) & mask
    n = meta[N]
    if n >= max_states:
        meta[STATUS] = TOO_MANY
        return -1
    if n + 2 > set_off.shape[0]:
        meta[STATUS] = GROW_STATES
        return -1
    used = meta[POOL]
    if used + m > set_pool.shape[0]:
        meta[STATUS] = GROW_POOL
        return -1
    if 2 * (n + 1) > htab.shape[0]:
        meta[STATUS] = GROW_HASH
        return -1
    final = lay[LFINAL]
    is_final = 0
    for q in range(m):
        x = buf[lo + q]
        set_pool[used + q] = x
        if x == final:
            is_final = 1
    set_off[n + 1] = used + m
    set_hash[n] = h
    acc[n] = is_final  # bit 0; bit 1 is :func:`_expand`'s, clear between its calls
    htab[i] = n
    meta[N] = n + 1
    meta[POOL] = used + m
    return int(n)


def _rehash(set_off: I64, set_hash: I64, n: int, htab: I32) -> None:  # pragma: no cover
    """Insert states ``0 .. n - 1`` into the empty table ``htab`` (after it grew)."""
    mask = htab.shape[0] - 1
    for j in range(n):
        i = set_hash[j] & mask
        while htab[i] >= 0:
            i = (i + 1) & mask
        htab[i] = j


@_inner
def _row(
    s: int, store: Store, rows: I32, done: U8, max_states: int
) -> bool:  # pragma: no cover - compiled
    """Build the row of DFA state ``s`` into ``rows[s]`` (``False``: stopped, see meta).

    ``rows`` is ``int32[capacity, 256]`` (byte rows: a lazy DFA's table) or
    ``int32[capacity, k]`` (class rows: the eager build); -1 is dead. The row is written once
    its targets are all known, each cell once, with its final value (a reader without the
    lock never sees a wrong one), and only then marked ``done``.
    """
    nfa, lay, set_off = store[0], store[1], store[4]
    set_pool, meta, scr = store[5], store[9], store[10]
    o_cs, o_ra, o_rb, o_rj, o_buf = lay[CSTART], lay[RA], lay[RB], lay[RJ], lay[BUF_A]
    o_cuts = lay[CUTS]
    by_bytes = rows.shape[1] == 256  # (with 256 classes, class c is byte c)
    n_e, nu = _cuts(set_off[s], set_off[s + 1] - set_off[s], set_pool, store)
    if nu < 0:
        return False
    nr = 0
    for u in range(nu - 1):
        m = _union(scr[o_cuts + u], n_e, store, o_buf)
        if m < 0:
            continue
        j = _intern(scr, o_buf, m, store, max_states)
        if j < 0:
            return False
        scr[o_ra + nr] = scr[o_cuts + u]
        scr[o_rb + nr] = scr[o_cuts + u + 1]  # exclusive
        scr[o_rj + nr] = j
        nr += 1
    pos = 0
    for r in range(nr):
        lo = scr[o_ra + r]
        hi = scr[o_rb + r]
        if by_bytes:
            lo, hi = nfa[o_cs + lo], nfa[o_cs + hi]
        j = scr[o_rj + r]
        for x in range(pos, lo):
            rows[s, x] = -1
        for x in range(lo, hi):
            rows[s, x] = j
        pos = hi
    for x in range(pos, rows.shape[1]):
        rows[s, x] = -1
    done[s] = 1
    built = meta[BUILT] + 1
    meta[BUILT] = built
    if built >= PAUSE_ROWS:
        meta[STATUS] = PAUSE  # the row is built: calling again goes on after it
        return False
    return True


def _expand(
    store: Store, todo: I32, ascending: bool, rows: I32, done: U8, max_states: int, order: I32
) -> bool:  # pragma: no cover - compiled
    """Build the rows of the distinct states of ``todo`` not ``done`` yet (see :func:`_row`).

    In the order of ``todo``, or ascending (``order``: room for them). ``False`` when it
    stopped (``meta[STATUS]``: an array must grow, or ``max_states`` is reached); calling
    it again goes on.
    """
    acc, meta = store[7], store[9]
    meta[STATUS] = OK
    cnt = 0
    for x in todo:  # bit 1 of acc: listed already
        if done[x] == 0 and acc[x] & 2 == 0:
            acc[x] |= 2
            order[cnt] = x
            cnt += 1
    for q in range(cnt):
        acc[order[q]] &= 1
    if ascending:
        _isort(order, 0, cnt)
    for q in range(cnt):  # noqa: SIM110 - a plain loop compiles; a generator does not
        if not _row(order[q], store, rows, done, max_states):
            return False
    return True


def _expand_all(
    store: Store, first: int, limit: int, rows: I32, done: U8, max_states: int
) -> int:  # pragma: no cover - compiled
    """Build the rows of states ``first, first + 1, ...`` as they are found (the eager build).

    Stops at state ``limit``, past the last state, or when ``rows`` is full (``meta[STATUS]``
    is then ``GROW_ROWS``) or another array must grow; returns the first state not built.
    """
    meta = store[9]
    meta[STATUS] = OK
    i = first
    while i < meta[N] and i < limit:
        if not _ready(i, store, rows, done, max_states):
            return i
        i += 1
    return i


@_inner
def _ready(s: int, store: Store, rows: I32, done: U8, max_states: int) -> bool:  # pragma: no cover
    """Build the row of ``s`` unless it is; ``False``: stopped (``GROW_ROWS``: past ``rows``)."""
    if s >= rows.shape[0]:
        store[9][STATUS] = GROW_ROWS
        return False
    return bool(done[s]) or _row(s, store, rows, done, max_states)


def _start(store: Store, start: int, max_states: int) -> int:  # pragma: no cover - compiled
    """Add the closure of the NFA state ``start`` as a DFA state (-1: see meta)."""
    clo_idx, clo_pool, meta = store[2], store[3], store[9]
    meta[STATUS] = OK
    if not _closure(start, store):
        return -1
    cs, m = clo_idx[2 * start], clo_idx[2 * start + 1]
    return _intern(clo_pool, cs, m, store, max_states)


@_inner
def _same(a: I32, lo: int, m: int, lo2: int, n: int) -> bool:  # pragma: no cover - compiled
    """Whether ``a[lo : lo + m]`` equals ``a[lo2 : lo2 + n]``."""
    if m != n:
        return False
    for q in range(m):  # noqa: SIM110 - a plain loop compiles; a generator does not
        if a[lo + q] != a[lo2 + q]:
            return False
    return True


@_inner
def _copy(src: I32, lo: int, dst: I32, lo2: int, m: int) -> None:  # pragma: no cover
    for q in range(m):
        dst[lo2 + q] = src[lo + q]


_A = numba.types.Array
_i32, _i64, _u8, _u32 = (
    _A(t, 1, "C") for t in (numba.int32, numba.int64, numba.uint8, numba.uint32)
)
_rows, _int = _A(numba.int32, 2, "C"), numba.int64
_tuple: Callable[..., Any] = numba.types.Tuple
_STORE = _tuple((_i32, _i64, _i64, _i32, _i64, _i32, _i64, _u8, _i32, _i64, _i32))


def _jit(func: Callable[..., Any], *args: Any) -> Callable[..., Any]:
    compiled: Callable[..., Any] = numba.njit(args, **_OPTIONS)(func)
    return compiled


expand_kernel = _jit(_expand, _STORE, _i32, numba.boolean, _rows, _u8, numba.int64, _i32)
expand_all_kernel = _jit(_expand_all, _STORE, numba.int64, numba.int64, _rows, _u8, numba.int64)
rehash_kernel = _jit(_rehash, _i64, _i64, numba.int64, _i32)
start_kernel = _jit(_start, _STORE, numba.int64, numba.int64)
