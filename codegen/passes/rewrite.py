"""What the passes share: mapping the steps of every function of a module, and the
expressions inside a step, bottom up."""

import dataclasses
from collections.abc import Callable

from tspec.codegen import ir

# the records a step's expressions may sit in
NESTED = (tuple, ir.Expr, ir.Keyword, ir.Step, ir.AttentionForm, ir.AttentionStrategy)


def map_steps(module: ir.Module, rule: Callable[[ir.Step], ir.Step]) -> ir.Module:
    """The module with ``rule`` applied to every step of every function (its prologue's and
    its body's, and the steps inside an attention core or a fused step, inner ones first)."""

    def each(step: ir.Step) -> ir.Step:
        if isinstance(step, ir.AttentionCore):
            step = dataclasses.replace(step, steps=tuple(each(s) for s in step.steps))
        if isinstance(step, ir.Fused):
            step = dataclasses.replace(step, fused=tuple(each(s) for s in step.fused),
                                       steps=tuple(each(s) for s in step.steps))
        return rule(step)

    functions = [dataclasses.replace(f, prologue=tuple(each(s) for s in f.prologue),
                                     steps=tuple(each(s) for s in f.steps))
                 for f in module.functions]
    return dataclasses.replace(module, functions=functions)


def map_expressions(record, rule: Callable[[ir.Expr], ir.Expr]):
    """``record`` (a step, an expression, a keyword) with ``rule`` applied to every expression
    inside it, the innermost first; records without expressions come back as they are."""
    if isinstance(record, tuple):
        return tuple(map_expressions(each, rule) for each in record)
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        return record
    changes = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if isinstance(value, NESTED):
            mapped = map_expressions(value, rule)
            if mapped is not value:
                changes[field.name] = mapped
    if changes:
        record = dataclasses.replace(record, **changes)
    return rule(record) if isinstance(record, ir.Expr) else record


def retyped(original: ir.Expr, new: ir.Expr) -> ir.Expr:
    """``new`` with the tensor record ``original`` had (its shape and dtype), if any."""
    if isinstance(original, ir.Tensor):
        return ir.Tensor(new, original.shape, original.dtype)
    return new
