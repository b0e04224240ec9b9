"""The printer: IR expressions (``codegen.ir``) as one line of Python for a backend.

Parentheses come from the operators' precedences alone (``ir.precedence``); a dim expression
is printed by sympy (``d_model // H``, ``math.sqrt(d_k)``), and the standard modules its text
calls are noted for the module's imports. Any record the printer does not know is a
CodegenError. Breaking lines is ``layout``'s.
"""

import sympy
from sympy.printing.pycode import PythonCodePrinter

from tspec.codegen import ir
from tspec.errors import CodegenError

SORTED_DIMS = 64        # a sum over more dims than this is written in sympy's order


class _SympyPrinter(PythonCodePrinter):
    """Dim expressions as Python: names stay names, sqrt is math.sqrt."""

    def _print_Symbol(self, expr):
        return expr.name


class Printer:
    """Expressions as Python text; ``alias`` is the array module's (np, cp)."""

    def __init__(self, alias: str):
        self.alias = alias
        self.modules: set[str] = set()      # standard modules printed dims call (math)

    def sympy(self, expr, settings: dict | None = None) -> str:
        printer = _SympyPrinter(settings or {})
        code = printer.doprint(expr)
        self.modules |= set(printer.module_imports)
        return code

    def dim(self, expr) -> str:
        numerator, denominator = sympy.fraction(sympy.together(expr))
        if denominator == 1:
            return self.sympy(expr)
        return f"{self.atom(numerator)} // {self.atom(denominator)}"

    def scalar(self, expr) -> str:
        # over more than SORTED_DIMS dims, a sum's terms in sympy's own order: sorting them as
        # sympy prints them costs the terms times the dims (quadratic for a stack of widths)
        settings = {"order": "none"} if len(expr.free_symbols) > SORTED_DIMS else {}
        return self.sympy(expr, settings)

    def atom(self, expr) -> str:
        code = self.sympy(expr)
        return code if expr.is_Atom else f"({code})"

    def wrap(self, expr: ir.Expr, precedence: int, right: bool = False) -> str:
        """The expression's text, parenthesised where the surrounding operator binds tighter."""
        inner = ir.unwrap(expr)
        if isinstance(inner, ir.Scalar):     # a number over dims beside an operator
            atomic = (inner.expr.is_Atom and not (inner.expr.is_Rational and
                                                  not inner.expr.is_Integer)) or (
                isinstance(inner.expr, sympy.Pow) and inner.expr.exp == sympy.Rational(1, 2))
            code = self.scalar(inner.expr)
            return code if atomic else f"({code})"
        if isinstance(inner, ir.Dim) and precedence < ir.ATOM:
            code = self.dim(inner.expr)
            return code if inner.expr.is_Atom else f"({code})"
        code = self(expr)
        own = ir.precedence(expr)
        if own < precedence or (right and own == precedence):
            return f"({code})"
        return code

    def __call__(self, expr: ir.Expr) -> str:
        method = getattr(self, "_" + type(expr).__name__, None)
        if not isinstance(expr, ir.Expr) or method is None:
            raise CodegenError(f"internal error: the printer knows no expression "
                               f"{type(expr).__name__}; please report it")
        return method(expr)

    def _Tensor(self, expr: ir.Tensor) -> str:
        return self(expr.ref)

    def _Name(self, expr: ir.Name) -> str:
        return expr.id

    def _Runtime(self, expr: ir.Runtime) -> str:
        return f"rt.{expr.name}"            # from . import _runtime as rt

    def _ArrayModule(self, expr: ir.ArrayModule) -> str:
        return f"{self.alias}.{expr.name}"

    def _Dim(self, expr: ir.Dim) -> str:
        return self.dim(expr.expr)

    def _Scalar(self, expr: ir.Scalar) -> str:
        return self.scalar(expr.expr)

    def _Number(self, expr: ir.Number) -> str:
        return expr.spelling

    def _Literal(self, expr: ir.Literal) -> str:
        value = expr.value
        if value is Ellipsis:
            return "..."
        if isinstance(value, str) and not expr.repr_quotes:
            if '"' in value or "\\" in value or "\n" in value:
                raise CodegenError(f"internal error: string {value!r} cannot be placed in "
                                   "code; please report it")
            return f'"{value}"'
        return repr(value)

    def _Slice(self, expr: ir.Slice) -> str:
        return ":"

    def keyword(self, keyword: ir.Keyword) -> str:
        return f"{keyword.name}={self(keyword.value)}"

    def arguments(self, expr: ir.Call) -> list[str]:
        return [self(a) for a in expr.args] + [self.keyword(k) for k in expr.keywords]

    def _Call(self, expr: ir.Call) -> str:
        return f"{self.wrap(expr.function, ir.ATOM)}({', '.join(self.arguments(expr))})"

    def _BinOp(self, expr: ir.BinOp) -> str:
        precedence = ir.OPERATORS[expr.op]
        if expr.op == "**":                 # x ** (p): the exponent always bracketed
            return f"{self.wrap(expr.left, precedence, True)} ** ({self(expr.right)})"
        return (f"{self.wrap(expr.left, precedence)} {expr.op} "
                f"{self.wrap(expr.right, precedence, True)}")

    def _Neg(self, expr: ir.Neg) -> str:
        return f"-{self.wrap(expr.operand, ir.UNARY)}"

    def _Subscript(self, expr: ir.Subscript) -> str:
        return f"{self.wrap(expr.value, ir.ATOM)}[{', '.join(self(i) for i in expr.index)}]"

    def _Attribute(self, expr: ir.Attribute) -> str:
        return f"{self.wrap(expr.value, ir.ATOM)}.{expr.name}"

    def _Lambda(self, expr: ir.Lambda) -> str:
        return f"lambda {', '.join(expr.parameters)}: {self(expr.body)}"

    def _List(self, expr: ir.List) -> str:
        return f"[{', '.join(self(i) for i in expr.items)}]"

    def type(self, annotation: ir.Type, array_type: str) -> str:
        """An argument's, field's or result's annotation."""
        if isinstance(annotation, ir.ArrayType):
            return f'{annotation.kind}[{array_type}, "{annotation.axes}"]'
        if annotation.name == "dtype":
            return f"type | {self.alias}.dtype"
        if annotation.of is not None:
            return f"{annotation.name}[{annotation.of}]"
        return annotation.name
