"""The memory guard: one ``rt.require_memory`` per entry function, last in its prologue, and
the module's MEMORY_LIMIT it reads.

Lowering knows each entry function's footprint (``ir.Function.footprint``: the elements its
tensors and its calls' take at once, from the spec's activation counts) and reads every dim of
it where the function starts; this pass adds the check of it, so that a call of the model (or
of its decoding step) too large for the memory refuses to start instead of failing halfway.
"""

import dataclasses

from tspec.codegen import ir

LIMIT = "MEMORY_LIMIT"


def guard_memory(module: ir.Module) -> ir.Module:
    functions = []
    for function in module.functions:
        guarded = any(isinstance(s, ir.MemoryGuard) for s in function.prologue)
        if function.footprint is not None and not guarded:
            function = dataclasses.replace(function, prologue=(
                *function.prologue, ir.MemoryGuard(function.name, function.footprint)))
        functions.append(function)
    constants = list(module.constants)
    if any(f.footprint is not None for f in functions) and \
            all(c.name != LIMIT for c in constants):
        guarded = [f.name for f in functions if f.footprint is not None]
        names = guarded[0] if len(guarded) == 1 else \
            f"{', '.join(guarded[:-1])} or {guarded[-1]}"
        constants.insert(0, ir.Constant(
            LIMIT, "the most bytes the model's tensors may take at once (its own, and those "
            f"of the calls under way): past it, {names} refuses to start; None: "
            f"{module.backend.memory_owner}", None))
    return dataclasses.replace(module, functions=functions, constants=constants)
