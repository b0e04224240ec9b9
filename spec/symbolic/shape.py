"""Dims and symbolic shapes.

A dim is a sympy symbol, a positive integer. A shape is a tuple of sympy expressions over dims,
written like jaxtyping's shape strings: ``"B T d_model"``, ``"B T H*d_k"``. A *family* is a set
of tensors indexed by a dim (the heads ``Q_h`` for ``h = 1..H``): its shape is the shape of one
member plus the family size, shown as ``[H] B T d_k``.
"""

import functools
from dataclasses import dataclass

import sympy

from tspec.errors import LimitError, SpecError, TspecError
from tspec.symbolic.expr import Node, dim_text, parse_expression, to_sympy

DTYPES = ("float", "int", "bool")


def dim_symbol(name: str) -> sympy.Symbol:
    """The sympy symbol of a dim: a positive integer."""
    return sympy.Symbol(name, integer=True, positive=True)


@dataclass(frozen=True)
class Dim:
    """A named dimension: its symbol, a one-line meaning, and a value when the spec binds it."""
    name: str
    meaning: str
    symbol: sympy.Symbol
    value: int | None = None
    file: str | None = None
    line: int | None = None


@functools.lru_cache(maxsize=4096)
def format_expr(expr: sympy.Basic) -> str:
    """A dim expression as one shape token: ``H*d_k``, ``d_model/H``, no spaces (the
    language's own form, see ``spec.expr.dim_text``)."""
    return dim_text(expr).replace(" ", "")


@dataclass(frozen=True)
class Shape:
    """The shape of a tensor, or of each member of a family of ``family`` tensors."""
    dims: tuple[sympy.Basic, ...]
    family: sympy.Basic | None = None

    def __hash__(self) -> int:
        # shapes key the checker's caches: hash once, not on every lookup
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.dims, self.family))
            object.__setattr__(self, "_hash", cached)
        return cached

    @property
    def rank(self) -> int:
        return len(self.dims)

    def subs(self, mapping: dict) -> "Shape":
        if not mapping:
            return self
        family = None if self.family is None else sympy.sympify(self.family).xreplace(mapping)
        return Shape(tuple(sympy.sympify(d).xreplace(mapping) for d in self.dims), family)

    def free_symbols(self) -> set:
        found = set()
        for d in self.dims + ((self.family,) if self.family is not None else ()):
            found |= sympy.sympify(d).free_symbols
        return found

    def text(self) -> str:
        body = " ".join(format_expr(d) for d in self.dims) if self.dims else "scalar"
        return body if self.family is None else f"[{format_expr(self.family)}] {body}"

    def __str__(self) -> str:
        return self.text()


def parse_shape(text: str, symbols: dict[str, sympy.Symbol], *, file: str | None = None,
                line: int | None = None, family: Node | None = None) -> Shape:
    """Parse a declared shape string such as ``"B T H*d_k"`` into a Shape.

    Tokens are separated by spaces; each is a dim expression (no spaces inside, as in
    jaxtyping). An empty string is a scalar.
    """
    dims = []
    for token in text.split():
        try:
            node = parse_expression(token, file)
            dims.append(to_sympy(node, symbols, file=file, what=f'shape "{text}"'))
        except LimitError:          # the time limit, fired in here: itself, not a bad token
            raise
        except TspecError as error:
            raise SpecError(f"bad shape token {token!r} in \"{text}\": {error.message}",
                            file=file, line=line) from None
    fam = None if family is None else to_sympy(family, symbols, file=file, what="family size")
    return Shape(tuple(dims), fam)
