"""Data flow: which of the model's inputs a tensor is computed from, at its place in the
model (``decoder.layers[i].cross_attention.K_g``), under one setting of every choice.

A tensor depends on the tensors its equation reads; a block call's output on the arguments
whose inputs the block's output depends on; a repeated block's copies after the first take
the copy before's output as their first input, so their tensors depend on what that output
depends on too. Parameters and states depend on nothing. The decoding pass asks it of a state
that no `update` writes: only one started from inputs a decoding step never takes anew (the
source a cross-attention cache holds) may stay as prefill left it.
"""

from tspec.language.model import BlockCall, Equation, Spec, TensorDecl, select, under


def calls_at(spec: Spec, choices: dict[str, str], path: str) -> list[BlockCall] | None:
    """The block calls of the body at ``path`` (``decoder.layers[i]``; "" the model's), under
    ``choices``, every one set; None where no body runs there."""
    found = _chain(spec, choices, [p for p in path.split(".") if p])
    if found is None:
        return None
    statements = found[0]
    return [s for s in statements if isinstance(s, BlockCall) and s.block in spec.blocks]


def _chain(spec: Spec, choices: dict, instances: list[str]):
    """The body at the end of a path of instances (its statements under the choices and its
    block, None for the model's), with each call on the way and the body it is in."""
    spec = under(spec, choices)
    statements, block = select(spec.body, choices), None
    chain = []
    for instance in instances:
        instance = instance.removesuffix("[i]")
        call = next((s for s in statements if isinstance(s, BlockCall) and
                     s.instance == instance and s.block in spec.blocks), None)
        if call is None:
            return None
        chain.append((statements, block, call))
        block = spec.blocks[call.block]
        statements = select(block.body, choices)
    return statements, block, chain, spec


def fed_by(spec: Spec, choices: dict[str, str], qualified: str) -> set[str] | None:
    """The names of the model's inputs the tensor at ``qualified`` is computed from (under
    ``choices``, every one set); None where no tensor is computed there."""
    *instances, tensor = qualified.split(".")
    found = _chain(spec, choices, instances)
    if found is None:
        return None
    statements, block, chain, spec = found
    names = _inputs_of(spec, choices, statements, block, {tensor})
    for caller, caller_block, call in reversed(chain):
        callee = spec.blocks[call.block]
        names = _inputs_of(spec, choices, caller, caller_block,
                           _arguments(spec, choices, call, callee, names))
    return names


def _inputs_of(spec: Spec, choices: dict, statements: list, block, wanted: set) -> set[str]:
    """The inputs of a body (a block's, or the model's ``input`` declarations) the ``wanted``
    tensors of that body are computed from."""
    inputs = {d.name for d in block.inputs} if block is not None else \
        {s.name for s in statements if isinstance(s, TensorDecl) and s.role == "input"}
    producers = {s.output: s for s in statements if isinstance(s, (Equation, BlockCall))}
    found, seen, pending = set(), set(), list(wanted)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in inputs:
            found.add(name)
        record = producers.get(name)
        if isinstance(record, Equation):
            pending.extend(record.inputs)
        elif isinstance(record, BlockCall) and record.block in spec.blocks:
            callee = spec.blocks[record.block]
            pending.extend(_arguments(spec, choices, record, callee, {callee.output}))
    return found


def _arguments(spec: Spec, choices: dict, call: BlockCall, callee, wanted: set) -> set[str]:
    """The arguments of ``call`` that the callee's ``wanted`` tensors are computed from: its
    inputs among them, through the callee's body, each as the argument passed to it (for a
    repeat, the copies after the first take the output as their first input)."""
    body = select(callee.body, choices)
    names = [d.name for d in callee.inputs]
    reached = _inputs_of(spec, choices, body, callee, wanted)
    if call.repeat is not None and names and names[0] in reached:
        reached |= _inputs_of(spec, choices, body, callee, {callee.output})
    return {arg for name, arg in zip(names, call.args) if name in reached}
