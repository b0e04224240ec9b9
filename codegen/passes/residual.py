"""Residual fusion: a residual sum added in the kernel of the norm that reads it.

A norm (an op the catalogue marks ``normalises``: LayerNorm, RMSNorm) of a sum of two tensors
of one shape reads the sum once more after it is written. Where the backend fuses residuals
(``Backend.fused_residual``), the norm's helper reads both summands instead and adds them
itself, rounding the sum to the tensors' dtype as storing it would (the same numbers):

- post-norm, ``rt.layer_norm(X + Y, gamma, beta, eps)`` becomes ``rt.layer_norm(X, gamma,
  beta, eps, residual=Y)``: the sum is never stored;
- pre-norm, a named sum ``Z_1 = Z + A`` right before the norm of ``Z_1`` (a block such as
  ``normalize``, whose function is that norm of its argument alone, or the norm inline) is,
  where no trace is asked for, ``Z_1 = xp.empty_like(Z)`` and the norm with ``residual=A,
  total=Z_1``: one kernel writes both the sum, which the residual stream uses again, and its
  normalisation. With a trace the steps run as written, the block's own trace included.

A sum that feeds a norm across a stack's loop (a layer's output, normalised first thing in the
next layer) is not fused: its two steps are in two functions no call joins.

NumPy keeps the unfused form: its norm helpers have no kernel to add the residual in; adding it
there would be the same ufunc pass over the rows the separate sum is, inside the helper (on
the thread pool, the sum and the norm of a chunk of rows both run warm in the cache already),
so it would gain nothing and lengthen every pre-norm model by a traced and an untraced path.
"""

import dataclasses

from tspec.codegen import ir
from tspec.codegen.passes.rewrite import map_expressions, map_steps, retyped
from tspec.ops.catalogue import OPS


def fuse_residuals(module: ir.Module) -> ir.Module:
    if not module.backend.fused_residual:
        return module
    # the norms' helpers, read when the pass runs (a scratch op's too)
    norms = {op.helper for op in OPS.values() if op.normalises and op.helper}
    blocks = {f.name: f for f in module.functions}

    def inline(expr: ir.Expr) -> ir.Expr:
        call = ir.unwrap(expr)
        if _norm(call, norms) and call.args:
            pair = _summands(call.args[0])
            if pair is not None:
                left, right = pair
                return retyped(expr, dataclasses.replace(
                    call, args=(left, *call.args[1:]),
                    keywords=(*call.keywords, ir.Keyword("residual", right))))
        return expr

    module = map_steps(module, lambda step: map_expressions(step, inline))
    functions = []
    for function in module.functions:
        steps = _fuse_named_sums(function, function.steps, blocks, norms)
        functions.append(dataclasses.replace(function, steps=steps))
    return dataclasses.replace(module, functions=functions)


def _fuse_named_sums(function: ir.Function, steps: tuple[ir.Step, ...], blocks: dict,
                     norms: set[str]) -> tuple[ir.Step, ...]:
    """``steps`` with each named sum that the next step normalises fused into that norm."""
    out: list[ir.Step] = []
    index = 0
    while index < len(steps):
        step = steps[index]
        following = steps[index + 1] if index + 1 < len(steps) else None
        fused = _fused_pair(step, following, blocks, norms)
        if fused is None:
            out.append(step)
            index += 1
            continue
        note = f"{step.targets[0].id} and {_target(fused)}, its norm, in one kernel"
        out.extend(fused if not function.traces else
                   (ir.Fused(note, fused, (step, following)),))
        index += 2
    return tuple(out)


def _fused_pair(step: ir.Step, following: ir.Step | None, blocks: dict,
                norms: set[str]) -> tuple[ir.Step, ...] | None:
    """The steps that compute ``step``, a named sum, and ``following``, a norm of it, in one
    kernel; None where they are not that pair."""
    if not isinstance(step, ir.Assign) or len(step.targets) != 1 or \
            not isinstance(step.targets[0], ir.Name) or following is None:
        return None
    pair = _summands(step.value)
    if pair is None:
        return None
    total = step.targets[0]
    if isinstance(following, ir.CallBlock) and len(following.targets) == 1:
        norm = _block_norm(following, blocks.get(following.function), norms)
        target = ir.Name(following.targets[0])
    elif isinstance(following, ir.Assign) and len(following.targets) == 1:
        norm, target = ir.unwrap(following.value), following.targets[0]
        norm = norm if _norm(norm, norms) else None
    else:
        return None
    if norm is None or not norm.args or ir.unwrap(norm.args[0]) != total or \
            any(total in ir.walk(part) for part in (norm.args[1:], norm.keywords)):
        return None
    left, right = pair
    fused = dataclasses.replace(norm, args=(left, *norm.args[1:]), keywords=(
        *norm.keywords, ir.Keyword("residual", right), ir.Keyword("total", total)))
    if isinstance(following, ir.Assign):
        fused = retyped(following.value, fused)
    return (ir.Assign((total,), ir.call(ir.ArrayModule("empty_like"), left), step.comment),
            ir.Assign((target,), fused, following.comment))


def _block_norm(call: ir.CallBlock, block: ir.Function | None,
                norms: set[str]) -> ir.Call | None:
    """The norm ``call``'s block computes, in the caller's names, where the block's function
    is a norm of its argument alone (``normalize``); None otherwise."""
    if block is None or block.prologue or block.cache or len(block.arguments) != 1:
        return None
    body = [s for s in block.steps if not isinstance(s, ir.Record)]
    if len(body) != 2 or not isinstance(body[0], ir.Assign) or \
            not isinstance(body[1], ir.Return) or len(body[0].targets) != 1 or \
            body[1].values != (getattr(body[0].targets[0], "id", None),):
        return None
    norm = ir.unwrap(body[0].value)
    if not _norm(norm, norms):
        return None
    # the block's names as the call gives them: its argument, params, settings, its keywords
    names = {block.arguments[0].name: call.args[0]}
    rest = list(call.args[1:])
    for taken, name in ((block.params_class is not None, "params"),
                        (bool(block.settings), "settings")):
        if taken:
            if not rest:
                return None
            names[name] = rest.pop(0)
    if rest:
        return None
    given = {k.name: k.value for k in call.keywords}
    for keyword in block.keywords:
        value = given.get(keyword.name, keyword.default)
        if value is None:
            return None
        names[keyword.name] = value
    unknown = [r for r in ir.walk(norm) if isinstance(r, ir.Name) and r.id not in names]
    if unknown:
        return None
    return map_expressions(norm, lambda e: names.get(e.id, e) if isinstance(e, ir.Name) else e)


def _summands(expr: ir.Expr) -> tuple[ir.Expr, ir.Expr] | None:
    """The two tensors of one shape and dtype class that ``expr`` adds; None for any other."""
    inner = ir.unwrap(expr)
    if not isinstance(inner, ir.BinOp) or inner.op != "+":
        return None
    left, right = inner.left, inner.right
    if not isinstance(left, ir.Tensor) or not isinstance(right, ir.Tensor) or \
            left.shape != right.shape or left.dtype != right.dtype or left.dtype != "float":
        return None
    return left, right


def _norm(expr: ir.Expr, norms: set[str]) -> bool:
    return isinstance(expr, ir.Call) and isinstance(expr.function, ir.Runtime) and \
        expr.function.name in norms and \
        not any(k.name in ("residual", "total") for k in expr.keywords)


def _target(fused: tuple[ir.Step, ...]) -> str:
    """The name the fused norm assigns."""
    return fused[-1].targets[0].id
