"""spec.evaluate: dim expressions at many sizes at once, exact, against spec.prove.evaluate."""

import math
from fractions import Fraction

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from tspec.analysis.evaluate import Evaluator, as_integers
from tspec.checking.prove import evaluate as evaluate_one

a, b, c = (sympy.Symbol(n, integer=True, positive=True) for n in "abc")
SYMBOLS = (a, b, c)


def fractions(exact, count):
    """An Exact's entries as Fractions, None where undefined."""
    nums = np.broadcast_to(exact.num, (count,)).tolist()
    dens = np.broadcast_to(exact.den, (count,)).tolist()
    return [None if den == 0 else Fraction(int(num), int(den)) for num, den in zip(nums, dens)]


def one_by_one(expr, columns):
    """prove.evaluate at each point: a Fraction or bool, None where it divides by zero."""
    out = []
    for i in range(len(columns[a])):
        try:
            out.append(evaluate_one(expr, {s: int(columns[s][i]) for s in SYMBOLS}))
        except ZeroDivisionError:
            out.append(None)
    return out


leaves = st.one_of(st.sampled_from(SYMBOLS), st.integers(-3, 5).map(sympy.Integer),
                   st.sampled_from([sympy.Rational(1, 2), sympy.Rational(-2, 3)]))


def _remainder(x, y):
    """Mod(x, y), or x where y is 0 or sympy cannot build it (it recurses without end on
    some fractional operands, e.g. Mod(a - 2/3, c + 1/2); the spec refuses those)."""
    try:
        return sympy.Mod(x, y) if y != 0 else x
    except RecursionError:
        return x


def _node(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda p: p[0] + p[1]),
        pair.map(lambda p: p[0] * p[1]),
        pair.map(lambda p: p[0] - p[1]),
        pair.map(lambda p: p[0] / p[1] if p[1] != 0 else p[0]),
        pair.map(lambda p: _remainder(*p)),
        st.tuples(children, st.integers(-2, 2)).map(
            lambda p: p[0] ** p[1] if p[0] != 0 or p[1] >= 0 else p[0]))


expressions = st.recursive(leaves, _node, max_leaves=6)
columns = st.lists(st.tuples(*(st.integers(1, 7) for _ in SYMBOLS)), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(expressions, columns)
def test_values_agree_with_prove_evaluate(expr, rows):
    values = {s: np.array([row[k] for row in rows]) for k, s in enumerate(SYMBOLS)}
    expected = one_by_one(expr, values)
    got = Evaluator(values).value(expr)
    assert fractions(got, len(rows)) == expected, expr


@settings(max_examples=100, deadline=None)
@given(expressions, expressions, st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), columns)
def test_relations_agree_with_prove_evaluate(left, right, op, rows):
    relation = {"==": sympy.Eq, "!=": sympy.Ne, "<": sympy.StrictLessThan,
                "<=": sympy.LessThan, ">": sympy.StrictGreaterThan,
                ">=": sympy.GreaterThan}[op](left, right, evaluate=False)
    values = {s: np.array([row[k] for row in rows]) for k, s in enumerate(SYMBOLS)}
    # the checker counts a relation that divides by zero as not holding
    expected = [bool(v) if v is not None else False for v in one_by_one(relation, values)]
    got = np.broadcast_to(Evaluator(values).holds(relation), (len(rows),))
    assert got.tolist() == expected, relation


def test_a_divisibility_constraint():
    values = {a: np.array([512, 512, 520, 768]), b: np.array([8, 10, 8, 12])}
    assert Evaluator(values).holds(sympy.Eq(sympy.Mod(a, b), 0)).tolist() == \
        [True, False, True, True]


def test_derived_dims_are_exact_fractions():
    value = Evaluator({a: np.array([512, 256]), b: np.array([8, 6])}).value(a / b)
    assert value.num.tolist() == [64, 128] and value.den.tolist() == [1, 3]
    assert value.whole.tolist() == [True, False]


def test_division_and_modulo_by_zero_are_undefined_and_no_relation_holds():
    values = {a: np.array([6, 6]), b: np.array([3, 4])}
    evaluator = Evaluator(values)
    quotient = evaluator.value(a / (b - 3))
    assert quotient.defined.tolist() == [False, True]
    assert evaluator.value(sympy.Mod(a, b - 3)).defined.tolist() == [False, True]
    assert evaluator.holds(sympy.Ne(a / (b - 3), 0, evaluate=False)).tolist() == \
        [False, True]
    assert evaluator.holds(sympy.Eq(sympy.Mod(a, b - 3), 0)).tolist() == [False, True]


def test_floor_ceiling_and_logic():
    values = {a: np.array([7, 8, 9]), b: np.array([2, 2, 3])}
    evaluator = Evaluator(values)
    assert evaluator.value(sympy.floor(a / b)).num.tolist() == [3, 4, 3]
    assert evaluator.value(sympy.ceiling(a / b)).num.tolist() == [4, 4, 3]
    assert evaluator.value(sympy.floor(-a / b)).num.tolist() == \
        [math.floor(-7 / 2), -4, -3]
    both = sympy.And(sympy.Eq(sympy.Mod(a, b), 0), sympy.GreaterThan(a, 8))
    assert evaluator.holds(both).tolist() == [False, True, True]
    assert evaluator.holds(sympy.Or(sympy.Eq(a, 7), sympy.Eq(b, 3))).tolist() == \
        [True, False, True]
    assert evaluator.holds(sympy.Not(sympy.Eq(a, 7))).tolist() == [False, True, True]


def test_past_int64_the_arithmetic_goes_on_in_python_integers():
    big = 2 ** 40
    values = {a: np.array([big, 3 * big]), b: np.array([2 ** 62, 5])}
    value = Evaluator(values).value(12 * a ** 3 * b + a / 7)
    expected = [Fraction(12 * x ** 3 * y) + Fraction(x, 7) for x, y in
                zip([big, 3 * big], [2 ** 62, 5])]
    assert fractions(value, 2) == expected
    assert value.num.dtype == object
    small = Evaluator({a: np.array([3, 4])}).value(a ** 2 + 1)
    assert small.num.dtype == np.int64          # int64 where nothing can overflow


def test_values_beyond_int64_are_python_integers():
    assert as_integers([10 ** 30, 1]).dtype == object
    assert as_integers(7).dtype == np.int64
    value = Evaluator({a: 10 ** 30}).value(a * a)
    assert int(value.num) == 10 ** 60


@pytest.mark.parametrize("expr", [sympy.sqrt(a), a ** sympy.Rational(1, 3), sympy.Float(1.5),
                                  sympy.sin(a)])
def test_anything_else_is_refused(expr):
    with pytest.raises(TypeError, match="cannot evaluate .* over a grid"):
        Evaluator({a: np.array([4])}).value(expr)


def test_sympys_own_division_by_zero_is_undefined():
    for expr in (sympy.zoo, sympy.nan):
        assert Evaluator({a: np.array([4])}).value(expr).defined.tolist() is False
