r"""Up-front size estimates of a regex's automata, so a hopeless regex is refused at compile.

Two estimates, both read off the regex tree in time linear in it:

* :func:`nfa_states`: the NFA's size (counted repetitions multiply their item), so that
  ``(a{1000}){1000}`` is refused before a million states are built.
* :func:`dfa_blowup`: the classic exponential subset construction. A loop ``X*`` followed by
  text that can also start where the loop goes on (``[0-9]*1[0-9]{3000}``: after any digit the
  ``1`` may have been the one) keeps one NFA thread alive per recent position that could have
  started it, so the DFA needs a state per set of such positions: ``2 ** w`` for ``w``
  positions after the first one that tells the loop's characters apart. Literal runs add
  nothing (their threads are ordered, as in KMP), nor does text the loop cannot go on with.
  The lazy DFA would find out during generation, after seconds and thousands of states; the
  estimate says it at compile. It is a lower bound in the cases it recognises and silent
  otherwise (the state limit, checked as the DFA grows, still applies).
"""

from __future__ import annotations

from outlines_like.types._charset import Ranges, normalize
from outlines_like.types._regex import Alt, Anchor, Atomic, Chars, Concat, Node, Repeat, width

__all__ = ["dfa_blowup", "nfa_states"]

_CAP = 1 << 62


def nfa_states(node: Node) -> int:
    """A rough count of the NFA states of ``node`` (capped, so it never overflows).

    Linear in the tree's distinct nodes: a node the reader shares (a group text read before)
    is counted once and its count reused.
    """
    return _nfa_states(node, {})


def _nfa_states(node: Node, memo: dict[int, int]) -> int:
    if isinstance(node, Chars):
        return 1 + min(len(node.ranges), 4)
    if isinstance(node, Anchor):
        return 0
    got = memo.get(id(node))  # the tree holds its nodes while the memo lives
    if got is not None:
        return got
    if isinstance(node, (Concat, Alt)):
        total = 1
        for item in node.items:  # sets inline: most items of a JSON Schema's regex
            if type(item) is Chars:
                total += 1 + min(len(item.ranges), 4)
            else:
                total += _nfa_states(item, memo)
        got = min(_CAP, total)
    elif isinstance(node, Atomic):
        got = _nfa_states(node.item, memo)
    else:
        copies = node.high if node.high is not None else node.low + 1
        got = min(_CAP, max(copies, 1) * _nfa_states(node.item, memo) + 1)
    memo[id(node)] = got
    return got


class _Facts:
    """Width, characters and first characters of the tree's nodes, each computed once."""

    def __init__(self) -> None:
        self._width: dict[int, tuple[int, int | None]] = {}
        self._chars: dict[int, Ranges] = {}
        self._first: dict[int, Ranges] = {}
        self._keep: list[Node] = []  # the ids stay valid while the memo lives

    def width(self, node: Node) -> tuple[int, int | None]:
        got = self._width.get(id(node))
        if got is None:
            got = self._width[id(node)] = width(node)
            self._keep.append(node)
        return got

    def nullable(self, node: Node) -> bool:
        return self.width(node)[0] == 0

    def chars(self, node: Node) -> Ranges:
        """Every character ``node`` can read."""
        got = self._chars.get(id(node))
        if got is not None:
            return got
        found: list[tuple[int, int]] = []
        todo = [node]
        while todo:
            n = todo.pop()
            if isinstance(n, Chars):
                found.extend(n.ranges)
            elif isinstance(n, (Concat, Alt)):
                todo.extend(n.items)
            elif isinstance(n, (Repeat, Atomic)):
                todo.append(n.item)
        got = self._chars[id(node)] = normalize(found)
        self._keep.append(node)
        return got

    def first(self, node: Node) -> Ranges:
        """The characters ``node``'s text can start with."""
        got = self._first.get(id(node))
        if got is not None:
            return got
        out: list[tuple[int, int]] = []
        if isinstance(node, Chars):
            out.extend(node.ranges)
        elif isinstance(node, Alt):
            for item in node.items:
                out.extend(self.first(item))
        elif isinstance(node, Concat):
            for item in node.items:
                out.extend(self.first(item))
                if not self.nullable(item):
                    break
        elif isinstance(node, (Repeat, Atomic)):
            out.extend(self.first(node.item))
        got = self._first[id(node)] = normalize(out)
        self._keep.append(node)
        return got


def _common(a: Ranges, b: Ranges) -> int:
    """How many code points ``a`` and ``b`` share."""
    total = 0
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            total += hi - lo + 1
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _size(a: Ranges) -> int:
    return sum(hi - lo + 1 for lo, hi in a)


def _flat(node: Concat) -> list[Node]:
    """The items of ``node`` with the concatenations in it opened, in order."""
    if Concat not in map(type, node.items):  # most: no Python loop
        return list(node.items)
    out: list[Node] = []
    add = out.append
    for item in node.items:
        if type(item) is Concat:
            out.extend(_flat(item))
        else:
            add(item)
    return out


def _blowup_after(facts: _Facts, loop: Ranges, items: list[Node], begin: int) -> int:
    """Positions after a loop over ``loop`` whose threads the DFA must track independently.

    The positions are those of ``items[begin:]`` (read in place: no slice per loop).
    """
    started = False
    w = 0
    for k in range(begin, len(items)):
        item = items[k]
        common = _common(facts.chars(item), loop)
        if not common:
            if facts.nullable(item):
                continue
            break
        lo, hi = facts.width(item)
        if not started:
            started = common < _size(loop)  # this item tells the loop's characters apart
            if started:
                w += 0 if hi is None else max(hi - 1, 0)
            if hi is None:
                break
            continue
        if common >= 2:  # a wide position: a thread may be here or not, independently
            w += lo if hi is None else hi
        if hi is None:
            break
    return w


def dfa_blowup(node: Node) -> int:
    """An estimate of ``log2`` of the DFA states the subset construction needs (0: no blowup).

    The worst over the loops of the tree: the worst of a node is its own loops' and its
    parts', a function of the node alone, so it is computed once per node and kept (with the
    node) for the trees that share it: the reader shares a group text's node within a pattern
    and across patterns (JSON Schemas' patterns repeat each other's strings and numbers).
    """
    if len(_WORST) > _WORST_LIMIT:
        _WORST.clear()  # only a cache
    return _worst(node, _Facts())


_WORST: dict[int, tuple[Node, int]] = {}
"""``id(node)`` -> the node (so the id stays its own) and its worst blowup."""
_WORST_LIMIT = 1 << 14


def clear_estimates() -> None:
    """Empty the kept blowups (and the trees they hold alive)."""
    _WORST.clear()


def _worst(node: Node, facts: _Facts) -> int:
    """The blowup of ``node``'s loops and of its parts' (a concatenation's parts: opened)."""
    got = _WORST.get(id(node))
    if got is not None:
        return got[1]
    worst = 0
    if isinstance(node, Concat):
        items = _flat(node)
        types = [*map(type, items)]
        k = -1
        for _ in range(types.count(Repeat)):
            k = types.index(Repeat, k + 1)
            rep = items[k]
            if isinstance(rep, Repeat) and rep.high is None:
                loop = facts.first(rep.item)
                worst = max(worst, _blowup_after(facts, loop, items, k + 1))
        parts: list[Node] | tuple[Node, ...] = [
            item
            for item, of in zip(items, types, strict=True)
            if of is not Chars and of is not Anchor
        ]
    elif isinstance(node, Alt):
        parts = node.items
    elif isinstance(node, (Repeat, Atomic)):
        parts = (node.item,)
    else:  # sets and anchors hold no loop
        return 0
    known = _WORST.get
    for item in parts:  # the parts met before: read here, without a call
        of: type = type(item)
        if of is not Chars and of is not Anchor:
            got = known(id(item))
            part = got[1] if got is not None else _worst(item, facts)
            if part > worst:
                worst = part
    _WORST[id(node)] = (node, worst)
    return worst
