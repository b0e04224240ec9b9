"""Whole numbers as tspec shows them: every printer (tables, findings, shapes, JSON, pages)
takes its numbers from here.

Dims and counts are exact integers however large they grow (a dim derived as ``d**64`` from
a 40-digit ``d`` has 2,560 digits; a count multiplies several such dims), and exact they stay
in every computation. Shown, a number of more than SHOWN_DIGITS digits is rounded to four
significant digits, ``~9.999e7679``: its digits would say nothing a reader could use, Python
refuses to convert an integer of more than 4,300 digits to text (``sys.int_info``), and below
that it takes time quadratic in the digits (a million digits: 20 s).
"""

import functools
import math
import sys
from fractions import Fraction

import sympy
from sympy.printing.str import StrPrinter

SHOWN_DIGITS = 1000        # as many as a constant in a spec may have (spec.expr)


@functools.cache
def _bound(digits: int) -> int:
    return 10 ** digits


def exact(n: int) -> bool:
    """Whether ``n`` is shown with all its digits (at most SHOWN_DIGITS, and no more than this
    Python converts: ``PYTHONINTMAXSTRDIGITS`` may lower its limit to 640)."""
    limit = sys.get_int_max_str_digits()
    return abs(n) < _bound(min(SHOWN_DIGITS, limit) if limit else SHOWN_DIGITS)


def integer_text(n: int, grouped: bool = False) -> str:
    """``n`` in full (``grouped``: 1,234,567), or past SHOWN_DIGITS digits rounded:
    ``~1.235e7679`` (its logarithm, read from its binary digits, takes no conversion)."""
    n = int(n)
    if exact(n):
        return f"{n:,}" if grouped else str(n)
    return approximate(n)


def approximate(n: int) -> str:
    """A nonzero integer as four significant digits, ``~9.999e7679``, read from its binary
    digits (its logarithm: no conversion to text, which takes time quadratic in its digits)."""
    logarithm = math.log10(abs(n))
    exponent = math.floor(logarithm)
    mantissa = round(10 ** (logarithm - exponent), 3)
    if mantissa >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{'-' if n < 0 else ''}~{mantissa:.3f}e{exponent}"


def value_text(value) -> str:
    """A dim's value (an integer, a Fraction or a sympy number: ``7/2`` where a derived dim is
    not whole) with its integers as integer_text gives them."""
    if isinstance(value, Fraction):
        if value.denominator == 1:
            return integer_text(value.numerator)
        return f"{integer_text(value.numerator)}/{integer_text(value.denominator)}"
    if isinstance(value, int):
        return integer_text(value)
    if isinstance(value, sympy.Basic):
        return expr_text(value)
    return str(value)


class IntegerPrinter(StrPrinter):
    """sympy's own text, with every integer as integer_text gives it (the base of the
    language's printer, ``spec.expr.dim_text``)."""

    def _print_Integer(self, expr) -> str:
        return integer_text(expr.p)

    def _print_Rational(self, expr) -> str:
        if expr.q == 1:
            return integer_text(expr.p)
        return f"{integer_text(expr.p)}/{integer_text(expr.q)}"


def expr_text(expr) -> str:
    """A sympy expression as ``str`` gives it, its integers as integer_text gives them (a
    printer per call, as ``str`` makes: a printer keeps state while it prints)."""
    return IntegerPrinter().doprint(expr)


def shown_json(value):
    """``value`` (dicts, lists, numbers, text) with every integer JSON cannot carry as a
    number, one that integer_text would round, as its text: ``"~9.999e7679"``."""
    if isinstance(value, dict):
        return {key: shown_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [shown_json(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and not exact(value):
        return integer_text(value)
    return value
