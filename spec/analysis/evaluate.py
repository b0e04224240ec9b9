"""Dim expressions evaluated at many sizes at once: NumPy arrays, exact rationals, no eval.

``Evaluator(values)`` takes each dim's value, a number or an array with one entry per point
(a grid's combinations), and walks a sympy expression tree by hand: integers and rationals,
dims, ``+``, ``*``, powers with integer exponents, ``Mod``, ``floor`` and ``ceiling``, the
comparisons and ``And``/``Or``/``Not``. That is everything the spec language builds
(``spec.expr.to_sympy``) and everything ``spec.counts`` makes of it; anything else is refused.
Nothing is handed to ``sympify``, ``lambdify``, ``eval`` or ``exec``.

Every number is an exact rational ``num / den`` in lowest terms with ``den > 0``; ``den == 0``
marks an undefined value (a division or a modulo by zero), which no comparison holds for, as
``spec.prove.evaluate`` raising ZeroDivisionError counts as a broken constraint in the checker.
Arithmetic runs in int64 while it cannot overflow: before each product, sum or power the result's
magnitude is bounded in float64, and past 2**62 that operation and everything computed from it
goes on in Python integers (object arrays), exact at any size.
"""

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import sympy

INT64_SAFE = 2.0 ** 62      # bounds below this leave int64 a factor of two of headroom
ONE = np.asarray(1, dtype=np.int64)
ZERO = np.asarray(0, dtype=np.int64)


@dataclass(frozen=True)
class Exact:
    """Rationals num / den, one per point (or one for all), lowest terms, den > 0 where
    defined and den == 0 where undefined."""
    num: np.ndarray
    den: np.ndarray

    def __post_init__(self):
        # arithmetic on 0-d object arrays gives bare Python integers: arrays again, always
        for name in ("num", "den"):
            object.__setattr__(self, name, _exact(getattr(self, name)))

    @property
    def defined(self) -> np.ndarray:
        return self.den != 0

    @property
    def whole(self) -> np.ndarray:
        """Where the value is an integer (lowest terms: den is 1)."""
        return self.den == 1


def as_integers(value) -> np.ndarray:
    """A number or a sequence of integers as an integer array: int64 where every entry fits
    comfortably, Python integers (object) otherwise."""
    items = value if isinstance(value, list | tuple) else [value]
    if any(isinstance(v, int) and not -2 ** 62 < v < 2 ** 62 for v in items):
        return np.array(value, dtype=object)    # NumPy would make them unsigned or float
    array = np.asarray(value)
    if array.dtype == object or array.size == 0:
        return array
    if not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"not integers: {array.dtype}")
    if array.dtype.kind == "u" and np.any(array >= 2 ** 62):
        return array.astype(object)
    return array.astype(np.int64)


def free_symbols(expr) -> set:
    """The dims an expression (sympy, or a Python integer) uses."""
    return set() if isinstance(expr, int) else set(expr.free_symbols)


def _is_one(array: np.ndarray) -> bool:
    return array.ndim == 0 and array == 1


def _wide(*arrays) -> bool:
    return any(a.dtype == object for a in arrays)


def _float(a: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.float64))


def _objects(*arrays) -> list:
    return [a.astype(object) for a in arrays]


def _exact(result) -> np.ndarray:
    """The result of arithmetic on object arrays as an array again: on 0-d arrays NumPy
    returns a bare Python integer, which has no dtype."""
    return result if isinstance(result, np.ndarray | np.generic) else as_integers(result)


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not _wide(a, b) and _safe(lambda: _float(a) * _float(b)):
        return a * b
    a, b = _objects(a, b)
    return _exact(a * b)


def _sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not _wide(a, b) and _safe(lambda: _float(a) + _float(b)):
        return a + b
    a, b = _objects(a, b)
    return _exact(a + b)


def _power(a: np.ndarray, exponent: int) -> np.ndarray:
    if not _wide(a) and _safe(lambda: _float(a) ** exponent):
        return a ** exponent
    return _exact(a.astype(object) ** exponent)


def _safe(estimate) -> bool:
    """Whether a result's float estimate is below INT64_SAFE everywhere: one past a float's
    range is inf, which is not (and is no warning on stderr)."""
    with np.errstate(over="ignore"):
        return bool(np.all(estimate() < INT64_SAFE))


def _reduced(num: np.ndarray, den: np.ndarray) -> Exact:
    """num / den in lowest terms with a positive denominator (den 0 stays 0: undefined)."""
    if _is_one(den):
        return Exact(num, den)
    if _wide(num, den):
        num, den = _objects(num, den)
    sign = np.where(den < 0, -1, 1)
    num, den = _exact(num * sign), _exact(den * sign)
    divisor = _exact(np.gcd(num, den))
    divisor = np.where(divisor == 0, 1, divisor)       # 0 / 0: undefined, left as it is
    num, den = _exact(num // divisor), _exact(den // divisor)
    return Exact(num, ONE if np.all(den == 1) else den)


def _floor(value: Exact) -> np.ndarray:
    """The floor of each defined value (undefined ones give 0; their den stays 0 elsewhere)."""
    if _is_one(value.den):
        return value.num
    return value.num // np.where(value.den == 0, 1, value.den)


class Evaluator:
    """Evaluates dim expressions with ``values`` (dim symbol -> a number, or an array with
    one entry per point); subexpressions are remembered across calls."""

    def __init__(self, values: Mapping[sympy.Symbol, object]):
        self.values = {symbol: as_integers(v) for symbol, v in values.items()}
        self.memo: dict = {}

    def value(self, expr) -> Exact:
        """An expression's value at every point (``expr``: sympy, or a Python integer)."""
        expr = sympy.Integer(expr) if isinstance(expr, int) else expr
        cached = self.memo.get(expr)
        if cached is None:
            cached = self.memo[expr] = self._value(expr)
        return cached

    def holds(self, condition) -> np.ndarray:
        """Where a relation (or an And/Or/Not of relations) holds: a bool per point, False
        where it is undefined."""
        if condition is sympy.true:
            return np.asarray(True)
        if condition is sympy.false:
            return np.asarray(False)
        if isinstance(condition, sympy.And):
            return np.logical_and.reduce([self.holds(c) for c in condition.args])
        if isinstance(condition, sympy.Or):
            return np.logical_or.reduce([self.holds(c) for c in condition.args])
        if isinstance(condition, sympy.Not):
            return ~self.holds(condition.args[0])
        compare = _COMPARISONS.get(type(condition))
        if compare is None:
            raise TypeError(f"cannot evaluate {condition!r} over a grid")
        difference = self._difference(self.value(condition.lhs), self.value(condition.rhs))
        return compare(difference.num) & difference.defined

    def _value(self, expr) -> Exact:
        if isinstance(expr, sympy.Symbol):
            return Exact(self.values[expr], ONE)
        if expr in (sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):      # sympy's x / 0
            return Exact(ZERO, ZERO)
        if isinstance(expr, sympy.Integer):
            return Exact(as_integers(int(expr)), ONE)
        if isinstance(expr, sympy.Rational):
            return Exact(as_integers(int(expr.p)), as_integers(int(expr.q)))
        if isinstance(expr, sympy.Add):
            total = self.value(expr.args[0])
            for term in expr.args[1:]:
                total = self._add(total, self.value(term))
            return total
        if isinstance(expr, sympy.Mul):
            total = self.value(expr.args[0])
            for factor in expr.args[1:]:
                total = self._multiply(total, self.value(factor))
            return total
        if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer):
            return self._raise(self.value(expr.base), int(expr.exp))
        if isinstance(expr, sympy.Mod):
            return self._modulo(self.value(expr.args[0]), self.value(expr.args[1]))
        if isinstance(expr, (sympy.floor, sympy.ceiling)):
            inner = self.value(expr.args[0])
            if isinstance(expr, sympy.ceiling):
                negated = Exact(-inner.num, inner.den)
                return Exact(-_floor(negated), np.where(inner.defined, 1, 0))
            return Exact(_floor(inner), np.where(inner.defined, 1, 0))
        raise TypeError(f"cannot evaluate {expr!r} over a grid")

    @staticmethod
    def _add(a: Exact, b: Exact) -> Exact:
        if _is_one(a.den) and _is_one(b.den):
            return Exact(_sum(a.num, b.num), ONE)
        return _reduced(_sum(_product(a.num, b.den), _product(b.num, a.den)),
                        _product(a.den, b.den))

    @staticmethod
    def _multiply(a: Exact, b: Exact) -> Exact:
        if _is_one(a.den) and _is_one(b.den):
            return Exact(_product(a.num, b.num), ONE)
        return _reduced(_product(a.num, b.num), _product(a.den, b.den))

    @staticmethod
    def _raise(base: Exact, exponent: int) -> Exact:
        num, den = _power(base.num, abs(exponent)), _power(base.den, abs(exponent))
        if exponent < 0:
            num, den = den, num            # 0 ** -1 becomes den 0: undefined
        return _reduced(num, den)

    def _difference(self, a: Exact, b: Exact) -> Exact:
        return self._add(a, Exact(-b.num, b.den))

    def _modulo(self, a: Exact, b: Exact) -> Exact:
        """a - b * floor(a / b), as sympy's Mod (the sign of b); undefined where b is 0."""
        if _is_one(a.den) and _is_one(b.den):
            zero = b.num == 0
            divisor = np.where(zero, 1, b.num)
            return Exact(np.mod(a.num, divisor), np.where(zero, 0, 1))
        quotient = self._multiply(a, self._raise(b, -1))
        floor = Exact(_floor(quotient), np.where(quotient.defined, 1, 0))
        rest = self._difference(a, self._multiply(b, floor))
        return Exact(rest.num, np.where(quotient.defined, rest.den, 0))


_COMPARISONS = {
    sympy.Eq: lambda d: d == 0,
    sympy.Ne: lambda d: d != 0,
    sympy.StrictLessThan: lambda d: d < 0,
    sympy.LessThan: lambda d: d <= 0,
    sympy.StrictGreaterThan: lambda d: d > 0,
    sympy.GreaterThan: lambda d: d >= 0,
}
