"""DFA minimisation (Moore refinement, vectorised over states) and byte-class merging."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["merge_classes", "minimize"]


def _splitmix64(n: int, seed: int = 0x5EED) -> npt.NDArray[np.uint64]:
    """``n`` odd pseudo-random 64-bit multipliers (fixed: hashing is deterministic)."""
    out = []
    x = seed
    mask = (1 << 64) - 1
    for _ in range(n):
        x = (x + 0x9E3779B97F4A7C15) & mask
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append((z ^ (z >> 31)) | 1)
    return np.array(out, dtype=np.uint64)


_MULTIPLIERS = _splitmix64(258)


def _labels(keys: list[int] | list[bytes]) -> tuple[list[int], int]:
    """Number ``keys`` by first occurrence (equal keys, equal numbers); return the count too."""
    ids: dict[int | bytes, int] = {}
    return [ids.setdefault(key, len(ids)) for key in keys], len(ids)


def _rows(a: npt.NDArray[np.int64]) -> list[bytes]:
    """The bytes of each row of ``a`` (exact, hashable keys)."""
    raw = np.ascontiguousarray(a).tobytes()
    w = len(raw) // a.shape[0] if a.shape[0] else 0
    return [raw[i : i + w] for i in range(0, len(raw), w)] if w else [b""] * a.shape[0]


def _refine(
    table: npt.NDArray[np.int32], block: npt.NDArray[np.int64], hashed: bool
) -> npt.NDArray[np.int64]:
    """Moore partition refinement to a fixed point, vectorised over states.

    Blocks are numbered by their first state. ``hashed`` compares 64-bit hashes of the
    signatures instead of whole rows (faster); the caller checks the result exactly.
    """
    mult = _MULTIPLIERS[: table.shape[1] + 1]
    n_blocks = int(block.max()) + 1
    while True:
        succ = np.append(block, -1)[table]
        if hashed:
            h = block.astype(np.uint64) * mult[0] + (succ + 1).astype(np.uint64) @ mult[1:]
            labels, m = _labels(h.tolist())
        else:
            labels, m = _labels(_rows(np.concatenate([block[:, None], succ], axis=1)))
        if m == n_blocks:
            return block
        block, n_blocks = np.array(labels, dtype=np.int64), m


def _is_congruence(table: npt.NDArray[np.int32], block: npt.NDArray[np.int64]) -> bool:
    """Whether states in one block have identical (block, successor blocks) rows."""
    n_blocks = int(block.max()) + 1
    rep = np.zeros(n_blocks, dtype=np.int64)
    rep[block[::-1]] = np.arange(block.shape[0])[::-1]
    ext = np.append(block, -1)
    sig = ext[table]
    return bool((sig == sig[rep[block]]).all())


def minimize(
    table: npt.NDArray[np.int32], accepting: npt.NDArray[np.bool_], start: int
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_], int]:
    """Merge equivalent states (Moore refinement, hashed, checked exactly)."""
    n = table.shape[0]
    if n <= 1:
        return table, accepting, start
    initial = accepting.astype(np.int64)
    if initial.min() == initial.max():
        initial = np.zeros(n, dtype=np.int64)
    block = _refine(table, initial, hashed=True)
    if not _is_congruence(table, block):  # a hash collision merged two states: redo exactly
        block = _refine(table, initial, hashed=False)
    n_blocks = int(block.max()) + 1
    if n_blocks == n:
        return table, accepting, start
    rep = np.zeros(n_blocks, dtype=np.int64)
    rep[block[::-1]] = np.arange(n)[::-1]
    ext = np.append(block, -1)
    new_table = ext[table[rep]].astype(np.int32)
    new_acc = accepting[rep]
    return new_table, new_acc, int(block[start])


def merge_classes(
    table: npt.NDArray[np.int32], classes: npt.NDArray[np.int32]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """Merge byte classes with identical columns (numbered by first class, in byte order)."""
    if table.shape[0] == 0:
        return table, classes
    labels, m = _labels(_rows(table.T))
    if m == table.shape[1]:
        return table, classes
    first = [0] * m
    for c in range(len(labels) - 1, -1, -1):
        first[labels[c]] = c
    new_cls = np.array(labels, dtype=np.int32)[classes]
    return np.ascontiguousarray(table[:, first], dtype=np.int32), new_cls
