"""The memo of lexer contexts' products, shared by every grammar of the process.

The compiled kernel's product of a context's terminal DFAs depends on those DFAs alone (the
terminal ids only name its reach's columns), and grammars share most of their contexts, so
:func:`context_product` keeps the products by their components' identities, up to
:data:`_PRODUCT_MEMO_BYTES` of tables; :mod:`outlines_like.fsm._grammar_lexer` maps an entry's
components to its own grammar's terminal and class ids.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import weakref
from collections.abc import Sequence
from types import ModuleType
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["Component", "Product", "clear_context_products", "context_product"]


class Component(Protocol):
    """What the product reads of a terminal's DFA (a ``_grammar_lexer.TerminalDFA``)."""

    @property
    def transitions(self) -> npt.NDArray[np.int32]: ...

    @property
    def accepting(self) -> npt.NDArray[np.bool_]: ...

    @property
    def start(self) -> int: ...


_PRODUCT_MEMO_BYTES = 32 << 20
"""Most bytes of transition tables the memo of compiled context products keeps."""


@dataclasses.dataclass(frozen=True, eq=False)
class Product:
    """A context's product as the kernel built it, in terms of its components (any grammar).

    ``components``: weak references to the terminal DFAs whose ids make the memo's key. They
    do not keep the DFAs alive (a literal's DFA is ~1 KB a byte, and the terminal memo's own
    bound evicts them): an entry whose DFAs are gone answers no key (a new DFA may take an
    old one's id) and waits for eviction, its bytes still counted.
    A lexeme ending in state ``s`` becomes component ``labels[label_at[s]]`` (``labels``: the
    components that win somewhere, in the order of the first state they win; ``label_at[s]
    = len(labels)`` where none does), and ``reach[s, c]`` says whether it can still become
    component ``c``.
    """

    components: tuple[weakref.ref[Component], ...]
    transitions: npt.NDArray[np.int32]
    labels: list[int]
    label_at: npt.NDArray[np.intp]
    reach: npt.NDArray[np.bool_]


_products: collections.OrderedDict[tuple[int, ...], Product] = collections.OrderedDict()
_products_bytes = 0
_products_lock = threading.Lock()


def clear_context_products() -> None:
    """Empty the memo of compiled context products."""
    global _products_bytes
    with _products_lock:
        _products.clear()
        _products_bytes = 0


def context_product(
    kernels: ModuleType, comp_dfas: Sequence[Component], max_states: int
) -> Product | None:
    """The product of ``comp_dfas`` (memoised).

    The kernel's product depends on the components' DFAs alone: it is built with each
    component as its own terminal, so its reach is by component (a grammar maps the columns
    to its terminal ids). Grammars share most of their contexts (a JSON Schema's value,
    string and punctuation contexts; Kubernetes schemas their common objects): 877 of the
    1,391 contexts built over the real-world corpus had their components in an earlier one.
    ``None`` past ``max_states`` states.
    """
    global _products_bytes
    key = tuple(map(id, comp_dfas))
    with _products_lock:
        found = _products.get(key)
        if found is not None and all(
            ref() is dfa for ref, dfa in zip(found.components, comp_dfas, strict=True)
        ):
            _products.move_to_end(key)
            if found.transitions.shape[0] > max_states:  # (a limit lowered since)
                return None
            return found
    sizes = [d.transitions.shape[0] for d in comp_dfas]
    n_comps = len(comp_dfas)
    status, transitions, label, reach = kernels.product(
        np.concatenate([d.transitions for d in comp_dfas]).reshape(-1),
        np.concatenate([d.accepting for d in comp_dfas]).view(np.uint8),
        np.array([0, *itertools.accumulate(sizes[:-1])], dtype=np.int64),
        np.array([d.start for d in comp_dfas], dtype=np.int32),
        np.arange(n_comps, dtype=np.int32),  # each component its own terminal
        n_comps,
        max_states,
    )
    if status != kernels.OK:
        return None
    n = label.shape[0]
    first_win: dict[int, int] = {}  # the winning components, in the order of their states
    at = [first_win.setdefault(c, len(first_win)) if c >= 0 else -1 for c in label.tolist()]
    label_at = np.array(at, dtype=np.intp)
    label_at[label_at < 0] = len(first_win)
    won = list(first_win)
    built = Product(
        tuple(map(weakref.ref, comp_dfas)),
        transitions.reshape(n, 256),
        won,
        label_at,
        reach.view(np.bool_).reshape(n, n_comps),
    )
    with _products_lock:
        stale = _products.get(key)
        if stale is None or any(
            ref() is not dfa for ref, dfa in zip(stale.components, comp_dfas, strict=True)
        ):
            if stale is not None:  # its DFAs are gone: another DFA took an id
                del _products[key]
                _products_bytes -= stale.transitions.nbytes + stale.reach.nbytes
            _products[key] = built
            _products_bytes += built.transitions.nbytes + built.reach.nbytes
            while _products_bytes > _PRODUCT_MEMO_BYTES and len(_products) > 1:
                _, old = _products.popitem(last=False)
                _products_bytes -= old.transitions.nbytes + old.reach.nbytes
    return built
