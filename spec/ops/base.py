"""What every op of the catalogue (``catalogue.py``) is built from: the values the checker
passes its shape rules, the contexts those rules and the code rules talk to, the operand and
precedence helpers, and the ``Op`` base class.

Shape rules talk to the checker through a small context (see ``Context``): they state what must
hold (``ctx.equal(K, K2, ...)``) and the checker proves it for every size the constraints allow,
or records a finding with a counterexample. A rule raises ``ctx.error(...)`` only for what no
size can fix: a wrong rank, a wrong dtype, an axis that does not exist.
"""

from dataclasses import dataclass, field
from typing import Protocol

import sympy

from tspec.errors import CodegenError, SpecError
from tspec.symbolic.shape import Shape


@dataclass(frozen=True)
class Value:
    """What an expression evaluates to during checking: a tensor (or family) or a scalar."""
    shape: Shape | None            # None: a parameter whose shape the spec left unstated
    dtype: str = "float"
    scalar: sympy.Basic | None = None   # set for scalar expressions over dims (sqrt(d_k))
    tensor: str | None = None           # the tensor name, for a leaf
    # how an operand that is an expression is written (``X @ W_1 + b_1``), for messages
    text: str | None = field(default=None, compare=False)

    @property
    def is_scalar(self) -> bool:
        return self.scalar is not None


class Context(Protocol):
    """What shape rules may ask of the checker."""

    def equal(self, a: sympy.Basic, b: sympy.Basic, what: str,
              broadcast: bool = False) -> sympy.Basic:
        """State a == b for all allowed sizes; returns the common value. With ``broadcast``,
        a counterexample must have both sides other than 1."""

    def divides(self, divisor: sympy.Basic, n: sympy.Basic, what: str) -> None:
        """State that divisor divides n for all allowed sizes."""

    def at_most(self, a: sympy.Basic, b: sympy.Basic, what: str) -> None:
        """State a <= b for all allowed sizes."""

    def shape(self, value: Value, rank: int, role: str, like: Shape | None = None) -> Shape:
        """The shape of value; for an unstated parameter, a fresh shape of this rank.

        ``like`` is the shape an unstated operand must broadcast against, for the report.
        """

    def error(self, message: str) -> SpecError:
        """An error at the equation being checked (raise it)."""


@dataclass(frozen=True)
class Operand:
    """An argument as code generation sees it: its expression (a record of
    ``tspec.codegen.ir``, built through the ``CodeContext``) and its value (shape, dtype)."""
    expr: object
    value: Value


class CodeContext(Protocol):
    """What an op's code rule may ask of the code generator. A code rule builds an expression
    record (``tspec.codegen.ir``) from its operands' expressions through these methods, never
    Python text: the renderer prints it, parentheses and all."""

    batched_matmul: str | None                # the helper for products of two stacks, if any

    def helper(self, name: str) -> object:
        """A helper function of the generated runtime (rendered from its template):
        ``rt.softmax``."""

    def array_function(self, name: str, op: str) -> object:
        """A function of the array module for op ``op`` (``np.exp``); a CodegenError where the
        module has none of that name."""

    def dim(self, expr: sympy.Basic) -> object:
        """An integer dim expression (``T_dec``, ``d_model // H``)."""

    def scalar(self, expr: sympy.Basic) -> object:
        """A scalar expression over dims, a Python number (``math.sqrt(d_k)``)."""

    def dtype(self) -> object:
        """The float dtype of the computation (taken from a float tensor in scope)."""

    def runtime(self, name: str) -> object:
        """A run-time setting the function takes as a keyword argument (``eps``)."""

    def call(self, function: object, *args: object, **keywords: object) -> object:
        """``function(args, keywords)``."""

    def operator(self, symbol: str, left: object, right: object) -> object:
        """``left symbol right`` for a Python operator (+ - * / @ **)."""

    def negate(self, operand: object) -> object:
        """``-operand``."""

    def index(self, value: object, *items: object) -> object:
        """``value[items]``; ``ctx.literal(None)`` is a new axis, ``ctx.every()`` ``:``."""

    def attribute(self, value: object, name: str) -> object:
        """``value.name``."""

    def literal(self, value: int | str | None) -> object:
        """A constant: a number, a string, None, or ``...`` (Ellipsis)."""

    def pattern(self, text: str) -> object:
        """A string constant as Python's repr quotes it (an einsum pattern)."""

    def every(self) -> object:
        """``:`` in an index: every entry of an axis."""

    def items(self, *values: object) -> object:
        """A list, ``[a, b]``."""

    def atomic(self, expr: object) -> bool:
        """Whether the expression needs no brackets anywhere (a name, a call)."""

    def error(self, message: str) -> Exception:
        """An error at the equation being lowered (raise it)."""

    def grows(self, operand: Operand) -> bool:
        """Whether the equation being lowered extends the operand, a state it replaces (the
        key-value cache: K_all = concat(K_past, K_new) with K_past <- K_all), in a backend
        that keeps such states in buffers with room to grow."""


@dataclass(frozen=True)
class Setting:
    """A number an op's code reads at run time, not a dim: generated functions take it as a
    keyword argument (``eps=1e-5``), and a variant may set it (``[settings]``)."""
    default: str           # as generated code writes it
    meaning: str


# where the ops are defined, the file to edit to add or change one
CATALOGUE = "spec/ops/catalogue.py"


def align(ctx: CodeContext, a: Operand, b: Operand) -> tuple[Operand, Operand]:
    """Line up a family (its members on a leading axis) with an operand of higher rank.

    Broadcasting aligns the last axes, so a family of rank-r members meeting a tensor of rank
    r + k needs k unit axes after its family axis: ``P_h[:, None]``.
    """
    if a.value.is_scalar or b.value.is_scalar:
        return a, b
    shape_a, shape_b = a.value.shape, b.value.shape
    if shape_a.family is not None and shape_b.rank > shape_a.rank:
        a = _unit_axes(ctx, a, shape_b.rank - shape_a.rank)
    elif shape_b.family is not None and shape_a.rank > shape_b.rank:
        b = _unit_axes(ctx, b, shape_a.rank - shape_b.rank)
    return a, b


def _unit_axes(ctx: CodeContext, operand: Operand, count: int) -> Operand:
    index = [ctx.every()] + [ctx.literal(None)] * count
    return Operand(ctx.index(operand.expr, *index), operand.value)


def operand_expr(ctx: CodeContext, operand: Operand) -> object:
    """An operand's expression: a scalar's from its value over dims."""
    return ctx.scalar(operand.value.scalar) if operand.value.is_scalar else operand.expr


# ---------------------------------------------------------------------------------------------
# Shared rules

def join_family(ctx: Context, *families) -> sympy.Basic | None:
    """Members of families combine member by member: the family sizes must agree."""
    result = None
    for family in families:
        if family is None:
            continue
        result = family if result is None else ctx.equal(result, family, "family sizes")
    return result


def named(value: Value, shape: Shape) -> str:
    """An operand as messages name it: ``X (B T d)``, ``X @ W_1 (B T d_ff)``; its shape alone
    when it has no name."""
    name = value.text or value.tensor
    return f"{name} ({shape.text()})" if name else f"({shape.text()})"


def operands(a: Value, shape_a: Shape, b: Value, shape_b: Shape, joined: str = "and") -> str:
    return f"{named(a, shape_a)} {joined} {named(b, shape_b)}"


def broadcast(ctx: Context, a: Shape, b: Shape, what: str) -> Shape:
    """NumPy broadcasting of two shapes, right-aligned; unequal dims must be provably 1."""
    out = []
    for i in range(1, max(a.rank, b.rank) + 1):
        x = a.dims[-i] if i <= a.rank else None
        y = b.dims[-i] if i <= b.rank else None
        if x is None or x == 1:
            out.append(y if y is not None else x)
        elif y is None or y == 1:
            out.append(x)
        else:
            out.append(ctx.equal(x, y, f"{what}, axis {-i}", broadcast=True))
    return Shape(tuple(reversed(out)), join_family(ctx, a.family, b.family))


def result_dtype(values: list[Value]) -> str:
    dtypes = {v.dtype for v in values}
    return "float" if "float" in dtypes else "int" if "int" in dtypes else "bool"


def require_rank(ctx: Context, shape: Shape, at_least: int, what: str, op: str) -> None:
    if shape.rank < at_least:
        raise ctx.error(f"{op} needs {what} of rank {at_least} or more, got rank {shape.rank} "
                        f"({shape.text()})")


def require_dtype(ctx: Context, value: Value, dtypes: tuple[str, ...], what: str, op: str) -> None:
    if value.dtype not in dtypes:
        raise ctx.error(f"{op} needs {what} of dtype {' or '.join(dtypes)}, got {value.dtype}")


def normalised(ctx: Context, x: Value, params: dict[str, Value], op: str) -> Value:
    """A normalisation over the last axis (LayerNorm, RMSNorm): the input's shape, with each
    parameter (gain, bias) a vector of the input's last axis's width."""
    shape = ctx.shape(x, 1, "input")
    require_rank(ctx, shape, 1, "an input", op)
    for name, param in params.items():
        vector = ctx.shape(param, 1, name)
        if vector.rank != 1:
            raise ctx.error(f"{op} {name} must be a vector, got {vector.text()}")
        ctx.equal(vector.dims[0], shape.dims[-1], f"{op} {name} {named(param, vector)} width "
                  f"vs the last axis of its input {named(x, shape)}")
    return Value(shape, "float")


def axis_index(ctx: Context, axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"{op}: axis {axis} does not exist in a tensor of rank {rank}")
    return axis % rank


class Unchecked:
    """The shape rules' context for a proved spec: nothing left to prove, so every claim is
    taken as true; ``error`` builds the caller's own error kind."""

    def __init__(self, where: str, error_class=SpecError):
        self.where = where
        self.error_class = error_class

    def equal(self, a, b, what, broadcast=False):
        return a

    def divides(self, divisor, n, what):
        return None

    def at_most(self, a, b, what):
        return None

    def shape(self, value, rank, role, like=None):
        if value.shape is None:
            raise self.error_class(f"{self.where}: {value.tensor} has no stated shape")
        return value.shape

    def error(self, message):
        return self.error_class(f"{self.where}: {message}")


def numel(value: Value) -> sympy.Basic:
    """The number of elements of a tensor value (family members included), 1 for a scalar."""
    if value.is_scalar or value.shape is None:
        return sympy.Integer(1)
    size = sympy.Mul(*value.shape.dims)
    return size if value.shape.family is None else size * value.shape.family


# ---------------------------------------------------------------------------------------------
# The base of every op

@dataclass(frozen=True)
class Op:
    """One op: how it is written and its shape rule; subclasses fill in ``infer`` and ``latex``.

    ``params`` gives each positional argument's kind: 'tensor', 'dim' (a dim expression), or
    'value' (either), the last ``optional`` of them may be left out (``rotary(X)`` beside
    ``rotary(X, T_past)``); ``attrs`` gives keyword attributes and their defaults.
    """
    name: str
    summary: str
    params: tuple[str, ...] = ()
    attrs: dict = field(default_factory=dict)
    optional: int = 0          # how many of the last params may be left out
    precedence: int = 100      # for LaTeX parentheses: 100 atoms/functions, 50 products, 40 sums
    group_right: bool = False  # a right operand of equal precedence is bracketed: a - (b - c)
    per_element: int = 0       # FLOPs per output element (0: data movement, no arithmetic)
    # what code generation needs to know of it (``called``): how a spec writes it, a function
    # name or an operator symbol (None where only syntax reaches it: E[t], P[:n], X / c)
    spelling: str | None = None
    helper: str | None = None  # its runtime function, rt.<helper>, from helpers/<helper>.py.j2
    array_function: str | None = None     # or the array module's function, np.<array_function>
    imports: tuple[str, ...] = ()  # what its helper's code imports (codegen.backends.IMPORTS)
    needs: tuple[str, ...] = ()    # the runtime's helpers its helper calls
    row_wise: bool = False     # its helper works row by row: on a thread pool, in chunks of rows
    activation: bool = False   # may be applied in place to a product's fresh result
    # normalises the rows of its first argument: on a backend that fuses residual sums into
    # norms (codegen.backends.Backend.fused_residual), its helper also takes ``residual=``, a
    # tensor it adds to the first argument, and ``total=``, where it writes that sum
    normalises: bool = False
    # the run-time settings (catalogue.SETTINGS) its code reads (``ctx.runtime``): what a
    # variant's [settings] can change in a model that applies it
    settings: tuple[str, ...] = ()
    # each element of its result reads only its operands' elements at the same place (after
    # broadcasting): on a slice of rows and keys it gives that slice of the result, so an
    # attention core's scores may pass through it and still be computed a block of query
    # rows at a time (spec.analysis.attention)
    elementwise: bool = False

    def arity(self) -> str:
        """How many positional arguments the op takes, in words ("1 or 2 arguments")."""
        most = len(self.params)
        least = most - self.optional
        count = str(most) if least == most else \
            f"{least} or {most}" if least + 1 == most else f"{least} to {most}"
        return f"{count} argument{'' if most == 1 else 's'}"

    def fraction(self, attrs: dict) -> bool:
        """Whether the LaTeX form is a \\frac, whose parts need no brackets."""
        return False

    def infer(self, ctx: Context, args: list[Value], attrs: dict) -> Value:
        raise NotImplementedError

    def latex(self, args: list[str], attrs: dict) -> str:
        raise NotImplementedError

    def code(self, ctx: CodeContext, args: list[Operand], attrs: dict) -> object:
        """The expression of the op applied to its operands (built through ``ctx``): by
        default, its function (``called``) applied to them."""
        return ctx.call(self.called(ctx), *(a.expr for a in args))

    def called(self, ctx: CodeContext) -> object:
        """The function the op's code calls: its runtime helper, or the array module's
        function; an op with neither (and no ``code`` of its own) is an error of the catalogue's,
        found when code for it is first generated."""
        if self.helper is not None:
            return ctx.helper(self.helper)
        if self.array_function is not None:
            return ctx.array_function(self.array_function, self.name)
        raise CodegenError(f"op {self.name} has no code: give it helper= or array_function= "
                           f"in {CATALOGUE}")

    def flops(self, args: list[Value], out: Value, attrs: dict) -> sympy.Basic:
        """Floating-point operations of one application, in the dims: ``per_element`` for
        each output element (one per arithmetic operation or function evaluation); matrix
        products count a multiply and an add per term."""
        return self.per_element * numel(out)

    @property
    def kind(self) -> str:
        """'matmul' for the products whose FLOPs scaling-law counts keep, 'other' else."""
        return "other"

