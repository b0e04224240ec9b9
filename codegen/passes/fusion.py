"""Bias-and-activation fusion: work done in place on a product's fresh result.

A product of a batch of vectors and one weight matrix is ``rt.project(X, W)``. A vector bias
added to it, ``rt.project(X, W) + b``, becomes ``rt.project(X, W, b)``; an activation applied
to it (an op the catalogue marks ``activation``), ``rt.gelu(rt.project(X, W, b))``, becomes
``rt.project(X, W, b, activation=rt.gelu)``: one pass over the result, chunk by chunk, instead
of a new array per operation.

A gated unit's product, an activated product times a plain one of the same shape (SwiGLU's
``rt.project(X, W_1, activation=rt.silu) * rt.project(X, W_3)``), becomes
``rt.glu(rt.project(X, W_1), rt.project(X, W_3), activation=rt.silu)``: the activation and the
product in one pass written into the gate's fresh array (one kernel on CuPy).
"""

import dataclasses

from tspec.codegen import ir
from tspec.codegen.passes.rewrite import map_expressions, map_steps, retyped
from tspec.ops.catalogue import OPS

PROJECT = ir.Runtime("project")
GLU = ir.Runtime("glu")


def fuse_projections(module: ir.Module) -> ir.Module:
    # the activations' helpers, read when the pass runs (a scratch op's too)
    activations = {op.helper for op in OPS.values() if op.activation and op.helper}

    def fused(expr: ir.Expr) -> ir.Expr:
        inner = ir.unwrap(expr)
        if isinstance(inner, ir.BinOp) and inner.op == "+":
            product, bias = ir.unwrap(inner.left), inner.right
            if _project(product) and len(product.args) == 2 and not product.keywords and \
                    isinstance(bias, ir.Tensor) and bias.shape.rank == 1 and \
                    bias.shape.family is None:
                return retyped(expr, dataclasses.replace(product, args=(*product.args, bias)))
        if isinstance(inner, ir.Call) and isinstance(inner.function, ir.Runtime) and \
                inner.function.name in activations and len(inner.args) == 1 and \
                not inner.keywords:
            product = ir.unwrap(inner.args[0])
            if _project(product) and not any(k.name == "activation" for k in product.keywords):
                keywords = (*product.keywords, ir.Keyword("activation", inner.function))
                return retyped(expr, dataclasses.replace(product, keywords=keywords))
        if isinstance(inner, ir.BinOp) and inner.op == "*":
            gated = _gated(inner.left, inner.right) or _gated(inner.right, inner.left)
            if gated is not None:
                return retyped(expr, gated)
        return expr

    return map_steps(module, lambda step: map_expressions(step, fused))


def _gated(gate: ir.Expr, x: ir.Expr) -> ir.Call | None:
    """``rt.glu(product, x, activation=f)`` where ``gate`` is a product with activation f and
    ``x`` one without, of one shape and dtype; None otherwise."""
    if not isinstance(gate, ir.Tensor) or not isinstance(x, ir.Tensor) or \
            gate.shape != x.shape or gate.dtype != x.dtype:
        return None
    product, other = ir.unwrap(gate), ir.unwrap(x)
    if not _project(product) or not _project(other) or \
            any(k.name == "activation" for k in other.keywords):
        return None
    activation = [k for k in product.keywords if k.name == "activation"]
    if len(activation) != 1:
        return None
    plain = dataclasses.replace(product, keywords=tuple(
        k for k in product.keywords if k.name != "activation"))
    return ir.Call(GLU, (retyped(gate, plain), x), tuple(activation))


def _project(expr: ir.Expr) -> bool:
    return isinstance(expr, ir.Call) and expr.function == PROJECT
