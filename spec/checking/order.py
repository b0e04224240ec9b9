"""Orders by data flow: a depth-first walk that names a cycle, and the topological order of
the equations (the checker's, the counts' and lowering's).
"""

from tspec.errors import SpecError
from tspec.language.model import (
    Let,
)


def check_let_cycles(lets: list[Let], let_map: dict, symbols: dict) -> None:
    """Derived dims defined through each other (let m = n + 1; let n = m + 1) are an error."""
    by_symbol = {symbols[let.dim]: let for let in lets}

    def cycle_error(cycle):
        let = by_symbol[cycle[0]]
        return SpecError("derived dims defined through each other: "
                         + " -> ".join(str(s) for s in cycle) + " (lines "
                         + ", ".join(str(by_symbol[s].line) for s in cycle[:-1]) + ")",
                         file=let.file, line=let.line)

    depth_first(let_map, lambda symbol: sorted(let_map[symbol].free_symbols & set(let_map),
                                               key=str), cycle_error)


def depth_first(nodes, uses, cycle_error) -> list:
    """Nodes in dependency order, each after the nodes it uses; a cycle raises
    ``cycle_error(cycle)``, the cycle as a list from a node back to itself."""
    order, state = [], {}

    def visit(node, trail):
        if state.get(node) == "done":
            return
        if state.get(node) == "active":
            raise cycle_error(trail[trail.index(node):] + [node])
        state[node] = "active"
        for used in uses(node):
            visit(used, trail + [node])
        state[node] = "done"
        order.append(node)

    for node in nodes:
        visit(node, [])
    return order


def topological(producers: dict, where: str) -> list:
    """Equations in data-flow order; a cycle is an error naming it."""
    def cycle_error(cycle):
        lines = ", ".join(str(producers[n].line) for n in cycle[:-1])
        record = producers[cycle[0]]
        return SpecError(f"cyclic equations in {where}: {' -> '.join(cycle)} (lines {lines})",
                         file=record.file, line=record.line)

    names = depth_first(producers, lambda name: [u for u in producers[name].inputs
                                                 if u in producers], cycle_error)
    return [producers[name] for name in names]
