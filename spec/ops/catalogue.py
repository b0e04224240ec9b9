"""The op catalogue: every op the spec language knows, each defined once, here.

An entry holds what the op *is*: how it is written in a spec (its function name and argument
kinds), its shape and dtype rule, and its LaTeX form. Later stages (code generation, FLOP and
parameter counts) add their rule to the same entry, never a second table elsewhere. What the
entries are built from (values, contexts, the ``Op`` base) is in ``base.py``.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import sympy

from tspec.ops.base import (
    Context,
    Op,
    Setting,
    Value,
    align,
    axis_index,
    broadcast,
    join_family,
    normalised,
    numel,
    operand_expr,
    operands,
    require_dtype,
    require_rank,
    result_dtype,
)
from tspec.symbolic.shape import Shape

SETTINGS: dict[str, Setting] = {
    "eps": Setting("1e-5", "LayerNorm's or RMSNorm's epsilon, added to the variance or mean "
                         "square"),
    "theta": Setting("10000.0", "rotary position embedding's base: position p turns feature "
                              "pair i by p * theta^(-2i/d_k)"),
    # Llama 3.1's rotary scaling ("rope_type": "llama3"); a factor of 1 scales nothing
    "rope_factor": Setting("1.0", "rotary scaling (Llama 3.1's factor): low frequencies are "
                                  "divided by it; 1 scales nothing"),
    "rope_low": Setting("1.0", "rotary scaling's low_freq_factor: wavelengths above "
                               "rope_context / rope_low are divided by rope_factor"),
    "rope_high": Setting("4.0", "rotary scaling's high_freq_factor: wavelengths below "
                                "rope_context / rope_high are kept, those between blended"),
    "rope_context": Setting("8192.0", "rotary scaling's original_max_position_embeddings: the "
                                      "context length trained at before scaling"),
    "score_cap": Setting("50.0", "soft-capping's bound c: softcap(x) = c * tanh(x / c) lies "
                                 "in (-c, c) (Gemma 2's attn_logit_softcapping)"),
}
# the settings a rotary helper takes after theta, in its order
ROPE_SCALING = ("rope_factor", "rope_low", "rope_high", "rope_context")


def _shift(offset: str) -> str:
    """An offset's LaTeX as a shift: ``+T_{\\mathrm{past}}``, ``-1``."""
    return offset if offset.startswith("-") else f"+{offset}"


@dataclass(frozen=True)
class Elementwise(Op):
    """A function applied to every element: shape kept, dtype float."""
    latex_name: str = ""
    params: tuple[str, ...] = ("tensor",)
    elementwise: bool = True

    def infer(self, ctx, args, attrs):
        (x,) = args
        # an unstated input keeps its name, so a later broadcast can say what it must fit
        return Value(ctx.shape(x, 1, "input"), "float", tensor=x.tensor)

    def latex(self, args, attrs):
        return f"{self.latex_name}\\left({args[0]}\\right)"

    def code(self, ctx, args, attrs):
        (x,) = args
        if self.name == "log" and x.value.dtype == "bool":
            # log of a 0/1 mask: 0 where kept, -inf where masked, in the float dtype
            return ctx.call(ctx.helper("log_mask"), x.expr, ctx.dtype())
        return ctx.call(self.called(ctx), x.expr)


@dataclass(frozen=True)
class SoftCap(Elementwise):
    """c * tanh(x / c), c the setting score_cap: x where it is small, bounded by c."""

    def latex(self, args, attrs):
        return f"c \\tanh\\left({args[0]} / c\\right)"

    def code(self, ctx, args, attrs):
        (x,) = args
        cap = ctx.setting("score_cap")
        return ctx.operator("*", ctx.call(ctx.array_function("tanh", self.name),
                                          ctx.operator("/", x.expr, cap)), cap)


@dataclass(frozen=True)
class Binary(Op):
    """Element-wise binary arithmetic with NumPy broadcasting; tensor or scalar operands."""
    symbol: str = "+"
    latex_symbol: str = "+"
    params: tuple[str, ...] = ("value", "value")
    elementwise: bool = True

    def infer(self, ctx, args, attrs):
        a, b = args
        if a.is_scalar and b.is_scalar:
            raise ctx.error(f"{self.name} of two scalars is a dim expression, not a tensor")
        if self.name == "sub" and "bool" in (a.dtype, b.dtype):
            raise ctx.error("code generation does not subtract boolean masks (NumPy refuses "
                            "it); combine masks with '*'")
        if a.is_scalar or b.is_scalar:
            tensor = b if a.is_scalar else a
            return Value(ctx.shape(tensor, 1, "operand"), result_dtype([tensor]))
        # an unstated operand (a bias) is taken as a vector along the other's last axis
        shape_a = ctx.shape(a, 1, "operand", like=b.shape)
        shape_b = ctx.shape(b, 1, "operand", like=shape_a)
        dtype = "float" if self.name in ("div",) else result_dtype([a, b])
        return Value(broadcast(ctx, shape_a, shape_b, f"{self.name} operands "
                               f"{operands(a, shape_a, b, shape_b)}"), dtype)

    def fraction(self, attrs):
        return self.name == "div"

    def latex(self, args, attrs):
        if self.fraction(attrs):
            return f"\\frac{{{args[0]}}}{{{args[1]}}}"
        return f"{args[0]} {self.latex_symbol} {args[1]}"

    def code(self, ctx, args, attrs):
        a, b = align(ctx, *args)
        return ctx.operator(self.symbol, operand_expr(ctx, a), operand_expr(ctx, b))


@dataclass(frozen=True)
class Maximum(Op):
    elementwise: bool = True

    def infer(self, ctx, args, attrs):
        a, b = args
        if a.is_scalar and b.is_scalar:
            raise ctx.error("max of two scalars is not a tensor")
        if a.is_scalar or b.is_scalar:
            tensor = b if a.is_scalar else a
            return Value(ctx.shape(tensor, 1, "operand"), result_dtype([tensor]))
        shape_a = ctx.shape(a, 1, "operand", like=b.shape)
        shape_b = ctx.shape(b, 1, "operand", like=shape_a)
        return Value(broadcast(ctx, shape_a, shape_b, "max operands "
                               f"{operands(a, shape_a, b, shape_b)}"), result_dtype([a, b]))

    def latex(self, args, attrs):
        return f"\\max\\left({args[0]},\\, {args[1]}\\right)"

    def code(self, ctx, args, attrs):
        a, b = align(ctx, *args)
        if a.value.is_scalar:          # max(0, x) reads best as maximum(x, 0)
            a, b = b, a
        return ctx.call(self.called(ctx), a.expr, operand_expr(ctx, b))


@dataclass(frozen=True)
class Negate(Op):
    elementwise: bool = True

    def infer(self, ctx, args, attrs):
        (x,) = args
        if x.dtype == "bool":
            raise ctx.error("code generation does not negate boolean masks (NumPy refuses "
                            "it)")
        return Value(ctx.shape(x, 1, "operand"), result_dtype([x]))

    def latex(self, args, attrs):
        return f"-{args[0]}"

    def code(self, ctx, args, attrs):
        return ctx.negate(args[0].expr)


@dataclass(frozen=True)
class Power(Op):
    elementwise: bool = True

    def infer(self, ctx, args, attrs):
        x, exponent = args
        if x.is_scalar or not exponent.is_scalar:
            raise ctx.error("'**' raises a tensor to a scalar power")
        return Value(ctx.shape(x, 1, "operand"), "float")

    def latex(self, args, attrs):
        return f"{args[0]}^{{{args[1]}}}"

    def code(self, ctx, args, attrs):
        x, exponent = args
        power = exponent.value.scalar
        if power.is_Integer and 2 <= int(power) <= 4 and ctx.atomic(x.expr):
            # repeated products of a name: x ** 3 is far slower than x * x * x on arrays
            product = x.expr
            for _ in range(int(power) - 1):
                product = ctx.operator("*", product, x.expr)
            return product
        return ctx.operator("**", x.expr, ctx.scalar(power))


@dataclass(frozen=True)
class MatMul(Op):
    """A @ B: (..., M, K) @ (..., K, N) -> (..., M, N), batch axes broadcast."""

    def infer(self, ctx, args, attrs):
        a, b = args
        if a.is_scalar or b.is_scalar:
            raise ctx.error("'@' needs two tensors; scale by a scalar with '*' or '/'")
        shape_a = ctx.shape(a, 2, "left operand")
        shape_b = ctx.shape(b, 2, "right operand")
        require_rank(ctx, shape_a, 2, "a left operand", "matmul")
        require_rank(ctx, shape_b, 2, "a right operand", "matmul")
        ctx.equal(shape_a.dims[-1], shape_b.dims[-2],
                  f"matmul inner dimensions of {operands(a, shape_a, b, shape_b, '@')}")
        batch = broadcast(ctx, Shape(shape_a.dims[:-2], shape_a.family),
                          Shape(shape_b.dims[:-2], shape_b.family),
                          f"matmul batch axes of {operands(a, shape_a, b, shape_b, '@')}")
        dims = batch.dims + (shape_a.dims[-2], shape_b.dims[-1])
        return Value(Shape(dims, batch.family), "float")

    def latex(self, args, attrs):
        return f"{args[0]} {args[1]}"

    def flops(self, args, out, attrs):
        return 2 * numel(out) * args[0].shape.dims[-1]       # multiply and add per term

    @property
    def kind(self):
        return "matmul"

    def code(self, ctx, args, attrs):
        a, b = align(ctx, *args)
        left, right = a.value.shape, b.value.shape
        if right.rank == 2 and right.family is None and left.family is None and left.rank > 2:
            # a batch of vectors times one weight matrix: one product over all leading axes
            return ctx.call(ctx.helper("project"), a.expr, b.expr)
        if ctx.batched_matmul and min(left.rank + (left.family is not None),
                                      right.rank + (right.family is not None)) > 2:
            # two stacks of matrices, where the backend has a helper for them
            return ctx.call(ctx.helper(ctx.batched_matmul), a.expr, b.expr)
        return ctx.operator("@", a.expr, b.expr)


@dataclass(frozen=True)
class Transpose(Op):
    """X.T: swap the last two axes (a matrix transpose, batched)."""

    def infer(self, ctx, args, attrs):
        (x,) = args
        shape = ctx.shape(x, 2, "operand")
        require_rank(ctx, shape, 2, "an operand", "transpose (.T)")
        dims = shape.dims[:-2] + (shape.dims[-1], shape.dims[-2])
        return Value(Shape(dims, shape.family), x.dtype)

    def latex(self, args, attrs):
        return f"{args[0]}^\\top"

    def code(self, ctx, args, attrs):
        return ctx.call(ctx.attribute(args[0].expr, "swapaxes"), ctx.literal(-1),
                        ctx.literal(-2))


@dataclass(frozen=True)
class Scale(Op):
    """X * c or X / c for a scalar expression c over dims (1/sqrt(d_k))."""

    params: tuple[str, ...] = ("tensor", "value")
    elementwise: bool = True

    def infer(self, ctx, args, attrs):
        tensor, factor = args
        if tensor.is_scalar or not factor.is_scalar:
            raise ctx.error("scale multiplies or divides a tensor by a dim expression")
        return Value(ctx.shape(tensor, 1, "operand"), "float")

    def fraction(self, attrs):
        return bool(attrs.get("divide"))

    def latex(self, args, attrs):
        return f"\\frac{{{args[0]}}}{{{args[1]}}}" if self.fraction(attrs) else \
            f"{args[1]} {args[0]}"

    def code(self, ctx, args, attrs):
        tensor, factor = args
        symbol = "/" if self.fraction(attrs) else "*"
        return ctx.operator(symbol, tensor.expr, ctx.scalar(factor.value.scalar))


@dataclass(frozen=True)
class Softmax(Op):
    def infer(self, ctx, args, attrs):
        (x,) = args
        shape = ctx.shape(x, 1, "input")
        axis_index(ctx, attrs["axis"], shape.rank, "softmax")
        return Value(shape, "float")

    def latex(self, args, attrs):
        return f"\\mathrm{{softmax}}\\left({args[0]}\\right)"

    def code(self, ctx, args, attrs):
        axis = attrs["axis"]
        if axis >= 0 and args[0].value.shape.family is not None:
            axis += 1           # past the family axis
        keywords = {} if axis == -1 else {"axis": ctx.literal(axis)}
        return ctx.call(self.called(ctx), args[0].expr, **keywords)


@dataclass(frozen=True)
class LayerNorm(Op):
    """LayerNorm(X; gamma, beta) over the last axis; gamma and beta have X's last dim."""

    def flops(self, args, out, attrs):
        # per element: the mean's sum, the subtraction, the square, the variance's sum, the
        # normalising product, gamma and beta; per row: + eps, the square root, the reciprocal
        rows = numel(out) / out.shape.dims[-1]
        return 7 * numel(out) + 3 * rows

    def infer(self, ctx, args, attrs):
        x, gamma, beta = args
        return normalised(ctx, x, {"gain": gamma, "bias": beta}, "layer_norm")

    def latex(self, args, attrs):
        return f"\\mathrm{{LayerNorm}}\\left({args[0]};\\, {args[1]}, {args[2]}\\right)"

    def code(self, ctx, args, attrs):
        x, gamma, beta = args
        return ctx.call(self.called(ctx), x.expr, gamma.expr, beta.expr, ctx.setting("eps"))


@dataclass(frozen=True)
class RMSNorm(Op):
    """RMSNorm(X; gamma) over the last axis: X / sqrt(mean(X^2) + eps) * gamma; gamma has X's
    last dim (Zhang and Sennrich 2019: no centring, no bias)."""

    def flops(self, args, out, attrs):
        # per element: the square, the sum, the normalising product and gamma; per row:
        # + eps, the square root, the reciprocal
        rows = numel(out) / out.shape.dims[-1]
        return 4 * numel(out) + 3 * rows

    def infer(self, ctx, args, attrs):
        x, gamma = args
        return normalised(ctx, x, {"gain": gamma}, "rms_norm")

    def latex(self, args, attrs):
        return f"\\mathrm{{RMSNorm}}\\left({args[0]};\\, {args[1]}\\right)"

    def code(self, ctx, args, attrs):
        x, gamma = args
        return ctx.call(self.called(ctx), x.expr, gamma.expr, ctx.setting("eps"))


@dataclass(frozen=True)
class Rotary(Op):
    """rotary(X) or rotary(X, offset): each position p of X (..., T, d) turned by p times d/2
    angles (RoPE).

    The last axis is two halves: pair i is (x_i, x_{i + d/2}), turned by p * theta^(-2i/d),
    theta a run-time setting (10000 in RoFormer and Llama 2); Llama 3.1's scaling of the
    frequencies (``ROPE_SCALING``, run-time settings too) divides the low ones by rope_factor,
    a factor of 1 changing nothing. Positions count from ``offset``
    (a dim expression, 0 when absent) along the second-to-last axis: a decoding step's T_new
    rows after T_past cached ones are rotary(X_new, T_past), the last rows of rotary of the
    whole sequence. Queries and keys turned so make every score depend on their positions'
    difference alone.
    """

    def flops(self, args, out, attrs):
        return 3 * numel(out)           # x cos, the partner's x sin, and their sum

    def infer(self, ctx, args, attrs):
        x = args[0]                      # the offset, a scalar, changes no shape
        shape = ctx.shape(x, 2, "input")
        require_rank(ctx, shape, 2, "an input (positions, width)", "rotary")
        ctx.divides(sympy.Integer(2), shape.dims[-1],
                    "rotary turns pairs of features, so the width must be even")
        return Value(shape, "float")

    def latex(self, args, attrs):
        offset = f"_{{{_shift(args[1])}}}" if len(args) > 1 else ""
        return f"\\mathrm{{RoPE}}{offset}\\left({args[0]}\\right)"

    def code(self, ctx, args, attrs):
        offset = {"offset": ctx.dim(args[1].value.scalar)} if len(args) > 1 else {}
        scaling = ctx.items(*(ctx.setting(name) for name in ROPE_SCALING))
        return ctx.call(self.called(ctx), args[0].expr, ctx.setting("theta"), scaling, **offset)


@dataclass(frozen=True)
class RepeatHeads(Op):
    """repeat_heads(X_g, H): a family of G key-value heads -> a family of H, member h being
    X_g[h // (H / G)]: each group of H / G consecutive heads shares one (grouped-query
    attention). G must divide H."""

    def infer(self, ctx, args, attrs):
        x, heads = args
        shape = ctx.shape(x, 1, "input")
        if shape.family is None:
            raise ctx.error("repeat_heads needs a family of tensors (declared with [H_kv])")
        ctx.divides(shape.family, heads.scalar,
                    "repeat_heads: the key-value heads must divide the heads")
        return Value(Shape(shape.dims, heads.scalar), x.dtype)

    def latex(self, args, attrs):
        return f"\\mathrm{{Repeat}}_{{{args[1]}}}\\left({args[0]}\\right)"

    def code(self, ctx, args, attrs):
        x, heads = args
        return ctx.call(self.called(ctx), x.expr, ctx.dim(heads.value.scalar))


@dataclass(frozen=True)
class Gather(Op):
    """E[t]: rows of a table picked by integer ids: (V, d) and (...) -> (..., d)."""

    def infer(self, ctx, args, attrs):
        table, ids = args
        if ids.is_scalar:
            raise ctx.error("indexing needs a tensor of integer ids")
        require_dtype(ctx, ids, ("int",), "ids", "gather")
        table_shape = ctx.shape(table, 2, "table")
        require_rank(ctx, table_shape, 2, "a table", "gather")
        id_shape = ctx.shape(ids, 1, "ids")
        if table_shape.family is not None or id_shape.family is not None:
            raise ctx.error("code generation does not gather from families of tables or ids")
        family = join_family(ctx, table_shape.family, id_shape.family)
        return Value(Shape(id_shape.dims + table_shape.dims[1:], family), table.dtype)

    def latex(self, args, attrs):
        return f"{{{args[0]}}}_{{{args[1]}}}"

    def code(self, ctx, args, attrs):
        table, ids = args
        named = {}                                   # the table and the ids, for its errors
        if table.value.tensor not in (None, "E"):
            named["table"] = ctx.literal(table.value.tensor)
        if ids.value.tensor not in (None, "t"):
            named["ids"] = ctx.literal(ids.value.tensor)
        return ctx.call(self.called(ctx), table.expr, ids.expr, **named)


@dataclass(frozen=True)
class SliceRows(Op):
    """P[:n]: the first n rows of a table; n must not exceed its length. P[a:b]: rows
    a .. b - 1, (L, ...) -> (b - a, ...), with 0 <= a, a + 1 <= b (a row at least) and
    b <= L.

    Its arguments are the table, the stop, and the start where the slice has one
    (slice_rows(P, b, a)): the start is the optional last argument, as an offset is.
    """

    def infer(self, ctx, args, attrs):
        table, stop, *start = args
        shape = ctx.shape(table, 2, "table")
        require_rank(ctx, shape, 1, "a table", "slice")
        if not start:
            ctx.at_most(stop.scalar, shape.dims[0], "rows taken vs table length")
            return Value(Shape((stop.scalar,) + shape.dims[1:], shape.family), table.dtype)
        first = start[0].scalar
        ctx.at_most(sympy.Integer(0), first, "slice start (rows skipped)")
        ctx.at_most(first + 1, stop.scalar, "slice start vs stop (a row at least)")
        ctx.at_most(stop.scalar, shape.dims[0], "slice stop vs table length")
        return Value(Shape((stop.scalar - first,) + shape.dims[1:], shape.family), table.dtype)

    def latex(self, args, attrs):
        if len(args) < 3:
            return f"{{{args[0]}}}_{{1:{args[1]}}}"
        start = args[2]         # rows count from 1 here: rows a .. b - 1 are a + 1 .. b
        first = str(int(start) + 1) if start.isdigit() else f"{start} + 1"
        return f"{{{args[0]}}}_{{{first}:{args[1]}}}"

    def code(self, ctx, args, attrs):
        table, stop, *start = args
        first = ctx.dim(start[0].value.scalar) if start else ctx.literal(0)
        name = table.value.tensor or "the table"
        axis = {"axis": ctx.literal(1)} if table.value.shape.family is not None else {}
        return ctx.call(self.called(ctx), table.expr, ctx.literal(name), first,
                        ctx.dim(stop.value.scalar), **axis)


@dataclass(frozen=True)
class FirstPosition(Op):
    """first(X): the first position of each sequence, (..., T, d) -> (..., d); BERT's pooler
    reads the [CLS] token's vector this way."""

    def infer(self, ctx, args, attrs):
        (x,) = args
        shape = ctx.shape(x, 2, "input")
        require_rank(ctx, shape, 2, "an input", "first")
        return Value(Shape(shape.dims[:-2] + shape.dims[-1:], shape.family), x.dtype)

    def latex(self, args, attrs):
        return f"{{{args[0]}}}_{{:,\\,1}}"

    def code(self, ctx, args, attrs):
        return ctx.index(args[0].expr, ctx.literal(...), ctx.literal(0), ctx.every())


@dataclass(frozen=True)
class SplitHeads(Op):
    """split_heads(X, H): (..., H*d) -> a family of H tensors (..., d)."""

    def infer(self, ctx, args, attrs):
        x, heads = args
        shape = ctx.shape(x, 1, "input")
        require_rank(ctx, shape, 1, "an input", "split_heads")
        if shape.family is not None:
            raise ctx.error("split_heads needs a single tensor, got a family")
        width = shape.dims[-1]
        ctx.divides(heads.scalar, width, "split_heads: heads must divide the last axis")
        return Value(Shape(shape.dims[:-1] + (width / heads.scalar,), heads.scalar), x.dtype)

    def latex(self, args, attrs):
        return f"\\mathrm{{SplitHeads}}_{{{args[1]}}}\\left({args[0]}\\right)"

    def code(self, ctx, args, attrs):
        x, heads = args
        return ctx.call(self.called(ctx), x.expr, ctx.dim(heads.value.scalar))


@dataclass(frozen=True)
class ConcatHeads(Op):
    """concat_heads(O_h): a family of H tensors (..., d) -> (..., H*d)."""

    def infer(self, ctx, args, attrs):
        (x,) = args
        shape = ctx.shape(x, 1, "input")
        if shape.family is None:
            raise ctx.error("concat_heads needs a family of tensors (declared with [H])")
        require_rank(ctx, shape, 1, "members", "concat_heads")
        dims = shape.dims[:-1] + (shape.family * shape.dims[-1],)
        return Value(Shape(dims), x.dtype)

    def latex(self, args, attrs):
        return f"\\mathrm{{Concat}}\\left({args[0]}\\right)"


@dataclass(frozen=True)
class Concat(Op):
    """concat(A, B, axis=-1): join two tensors along an axis; the other axes must agree."""

    def infer(self, ctx, args, attrs):
        a, b = args
        shape_a, shape_b = ctx.shape(a, 1, "operand"), ctx.shape(b, 1, "operand")
        if shape_a.rank != shape_b.rank:
            raise ctx.error(f"concat needs operands of one rank, got {shape_a.text()} and "
                            f"{shape_b.text()}")
        if (shape_a.family is None) != (shape_b.family is None):
            raise ctx.error("code generation does not concat a family with a single tensor")
        axis = axis_index(ctx, attrs["axis"], shape_a.rank, "concat")
        dims = []
        for i, (x, y) in enumerate(zip(shape_a.dims, shape_b.dims)):
            dims.append(x + y if i == axis else ctx.equal(
                x, y, f"concat axis {i} of {operands(a, shape_a, b, shape_b)}"))
        return Value(Shape(tuple(dims), join_family(ctx, shape_a.family, shape_b.family)),
                     result_dtype([a, b]))

    def latex(self, args, attrs):
        return f"\\left[{args[0]} \\,\\|\\, {args[1]}\\right]"

    def code(self, ctx, args, attrs):
        a, b = align(ctx, *args)
        axis = attrs["axis"]
        if axis >= 0 and a.value.shape.family is not None:
            axis += 1           # past the family axis
        if ctx.grows(a):        # a decoding step's state: appended to, not copied
            return ctx.call(ctx.helper("extend"), a.expr, b.expr, axis=ctx.literal(axis))
        return ctx.call(self.called(ctx), ctx.items(a.expr, b.expr), axis=ctx.literal(axis))


@dataclass(frozen=True)
class CausalMask(Op):
    """causal_mask(T_q, T_kv): M[i, j] = 1 where key j is not after query i, else 0.

    Bottom-right aligned: the T_q queries are the last T_q of the T_kv positions (a decoding
    step's new rows after T_kv - T_q cached ones), so query i sits at position
    i + (T_kv - T_q) and M[i, j] = 1 iff j <= i + (T_kv - T_q); T_q <= T_kv. With T_q = T_kv
    it is the lower triangle.
    """

    def infer(self, ctx, args, attrs):
        t_q, t_kv = args
        ctx.at_most(t_q.scalar, t_kv.scalar,
                    "causal mask: queries (the last positions of the keys) vs keys")
        return Value(Shape((t_q.scalar, t_kv.scalar)), "bool")

    def latex(self, args, attrs):
        return f"M^{{\\mathrm{{causal}}}}_{{{args[0]} \\times {args[1]}}}"

    def code(self, ctx, args, attrs):
        t_q, t_kv = (ctx.dim(a.value.scalar) for a in args)
        return ctx.call(self.called(ctx), t_q, t_kv)


@dataclass(frozen=True)
class SlidingWindowMask(Op):
    """sliding_window_mask(T_q, T_kv, W): M[i, j] = 1 where key j is neither after query i
    nor W or more positions before it: each query sees itself and the W - 1 positions before
    (Mistral's sliding-window attention).

    Bottom-right aligned as causal_mask: query i sits at position p = i + (T_kv - T_q), and
    M[i, j] = 1 iff p - W < j <= p; T_q <= T_kv, W >= 1. A window at least T_kv long is the
    causal mask.
    """

    def infer(self, ctx, args, attrs):
        t_q, t_kv, window = args
        ctx.at_most(t_q.scalar, t_kv.scalar,
                    "sliding window mask: queries (the last positions of the keys) vs keys")
        ctx.at_most(sympy.Integer(1), window.scalar,
                    "sliding window mask: a window holds the query's own position at least")
        return Value(Shape((t_q.scalar, t_kv.scalar)), "bool")

    def latex(self, args, attrs):
        return f"M^{{\\mathrm{{window}}\\,{args[2]}}}_{{{args[0]} \\times {args[1]}}}"

    def code(self, ctx, args, attrs):
        t_q, t_kv, window = (ctx.dim(a.value.scalar) for a in args)
        return ctx.call(self.called(ctx), t_q, t_kv, window)


@dataclass(frozen=True)
class PaddingMask(Op):
    """padding_mask(m, T_q): key mask (B, T_kv) of 1 = token, 0 = padding -> (B, T_q, T_kv)."""

    def infer(self, ctx, args, attrs):
        keep, t_q = args
        require_dtype(ctx, keep, ("bool",), "a key mask", "padding_mask")
        shape = ctx.shape(keep, 2, "key mask")
        if shape.rank != 2:
            raise ctx.error(f"padding_mask needs a (batch, length) key mask, got {shape.text()}")
        return Value(Shape((shape.dims[0], t_q.scalar, shape.dims[1]), shape.family), "bool")

    def latex(self, args, attrs):
        return f"M^{{\\mathrm{{pad}}}}\\left({args[0]}\\right)"

    def code(self, ctx, args, attrs):
        keep, t_q = args
        return ctx.call(self.called(ctx), keep.expr, ctx.dim(t_q.value.scalar))


@dataclass(frozen=True)
class Sinusoidal(Op):
    """sinusoidal_encoding(T, d) or sinusoidal_encoding(T, d, offset): the rows of positions
    pos = offset .. offset + T - 1 (offset a dim expression, 0 when absent) of the table
    P[pos, 2i] = sin(pos / 10000^(2i/d)), P[pos, 2i+1] = cos(...).

    Every column is defined on its own, so any width d will do: an odd d ends with a sin
    column (2i = d - 1) that has no cos partner.
    """

    def infer(self, ctx, args, attrs):
        length, width = args[:2]        # the offset, a scalar, changes no shape
        return Value(Shape((length.scalar, width.scalar)), "float")

    def latex(self, args, attrs):
        offset = f"^{{{_shift(args[2])}}}" if len(args) > 2 else ""
        return f"\\mathrm{{PE}}_{{{args[0]} \\times {args[1]}}}{offset}"

    def code(self, ctx, args, attrs):
        length, width, *offset = (ctx.dim(a.value.scalar) for a in args)
        shift = {"offset": offset[0]} if offset else {}
        return ctx.call(self.called(ctx), length, width, ctx.dtype(), **shift)


@dataclass(frozen=True)
class RelativeBias(Op):
    """relative_position_bias(R, T_q, T_kv): R[(j - i - (T_kv - T_q)) + c] for query i and
    key j.

    R holds one learned value per relative offset, centred: entry c = (len(R) - 1) / 2 is
    offset 0, so the same entry means the same offset at every length. Bottom-right aligned,
    as causal_mask: the T_q queries are the last T_q of the T_kv positions, query i at
    position i + (T_kv - T_q), so with T_q = T_kv the offset is j - i. Offsets run from
    -(T_kv - 1) to T_q - 1; with T_q <= T_kv, 2*T_kv - 1 <= len(R) covers them all.
    """

    def infer(self, ctx, args, attrs):
        table, t_q, t_kv = args
        shape = ctx.shape(table, 1, "table")
        if shape.rank != 1:
            raise ctx.error(f"relative_position_bias needs a vector of offsets, got "
                            f"{shape.text()}")
        ctx.at_most(t_q.scalar, t_kv.scalar,
                    "relative position bias: queries (the last positions of the keys) vs keys")
        ctx.at_most(2 * t_kv.scalar - 1, shape.dims[0],
                    "relative offsets needed vs table length")
        return Value(Shape((t_q.scalar, t_kv.scalar), shape.family), "float")

    def latex(self, args, attrs):
        table, t_q, t_kv = args
        if t_q == t_kv:
            return f"{{{table}}}_{{j - i}}"
        return f"{{{table}}}_{{j - i - \\left({t_kv} - {t_q}\\right)}}"

    def code(self, ctx, args, attrs):
        table, t_q, t_kv = args
        return ctx.call(self.called(ctx), table.expr, ctx.dim(t_q.value.scalar),
                        ctx.dim(t_kv.value.scalar))


@dataclass(frozen=True)
class Einsum(Op):
    """einsum("ij,jk->ik", A, B): letters name axes; a repeated letter's dims must agree."""

    def infer(self, ctx, args, attrs):
        spec = attrs["spec"]
        inputs, output = _parse_einsum(ctx, spec, len(args))
        sizes: dict[str, sympy.Basic] = {}
        owners: dict[str, tuple[Value, Shape]] = {}      # the operand that sized each letter
        for letters, value in zip(inputs, args):
            if value.is_scalar:
                raise ctx.error("einsum operands must be tensors")
            shape = ctx.shape(value, len(letters), "operand")
            if shape.family is not None:
                raise ctx.error("einsum does not take families; concat_heads first")
            if shape.rank != len(letters):
                raise ctx.error(f"einsum {spec!r}: operand {letters!r} has rank {len(letters)} "
                                f"in the pattern but rank {shape.rank} ({shape.text()})")
            for letter, dim in zip(letters, shape.dims):
                if letter not in sizes:
                    sizes[letter], owners[letter] = dim, (value, shape)
                else:
                    sizes[letter] = ctx.equal(sizes[letter], dim, f"einsum axis {letter!r} of "
                                              f"{operands(*owners[letter], value, shape)}")
        return Value(Shape(tuple(sizes[c] for c in output)), result_dtype(args))

    def flops(self, args, out, attrs):
        inputs, _ = (part.replace(" ", "") for part in attrs["spec"].split("->"))
        sizes = {}
        for letters, value in zip(inputs.split(","), args):
            sizes.update(zip(letters, value.shape.dims))
        terms = sympy.Mul(*sizes.values())
        return (2 if len(args) > 1 else 1) * terms    # a multiply and an add per term

    @property
    def kind(self):
        return "matmul"

    def latex(self, args, attrs):
        return f"\\mathrm{{einsum}}_{{\\texttt{{{attrs['spec']}}}}}\\left({', '.join(args)}\\right)"

    def code(self, ctx, args, attrs):
        return ctx.call(self.called(ctx), ctx.pattern(attrs["spec"]), *(a.expr for a in args))


def _parse_einsum(ctx: Context, spec: str, count: int) -> tuple[list[str], str]:
    if spec.count("->") != 1:
        raise ctx.error(f"einsum pattern {spec!r} needs exactly one '->'")
    left, output = (part.replace(" ", "") for part in spec.split("->"))
    inputs = left.split(",")
    letters = "".join(inputs) + output
    if not all("a" <= c <= "z" or "A" <= c <= "Z" for c in letters):
        raise ctx.error(f"einsum pattern {spec!r}: axes are single letters")
    if len(inputs) != count:
        raise ctx.error(f"einsum pattern {spec!r} names {len(inputs)} operands, got {count}")
    unknown = set(output) - set("".join(inputs))
    if unknown or len(set(output)) != len(output):
        raise ctx.error(f"einsum pattern {spec!r}: output axes must be distinct input axes")
    return inputs, output


def _ops(*ops: Op) -> dict[str, Op]:
    return {op.name: op for op in ops}


# Every op: how a spec writes it, its shape rule, LaTeX and FLOPs (its class), and the function
# its code calls (a runtime helper, with the helpers and modules that helper's template uses,
# or an array-module function). Adding an op is adding an entry here, with its template in
# codegen/templates/helpers/ if it has a helper: nothing else names it.
OPS: dict[str, Op] = _ops(
    MatMul("matmul", "matrix product with broadcast batch axes", ("tensor", "tensor"),
           precedence=50, group_right=True, spelling="@"),
    Einsum("einsum", "tensor contraction by an index pattern", precedence=100,
           spelling="einsum", array_function="einsum"),
    Transpose("transpose", "swap the last two axes", ("tensor",), precedence=90,
              spelling="transpose"),
    Binary("add", "element-wise sum, broadcasting", symbol="+", latex_symbol="+",
           precedence=40, per_element=1, spelling="+"),
    Binary("sub", "element-wise difference, broadcasting", symbol="-", latex_symbol="-",
           precedence=40, group_right=True, per_element=1, spelling="-"),
    Binary("mul", "element-wise product, broadcasting", symbol="*", latex_symbol="\\odot",
           precedence=50, group_right=True, per_element=1, spelling="*"),
    Binary("div", "element-wise quotient, broadcasting", symbol="/", latex_symbol="/",
           precedence=100, per_element=1, spelling="/"),
    Scale("scale", "multiply or divide by a scalar expression over dims", precedence=50,
          per_element=1),
    Negate("neg", "element-wise negation", ("tensor",), precedence=45, per_element=1),
    Power("pow", "element-wise power by a scalar", ("tensor", "value"), precedence=70,
          per_element=1, spelling="**"),
    Maximum("maximum", "element-wise maximum, broadcasting", ("value", "value"),
            per_element=1, spelling="max", array_function="maximum"),
    Elementwise("log", "element-wise natural logarithm", latex_name="\\log", per_element=1,
                spelling="log", array_function="log"),
    Elementwise("exp", "element-wise exponential", latex_name="\\exp", per_element=1,
                spelling="exp", array_function="exp"),
    Elementwise("relu", "max(0, x)", latex_name="\\mathrm{ReLU}", per_element=1,
                spelling="relu", helper="relu", imports=("Optional",), row_wise=True,
                activation=True),
    Elementwise("tanh", "hyperbolic tangent", latex_name="\\tanh", per_element=1,
                spelling="tanh", array_function="tanh"),
    # the division, tanh and the product
    SoftCap("softcap", "c * tanh(x / c), bounded by the setting score_cap (soft-capping)",
            per_element=3, spelling="softcap", settings=("score_cap",)),
    # x / (1 + exp(-x)): the negation, exp, the add and the division
    Elementwise("silu", "x * sigmoid(x), the SwiGLU gate's function", latex_name="\\mathrm{SiLU}",
                per_element=4, spelling="silu", helper="silu", imports=("Optional",),
                needs=("float16",), row_wise=True, activation=True),
    # x / 2 * (1 + erf(x / sqrt 2)): a scale, erf, an add and two products
    Elementwise("gelu", "x * Phi(x), Phi the standard normal CDF", latex_name="\\mathrm{GELU}",
                per_element=5, spelling="gelu", helper="gelu", imports=("Optional", "erf", "math"),
                needs=("float16",), row_wise=True, activation=True),
    # x / 2 * (1 + tanh(c (x + 0.044715 x^3))): the cube (2), two scales, two adds, tanh and
    # two products
    Elementwise("gelu_tanh", "GELU by its tanh approximation (GPT-2)",
                latex_name="\\mathrm{GELU}_{\\tanh}", per_element=9, spelling="gelu_tanh",
                helper="gelu_tanh", imports=("Optional", "math"), needs=("float16",),
                row_wise=True, activation=True),
    # the row maximum, the subtraction, exp, the sum and the division
    Softmax("softmax", "exp(x) / sum(exp(x)) along an axis", ("tensor",), {"axis": -1},
            per_element=5, spelling="softmax", helper="softmax", imports=("Optional",),
            needs=("checked_axis", "float16"), row_wise=True),
    LayerNorm("layer_norm", "normalise the last axis, then scale and shift",
              ("tensor", "tensor", "tensor"), spelling="layer_norm", helper="layer_norm",
              imports=("Optional",), needs=("float16", "residual_sum"), row_wise=True,
              normalises=True, settings=("eps",)),
    RMSNorm("rms_norm", "divide the last axis by its root mean square, then scale",
            ("tensor", "tensor"), spelling="rms_norm", helper="rms_norm", imports=("Optional",),
            needs=("float16", "residual_sum"), row_wise=True, normalises=True,
            settings=("eps",)),
    Rotary("rotary", "turn each position's feature pairs by angles proportional to the "
           "position (RoPE), positions counted from an optional offset", ("tensor", "dim"),
           optional=1, spelling="rotary", helper="rotary",
           settings=("theta", *ROPE_SCALING)),
    RepeatHeads("repeat_heads", "share each of G key-value heads among H / G query heads",
                ("tensor", "dim"), spelling="repeat_heads", helper="repeat_heads"),
    Gather("gather", "embedding lookup: rows of a table by integer ids", ("tensor", "tensor"),
           precedence=90, helper="embed"),
    SliceRows("slice_rows", "rows of a table: the first n (P[:n]), or a to b - 1 (P[a:b])",
              ("tensor", "dim", "dim"), optional=1, precedence=90, helper="table_rows"),
    FirstPosition("first_position", "the first position of each sequence: (..., T, d) -> "
                  "(..., d)", ("tensor",), precedence=90, spelling="first"),
    SplitHeads("split_heads", "reshape the last axis into H heads (reshape + transpose)",
               ("tensor", "dim"), spelling="split_heads", helper="split_heads"),
    ConcatHeads("concat_heads", "concatenate a family's members along the last axis",
                ("tensor",), spelling="concat_heads", helper="concat_heads"),
    Concat("concat", "join two tensors along an axis", ("tensor", "tensor"), {"axis": -1},
           spelling="concat", array_function="concatenate"),
    CausalMask("causal_mask", "0/1 mask, no attending to later keys: the queries are the "
               "last positions of the keys (bottom-right aligned)", ("dim", "dim"),
               spelling="causal_mask", helper="causal_mask"),
    SlidingWindowMask("sliding_window_mask", "0/1 mask of a sliding window: no attending to "
                      "later keys, nor to keys W or more positions back (bottom-right aligned)",
                      ("dim", "dim", "dim"), spelling="sliding_window_mask",
                      helper="sliding_window_mask"),
    PaddingMask("padding_mask", "0/1 key mask broadcast over queries", ("tensor", "dim"),
                spelling="padding_mask", helper="padding_mask"),
    # the angle (a division) and its sine or cosine
    Sinusoidal("sinusoidal_encoding", "the fixed sine/cosine position table, positions "
               "counted from an optional offset", ("dim", "dim", "dim"), optional=1,
               per_element=2, spelling="sinusoidal_encoding", helper="positional_encoding"),
    RelativeBias("relative_position_bias", "a learned bias per relative offset of key and "
                 "query positions, queries the last of the keys (bottom-right aligned)",
                 ("tensor", "dim", "dim"), spelling="relative_position_bias",
                 helper="relative_position_bias"),
)


class Spelled(Mapping):
    """A table read off OPS whenever it is consulted, so that an op added to OPS (a scratch
    catalogue entry) is in it at once: ``key(op)``, for each op where it is not None, maps to
    the op's name."""

    def __init__(self, key: Callable[[Op], str | None]):
        self.key = key
        self.ops: tuple[Op, ...] = ()
        self.table: dict[str, str] = {}

    def current(self) -> dict[str, str]:
        ops = tuple(OPS.values())
        if ops != self.ops:        # the same ops compare by identity first: cheap
            self.table = {key: op.name for op in ops if (key := self.key(op)) is not None}
            self.ops = ops
        return self.table

    def __getitem__(self, key: str) -> str:
        return self.current()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.current())

    def __len__(self) -> int:
        return len(self.current())


def _function_name(op: Op) -> str | None:
    return op.spelling if op.spelling is not None and op.spelling.isidentifier() else None


def _operator(op: Op) -> str | None:
    return op.spelling if op.spelling is not None and not op.spelling.isidentifier() else None


# How each op is written in a spec: function names and operators, each to the op it means.
FUNCTIONS = Spelled(_function_name)
OPERATORS = Spelled(_operator)
# the element-wise functions generated code applies in place to a product's fresh result
# (``project(X, W, b, activation=rt.gelu)``): name -> name
ACTIVATIONS = Spelled(lambda op: op.name if op.activation else None)
# Scalar functions of dims, usable wherever a scalar may stand (x / sqrt(d_k)).
SCALAR_FUNCTIONS = {"sqrt": sympy.sqrt}
