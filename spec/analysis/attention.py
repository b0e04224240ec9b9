"""Recognising attention: the block of a spec that computes softmax(X + L) V.

Code generation and the docs both need to know which block is attention proper (the part
that grows with the square of the sequence length): the first to compute it in blocks of
query rows that skip masked keys, the second to count its FLOPs apart. One definition here
serves both, judged from the equations themselves, not from a block's name.
"""

from dataclasses import dataclass

import sympy

from tspec.language.model import Block, Equation, OpNode, ScalarExpr, TensorDecl, TensorRef
from tspec.ops.catalogue import OPS


@dataclass(frozen=True)
class AttentionCore:
    """A block that is attention with an additive mask (see ``attention_core``)."""
    rows: sympy.Symbol          # the query axis, T_q
    keys: sympy.Symbol          # the key axis, T_kv
    mask: str                   # the additive mask input, L_h
    scores: str                 # S_h = X + L_h
    weights: str                # A_h = softmax(S_h, axis=-1)
    # the scores' chain from the product q @ k.T: the equations X reads that the block
    # computes (S_c = c * tanh(S_r / c), in order), the product itself (an op tree of X or of
    # one of them), and the inputs X reads beside q and k: biases over the rows and keys
    # (ALiBi, a relative position bias) or tensors free of both axes
    chain: tuple[str, ...] = ()
    product: OpNode | None = None
    extras: tuple[str, ...] = ()


def attention_core(block: Block | None, producers: dict,
                   decls: dict[str, TensorDecl]) -> AttentionCore | None:
    """The core when ``block`` is attention with an additive mask:

        S = X + L,   A = softmax(S, axis=-1),   O = A @ V

    (the softmax over S's last axis, written -1 or counted from the first), with L
    (..., T_q, T_kv) and V (..., T_kv, d) inputs, and X the product q @ k.T of inputs in which
    T_q and T_kv are free axes (never contracted or reduced), through any chain of
    element-wise ops (the catalogue's ``elementwise``: a scale, soft-capping c * tanh(x / c),
    added biases), written in S's equation or in equations of their own, that reads besides
    scalars only inputs whose last two axes are T_q and T_kv or that have neither.
    ``producers``: the block's equations under one choice of options, by output; ``decls``:
    its tensor declarations.

    Code generation computes such a block a block of query rows at a time (rows are
    independent, and the chain reads each score alone) and drops the keys after the last one
    the mask leaves visible to the rows: their scores are -inf, L being added last, their
    weights exp(-inf) = 0 exactly, and they add nothing to A @ V. The docs count its FLOPs as
    the attention part of the model. None for any other block."""
    if block is None or len(producers) < 3:
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
            keys not in output.shape.free_symbols()):
        return None
    found = _Chain(producers, inputs, (rows, keys), {block.output, weights, score.output})
    if not found.walk(left) or found.product is None:
        return None
    chain = [name for name in producers if name in found.chain]
    if set(producers) != {block.output, weights, score.output, *chain} or \
            value.name in found.extras or mask.name in found.extras:
        return None
    return AttentionCore(rows, keys, mask.name, score.output, attend.output, tuple(chain),
                         found.product, tuple(found.extras))


class _Chain:
    """The walk of a score chain X (see ``attention_core``): the block's equations it reads
    (``chain``), the product q @ k.T (``product``, exactly one) and the inputs beside q and k
    (``extras``, in the order read); ``walk`` is False for any other X."""

    def __init__(self, producers: dict, inputs: dict[str, TensorDecl], axes: tuple,
                 taken: set):
        self.producers, self.inputs, self.axes, self.taken = producers, inputs, axes, taken
        self.chain: set[str] = set()
        self.product: OpNode | None = None
        self.extras: list[str] = []

    def walk(self, term) -> bool:
        if isinstance(term, ScalarExpr):
            return True
        if isinstance(term, TensorRef):
            record = self.producers.get(term.name)
            if record is not None:
                if term.name in self.taken or not isinstance(record, Equation):
                    return False
                if term.name not in self.chain:
                    self.chain.add(term.name)
                    return self.walk(record.expr)
                return True
            decl = self.inputs.get(term.name)
            if decl is None or decl.shape is None or decl.dtype != "float":
                return False
            dims = decl.shape.dims
            over_both = len(dims) >= 2 and (dims[-2], dims[-1]) == self.axes and \
                not set(dims[:-2]) & set(self.axes)
            if not over_both and set(dims) & set(self.axes):
                return False
            if term.name not in self.extras:
                self.extras.append(term.name)
            return True
        if not isinstance(term, OpNode):
            return False
        if term.op == "matmul":
            if self.product is not None or not _free_axes(term, set(self.axes), self.inputs):
                return False
            self.product = term
            return True
        if not OPS[term.op].elementwise:
            return False
        return all(self.walk(a) for a in term.args)


def _is_op(term, op: str, arity: int) -> bool:
    return isinstance(term, OpNode) and term.op == op and len(term.args) == arity


def _free_axes(term, axes: set, inputs: dict[str, TensorDecl]) -> bool:
    """Whether ``term`` reads only inputs and scalars and never contracts or reduces ``axes``."""
    if isinstance(term, ScalarExpr):
        return True
    if isinstance(term, TensorRef):
        decl = inputs.get(term.name)
        return decl is not None and decl.shape is not None
    if not isinstance(term, OpNode) or not (OPS[term.op].elementwise or
                                            term.op in ("matmul", "transpose")):
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
