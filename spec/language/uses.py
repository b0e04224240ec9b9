"""Where each dim, choice and op is used, and under which choices.

A dim is used where a statement the choices select names it: a shape, an op's size argument
(``P_table[:T_dec]``, ``split_heads(Q, H)``), a repeat count, a constraint, or the definition
of a derived dim that is itself used. Each use holds under a *condition*: the options of the
choices around it (the `when`s it sits in, and those around every call that reaches its block),
one conjunction of ``choice in options`` per path to it. A dim given a value that no use under
the chosen options names is set for nothing (``H_kv`` without ``key_value_heads = grouped``);
the cheapest condition it is used under says which choice would use it.
"""

from dataclasses import dataclass

from tspec.language.model import (
    BlockCall,
    Constraint,
    Equation,
    Let,
    Spec,
    TensorDecl,
    When,
    _symbols_of,
)

# a condition: choice -> the options it holds under (a choice not named: any option)
Condition = tuple[tuple[str, frozenset[str]], ...]
MAX_PATHS = 256        # conditions kept per block and per dim (the cheapest are kept)


@dataclass(frozen=True)
class Unused:
    """A dim with a value that nothing uses under the chosen options, and the fewest other
    options under which something would (None: nothing in the spec uses it under any)."""
    dim: str
    under: Condition | None

    def text(self, spec: Spec) -> str:
        """``it is used under key_value_heads = grouped``, or that nothing uses it."""
        if self.under is None:
            return "no equation, shape or constraint of the spec uses it under any choices"
        return f"it is used under {condition_text(self.under, spec)}"


def condition_text(condition: Condition, spec: Spec) -> str:
    """``positional = learned or relative and decoding = step``: each choice's options, in
    the spec's order of choices and of their options."""
    order = list(spec.choices)
    parts = []
    for name, options in sorted(condition, key=lambda c: order.index(c[0])):
        listed = [o for o in spec.choices[name].options if o in options]
        parts.append(f"{name} = {' or '.join(listed)}")
    return " and ".join(parts)


def _joined(a: Condition, b: Condition) -> Condition | None:
    """Both conditions at once, None where they contradict each other."""
    merged = dict(a)
    for name, options in b:
        both = merged[name] & options if name in merged else options
        if not both:
            return None
        merged[name] = both
    return tuple(sorted(merged.items()))


def _pruned(conditions: set[Condition]) -> list[Condition]:
    """Conditions without those another one implies (one that asks for more), fewest
    choices first, at most MAX_PATHS."""
    ordered = sorted(conditions, key=lambda c: (len(c), c))
    kept: list[Condition] = []
    for condition in ordered:
        asks = dict(condition)
        if not any(all(name in asks and asks[name] <= options for name, options in other)
                   for other in kept):
            kept.append(condition)
        if len(kept) == MAX_PATHS:
            break
    return kept


def dim_uses(spec: Spec) -> dict[str, list[Condition]]:
    """Every dim of the spec with the conditions it is used under (an empty list: never
    used), memoised on the spec."""
    return _uses(spec)["dims"]


def choice_uses(spec: Spec) -> dict[str, list[Condition]]:
    """Every choice of the spec with the conditions some `when` consults it under."""
    return _uses(spec)["choices"]


def op_uses(spec: Spec) -> dict[str, list[Condition]]:
    """Every op some equation of the spec applies, with the conditions it applies it under."""
    return _uses(spec)["ops"]


def setting_uses(spec: Spec) -> dict[str, list[Condition]]:
    """Every run-time setting (eps, theta, ...) with the conditions some op that reads it
    (its ``settings``) is applied under."""
    from tspec.ops.catalogue import OPS
    found: dict[str, list[Condition]] = {}
    for op, conditions in op_uses(spec).items():
        for name in getattr(OPS.get(op), "settings", ()):
            found.setdefault(name, []).extend(conditions)
    return found


def settings_read(spec: Spec, choices: dict[str, str]) -> set[str]:
    """The settings some op the choices apply reads."""
    return {name for name, conditions in setting_uses(spec).items()
            if any(holds(c, choices) for c in conditions)}


def _uses(spec: Spec) -> dict[str, dict[str, list[Condition]]]:
    """Where each dim, choice and op is used: ``{"dims": ..., "choices": ..., "ops": ...}``,
    each name with its conditions, memoised on the spec."""
    memo = spec.__dict__.get("_uses")
    if memo is not None:
        return memo
    names = {dim.symbol: name for name, dim in spec.dims.items()}
    every = {name: frozenset(choice.options) for name, choice in spec.choices.items()}
    # body -> (kind, name, condition): a dim, choice or op used there
    direct: dict[str | None, list[tuple[str, str, Condition]]] = {}
    calls: dict[str | None, list[tuple[str, Condition]]] = {}    # body -> (block, condition)
    lets: list[tuple[Let, Condition]] = []

    def walk(statements, condition: Condition, body: str | None, local: set) -> None:
        found_here = direct.setdefault(body, [])
        for s in statements:
            if isinstance(s, When):
                found_here.append(("choices", s.choice, condition))
                for branch, options in ((s.body, s.options),
                                        (s.otherwise, every[s.choice] - s.options)):
                    inner = _joined(condition, ((s.choice, frozenset(options)),))
                    if inner is not None and branch:
                        walk(branch, inner, body, local)
                continue
            if isinstance(s, Let):
                lets.append((s, condition))
                continue
            if isinstance(s, Constraint):
                found = s.relation.free_symbols
            elif isinstance(s, (TensorDecl, Equation, BlockCall)):
                found = _symbols_of(s)
            else:
                found = set()
            if isinstance(s, Equation):
                found_here.extend(("ops", op, condition) for op in set(s.ops))
            if isinstance(s, BlockCall) and s.block in spec.blocks:
                calls.setdefault(body, []).append((s.block, condition))
            for symbol in found:
                if symbol in names and symbol not in local:
                    found_here.append(("dims", names[symbol], condition))

    walk(spec.body, (), None, set())
    for name, block in spec.blocks.items():
        local = {d.symbol for d in block.local_dims.values()}
        walk(block.inputs, (), name, local)
        walk(block.body, (), name, local)
    # the conditions under which each block runs: those of every call path from the model
    reach: dict[str | None, set[Condition]] = {None: {()}}
    changed = True
    rounds = 0
    while changed and rounds <= len(spec.blocks) + 1:
        changed, rounds = False, rounds + 1
        for caller, edges in calls.items():
            for callee, condition in edges:
                for outer in list(reach.get(caller, ())):
                    joined = _joined(outer, condition)
                    found = reach.setdefault(callee, set())
                    if joined is not None and joined not in found and len(found) < MAX_PATHS:
                        found.add(joined)
                        changed = True
    uses: dict[str, dict[str, set[Condition]]] = {
        "dims": {name: set() for name in spec.dims},
        "choices": {name: set() for name in spec.choices}, "ops": {}}
    for body, found in direct.items():
        for kind, name, condition in found:
            for outer in reach.get(body, ()):
                joined = _joined(outer, condition)
                if joined is not None:
                    uses[kind].setdefault(name, set()).add(joined)
    dims = uses["dims"]
    # a derived dim's definition uses its dims wherever the derived dim is used: a worklist,
    # each definition passed on again only when its dim gains a condition (a chain of n
    # derived dims is n steps, not n rounds of n)
    defining: dict[str, list] = {}
    for let, condition in lets:
        used = [names[sym] for sym in let.expr.free_symbols
                if sym in names and names[sym] != let.dim]
        defining.setdefault(let.dim, []).append((condition, used))
    pending = [dim for dim in defining if dims.get(dim)]
    passed: dict[str, set] = {}
    while pending:
        dim = pending.pop()
        fresh = dims[dim] - passed.setdefault(dim, set())
        passed[dim] |= fresh
        for condition, used in defining[dim]:
            for where in fresh:
                joined = _joined(where, condition)
                if joined is None:
                    continue
                for name in used:
                    if joined not in dims[name]:
                        dims[name].add(joined)
                        if name in defining:
                            pending.append(name)
    memo = {kind: {name: _pruned(found) for name, found in table.items()}
            for kind, table in uses.items()}
    spec.__dict__["_uses"] = memo
    return memo


def holds(condition: Condition, choices: dict[str, str]) -> bool:
    """Whether the condition can hold under these choices: each choice it names is set to
    one of its options, or not set (a bare spec's open choices take every option)."""
    return all(choices.get(name, next(iter(options))) in options
               for name, options in condition)


def used_dims(spec: Spec, choices: dict[str, str]) -> set[str]:
    """The dims some statement the choices select uses (under some option of a choice left
    unset)."""
    return {name for name, conditions in dim_uses(spec).items()
            if any(holds(c, choices) for c in conditions)}


def unused(spec: Spec, choices: dict[str, str], dims, table=None) -> list[Unused]:
    """Of ``dims`` (names given values), those no statement under ``choices`` uses (a choice
    left unset under any option), each with the condition that asks the fewest other options
    of the choices set; ``table``: the uses to judge by, name -> conditions (the dims',
    ``dim_uses``, unless given: ``choice_uses``, or settings' through the ops that read
    them)."""
    uses = dim_uses(spec) if table is None else table
    found = []
    for name in dims:
        conditions = uses.get(name, [])
        if any(holds(c, choices) for c in conditions):
            continue

        def unmet(condition: Condition) -> Condition:
            return tuple((c, o) for c, o in condition if c in choices and choices[c] not in o)
        found.append(Unused(name, _fewest([unmet(c) for c in conditions], spec)))
    return found


def _fewest(conditions: list[Condition], spec: Spec) -> Condition | None:
    """The condition that asks the fewest choices to change; where it asks one, every option
    of that choice some condition asks alone (``arch = encoder_decoder or encoder_only``)."""
    if not conditions:
        return None
    order = list(spec.choices)

    def rank(condition: Condition):
        return (len(condition), [order.index(c) for c, _ in condition],
                [sorted(o) for _, o in condition])
    best = min(conditions, key=rank)
    if len(best) != 1:
        return best
    name = best[0][0]
    options = frozenset().union(*(c[0][1] for c in conditions
                                  if len(c) == 1 and c[0][0] == name))
    return ((name, options),)


__all__ = ["Condition", "Unused", "choice_uses", "condition_text", "dim_uses", "holds",
           "op_uses", "setting_uses", "settings_read", "unused", "used_dims"]
