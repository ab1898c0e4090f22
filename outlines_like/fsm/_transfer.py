"""Compiled constraints to bytes and back, without their vocabulary (between processes).

A server compiles a request's constraint in a killable worker process and uses the result
(:mod:`outlines_like.server.compile_workers`). A compiled constraint is plain data (numpy
tables, dicts, Lark's parse tables) apart from three things, which :func:`dump_compiled`
handles in its pickler rather than in the masker's classes:

* the vocabulary and what is built once per vocabulary (its tokens, EOS and special ids, the
  token tables kept on it): written as references naming the vocabulary's hash, and re-attached
  on the receiving side to that side's own vocabulary (:func:`load_compiled` checks the hash),
  so a constraint's bytes never carry the vocabulary;
* locks: written as fresh locks (nothing is held while a compiled constraint is dumped: its
  lazily built tables are only filled under a matcher call);
* modules (Lark's lexers keep the ``re`` module they use): written by name.

Both sides must run the same version of this package (the worker is a subprocess of the
server, started from the same interpreter). The bytes are a pickle: load only bytes this
package wrote in a process you trust.
"""

from __future__ import annotations

import importlib
import io
import pickle
import threading
import types
from collections.abc import Callable
from typing import Any

from outlines_like.fsm._grammar_walk import byte_table
from outlines_like.fsm._protocols import Compiled
from outlines_like.fsm.index import token_table, token_trie
from outlines_like.fsm.vocabulary import Vocabulary

__all__ = ["dump_compiled", "load_compiled"]

_LOCK = type(threading.Lock())
_RLOCK = type(threading.RLock())
_BUILDERS: dict[str, Callable[[Vocabulary], object]] = {
    "token_table": token_table,
    "token_trie": token_trie,
    "fsm.grammar.byte_table": byte_table,
}
"""How the receiving side builds a per-vocabulary table it does not have yet, by cache key."""


class _Pickler(pickle.Pickler):
    """Pickles a compiled constraint with its vocabulary's parts as references."""

    def __init__(self, file: io.BytesIO, vocab: Vocabulary) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        digest = vocab.hash
        self._refs: dict[int, tuple[str, str, str]] = {
            id(vocab): ("vocab", digest, ""),
            id(vocab.tokens): ("tokens", digest, ""),
            id(vocab.eos_token_ids): ("eos", digest, ""),
            id(vocab.special_token_ids): ("special", digest, ""),
        }
        for key, value in vocab._cache.items():
            self._refs[id(value)] = ("cache", digest, key)

    def persistent_id(self, obj: Any) -> tuple[str, str, str] | None:
        return self._refs.get(id(obj))

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is _LOCK:
            return (threading.Lock, ())
        if type(obj) is _RLOCK:
            return (threading.RLock, ())
        if isinstance(obj, types.ModuleType):
            return (importlib.import_module, (obj.__name__,))
        return NotImplemented


class _Unpickler(pickle.Unpickler):
    """Re-attaches the references to the receiving side's vocabulary."""

    def __init__(self, file: io.BytesIO, vocab: Vocabulary) -> None:
        super().__init__(file)
        self._vocab = vocab

    def persistent_load(self, pid: Any) -> Any:
        kind, digest, key = pid
        vocab = self._vocab
        if digest != vocab.hash:
            raise pickle.UnpicklingError(
                "the compiled constraint was built for another vocabulary "
                f"(hash {digest[:12]}, this one is {vocab.hash[:12]})"
            )
        if kind == "vocab":
            return vocab
        if kind == "tokens":
            return vocab.tokens
        if kind == "eos":
            return vocab.eos_token_ids
        if kind == "special":
            return vocab.special_token_ids
        if kind == "cache":
            if key not in vocab._cache:
                build = _BUILDERS.get(key)
                if build is None:
                    vocab._cache.setdefault(key, {})  # a per-vocabulary cache of compiles
                else:
                    build(vocab)
            return vocab._cache[key]
        raise pickle.UnpicklingError(f"unknown reference {kind!r} in a compiled constraint")


def dump_compiled(compiled: Compiled) -> bytes:
    """The bytes of ``compiled``, its vocabulary left out (only its hash is written).

    Call it when no matcher of ``compiled`` is running (its lazy tables must not change while
    they are written).

    Raises:
        pickle.PicklingError, TypeError: Something in the constraint cannot be written.
    """
    buffer = io.BytesIO()
    _Pickler(buffer, compiled.vocabulary).dump(compiled)
    return buffer.getvalue()


def load_compiled(data: bytes, vocab: Vocabulary) -> Compiled:
    """The compiled constraint :func:`dump_compiled` wrote, re-attached to ``vocab``.

    Raises:
        pickle.UnpicklingError: ``vocab`` is not the vocabulary it was compiled for (by hash),
            or the bytes are not a compiled constraint.
    """
    compiled = _Unpickler(io.BytesIO(data), vocab).load()
    if not isinstance(compiled, Compiled):
        raise pickle.UnpicklingError(f"expected a compiled constraint, got {type(compiled)!r}")
    return compiled
