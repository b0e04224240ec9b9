"""Sets of choice combinations, kept without listing them.

A spec of 13 choices has 110,592 combinations; one of 28 has billions. The checker proves a
body once for each way of setting the choices it reads (see ``selections``), and a finding
holds in every combination that agrees with the choices it was seen under: a *cube* (some
choices set, the rest free). What a finding covers is a union of such cubes, and the checker
unites, intersects and subtracts them (a state kept under ``decoding = step``, a start the
full model computes).

``ChoiceSpace`` is the combinations checked, in order (the first is the defaults', or those
asked), as a sequence computed on demand. ``Cover`` is a set of them, as a reduced ordered
decision diagram over the space's choices: nodes are shared (one table per space), so equal
sets are the same node, and the work of an operation follows the size of the diagrams, not
the number of combinations.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

EMPTY, FULL = 0, 1       # the node ids of the empty set and of the whole space


class ChoiceSpace(Sequence):
    """Every combination of the given choice options, as dicts in the spec's order of
    choices; ``first`` (a choice name) is the most significant, the others in the spec's
    order after it (the order ``itertools.product`` gives)."""

    def __init__(self, options: dict[str, tuple[str, ...]], first: str | None = None):
        self.names = tuple(options)                  # the spec's order, for each dict
        self.order = tuple(([first] if first is not None else []) +
                           [name for name in options if name != first])
        self.values = tuple(tuple(options[name]) for name in self.order)
        self.sizes = tuple(len(v) for v in self.values)
        self.index_of = [{value: i for i, value in enumerate(v)} for v in self.values]
        self.level_of = {name: level for level, name in enumerate(self.order)}
        # the product of the sizes of levels [i, n): suffix[n] == 1
        self.suffix = [1] * (len(self.order) + 1)
        for level in range(len(self.order) - 1, -1, -1):
            self.suffix[level] = self.suffix[level + 1] * self.sizes[level]
        # the decision diagram's shared nodes: id -> (level, children), and back
        self.nodes: list[tuple[int, tuple[int, ...]]] = [(len(self.order), ()),
                                                         (len(self.order), ())]
        self.unique: dict[tuple[int, tuple[int, ...]], int] = {}
        self.memo: dict[tuple, int] = {}
        self.matched: dict[tuple, Cover] = {}
        self.counts: dict[int, int] = {EMPTY: 0, FULL: 1}

    # -- the sequence
    def __len__(self) -> int:
        return self.suffix[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("combination index out of range")
        chosen = {}
        for level, name in enumerate(self.order):
            position, index = divmod(index, self.suffix[level + 1])
            chosen[name] = self.values[level][position]
        return {name: chosen[name] for name in self.names}

    def __iter__(self) -> Iterator[dict]:
        for values in itertools.product(*self.values):
            chosen = dict(zip(self.order, values))
            yield {name: chosen[name] for name in self.names}

    def __contains__(self, combo) -> bool:
        return isinstance(combo, dict) and set(combo) == set(self.names) and all(
            combo[name] in self.index_of[level] for level, name in enumerate(self.order))

    def __eq__(self, other) -> bool:
        if isinstance(other, ChoiceSpace):
            return self.names == other.names and self.order == other.order and \
                self.values == other.values
        return isinstance(other, list) and len(other) == len(self) and list(self) == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"ChoiceSpace({len(self)} combinations of {len(self.names)} choices)"

    # -- sets of combinations
    @property
    def everything(self) -> Cover:
        return Cover(self, FULL)

    @property
    def nothing(self) -> Cover:
        return Cover(self, EMPTY)

    def matching(self, selection: dict) -> Cover:
        """The combinations that set each chosen choice as ``selection`` does (choices the
        space does not hold, or values it does not allow, match nothing)."""
        key = tuple(selection.items())
        found = self.matched.get(key)
        if found is None:
            found = self.matched[key] = self._matching(selection)
        return found

    def _matching(self, selection: dict) -> Cover:
        restricted = []
        for name, value in selection.items():
            level = self.level_of.get(name)
            position = None if level is None else self.index_of[level].get(value)
            if position is None:
                return self.nothing
            restricted.append((level, position))
        restricted.sort(reverse=True)
        node = FULL
        for level, position in restricted:
            children = [EMPTY] * self.sizes[level]
            children[position] = node
            node = self._node(level, tuple(children))
        return Cover(self, node)

    def _node(self, level: int, children: tuple[int, ...]) -> int:
        if children.count(children[0]) == len(children):
            return children[0]         # the choice does not matter here
        key = (level, children)
        found = self.unique.get(key)
        if found is None:
            found = self.unique[key] = len(self.nodes)
            self.nodes.append(key)
        return found

    def _children(self, node: int, level: int) -> tuple[int, ...]:
        at, children = self.nodes[node]
        return children if at == level else (node,) * self.sizes[level]

    def _apply(self, op: str, a: int, b: int) -> int:
        if op == "|":
            if a == FULL or b == FULL:
                return FULL
            if a == EMPTY or a == b:
                return b
            if b == EMPTY:
                return a
        elif op == "&":
            if a == EMPTY or b == EMPTY:
                return EMPTY
            if a == FULL or a == b:
                return b
            if b == FULL:
                return a
        else:      # "-"
            if a == EMPTY or b == FULL or a == b:
                return EMPTY
            if b == EMPTY:
                return a
        if op != "-" and a > b:
            a, b = b, a                 # | and & commute: one memo entry for both orders
        key = (op, a, b)
        found = self.memo.get(key)
        if found is None:
            level = min(self.nodes[a][0], self.nodes[b][0])
            found = self.memo[key] = self._node(level, tuple(
                self._apply(op, x, y) for x, y in zip(self._children(a, level),
                                                      self._children(b, level))))
        return found

    def _count(self, node: int) -> int:
        """The combinations under ``node`` over the levels from its own down."""
        found = self.counts.get(node)
        if found is None:
            level, children = self.nodes[node]
            found = self.counts[node] = sum(
                self._count(child) * self.suffix[level + 1] // self.suffix[self.nodes[child][0]]
                for child in children)
        return found


class Cover:
    """A set of combinations of one ChoiceSpace (see the module's docstring)."""

    __slots__ = ("node", "space")

    def __init__(self, space: ChoiceSpace, node: int):
        self.space, self.node = space, node

    def _other(self, other: Cover) -> int:
        if not isinstance(other, Cover) or other.space is not self.space:
            raise TypeError("combinations of different spaces")
        return other.node

    def __or__(self, other: Cover) -> Cover:
        return Cover(self.space, self.space._apply("|", self.node, self._other(other)))

    def __and__(self, other: Cover) -> Cover:
        return Cover(self.space, self.space._apply("&", self.node, self._other(other)))

    def __sub__(self, other: Cover) -> Cover:
        return Cover(self.space, self.space._apply("-", self.node, self._other(other)))

    def __bool__(self) -> bool:
        return self.node != EMPTY

    def __eq__(self, other) -> bool:
        return isinstance(other, Cover) and other.space is self.space and \
            other.node == self.node

    def __hash__(self) -> int:
        return hash((id(self.space), self.node))

    def __len__(self) -> int:
        space = self.space
        if self.node == EMPTY:
            return 0
        return space._count(self.node) * space.suffix[0] // \
            space.suffix[space.nodes[self.node][0]]

    def __contains__(self, combo: dict) -> bool:
        space, node = self.space, self.node
        while node not in (EMPTY, FULL):
            level, children = space.nodes[node]
            position = space.index_of[level].get(combo.get(space.order[level]))
            if position is None:
                return False
            node = children[position]
        return node == FULL

    def __iter__(self) -> Iterator[dict]:
        """The combinations, in the space's order."""
        space = self.space

        def walk(node: int, level: int, chosen: tuple):
            if node == EMPTY:
                return
            if level == len(space.order):
                values = dict(zip(space.order, chosen))
                yield {name: values[name] for name in space.names}
                return
            for value, child in zip(space.values[level], space._children(node, level)):
                yield from walk(child, level + 1, chosen + (value,))
        yield from walk(self.node, 0, ())

    def first(self) -> dict | None:
        """The earliest combination in the space's order (None for the empty set)."""
        return next(iter(self), None)

    def values(self) -> dict[str, tuple[str, ...]]:
        """For each choice, the values some combination of the set gives it (in the space's
        order of values); none for the empty set."""
        space = self.space
        if self.node == EMPTY:
            return {name: () for name in space.names}
        seen: list[set[int]] = [set() for _ in space.order]
        free = [False] * len(space.order)
        visited: set[int] = set()

        def visit(node: int, level: int) -> None:
            # ``level``: the first level not yet decided on the way to ``node``
            at = space.nodes[node][0]
            for skipped in range(level, at):
                free[skipped] = True
            if node == FULL or node in visited:
                return
            visited.add(node)
            for position, child in enumerate(space.nodes[node][1]):
                if child != EMPTY:
                    seen[at].add(position)
                    visit(child, at + 1)
        visit(self.node, 0)
        found = {}
        for level, name in enumerate(space.order):
            allowed = space.values[level]
            found[name] = allowed if free[level] else \
                tuple(v for i, v in enumerate(allowed) if i in seen[level])
        return {name: found[name] for name in space.names}

    def describe(self, options: dict[str, tuple[str, ...]] | None = None) -> str:
        """``all choices``, or the choices the set narrows (``norm=pre, activation=relu|gelu``)
        with ``(n of m combinations)`` where it is not all the combinations of those values.
        ``options`` orders each choice's values (the spec's), by default the space's."""
        space = self.space
        if self.node == FULL:
            return "all choices"
        found = self.values()
        parts = []
        product = 1
        for level, name in ((space.level_of[n], n) for n in space.names):
            every = space.values[level]
            values = found[name]
            if options is not None:
                values = tuple(v for v in options[name] if v in values)
                every = tuple(v for v in options[name] if v in every)
            product *= len(values)
            if values != every:
                parts.append(f"{name}={'|'.join(values)}")
        described = ", ".join(parts)
        count = len(self)
        if product != count:
            counted = f"{count} of {len(space)} combinations"
            described = f"{described} ({counted})" if described else counted
        return described

    def __repr__(self) -> str:
        return f"Cover({len(self)} of {len(self.space)}: {self.describe()})"
