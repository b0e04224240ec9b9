"""A block's ways: the choices its body reads (through the blocks it calls), and what a
block keeps under each way merged where the ways agree; and which blocks keep states, which
tensors start them."""

from tspec.language.model import (
    BlockCall,
    Spec,
    TensorDecl,
    When,
)
from tspec.symbolic.shape import Shape


def choices_used(spec: Spec, block_name: str) -> tuple[str, ...]:
    """The choices a block's body depends on, through the blocks it calls too (memoised)."""
    memo = spec.__dict__.setdefault("_choices_used", {})
    if block_name in memo:
        return memo[block_name]
    memo[block_name] = ()      # guards against recursion; recursive blocks are an error later
    found: set[str] = set()

    def walk(statements):
        for s in statements:
            if isinstance(s, When):
                found.add(s.choice)
                walk(s.body)
                walk(s.otherwise)
            elif isinstance(s, BlockCall) and s.block in spec.blocks:
                found.update(choices_used(spec, s.block))
    walk(spec.blocks[block_name].body)
    memo[block_name] = tuple(sorted(found))
    return memo[block_name]


def marked_with_ways(by_way: list[list[tuple]], ways: list[dict], at: int,
                      apart=None) -> list[tuple]:
    """The entries each way of setting a block's open choices added (states, starts, unstated
    shapes: tuples whose item ``at`` is the choices they hold under), each marked with its way;
    an entry every way adds alike holds whatever the way, and comes once, unmarked. (So what
    a block keeps does not multiply with the ways of the blocks it calls, up the calls.)
    ``apart(entry, way)``, where given, is more that tells an entry's ways apart."""
    def identity(entry: tuple, way: dict):
        parts = tuple(p if isinstance(p, (str, Shape, tuple, type(None))) else id(p)
                      for i, p in enumerate(entry) if i != at)
        key = parts + (tuple(entry[at].items()),) + \
            (apart(entry, way) if apart is not None else ())
        try:
            hash(key)
        except TypeError:
            return None
        return key
    keyed = [[(identity(entry, way), entry) for entry in entries]
             for way, entries in zip(ways, by_way)]
    everywhere = set.intersection(*({key for key, _ in entries} for entries in keyed)) \
        if keyed else set()
    everywhere.discard(None)
    out = []
    for index, (way, entries) in enumerate(zip(ways, keyed)):
        for key, entry in entries:
            if key in everywhere:
                if index == 0:
                    out.append(entry)
            else:
                out.append(entry[:at] + (way | entry[at],) + entry[at + 1:])
    return out


def keeps_states(spec: Spec, block_name: str) -> bool:
    """Whether a block declares states, in any branch, itself or in the blocks it calls."""
    def keeps(statements, seen) -> bool:
        for s in statements:
            if isinstance(s, When):
                found = keeps(s.body, seen) or keeps(s.otherwise, seen)
            elif isinstance(s, BlockCall):
                found = s.block in spec.blocks and s.block not in seen and \
                    keeps(spec.blocks[s.block].body, seen | {s.block})
            else:
                found = isinstance(s, TensorDecl) and s.role == "state"
            if found:
                return True
        return False
    return keeps(spec.blocks[block_name].body, {block_name})


def start_names(spec: Spec) -> frozenset[str]:
    """The tensors the spec's states start from (their `from`), in any branch (memoised)."""
    memo = spec.__dict__.get("_start_names")
    if memo is None:
        found: set[str] = set()

        def walk(statements):
            for s in statements:
                if isinstance(s, When):
                    walk(s.body)
                    walk(s.otherwise)
                elif isinstance(s, TensorDecl) and s.role == "state":
                    found.add(s.start)
        for block in spec.blocks.values():
            walk(block.body)
        memo = spec.__dict__["_start_names"] = frozenset(found)
    return memo
