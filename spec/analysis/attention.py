"""Recognising attention: the block of a spec that computes softmax(X + L) V.

Code generation and the docs both need to know which block is attention proper (the part
that grows with the square of the sequence length): the first to compute it in blocks of
query rows that skip masked keys, the second to count its FLOPs apart. One definition here
serves both, judged from the equations themselves, not from a block's name.
"""

from dataclasses import dataclass

import sympy

from tspec.language.model import Block, Equation, OpNode, ScalarExpr, TensorDecl, TensorRef


@dataclass(frozen=True)
class AttentionCore:
    """A block that is exactly attention with an additive mask (see ``attention_core``)."""
    rows: sympy.Symbol          # the query axis, T_q
    keys: sympy.Symbol          # the key axis, T_kv
    mask: str                   # the additive mask input, L_h
    scores: str                 # S_h = X + L_h
    weights: str                # A_h = softmax(S_h, axis=-1)


# ops under which query rows and keys stay free axes (never contracted or reduced), so that
# computing on a slice of them gives the same slice of the result
_FREE_AXIS_OPS = {"matmul", "transpose", "scale", "add", "sub", "mul", "div", "neg"}


def attention_core(block: Block | None, producers: dict,
                   decls: dict[str, TensorDecl]) -> AttentionCore | None:
    """The core when ``block`` is exactly attention with an additive mask:

        S = X + L,   A = softmax(S, axis=-1),   O = A @ V

    (the softmax over S's last axis, written -1 or counted from the first), with L
    (..., T_q, T_kv) and V (..., T_kv, d) inputs and X an expression of inputs in which T_q and
    T_kv are free axes (never contracted or reduced). ``producers``: the block's equations
    under one choice of options, by output; ``decls``: its tensor declarations.

    Code generation computes such a block a block of query rows at a time (rows are
    independent) and drops the keys after the last one the mask leaves visible to the rows:
    their scores are -inf, their weights exp(-inf) = 0 exactly, and they add nothing to A @ V.
    The docs count its FLOPs as the attention part of the model. None for any other block."""
    if block is None or len(producers) != 3:
        return None
    inputs = {decl.name: decl for decl in block.inputs}
    out = producers.get(block.output)
    if not (isinstance(out, Equation) and _is_op(out.expr, "matmul", 2) and
            all(isinstance(a, TensorRef) for a in out.expr.args)):
        return None
    weights, values = (a.name for a in out.expr.args)
    attend = producers.get(weights)
    if not (isinstance(attend, Equation) and _is_op(attend.expr, "softmax", 1) and
            isinstance(attend.expr.args[0], TensorRef)):
        return None
    scores = decls.get(attend.expr.args[0].name)
    axis = attend.expr.attr.get("axis", -1)
    if axis != -1 and not (scores is not None and scores.shape is not None and
                           axis == scores.shape.rank - 1):      # the last axis, counted from 0
        return None
    score = producers.get(attend.expr.args[0].name)
    if not (isinstance(score, Equation) and _is_op(score.expr, "add", 2)):
        return None
    left, right = score.expr.args
    if not (isinstance(right, TensorRef) and right.name in inputs and values in inputs):
        return None
    mask, value = inputs[right.name], inputs[values]
    if mask.shape is None or value.shape is None or mask.shape.rank < 2 or \
            value.shape.rank < 2 or mask.dtype != "float":
        return None
    rows, keys = mask.shape.dims[-2:]
    output = decls.get(block.output)
    if not (isinstance(rows, sympy.Symbol) and isinstance(keys, sympy.Symbol) and
            rows != keys and value.shape.dims[-2] == keys and output is not None and
            output.shape is not None and rows in output.shape.dims and
            keys not in output.shape.free_symbols() and
            _free_axes(left, {rows, keys}, inputs)):
        return None
    return AttentionCore(rows, keys, mask.name, score.output, attend.output)


def _is_op(term, op: str, arity: int) -> bool:
    return isinstance(term, OpNode) and term.op == op and len(term.args) == arity


def _free_axes(term, axes: set, inputs: dict[str, TensorDecl]) -> bool:
    """Whether ``term`` reads only inputs and scalars and never contracts or reduces ``axes``."""
    if isinstance(term, ScalarExpr):
        return True
    if isinstance(term, TensorRef):
        decl = inputs.get(term.name)
        return decl is not None and decl.shape is not None
    if not isinstance(term, OpNode) or term.op not in _FREE_AXIS_OPS:
        return False
    if not all(_free_axes(a, axes, inputs) for a in term.args):
        return False
    if term.op == "matmul":
        contracted = _last_axis(term.args[0], inputs)
        return contracted is not None and contracted not in axes
    return True


def _last_axis(term, inputs: dict[str, TensorDecl]):
    """The dim of a term's last axis, following transposes (None when unknown)."""
    if isinstance(term, TensorRef):
        return inputs[term.name].shape.dims[-1]
    if isinstance(term, OpNode) and term.op == "transpose":
        inner = term.args[0]
        if isinstance(inner, TensorRef):
            return inputs[inner.name].shape.dims[-2]
        return None
    if isinstance(term, OpNode) and term.op == "matmul":
        return _last_axis(term.args[1], inputs)
    if isinstance(term, OpNode) and term.op in ("scale", "neg"):
        return _last_axis(term.args[0], inputs)
    return None
